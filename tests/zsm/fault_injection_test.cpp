// tests/zsm/fault_injection_test.cpp: every page request of a scripted workload, failed in turn.
//
// The pool script is a fixed list of steps in phases: bursts of stores of mixed sizes (tiny
// objects, objects spanning pages in 2..16-page zspages, huge objects up to a whole page), by
// zs_store() and by zs_malloc() + zs_obj_write(), overwrites, frees and zs_compact(). A run
// replays it against a model holding every live object's bytes. One run with nothing failing
// counts the script's page requests, P. Then, for every k in 1..P, the script is replayed
// with only the k-th request failing, and with every request from the k-th on failing until
// the end of that phase. At each failed store: the call reported ENOMEM, the pool holds the
// pages it held before the call and the page source hands out exactly those, and every live
// object still holds its bytes. The rest of the script then runs and verifies, and freeing
// everything and compacting leaves the pool with no page. The same script runs under pool
// memory limits (max_pages) reached mid-burst, where a failed store has also freed the
// pool's spare zspages and still finds no room for the zspage it needs.
//
// The cache gets the same treatment in tests/cache/cache_fault_injection_test.cpp.
//
// enomem_test.cpp covers single bursts of stores; this file covers whole multi-phase
// workloads. Each sweep records how many fault points it exercised (test property
// "fault_points") and prints it on a summary line.
#include <zsm/zsmalloc.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "bytes.h"
#include "test_support.h"

namespace {

using namespace zsm_test;

// ---- the pool script ---------------------------------------------------------------------------

enum class Act : uint8_t { store, malloc_write, overwrite, free, compact, end_phase };

struct Step {
  Act act;
  uint32_t id = 0;             // the object: store, malloc_write, overwrite, free
  std::vector<uint8_t> bytes;  // what is written: store, malloc_write, overwrite (same size)
};

// Request sizes at 4 KiB pages (scaled with the page size): tiny objects, objects spanning
// pages in 2-, 5- and 8-page zspages (1160, 776, 3624 at chain 8), the largest classes, and
// huge objects up to a whole page.
constexpr uint32_t kSizes4k[] = {1, 24, 300, 776, 1160, 2000, 3264, 3624, 3625, 4000, 4096};

// Builds the script phase by phase, tracking which objects it has stored and not freed.
class ScriptBuilder {
 public:
  ScriptBuilder(uint32_t size_scale, uint64_t seed) : scale_(size_scale), rng_(seed) {}

  void burst(unsigned n) {
    for (unsigned i = 0; i < n; ++i) {
      const uint32_t size = kSizes4k[rng_() % std::size(kSizes4k)] * scale_;
      sizes_.push_back(size);
      steps_.push_back({i % 2 ? Act::malloc_write : Act::store, next_id_, make_pattern(size, rng_())});
      live_.push_back(next_id_++);
    }
  }
  // Frees `num`/`den` of the live objects, chosen at random.
  void free_fraction(unsigned num, unsigned den) {
    std::shuffle(live_.begin(), live_.end(), rng_);
    const size_t n = live_.size() * num / den;
    for (size_t i = 0; i < n; ++i) steps_.push_back({Act::free, live_[i], {}});
    live_.erase(live_.begin(), live_.begin() + static_cast<std::ptrdiff_t>(n));
  }
  void overwrite(unsigned n) {
    for (unsigned i = 0; i < n && !live_.empty(); ++i) {
      const uint32_t id = live_[rng_() % live_.size()];
      steps_.push_back({Act::overwrite, id, make_pattern(sizes_[id], rng_())});
    }
  }
  void compact() { steps_.push_back({Act::compact, 0, {}}); }
  void end_phase() { steps_.push_back({Act::end_phase, 0, {}}); }

  uint32_t objects() const { return next_id_; }
  std::vector<Step> take() { return std::move(steps_); }

