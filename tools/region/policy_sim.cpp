// zsm_region_policy_sim: the region's eviction policies on access traces, without userfaultfd,
// against exact LRU (the oracle a kernel with access bits approximates) and FIFO. A policy
// holds `budget` pages; an access to a page it does not hold is a fault.
//
// Userspace sees no accessed bit: an access to a mapped page is invisible, so the region's
// policies learn only from faults. The policies:
//   lru          exact LRU: every access moves the page to the front (needs access bits)
//   fifo         first in, first out
//   clock        CLOCK whose mark is set only when a page is faulted in (what the region can
//                see without probation): a second chance for every page
//   clock-prob   CLOCK over budget - P mapped pages, and a probation stage of P pages: the
//                hand's victim is unmapped but kept decompressed; a touch there is a minor
//                fault (no decompression) that marks the page and maps it again; a page that
//                leaves probation untouched is compressed (the next touch: a major fault).
//                P = budget / D, D from --probation (default 8).
//   clock-refault CLOCK over all the budget's pages; a victim is dropped at once, and a fault
//                on a page dropped fewer than budget / 2 victims ago maps it marked (the
//                refault distance): what the region does with clean victims.
// Faults are major (decompress) or minor (from probation); LRU, FIFO and CLOCK have only major.
//   zsm_region_policy_sim [--budget PAGES] [--accesses N] [--seed S] [--probation D]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kNone = UINT32_MAX;

struct Faults {
  uint64_t major = 0, minor = 0;
};

// Exact LRU over an intrusive list (prev/next per page).
class Lru {
 public:
  Lru(uint32_t pages, uint32_t budget) : prev_(pages, kNone), next_(pages, kNone), in_(pages), budget_(budget) {}
  void access(uint32_t p) {
    if (in_[p]) return move_front(p);
    ++faults.major;
    if (size_ == budget_) remove(tail_);
    push_front(p);
  }
  Faults faults;

 private:
  void unlink(uint32_t p) {
    (prev_[p] == kNone ? head_ : next_[prev_[p]]) = next_[p];
    (next_[p] == kNone ? tail_ : prev_[next_[p]]) = prev_[p];
  }
  void push_front(uint32_t p) {
    prev_[p] = kNone;
    next_[p] = head_;
    (head_ == kNone ? tail_ : prev_[head_]) = p;
    head_ = p;
    in_[p] = true;
    ++size_;
  }
  void remove(uint32_t p) {
    unlink(p);
    in_[p] = false;
    --size_;
  }
  void move_front(uint32_t p) {
    unlink(p);
    --size_;
    push_front(p);
  }
  std::vector<uint32_t> prev_, next_;
  std::vector<bool> in_;
  uint32_t head_ = kNone, tail_ = kNone, size_ = 0, budget_;
};

class Fifo {
 public:
  Fifo(uint32_t pages, uint32_t budget) : in_(pages), budget_(budget) {}
  void access(uint32_t p) {
    if (in_[p]) return;
    ++faults.major;
    if (queue_.size() == budget_) {
      in_[queue_.front()] = false;
      queue_.pop_front();
    }
    queue_.push_back(p);
    in_[p] = true;
  }
  Faults faults;

 private:
  std::vector<bool> in_;
  std::deque<uint32_t> queue_;
  uint32_t budget_;
};

// CLOCK over `frames` slots; marks are set by the caller. evict_to(p) makes room and returns
// the victim (kNone if there was room).
class Clock {
 public:
  explicit Clock(uint32_t frames) : slots_(frames, kNone), marks_(frames) {}
  uint32_t insert(uint32_t p, bool mark, std::vector<uint32_t>& slot_of) {
    uint32_t victim = kNone;
    while (slots_[hand_] != kNone && marks_[hand_]) {
      marks_[hand_] = false;
      hand_ = (hand_ + 1) % slots_.size();
    }
    victim = slots_[hand_];
    if (victim != kNone) slot_of[victim] = kNone;
    slots_[hand_] = p;
    marks_[hand_] = mark;
    slot_of[p] = static_cast<uint32_t>(hand_);
    hand_ = (hand_ + 1) % slots_.size();
    return victim;
  }
  void mark(uint32_t slot) { marks_[slot] = true; }

