// zsm_region_bench: a zsm region (zsm/region.h) against the same memory kept resident and
// against the kernel's own zram swap, on the same data and the same accesses, in one run.
//
// Data: real 4 KiB pages (bench/corpus.h: the system's shared libraries and text), kept in a
// memfd so that they do not count in the process's resident set; page i of a memory of P
// pages is corpus page i mod (pages available). Each run makes one memory of ratio x budget
// bytes, fills it page by page, then times its touches: one 8-byte read per touch, checked
// against the word the page holds (a wrong word is counted, and fails the run). Accesses,
// made before any memory and the same for every memory of a row:
// - seq: each thread reads its share of the pages in order, --passes times;
// - uniform / zipf (s = 0.99, ranks scattered by a shuffle): --touches-per-page x P touches
//   in all, split between the threads.
// The memories:
// - resident: an anonymous mapping, every page present (the floor: a touch's own cost);
// - region: zsm_region_create(size, budget = --budget); the fill evicts what does not fit,
//   then zsm_region_evict() of the whole memory compresses the rest, so that the touches start
//   as the kernel column's do: every page compressed, none resident; once with a
//   handler thread a CPU (the default), once in the SIGBUS mode, where each faulting thread
//   serves its own fault (ZSM_REGION_SELF_SERVE; --modes picks);
// - kernel zram, budget (--kernel-zram, as root, with the zram device already swap: tools/
//   run-region-bench.sh sets it up and restores it): an anonymous mapping, filled, then pushed
//   out with madvise(MADV_PAGEOUT) into zram; the kernel brings a page back on its touch, and
//   the benchmark's own kswapd, a thread of its own, keeps the pages back in at the budget as
//   the region's evictor does (woken past budget - budget/64, down to budget - budget/32), by
//   MADV_PAGEOUT of the pages its record of the touches says were touched longest ago (an
//   exact LRU of the touches: the kernel sees no more than they): the same budget, so faults,
//   p99, MiB/s and peak RSS compare like for like. Its compressed size is zram's own mm_stat,
//   read after the first page-out.
// - kernel zram, no budget (with --kernel-zram): the same without the kswapd: each page comes
//   back on its first touch and stays (no memory pressure), so its faults are first touches.
// Above the table, the floor: what a fault costs each mechanism with nothing to decompress
// (the first read of a page never written: the region installs a zero page; the kernel maps
// an anonymous page), and lz4's time to compress and decompress one of the corpus's pages, so
// that a reader sees on any CPU what the region adds to the round trip.
// Per run: touches, faults (the memory's own count: the region's stats, the process's major
// faults for zram), fault latency p50/p99/p99.9 (the slowest touches, as many as there were
// faults: a resident touch costs well under a microsecond, a fault several), throughput
// (touches over the wall time of the touch phase, both threads together; the clock is read
// around every touch in every column alike), the peak resident set during the touch phase
// above what the process held before the memory was made (/proc/self/clear_refs resets it),
// compressed bytes held per byte of data (mem_used_total / orig_data_size, every page
// compressed in both), the fill's time per page (with the page-out of all: the region's
// evictions and zsm_region_evict, zram's MADV_PAGEOUT), and the cost of a page going out (region: the fill's
// time over the resident fill's, per eviction, a difference the machine's noise can swamp;
// zram: the MADV_PAGEOUT call's time per page).
//
// Usage: zsm_region_bench [--budget=BYTES] [--ratios=2,4,8] [--access=seq,uniform,zipf]
//          [--threads=1,2,4] [--touches-per-page=N] [--passes=N] [--modes=threads,sigbus] [--kernel-zram]
//          [--zram=NAME] [--at-scale] [--seed=N] [--quick]; --help.
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <zsm/codec.hpp>
#include <zsm/region.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "corpus.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kPage = zsm_bench::kCorpusPage;

struct Options {
  size_t budget = size_t{32} << 20;
  std::vector<uint64_t> ratios = {2, 4, 8};
  std::vector<std::string> access = {"seq", "uniform", "zipf"};
  std::vector<uint64_t> threads = {1, 2, 4};
  uint64_t touches_per_page = 2;
  uint64_t passes = 1;
  std::vector<std::string> modes = {"threads", "sigbus"};
  bool kernel_zram = false;
  bool at_scale = false;
  std::string zram = "zram0";
  uint64_t seed = 1;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) parts.push_back(part);
  if (parts.empty()) throw std::invalid_argument("an empty list: '" + s + "'");
  return parts;
}