 private:
  uint32_t scale_;
  std::mt19937_64 rng_;
  std::vector<Step> steps_;
  std::vector<uint32_t> live_;
  std::vector<uint32_t> sizes_;  // by object
  uint32_t next_id_ = 0;
};

struct Script {
  std::vector<Step> steps;
  uint32_t objects = 0;
};

// Five phases: fill; fragment and compact; refill and fragment harder; overwrite and compact;
// nearly empty, compact, refill.
// Larger pages take larger objects, half as many of them (the replay costs about the same).
Script build_script(size_t page_size) {
  ScriptBuilder b(static_cast<uint32_t>(page_size / 4096), 20260101);
  const unsigned n = page_size == 4096 ? 2 : 1;
  b.burst(75 * n);
  b.end_phase();
  b.free_fraction(1, 3);
  b.compact();
  b.overwrite(40);
  b.end_phase();
  b.burst(60 * n);
  b.free_fraction(2, 3);
  b.compact();
  b.end_phase();
  b.burst(50 * n);
  b.overwrite(30);
  b.compact();
  b.end_phase();
  b.free_fraction(9, 10);
  b.compact();
  b.burst(30 * n);
  b.end_phase();
  return {b.take(), b.objects()};
}

// ---- replaying it ------------------------------------------------------------------------------

struct PoolShape {
  const char* name;
  size_t page_size;
  unsigned chain;
  unsigned shards;
};

// GoogleTest prints a shape by its name (in the test's listing, and on failure).
void PrintTo(const PoolShape& shape, std::ostream* os) { *os << shape.name; }

// The indices of the pool's distinct classes (merged indices left out).
std::vector<unsigned> distinct_classes(zs_pool* pool) {
  std::vector<unsigned> out;
  for (unsigned i = 0; i < zs_class_count(pool); ++i) {
    struct zs_class_stats st{};
    if (zs_class_stats(pool, i, &st) == 1) out.push_back(i);
  }
  return out;
}

// Whether the object's first expected.size() bytes are `expected`: check_object()
// (test_support.h) with one reused buffer, since the sweeps read millions of objects.
::testing::AssertionResult holds_bytes(zs_pool* pool, unsigned long h, const std::vector<uint8_t>& expected,
                                       std::vector<uint8_t>& scratch) {
  if (scratch.size() < expected.size()) scratch.resize(expected.size());
  void* mem = zs_obj_read_begin(pool, h, expected.size(), scratch.data());
  if (mem == nullptr)
    return ::testing::AssertionFailure() << "zs_obj_read_begin(" << h << ") failed, errno " << errno;
  const bool same = std::memcmp(mem, expected.data(), expected.size()) == 0;
  zs_obj_read_end(pool, h, expected.size(), mem);
  if (!same) return ::testing::AssertionFailure() << "object " << h << " (" << expected.size() << " B) changed";
  return ::testing::AssertionSuccess();
}

// One pool on a fault-injecting page source, replaying the script against a model of its
// objects' bytes.
class PoolRun {
 public:
  PoolRun(const PoolShape& shape, unsigned long max_pages)
      : src_(shape.page_size),
        chain_(shape.chain != 0 ? shape.chain : ZS_DEFAULT_CHAIN_SIZE),
        limit_(max_pages) {
    zs_pool_config cfg{};
    cfg.page_size = shape.page_size;
    cfg.chain_size = shape.chain;
    cfg.nr_shards = shape.shards;
    cfg.max_pages = max_pages;
    cfg.page_source = src_.source();
    pool_ = zs_create_pool_ex(shape.name, &cfg);
    if (pool_ != nullptr) distinct_ = distinct_classes(pool_);
  }
  ~PoolRun() { zs_destroy_pool(pool_); }
  PoolRun(const PoolRun&) = delete;
  PoolRun& operator=(const PoolRun&) = delete;

  // Replays `script` with `plan` armed, then frees everything; the first broken expectation.
  ::testing::AssertionResult replay(const Script& script, FaultPlan plan) {
    if (pool_ == nullptr || !src_.ok())
      return ::testing::AssertionFailure() << "no pool, errno " << errno;
    objects_.assign(script.objects, {});
    src_.start(plan);
    for (size_t i = 0; i < script.steps.size(); ++i) {
      ::testing::AssertionResult r = apply(script.steps[i]);
      if (!r) return r << " [step " << i << "]";
      peak_pages_ = std::max(peak_pages_, zs_get_total_pages(pool_));
    }
    return free_everything();
  }