 private:
  std::vector<uint32_t> slots_;
  std::vector<bool> marks_;
  size_t hand_ = 0;
};

// The region without probation: a page's mark is set when it is faulted in, never after.
class ClockOnFaults {
 public:
  ClockOnFaults(uint32_t pages, uint32_t budget) : clock_(budget), slot_of_(pages, kNone) {}
  void access(uint32_t p) {
    if (slot_of_[p] != kNone) return;  // invisible: no accessed bit
    ++faults.major;
    clock_.insert(p, true, slot_of_);
  }
  Faults faults;

 private:
  Clock clock_;
  std::vector<uint32_t> slot_of_;
};

class ClockProbation {
 public:
  static inline uint32_t divisor = 8;
  ClockProbation(uint32_t pages, uint32_t budget)
      : probation_size_(std::max(budget / divisor, 1u)), clock_(budget - probation_size_),
        slot_of_(pages, kNone), in_probation_(pages), entry_(pages) {}
  void access(uint32_t p) {
    if (slot_of_[p] != kNone) return;  // mapped: invisible
    if (in_probation_[p]) {
      ++faults.minor;
      in_probation_[p] = false;  // its entry in probation_ goes stale
      --probation_live_;
      map(p, true);
      return;
    }
    ++faults.major;
    map(p, false);
  }
  Faults faults;

 private:
  void map(uint32_t p, bool mark) {
    uint32_t victim = clock_.insert(p, mark, slot_of_);
    if (victim == kNone) return;
    in_probation_[victim] = true;
    probation_.push_back({victim, ++entry_[victim]});
    ++probation_live_;
    while (probation_live_ > probation_size_) {
      auto [old, entry] = probation_.front();
      probation_.pop_front();
      // Stale: the page left probation since (and may be back under a newer entry).
      if (!in_probation_[old] || entry != entry_[old]) continue;
      in_probation_[old] = false;
      --probation_live_;
    }
  }
  uint32_t probation_size_;
  Clock clock_;
  std::vector<uint32_t> slot_of_;
  std::vector<bool> in_probation_;
  std::vector<uint32_t> entry_;  // per page: how many times it entered probation
  std::deque<std::pair<uint32_t, uint32_t>> probation_;  // (page, entry), oldest first
  uint32_t probation_live_ = 0;
};

// CLOCK over all the budget's pages, no probation: a victim is dropped at once, and the
// number of victims taken so far is noted for it. A fault on a page dropped fewer than B/2
// victims ago (the refault distance, as the kernel's workingset shadow entries measure it)
// maps it marked, where probation would have served it as a minor fault: the same knowledge,
// for a major fault and no pages of the budget set aside.
class ClockRefault {
 public:
  ClockRefault(uint32_t pages, uint32_t budget)
      : window_(std::max(budget / 2, 1u)), clock_(budget), slot_of_(pages, kNone),
        dropped_at_(pages) {}
  void access(uint32_t p) {
    if (slot_of_[p] != kNone) return;  // mapped: invisible
    ++faults.major;
    bool recent = dropped_at_[p] != 0 && victims_ - dropped_at_[p] < window_;
    uint32_t victim = clock_.insert(p, recent, slot_of_);
    if (victim != kNone) dropped_at_[victim] = ++victims_;
  }
  Faults faults;

 private:
  uint64_t window_;
  Clock clock_;
  std::vector<uint32_t> slot_of_;
  std::vector<uint64_t> dropped_at_;
  uint64_t victims_ = 0;
};

struct Trace {
  std::string name;
  uint32_t pages;
  std::vector<uint32_t> accesses;
};

std::vector<uint32_t> zipf_accesses(uint32_t pages, uint64_t n, double s, std::mt19937_64& rng) {
  std::vector<double> cdf(pages);
  double sum = 0;
  for (uint32_t i = 0; i < pages; ++i) cdf[i] = sum += 1.0 / std::pow(i + 1, s);
  std::vector<uint32_t> perm(pages);
  for (uint32_t i = 0; i < pages; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);  // hot pages spread over the region
  std::uniform_real_distribution<double> u(0, sum);
  std::vector<uint32_t> out(n);
  for (auto& a : out) a = perm[std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin()];
  return out;
}