std::vector<uint64_t> counts(const std::string& s, const char* what, uint64_t lo, uint64_t hi) {
  std::vector<uint64_t> v;
  for (const std::string& part : split(s)) v.push_back(zsm_cli::parse_count(part, what, lo, hi));
  return v;
}

const zsm_cli::Flag<Options> kFlags[] = {
    {"--budget", "BYTES", "the region's resident budget (default 32 MiB)",
     [](Options& o, const std::string& v) {
       o.budget = zsm_cli::parse_size(v, "--budget", 64 * kPage, uint64_t{1} << 34);
     }},
    {"--ratios", "N[,N]", "memory sizes, in multiples of the budget (default 2,4,8)",
     [](Options& o, const std::string& v) { o.ratios = counts(v, "--ratios", 1, 64); }},
    {"--access", "seq|uniform|zipf[,...]", "access patterns (default seq,uniform,zipf)",
     [](Options& o, const std::string& v) {
       o.access = split(v);
       for (const std::string& a : o.access)
         if (a != "seq" && a != "uniform" && a != "zipf")
           throw std::invalid_argument("--access: unknown '" + a + "'");
     }},
    {"--threads", "N[,N]", "touching threads (default 1,2,4)",
     [](Options& o, const std::string& v) { o.threads = counts(v, "--threads", 1, 64); }},
    {"--touches-per-page", "N", "uniform and zipf touches, per page of the memory (default 2)",
     [](Options& o, const std::string& v) {
       o.touches_per_page = zsm_cli::parse_count(v, "--touches-per-page", 1, 1000);
     }},
    {"--passes", "N", "sequential passes over the memory (default 1)",
     [](Options& o, const std::string& v) { o.passes = zsm_cli::parse_count(v, "--passes", 1, 100); }},
    {"--modes", "threads|sigbus[,...]",
     "the region's fault handling: a handler thread a CPU, the SIGBUS mode (default both)",
     [](Options& o, const std::string& v) {
       o.modes = split(v);
       for (const std::string& m : o.modes)
         if (m != "threads" && m != "sigbus") throw std::invalid_argument("--modes: unknown '" + m + "'");
     }},
    {"--kernel-zram", nullptr, "add the kernel zram swap column (root; the device set up as swap)",
     [](Options& o, const std::string&) { o.kernel_zram = true; }},
    {"--zram", "NAME", "the zram device of --kernel-zram (default zram0)",
     [](Options& o, const std::string& v) {
       if (v.empty() || v.find('/') != std::string::npos)
         throw std::invalid_argument("--zram: '" + v + "' is not a device name");
       o.zram = v;
     }},
    {"--at-scale", nullptr,
     "after the table, a 16 GiB region at a 1 GiB budget, 2 GiB of it written: its tables' and "
     "CLOCK's cost at scale",
     [](Options& o, const std::string&) { o.at_scale = true; }},
    {"--seed", "N", "pages and accesses (default 1)",
     [](Options& o, const std::string& v) { o.seed = zsm_cli::parse_count(v, "--seed"); }},
    {"--quick", nullptr, "a 2 MiB budget: seconds, for the smoke test",
     [](Options& o, const std::string&) { o.budget = size_t{2} << 20; }},
};

// --- The data. --------------------------------------------------------------------------

// Corpus pages in a memfd (shared memory, outside the process's anonymous resident set), and
// the word each page of a memory is checked by.
class Corpus {
 public:
  explicit Corpus(size_t want, uint64_t seed) {
    fd_ = memfd_create("zsm_region_bench_corpus", 0);
    if (fd_ < 0) throw std::runtime_error("memfd_create: " + std::string(std::strerror(errno)));
    zsm_bench::for_each_corpus_page(
        zsm_bench::corpus_files(zsm_bench::default_corpus_roots(), seed), want, 8,
        [&](const std::filesystem::path&, size_t, const unsigned char* page) {
          if (pwrite(fd_, page, kPage, static_cast<off_t>(pages_ * kPage)) != ssize_t(kPage))
            return false;
          pages_++;
          return true;
        });
    if (pages_ == 0) throw std::runtime_error("no corpus pages under /usr/lib and /usr/share");
  }
  ~Corpus() { close(fd_); }
  Corpus(const Corpus&) = delete;
  Corpus& operator=(const Corpus&) = delete;