  // Destroys the pool: every page must be back with the source.
  ::testing::AssertionResult destroy() {
    zs_destroy_pool(pool_);
    pool_ = nullptr;
    if (src_.in_use() != 0 || src_.vm_in_use() != 0)
      return ::testing::AssertionFailure() << src_.in_use() << " pages still out after zs_destroy_pool";
    return ::testing::AssertionSuccess();
  }

  unsigned long page_requests() const { return src_.calls(); }
  unsigned long peak_pages() const { return peak_pages_; }
  unsigned long failed_stores() const { return failed_stores_; }

 private:
  struct Object {
    unsigned long handle = 0;
    std::vector<uint8_t> bytes;
  };

  // What a failed store is checked against.
  struct Before {
    unsigned long total;
    unsigned long spares;
    unsigned long source_failures;
  };

  ::testing::AssertionResult apply(const Step& step) {
    switch (step.act) {
      case Act::store:
      case Act::malloc_write: return store(step);
      case Act::overwrite: return overwrite(step);
      case Act::free: return free_object(step.id);
      case Act::compact:
        zs_compact(pool_);
        return all_intact();
      case Act::end_phase: return end_phase();
    }
    return ::testing::AssertionFailure() << "unknown step";
  }

  ::testing::AssertionResult store(const Step& step) {
    const std::vector<uint8_t>& bytes = step.bytes;
    const unsigned long total = zs_get_total_pages(pool_);
    // A store takes at most one new zspage of at most chain_ pages: only near the limit can it
    // fail, or free spares.
    const bool near_limit = limit_ != 0 && total + chain_ > limit_;
    const Before before{total, near_limit ? spare_pages() : 0, src_.failures()};
    errno = 0;
    unsigned long h = step.act == Act::store ? zs_store(pool_, bytes.data(), bytes.size())
                                             : zs_malloc(pool_, bytes.size());
    const bool source_failed = src_.failures() != before.source_failures;
    if (h == 0) return after_failed_store(step, before, source_failed);
    if (source_failed)
      return ::testing::AssertionFailure() << "a store succeeded although its page request failed";
    if (step.act == Act::malloc_write) {
      zs_obj_write(pool_, h, bytes.data(), bytes.size());
      if (errno != 0) return ::testing::AssertionFailure() << "zs_obj_write set errno " << errno;
    }
    objects_[step.id] = {h, bytes};
    if (limit_ != 0 && zs_get_total_pages(pool_) > limit_)
      return ::testing::AssertionFailure() << zs_get_total_pages(pool_) << " pages over the limit " << limit_;
    return pages_balanced();
  }

  // A store that returned 0: why, and what it left behind.
  ::testing::AssertionResult after_failed_store(const Step& step, const Before& before,
                                                bool source_failed) {
    if (errno != ENOMEM)
      return ::testing::AssertionFailure() << "store of " << step.bytes.size() << " B failed with errno " << errno;
    if (src_.recovered())
      return ::testing::AssertionFailure() << "store of " << step.bytes.size() << " B failed after the source recovered";
    ++failed_stores_;
    const unsigned long total = zs_get_total_pages(pool_);
    if (source_failed && total != before.total)
      return ::testing::AssertionFailure() << "the pool held " << before.total << " pages before a store"
                                           << " whose page request failed and " << total << " after";
    if (!source_failed) {
      if (limit_ == 0)
        return ::testing::AssertionFailure() << "ENOMEM with no failed page request and no limit";
      // At its limit the pool frees every spare, then fails only if the zspage still does not fit.
      const unsigned ppz = class_for_request(pool_, step.bytes.size()).pages_per_zspage;
      if (total != before.total - before.spares || total + ppz <= limit_)
        return ::testing::AssertionFailure()
               << "limit " << limit_ << ": " << before.total << " pages (" << before.spares
               << " in spares) before a refused " << ppz << "-page zspage, " << total << " after";
    }
    ::testing::AssertionResult r = pages_balanced();
    if (r) r = all_intact();
    // The class statistics too, once a phase (they cost more than the rest).
    if (r && !stats_checked_in_phase_) r = check_stats_consistent(pool_, live_count());
    stats_checked_in_phase_ = true;
    return r;
  }