std::vector<Trace> traces(uint32_t budget, uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Trace> t;
  uint32_t region = 4 * budget;
  Trace seq{"sequential 4x", region, std::vector<uint32_t>(n)};
  for (uint64_t i = 0; i < n; ++i) seq.accesses[i] = static_cast<uint32_t>(i % region);
  t.push_back(std::move(seq));
  Trace uni{"uniform 4x", region, std::vector<uint32_t>(n)};
  for (auto& a : uni.accesses) a = static_cast<uint32_t>(rng() % region);
  t.push_back(std::move(uni));
  t.push_back({"zipf 0.99 4x", region, zipf_accesses(region, n, 0.99, rng)});
  t.push_back({"zipf 0.8 8x", 8 * budget, zipf_accesses(8 * budget, n, 0.8, rng)});
  uint32_t loop = budget + budget / 4;
  Trace lp{"loop 1.25x", loop, std::vector<uint32_t>(n)};
  for (uint64_t i = 0; i < n; ++i) lp.accesses[i] = static_cast<uint32_t>(i % loop);
  t.push_back(std::move(lp));
  // A hot zipf set with a sequential scan through cold pages every 8th access (scan resistance).
  Trace mix{"zipf 0.99 + scan", region, zipf_accesses(region, n, 0.99, rng)};
  for (uint64_t i = 0; i < n; i += 8) mix.accesses[i] = static_cast<uint32_t>((i / 8) % region);
  t.push_back(std::move(mix));
  return t;
}

template <typename Policy>
Faults run(const Trace& t, uint32_t budget) {
  Policy policy(t.pages, budget);
  for (uint32_t a : t.accesses) policy.access(a);
  return policy.faults;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "zsm_region_policy_sim: %s\nusage: zsm_region_policy_sim [--budget PAGES] "
               "[--accesses N] [--seed S] [--probation D]\n", why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t budget = 4096, n = 4'000'000, seed = 1;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) usage("an option without its value");
    char* end = nullptr;
    uint64_t v = std::strtoull(argv[i + 1], &end, 10);
    if (end == argv[i + 1] || *end != '\0') usage("not a number");
    if (!std::strcmp(argv[i], "--budget")) budget = v;
    else if (!std::strcmp(argv[i], "--accesses")) n = v;
    else if (!std::strcmp(argv[i], "--seed")) seed = v;
    else if (!std::strcmp(argv[i], "--probation")) ClockProbation::divisor = static_cast<uint32_t>(v);
    else usage("unknown option");
  }
  if (budget < 16 || budget > (1u << 24) || n == 0 || n > 1'000'000'000 ||
      ClockProbation::divisor < 2 || ClockProbation::divisor > budget) {
    usage("--budget 16..16777216, --accesses 1..1e9, --probation 2..budget");
  }
  auto b = static_cast<uint32_t>(budget);
  std::printf("budget %u pages, probation budget/%u, %llu accesses a trace; faults (major + "
              "minor), and as x LRU's\n", b, ClockProbation::divisor, static_cast<unsigned long long>(n));
  std::printf("| trace | LRU (oracle) | FIFO | CLOCK, marks on faults | CLOCK + probation (major + minor) | CLOCK, marks on near refaults |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (const Trace& t : traces(b, n, seed)) {
    Faults lru = run<Lru>(t, b), fifo = run<Fifo>(t, b), clock = run<ClockOnFaults>(t, b);
    Faults prob = run<ClockProbation>(t, b), refault = run<ClockRefault>(t, b);
    double base = lru.major ? static_cast<double>(lru.major) : 1.0;
    std::printf("| %s | %llu | %llu (%.2fx) | %llu (%.2fx) | %llu + %llu (%.2fx major, %.2fx all) | %llu (%.2fx) |\n",
                t.name.c_str(), (unsigned long long)lru.major, (unsigned long long)fifo.major,
                fifo.major / base, (unsigned long long)clock.major, clock.major / base,
                (unsigned long long)prob.major, (unsigned long long)prob.minor, prob.major / base,
                (prob.major + prob.minor) / base, (unsigned long long)refault.major, refault.major / base);
  }
  return 0;
}