  size_t pages() const { return pages_; }
  static size_t check_offset(size_t page) { return (page * 8) % kPage; }

  // Page `page` of a memory, into `out` (kPage bytes).
  void read(size_t page, unsigned char* out) const {
    if (pread(fd_, out, kPage, static_cast<off_t>((page % pages_) * kPage)) != ssize_t(kPage))
      throw std::runtime_error("pread of the corpus failed");
  }

  // The checked word of every page of a memory of `pages` pages.
  std::vector<uint64_t> words(size_t pages) const {
    std::vector<uint64_t> w(pages);
    std::vector<unsigned char> buf(kPage);
    for (size_t i = 0; i < pages; i++) {
      read(i, buf.data());
      std::memcpy(&w[i], buf.data() + check_offset(i), 8);
    }
    return w;
  }

 private:
  int fd_ = -1;
  size_t pages_ = 0;
};

// --- The accesses. ----------------------------------------------------------------------

using Trace = std::vector<uint32_t>;  // page indices, in touch order

std::vector<Trace> make_traces(const std::string& access, size_t pages, const Options& opt,
                               uint64_t threads) {
  std::vector<Trace> traces(threads);
  if (access == "seq") {
    for (uint64_t t = 0; t < threads; t++)
      for (uint64_t pass = 0; pass < opt.passes; pass++)
        for (size_t p = t * pages / threads; p < (t + 1) * pages / threads; p++)
          traces[t].push_back(static_cast<uint32_t>(p));
    return traces;
  }
  std::mt19937_64 rng(opt.seed * 1000 + threads);
  std::vector<uint32_t> rank_to_page(pages);
  for (size_t i = 0; i < pages; i++) rank_to_page[i] = static_cast<uint32_t>(i);
  std::shuffle(rank_to_page.begin(), rank_to_page.end(), rng);
  std::vector<double> cdf;
  if (access == "zipf") {
    cdf.resize(pages);
    double sum = 0;
    for (size_t i = 0; i < pages; i++) cdf[i] = sum += 1.0 / std::pow(double(i + 1), 0.99);
    for (double& c : cdf) c /= sum;
  }
  const size_t each = opt.touches_per_page * pages / threads;
  for (uint64_t t = 0; t < threads; t++) {
    traces[t].reserve(each);
    for (size_t n = 0; n < each; n++) {
      size_t rank = 0;
      if (cdf.empty()) {
        rank = std::uniform_int_distribution<size_t>(0, pages - 1)(rng);
      } else {
        const double u = std::uniform_real_distribution<double>(0, 1)(rng);
        rank = std::min<size_t>(pages - 1, std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
      }
      traces[t].push_back(rank_to_page[rank]);
    }
  }
  return traces;
}

// --- The process's memory, from /proc. --------------------------------------------------

uint64_t status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(std::strlen(field)));
  return 0;
}

void reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";  // resets VmHWM to the current resident set
}

uint64_t major_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_majflt);
}

// zram's mm_stat: orig_data_size, compr_data_size, mem_used_total (bytes).
struct MmStat {
  uint64_t orig = 0, compr = 0, used = 0;
};

MmStat read_mm_stat(const std::string& zram) {
  std::ifstream in("/sys/block/" + zram + "/mm_stat");
  MmStat s;
  in >> s.orig >> s.compr >> s.used;
  return s;
}