  // Pages the pool's spare (empty) zspages hold: what a pool at its limit frees before failing.
  unsigned long spare_pages() {
    unsigned long pages = 0;
    for (unsigned i : distinct_) {
      struct zs_class_stats st{};
      zs_class_stats(pool_, i, &st);
      pages += st.zspages[0] * st.pages_per_zspage;
    }
    return pages;
  }

  ::testing::AssertionResult overwrite(const Step& step) {
    Object& o = objects_[step.id];
    if (o.handle == 0) return ::testing::AssertionSuccess();  // its store failed
    o.bytes = step.bytes;
    errno = 0;
    zs_obj_write(pool_, o.handle, o.bytes.data(), o.bytes.size());
    if (errno != 0) return ::testing::AssertionFailure() << "zs_obj_write set errno " << errno;
    return holds_bytes(pool_, o.handle, o.bytes, scratch_);
  }

  ::testing::AssertionResult free_object(uint32_t id) {
    Object& o = objects_[id];
    if (o.handle == 0) return ::testing::AssertionSuccess();
    ::testing::AssertionResult r = holds_bytes(pool_, o.handle, o.bytes, scratch_);
    zs_free(pool_, o.handle);
    o = {};
    return r ? pages_balanced() : r;
  }

  // Checks everything; where pages were failing until now, they come back.
  ::testing::AssertionResult end_phase() {
    src_.end_phase();
    stats_checked_in_phase_ = false;
    ::testing::AssertionResult r = all_intact();
    return r ? check_stats_consistent(pool_, live_count()) : r;
  }

  ::testing::AssertionResult free_everything() {
    for (uint32_t id = 0; id < objects_.size(); ++id) {
      ::testing::AssertionResult r = free_object(id);
      if (!r) return r;
    }
    ::testing::AssertionResult r = compact_and_check_empty(pool_);
    if (r && src_.in_use() != 0)
      r = ::testing::AssertionFailure() << src_.in_use() << " pages out with an empty pool";
    return r;
  }

  ::testing::AssertionResult all_intact() {
    for (const Object& o : objects_) {
      if (o.handle == 0) continue;
      ::testing::AssertionResult r = holds_bytes(pool_, o.handle, o.bytes, scratch_);
      if (!r) return r;
    }
    return pages_balanced();
  }

  // The source hands out exactly the pages the pool accounts for.
  ::testing::AssertionResult pages_balanced() {
    const unsigned long total = zs_get_total_pages(pool_);
    if (static_cast<unsigned long>(src_.in_use()) != total || src_.vm_in_use() != total)
      return ::testing::AssertionFailure() << "the source has " << src_.in_use() << " pages out ("
                                           << src_.vm_in_use() << " by the vm source's count), the pool "
                                           << total;
    return ::testing::AssertionSuccess();
  }

  size_t live_count() const {
    return static_cast<size_t>(std::count_if(objects_.begin(), objects_.end(),
                                             [](const Object& o) { return o.handle != 0; }));
  }

  FailingPageSource src_;
  unsigned chain_;
  unsigned long limit_;
  zs_pool* pool_ = nullptr;
  std::vector<unsigned> distinct_;  // class indices
  std::vector<Object> objects_;
  std::vector<uint8_t> scratch_;    // for reads of objects that span pages
  bool stats_checked_in_phase_ = false;
  unsigned long peak_pages_ = 0;
  unsigned long failed_stores_ = 0;
};

// A replay with nothing failing: the script's page requests and peak.
struct Baseline {
  unsigned long page_requests = 0;
  unsigned long peak_pages = 0;
};

::testing::AssertionResult run_baseline(const PoolShape& shape, const Script& script, Baseline* out) {
  PoolRun run(shape, 0);
  ::testing::AssertionResult r = run.replay(script, {});
  if (r) r = run.destroy();
  if (r && run.failed_stores() != 0) r = ::testing::AssertionFailure() << "a store failed with no fault";
  *out = {run.page_requests(), run.peak_pages()};
  return r;
}

void report(const char* sweep, const PoolShape& shape, unsigned long fault_points, const char* what) {
  ::testing::Test::RecordProperty("fault_points", std::to_string(fault_points));
  std::printf("[ summary  ] %s %s: %lu fault points (%s)\n", sweep, shape.name, fault_points, what);
}

// The sweeps over fault points, each point a fresh pool replaying the script: every page
// request failing alone (exactly one store fails, cleanly), every request from the k-th on
// failing until the phase ends, and the pool's own limit at every page count below the
// script's peak (stores past it fail with ENOMEM mid-burst and the script goes on).
enum class Sweep { fail_once, fail_until_phase_end, max_pages };

const char* sweep_name(Sweep sweep) {
  switch (sweep) {
    case Sweep::fail_once: return "EveryPageRequestFailsOnce";
    case Sweep::fail_until_phase_end: return "FailingFromEveryRequestUntilThePhaseEnds";
    case Sweep::max_pages: return "MemoryLimitReachedMidBurst";
  }
  return "?";
}

void PrintTo(Sweep sweep, std::ostream* os) { *os << sweep_name(sweep); }

class PoolFaults : public ::testing::TestWithParam<std::tuple<PoolShape, Sweep>> {};

TEST_P(PoolFaults, EveryFaultPointFailsCleanly) {
  const auto& [shape, sweep] = GetParam();
  const Script script = build_script(shape.page_size);
  Baseline base;
  ASSERT_TRUE(run_baseline(shape, script, &base));
  if (sweep == Sweep::max_pages) {
    ASSERT_GT(base.peak_pages, 1u);
  }
  // The fault points: the page requests of the script, or the page counts below its peak.
  const unsigned long points =
      sweep == Sweep::max_pages ? base.peak_pages - 1 : base.page_requests;
  ASSERT_GT(points, 0u);
  unsigned long failed_stores = 0;
  for (unsigned long k = 1; k <= points; ++k) {
    const std::string at =
        sweep == Sweep::fail_once    ? "page request " + std::to_string(k) + " failing"
        : sweep == Sweep::max_pages ? "max_pages " + std::to_string(k) + " below the peak of " +
                                          std::to_string(base.peak_pages)
                                    : "failing from request " + std::to_string(k);
    PoolRun run(shape, sweep == Sweep::max_pages ? k : 0);
    FaultPlan plan;
    if (sweep == Sweep::fail_once) plan = {FaultPlan::once, k};
    if (sweep == Sweep::fail_until_phase_end) plan = {FaultPlan::until_phase_end, k};
    ASSERT_TRUE(run.replay(script, plan)) << at;
    if (sweep == Sweep::fail_once)
      ASSERT_EQ(run.failed_stores(), 1u) << at;
    else
      ASSERT_GE(run.failed_stores(), 1u) << at;
    ASSERT_TRUE(run.destroy()) << at;
    failed_stores += run.failed_stores();
  }
  const std::string refused = std::to_string(failed_stores) + " stores refused in all";
  switch (sweep) {
    case Sweep::fail_once:
      report("fail once", shape, points, "each page request of the script failed alone");
      break;
    case Sweep::fail_until_phase_end:
      report("fail until phase end", shape, points, refused.c_str());
      break;
    case Sweep::max_pages:
      report("max_pages", shape, failed_stores,
             (std::to_string(points) + " limits below the peak").c_str());
      break;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PoolFaults,
    ::testing::Combine(::testing::Values(PoolShape{"page4k_chain8", 4096, 8, 0},
                                         PoolShape{"page4k_chain4_1shard", 4096, 4, 1},
                                         PoolShape{"page16k_chain16_4shards", 16384, 16, 4}),
                       ::testing::Values(Sweep::fail_once, Sweep::fail_until_phase_end,
                                         Sweep::max_pages)),
    [](const ::testing::TestParamInfo<std::tuple<PoolShape, Sweep>>& info) {
      return std::string(sweep_name(std::get<1>(info.param))) + "_" +
             std::get<0>(info.param).name;
    });

}  // namespace