// mm_stat once the device has finished freeing what an earlier run unmapped (zram frees a
// swapped page's slot as the mapping goes, not all at once): orig_data_size steady for 50 ms,
// or 2 s passed.
MmStat settled_mm_stat(const std::string& zram) {
  MmStat s = read_mm_stat(zram);
  for (int quiet = 0, waited = 0; quiet < 5 && waited < 200 && s.orig != 0; waited++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const MmStat now = read_mm_stat(zram);
    quiet = now.orig == s.orig ? quiet + 1 : 0;
    s = now;
  }
  return s;
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Why the kernel zram column cannot run, or "" if it can.
std::string zram_unavailable(const std::string& zram) {
  if (geteuid() != 0) return "not root";
  if (access(("/sys/block/" + zram).c_str(), F_OK) != 0) return "no /sys/block/" + zram;
  std::ifstream swaps("/proc/swaps");
  for (std::string line; std::getline(swaps, line);)
    if (line.rfind("/dev/" + zram + " ", 0) == 0) return "";
  return "/dev/" + zram + " is not swap (tools/run-region-bench.sh --kernel-zram sets it up)";
}

// --- One run. ---------------------------------------------------------------------------

struct Row {
  std::string access, memory;
  uint64_t ratio = 0, threads = 0, touches = 0, faults = 0, wrong = 0;
  double wall_s = 0, fill_s = 0, out_us = -1;
  size_t pages = 0;
  std::vector<float> us;  // every touch
  double peak_rss_mib = 0;
  double held_per_byte = -1;  // mem_used_total / orig_data_size
  std::string note;

  double fault_us(double q) const {  // among the `faults` slowest touches
    const size_t f = std::min<size_t>(faults, us.size());
    if (f == 0) return 0;
    const size_t from = us.size() - f;
    return us[from + std::min(f - 1, static_cast<size_t>(q * double(f)))];
  }
};

// A memory under test: where it is, how it counts its faults, and when each page was last
// touched (every column records it, so that every column's touch costs the same; the kernel
// column's kswapd reads it).
struct Memory {
  unsigned char* base = nullptr;
  size_t size = 0;
  uint64_t (*faults)(void*) = nullptr;
  void* context = nullptr;
  std::atomic<uint64_t>* touched = nullptr;  // a clock reading per page, 0: not in memory
  // The kernel column under a budget: the pages touched since their page-out, and the most
  // there may be before a touch that brings one more in waits for the kswapd (the region's
  // hard limit; a memory cgroup's limit would make the faulting thread reclaim).
  std::atomic<uint64_t>* in_memory = nullptr;
  uint64_t hard_limit = 0;
};

std::unique_ptr<std::atomic<uint64_t>[]> touch_record(size_t pages) {
  return std::make_unique<std::atomic<uint64_t>[]>(pages);  // zeros
}

void fill(const Memory& m, const Corpus& corpus) {
  std::vector<unsigned char> buf(kPage);
  for (size_t p = 0; p < m.size / kPage; p++) {
    corpus.read(p, buf.data());
    std::memcpy(m.base + p * kPage, buf.data(), kPage);
  }
}

// A page comes in: past the hard limit, the touch waits for the kswapd to page some out.
void wait_for_room(const Memory& m) {
  for (uint64_t n = m.in_memory->fetch_add(1, std::memory_order_relaxed) + 1; n > m.hard_limit;
       n = m.in_memory->load(std::memory_order_relaxed)) {
    std::this_thread::yield();
  }
}

// Every thread touches its trace; the first thread's start to the last one's end is timed.
void touch(const Memory& m, const std::vector<Trace>& traces, const std::vector<uint64_t>& words,
           Row& row) {
  std::atomic<size_t> ready{0};
  std::atomic<uint64_t> wrong{0};
  std::vector<std::vector<float>> us(traces.size());
  Clock::time_point start, end;
  std::vector<std::thread> threads;
  std::vector<Clock::time_point> ends(traces.size());
  const uint64_t faults_before = m.faults(m.context);
  for (size_t t = 0; t < traces.size(); t++)
    threads.emplace_back([&, t] {
      us[t].resize(traces[t].size());
      ready++;
      while (ready.load() != traces.size() + 1) {
      }
      uint64_t bad = 0;
      for (size_t i = 0; i < traces[t].size(); i++) {
        const uint32_t p = traces[t][i];
        const auto* word = reinterpret_cast<const volatile uint64_t*>(
            m.base + p * kPage + Corpus::check_offset(p));
        const auto t0 = Clock::now();
        const uint64_t before =
            m.touched[p].exchange(static_cast<uint64_t>(t0.time_since_epoch().count()), std::memory_order_relaxed);
        if (before == 0 && m.in_memory != nullptr) wait_for_room(m);
        const uint64_t v = *word;
        us[t][i] = std::chrono::duration<float, std::micro>(Clock::now() - t0).count();
        bad += v != words[p];
      }
      ends[t] = Clock::now();
      wrong += bad;
    });
  while (ready.load() != traces.size()) {
  }
  start = Clock::now();
  ready++;
  for (auto& th : threads) th.join();
  end = *std::max_element(ends.begin(), ends.end());
  row.faults = m.faults(m.context) - faults_before;
  row.wall_s = std::chrono::duration<double>(end - start).count();
  row.wrong = wrong;
  for (auto& u : us) row.us.insert(row.us.end(), u.begin(), u.end());
  row.touches = row.us.size();
  std::sort(row.us.begin(), row.us.end());
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

unsigned char* map_anonymous(size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("mmap: " + std::string(std::strerror(errno)));
  madvise(p, size, MADV_NOHUGEPAGE);  // 4 KiB pages, as the region's and zram's
  return static_cast<unsigned char*>(p);
}

uint64_t no_faults(void*) { return 0; }
uint64_t process_major_faults(void*) { return major_faults(); }

Row start_row(const std::string& access, uint64_t ratio, uint64_t threads, const char* memory) {
  Row row;
  row.access = access;
  row.ratio = ratio;
  row.threads = threads;
  row.memory = memory;
  return row;
}

Row run_resident(const Corpus& corpus, size_t size, const std::vector<Trace>& traces,
                 const std::vector<uint64_t>& words, Row row) {
  const uint64_t rss_before = status_kib("VmRSS:");
  auto touched = touch_record(size / kPage);
  Memory m{map_anonymous(size), size, no_faults, nullptr, touched.get()};
  auto t = Clock::now();
  fill(m, corpus);
  row.fill_s = seconds_since(t);
  reset_peak_rss();
  touch(m, traces, words, row);
  row.peak_rss_mib = double(status_kib("VmHWM:") - rss_before) / 1024;
  munmap(m.base, size);
  return row;
}

// The kernel column's kswapd: keeps the pages touched since their last page-out at the budget,
// paging out the ones touched longest ago, on a thread of its own (off the touching threads'
// path, as kswapd and the region's evictor are).
class Kswapd {
 public:
  Kswapd(const Memory& m, size_t budget_pages)
      : m_(m), pages_(m.size / kPage), budget_(budget_pages), thread_([this] { run(); }) {}
  ~Kswapd() {
    stop_ = true;
    thread_.join();
  }
  Kswapd(const Kswapd&) = delete;
  Kswapd& operator=(const Kswapd&) = delete;

 private:
  void run() {
    std::vector<std::pair<uint64_t, uint32_t>> in;  // (touched at, page)
    std::vector<uint32_t> out;
    while (!stop_.load(std::memory_order_relaxed)) {
      in.clear();
      for (size_t p = 0; p < pages_; p++) {
        const uint64_t at = m_.touched[p].load(std::memory_order_relaxed);
        if (at != 0) in.emplace_back(at, static_cast<uint32_t>(p));
      }
      if (in.size() + budget_ / 64 <= budget_) {  // below the low watermark: sleep
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      const size_t n = in.size() - (budget_ - budget_ / 32);  // down to the high watermark
      std::nth_element(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n), in.end());
      out.clear();
      for (size_t i = 0; i < n; i++) {  // those touched since they were chosen stay
        uint64_t at = in[i].first;
        if (m_.touched[in[i].second].compare_exchange_strong(at, 0, std::memory_order_relaxed))
          out.push_back(in[i].second);
      }
      page_out(out);
      m_.in_memory->fetch_sub(out.size(), std::memory_order_relaxed);
    }
  }
  // MADV_PAGEOUT of the pages, a run of neighbours in one call.
  void page_out(std::vector<uint32_t>& pages) {
    std::sort(pages.begin(), pages.end());
    for (size_t i = 0; i < pages.size();) {
      size_t j = i + 1;
      while (j < pages.size() && pages[j] == pages[j - 1] + 1) j++;
      madvise(m_.base + size_t{pages[i]} * kPage, (j - i) * kPage, MADV_PAGEOUT);
      i = j;
    }
  }

  const Memory& m_;
  const size_t pages_, budget_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Row run_zram(const Corpus& corpus, size_t size, size_t budget, const std::vector<Trace>& traces,
             const std::vector<uint64_t>& words, const std::string& zram, Row row) {
  const uint64_t rss_before = status_kib("VmRSS:");
  auto touched = touch_record(size / kPage);
  Memory m{map_anonymous(size), size, process_major_faults, nullptr, touched.get()};
  auto fill_start = Clock::now();
  fill(m, corpus);
  const MmStat before = settled_mm_stat(zram);
  const uint64_t swap_before = status_kib("VmSwap:");
  auto t = Clock::now();
  if (madvise(m.base, size, MADV_PAGEOUT) != 0)
    throw std::runtime_error("madvise(MADV_PAGEOUT): " + std::string(std::strerror(errno)));
  const double out_s = seconds_since(t);
  row.fill_s = seconds_since(fill_start);
  const uint64_t out_pages = (status_kib("VmSwap:") - swap_before) * 1024 / kPage;
  const MmStat after = read_mm_stat(zram);
  row.out_us = out_pages ? out_s * 1e6 / double(out_pages) : -1;
  if (after.orig > before.orig)
    row.held_per_byte = double(after.used - before.used) / double(after.orig - before.orig);
  if (out_pages * 10 < size / kPage * 9)
    row.note = "only " + std::to_string(out_pages) + " of " + std::to_string(size / kPage) +
               " pages went out";
  reset_peak_rss();
  {
    std::atomic<uint64_t> in_memory{0};
    std::optional<Kswapd> kswapd;
    if (budget != 0) {
      m.in_memory = &in_memory;
      m.hard_limit = budget / kPage + std::max<size_t>(budget / kPage / 64, 16);
      kswapd.emplace(m, budget / kPage);
    }
    touch(m, traces, words, row);
  }
  row.peak_rss_mib = double(status_kib("VmHWM:") - rss_before) / 1024;
  munmap(m.base, size);
  return row;
}

uint64_t region_faults(void* region) {
  struct zsm_region_stats s {};
  zsm_region_stats(static_cast<zsm_region*>(region), &s);
  return s.faults;
}

// nullopt (and a line on stderr) if the region cannot be made here.
std::optional<Row> run_region(const Corpus& corpus, size_t size, size_t budget,
                              const std::vector<Trace>& traces, const std::vector<uint64_t>& words,
                              double resident_fill_s, unsigned flags, Row row) {
  const uint64_t rss_before = status_kib("VmRSS:");
  zsm_region_options opts{};
  opts.budget_bytes = budget;
  opts.flags = flags;
  zsm_region* region = zsm_region_create(size, &opts);
  if (region == nullptr) {
    std::fprintf(stderr, "[region_bench] no region: %s (%s)\n", zsm_region_last_error(),
                 std::strerror(errno));
    return std::nullopt;
  }
  auto touched = touch_record(size / kPage);
  Memory m{static_cast<unsigned char*>(zsm_region_base(region)), size, region_faults, region, touched.get()};
  auto t = Clock::now();
  fill(m, corpus);
  if (zsm_region_evict(region, m.base, size) != 0)
    throw std::runtime_error("zsm_region_evict: " + std::string(std::strerror(errno)));
  row.fill_s = seconds_since(t);
  struct zsm_region_stats s {};
  zsm_region_stats(region, &s);
  if (s.evictions != 0)
    row.out_us = std::max(0.0, row.fill_s - resident_fill_s) * 1e6 / double(s.evictions);
  if (s.orig_data_size != 0) row.held_per_byte = double(s.mem_used_total) / double(s.orig_data_size);
  reset_peak_rss();
  touch(m, traces, words, row);
  row.peak_rss_mib = double(status_kib("VmHWM:") - rss_before) / 1024;
  zsm_region_destroy(region);
  return row;
}

// --- The floor. -------------------------------------------------------------------------

// A fault with nothing to decompress: the first read of each of `pages` pages never written.
float first_read_p50_us(const unsigned char* base, size_t pages) {
  std::vector<float> us(pages);
  for (size_t p = 0; p < pages; p++) {
    const auto t0 = Clock::now();
    (void)*reinterpret_cast<const volatile unsigned char*>(base + p * kPage);
    us[p] = std::chrono::duration<float, std::micro>(Clock::now() - t0).count();
  }
  std::nth_element(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(pages / 2), us.end());
  return us[pages / 2];
}

constexpr size_t kFloorPages = 2048;  // 8 MiB, inside the region's budget: no eviction

std::string region_floor(unsigned flags) {
  zsm_region_options opts{};
  opts.budget_bytes = 4 * kFloorPages * kPage;
  opts.fault_around_pages = 1;
  opts.flags = flags;
  zsm_region* r = zsm_region_create(2 * opts.budget_bytes, &opts);
  if (r == nullptr) return "-";
  char out[32];
  std::snprintf(out, sizeof out, "%.2f", first_read_p50_us(static_cast<unsigned char*>(zsm_region_base(r)), kFloorPages));
  zsm_region_destroy(r);
  return out;
}

float kernel_floor() {
  unsigned char* m = map_anonymous(kFloorPages * kPage);
  const float us = first_read_p50_us(m, kFloorPages);
  munmap(m, kFloorPages * kPage);
  return us;
}

// lz4's time a page, compressing and decompressing up to 1024 of the corpus's pages.
std::pair<double, double> lz4_us_per_page(const Corpus& corpus) {
  auto codec = zsm::Codec::create(zsm::CodecOptions{});
  const size_t n = std::min<size_t>(corpus.pages(), 1024);
  std::vector<std::byte> pages(n * kPage), out(kPage), compressed(n * codec->bound(kPage));
  std::vector<size_t> sizes(n);
  for (size_t i = 0; i < n; i++) corpus.read(i, reinterpret_cast<unsigned char*>(&pages[i * kPage]));
  const size_t each = codec->bound(kPage);
  auto t = Clock::now();
  for (size_t i = 0; i < n; i++) {
    auto got = codec->compress({&pages[i * kPage], kPage}, {&compressed[i * each], each});
    sizes[i] = got.value_or(0);
  }
  const double compress_us = seconds_since(t) * 1e6 / double(n);
  t = Clock::now();
  for (size_t i = 0; i < n; i++) {
    if (sizes[i] != 0 && codec->decompress({&compressed[i * each], sizes[i]}, out))
      throw std::runtime_error("lz4 did not decompress its own page");
  }
  return {compress_us, seconds_since(t) * 1e6 / double(n)};
}

void print_floor(const Corpus& corpus) {
  const auto [compress_us, decompress_us] = lz4_us_per_page(corpus);
  std::printf("# floor, a fault with nothing to decompress (p50 of %zu first reads): zsm region "
              "%s us, SIGBUS mode %s us, kernel (an anonymous page) %.2f us; lz4 a page: "
              "compress %.2f us, decompress %.2f us\n",
              kFloorPages, region_floor(0).c_str(), region_floor(ZSM_REGION_SELF_SERVE).c_str(), kernel_floor(),
              compress_us, decompress_us);
}

// --- At scale. --------------------------------------------------------------------------

// A 16 GiB region at a 1 GiB budget, its first 2 GiB written and touched at random (one thread,
// one touch a page): what the region's tables and its CLOCK cost when the region is large.
uint64_t run_at_scale(const Corpus& corpus, uint64_t seed) {
  const size_t region = size_t{16} << 30, budget = size_t{1} << 30, written = size_t{2} << 30;
  const uint64_t rss_before = status_kib("VmRSS:");
  zsm_region_options opts{};
  opts.budget_bytes = budget;
  zsm_region* r = zsm_region_create(region, &opts);
  if (r == nullptr) {
    std::printf("# at scale: no region (%s)\n", zsm_region_last_error());
    return 0;
  }
  auto touched = touch_record(written / kPage);
  Memory m{static_cast<unsigned char*>(zsm_region_base(r)), written, region_faults, r, touched.get()};
  auto t = Clock::now();
  fill(m, corpus);
  const double fill_us = seconds_since(t) * 1e6 / double(written / kPage);
  Options one;
  one.touches_per_page = 1;
  one.seed = seed;
  Row row = start_row("uniform", 2, 1, "zsm region");
  reset_peak_rss();
  touch(m, make_traces("uniform", written / kPage, one, 1), corpus.words(written / kPage), row);
  struct zsm_region_stats st {};
  zsm_region_stats(r, &st);
  std::printf("# at scale: a 16 GiB region at a 1 GiB budget, 2 GiB written (%.2f us a page) and "
              "touched at random, one touch a page: %llu faults, p50 %.2f us, p99 %.2f us; peak RSS "
              "%.0f MiB; bookkeeping %.1f MiB (the region's tables and the pool's metadata); one "
              "CLOCK sweep %.2f ms; %llu words wrong\n",
              fill_us, (unsigned long long)row.faults, row.fault_us(0.5), row.fault_us(0.99),
              double(status_kib("VmHWM:") - rss_before) / 1024, double(st.bookkeeping_bytes) / (1 << 20),
              double(st.clock_sweep_ns) / 1e6, (unsigned long long)row.wrong);
  zsm_region_destroy(r);
  return row.wrong;
}

// --- The table. -------------------------------------------------------------------------

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

void print_header(const Options& opt, const Corpus& corpus, const std::string& zram_note) {
  utsname u{};
  uname(&u);
  std::printf("# zsm_region_bench: %s, %u CPUs, Linux %s; budget %.1f MiB; %zu real 4 KiB "
              "pages (/usr/lib, /usr/share); %s\n",
              cpu_name().c_str(), std::thread::hardware_concurrency(), u.release,
              double(opt.budget) / (1 << 20), corpus.pages(), zram_note.c_str());
  print_floor(corpus);
  std::printf("| access | memory / budget | threads | memory | touches | faults | fault us p50 "
              "/ p99 / p99.9 | Mtouches/s | MiB/s | fill us/page | out us/page | peak RSS MiB | "
              "held / data | wrong |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

void print_row(const Row& r) {
  const double mtps = r.wall_s > 0 ? double(r.touches) / r.wall_s / 1e6 : 0;
  std::printf("| %s | %llux | %llu | %s | %llu | %llu | ", r.access.c_str(),
              (unsigned long long)r.ratio, (unsigned long long)r.threads, r.memory.c_str(),
              (unsigned long long)r.touches, (unsigned long long)r.faults);
  if (r.faults) std::printf("%.2f / %.2f / %.2f | ", r.fault_us(0.5), r.fault_us(0.99), r.fault_us(0.999));
  else std::printf("- | ");
  std::printf("%.3f | %.0f | %.2f | ", mtps, mtps * 1e6 * kPage / (1 << 20),
              r.pages ? r.fill_s * 1e6 / double(r.pages) : 0);
  if (r.out_us >= 0) std::printf("%.2f | ", r.out_us);
  else std::printf("- | ");
  std::printf("%.1f | ", r.peak_rss_mib);
  if (r.held_per_byte >= 0) std::printf("%.3f | ", r.held_per_byte);
  else std::printf("- | ");
  std::printf("%llu |%s%s\n", (unsigned long long)r.wrong, r.note.empty() ? "" : " ", r.note.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) try {
  Options opt;
  zsm_cli::parse<Options>(argc, argv, "zsm_region_bench [options]", kFlags, opt);
  std::string zram_note = "kernel zram: not asked for (--kernel-zram)";
  if (opt.kernel_zram) {
    const std::string why = zram_unavailable(opt.zram);
    zram_note = why.empty() ? "kernel zram: /dev/" + opt.zram + " as swap, " +
                                  first_line("/sys/block/" + opt.zram + "/comp_algorithm")
                            : "kernel zram skipped: " + why;
    if (!why.empty()) opt.kernel_zram = false;
  }
  const uint64_t most = *std::max_element(opt.ratios.begin(), opt.ratios.end());
  const size_t max_pages = most * opt.budget / kPage;
  Corpus corpus(max_pages, opt.seed);
  print_header(opt, corpus, zram_note);
  uint64_t wrong = 0;
  bool region_ok = true;  // until a region cannot be made
  for (const std::string& access : opt.access)
    for (uint64_t ratio : opt.ratios) {
      const size_t size = ratio * opt.budget / kPage * kPage;
      const std::vector<uint64_t> words = corpus.words(size / kPage);
      for (uint64_t threads : opt.threads) {
        const std::vector<Trace> traces = make_traces(access, size / kPage, opt, threads);
        std::vector<Row> rows;
        rows.push_back(run_resident(corpus, size, traces, words,
                                    start_row(access, ratio, threads, "resident")));
        for (const std::string& mode : opt.modes) {
          if (!region_ok) break;
          const bool sigbus = mode == "sigbus";
          auto r = run_region(corpus, size, opt.budget, traces, words, rows[0].fill_s,
                              sigbus ? ZSM_REGION_SELF_SERVE : 0u,
                              start_row(access, ratio, threads, sigbus ? "zsm region, SIGBUS" : "zsm region"));
          if (r) rows.push_back(std::move(*r));
          else region_ok = false;
        }
        if (opt.kernel_zram) {
          rows.push_back(run_zram(corpus, size, opt.budget, traces, words, opt.zram,
                                  start_row(access, ratio, threads, "kernel zram, budget")));
          rows.push_back(run_zram(corpus, size, 0, traces, words, opt.zram,
                                  start_row(access, ratio, threads, "kernel zram, no budget")));
        }
        for (Row& r : rows) {
          r.pages = size / kPage;
          print_row(r);
          wrong += r.wrong;
        }
      }
    }
  if (opt.at_scale) wrong += run_at_scale(corpus, opt.seed);
  std::printf("words read back that differ: %llu\n", (unsigned long long)wrong);
  return wrong == 0 ? 0 : 1;
} catch (const std::invalid_argument& e) {
  return zsm_cli::usage_error("zsm_region_bench", e);
} catch (const std::exception& e) {
  std::fprintf(stderr, "zsm_region_bench: %s\n", e.what());
  return 1;
}
