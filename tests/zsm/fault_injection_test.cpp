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
// zsm::Cache gets the same treatment with a put / erase / read-back script: over a failing
// page source a put makes room by evicting (cache.hpp) and throws no_memory only once nothing
// is left to evict; under a capacity it keeps reaching, puts evict and the capacity holds.
// Either way every entry reads back as the value last put or as absent (evicted), never as
// other bytes, and no page leaks.
//
// enomem_test.cpp covers single bursts of stores; this file covers whole multi-phase
// workloads. Each sweep records how many fault points it exercised (test property
// "fault_points") and prints it on a summary line.
#include <zsm/cache.hpp>

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

// How page requests fail during a replay.
struct FaultPlan {
  enum Mode { none, once, until_phase_end } mode = none;
  unsigned long k = 0;  // the first request that fails, 1-based
};

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
    plan_ = plan;
    if (plan.mode == FaultPlan::once) src_.fail_once_at(plan.k);
    if (plan.mode == FaultPlan::until_phase_end) src_.fail_from(plan.k);
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
    if (recovered_)
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
    if (plan_.mode == FaultPlan::until_phase_end && src_.failures() > 0 && !recovered_) {
      src_.recover();
      recovered_ = true;
    }
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
  FaultPlan plan_;
  bool recovered_ = false;
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

// ---- the cache script --------------------------------------------------------------------------

// The value put under key `key` at `version`: compressible, incompressible (stored raw above
// the huge class), same-filled, or a whole incompressible page (a record split in two).
Bytes cache_value(uint32_t key, uint32_t version) {
  const uint64_t seed = mix64((uint64_t{key} << 32) | version);
  const size_t n = 8 * (1 + (seed >> 8) % 512);
  switch (seed % 4) {
    case 0: {
      Bytes b = random_bytes(48, seed);
      b.resize(n);
      for (size_t i = 48; i < n; ++i) b[i] = b[i % 48] ^ static_cast<std::byte>(i / 480);
      return b;
    }
    case 1: return random_bytes(n, seed);
    case 2: {
      Bytes b(n);
      for (size_t i = 0; i < n; i += 8) std::memcpy(b.data() + i, &seed, 8);
      return b;
    }
    default: return random_bytes(4096, seed);
  }
}

enum class CacheAct : uint8_t { put, erase, end_phase };

struct CacheStep {
  CacheAct act;
  uint32_t key = 0;
  Bytes value;  // put
};

// Puts of new keys, overwrites, erases; read-backs of everything at each phase's end.
std::vector<CacheStep> build_cache_script() {
  std::mt19937_64 rng(4242);
  std::vector<CacheStep> steps;
  std::vector<uint32_t> versions;
  auto put_new = [&](unsigned n) {
    for (unsigned i = 0; i < n; ++i) {
      const auto key = static_cast<uint32_t>(versions.size());
      versions.push_back(1);
      steps.push_back({CacheAct::put, key, cache_value(key, 1)});
    }
  };
  auto overwrite = [&](unsigned n) {
    for (unsigned i = 0; i < n; ++i) {
      const uint32_t key = static_cast<uint32_t>(rng() % versions.size());
      steps.push_back({CacheAct::put, key, cache_value(key, ++versions[key])});
    }
  };
  auto erase = [&](unsigned n) {
    for (unsigned i = 0; i < n; ++i)
      steps.push_back({CacheAct::erase, static_cast<uint32_t>(rng() % versions.size()), {}});
  };
  put_new(90);
  steps.push_back({CacheAct::end_phase, 0, {}});
  overwrite(45);
  erase(30);
  steps.push_back({CacheAct::end_phase, 0, {}});
  put_new(60);
  overwrite(30);
  steps.push_back({CacheAct::end_phase, 0, {}});
  return steps;
}

std::string cache_key(uint32_t key) { return "key:" + std::to_string(key) + std::string(key % 23, '.'); }

// One cache over a fault-injecting page source, replaying the cache script against a model
// of its entries (key -> the value last put). An entry may vanish (evicted), never change.
class CacheRun {
 public:
  // `roomy`: the script never reaches the capacity, so a put's own value is never evicted.
  CacheRun(size_t capacity, unsigned pool_shards, bool roomy) : roomy_(roomy) {
    zsm::CacheOptions options;
    options.capacity_bytes = capacity;
    options.pool.nr_shards = pool_shards;
    options.pool.page_source = src_.source();
    cache_ = std::make_unique<zsm::Cache>(options);
  }

  ::testing::AssertionResult replay(const std::vector<CacheStep>& script, FaultPlan plan) {
    plan_ = plan;
    if (plan.mode == FaultPlan::once) src_.fail_once_at(plan.k);
    if (plan.mode == FaultPlan::until_phase_end) src_.fail_from(plan.k);
    for (size_t i = 0; i < script.size(); ++i) {
      ::testing::AssertionResult r = apply(script[i]);
      if (!r) return r << " [cache step " << i << "]";
    }
    return clear_everything();
  }

  unsigned long page_requests() const { return src_.calls(); }
  unsigned long page_failures() const { return src_.failures(); }
  unsigned long no_memory_errors() const { return no_memory_; }
  uint64_t evictions() const { return cache_->stats().evictions; }

 private:
  ::testing::AssertionResult apply(const CacheStep& step) {
    switch (step.act) {
      case CacheAct::put: return put(step);
      case CacheAct::erase: return erase(step.key);
      case CacheAct::end_phase: return end_phase();
    }
    return ::testing::AssertionFailure() << "unknown step";
  }

  ::testing::AssertionResult put(const CacheStep& step) {
    const std::string key = cache_key(step.key);
    const unsigned long failures = src_.failures();
    const uint64_t evictions = cache_->stats().evictions;
    try {
      cache_->put(key, step.value);
      model_[key] = step.value;
    } catch (const std::system_error& e) {
      if (e.code() != zsm::CacheError::no_memory)
        return ::testing::AssertionFailure() << "put of " << key << " threw " << e.what();
      return after_no_memory(key);
    }
    ::testing::AssertionResult r = read_back(key);
    if (!r) return r;
    // Evictions and failed page requests are where entries may have gone: check them all.
    if (src_.failures() != failures || cache_->stats().evictions != evictions) return all_consistent();
    return bounds_hold();
  }

  enum class Found { same, absent, other };

  // Whether the cache holds `want` under `key` (read into one reused buffer).
  Found look_up(const std::string& key, const Bytes& want) {
    std::optional<size_t> n = cache_->get(key, buffer_);
    if (!n) return Found::absent;
    const bool same = *n == want.size() && std::memcmp(buffer_.data(), want.data(), *n) == 0;
    return same ? Found::same : Found::other;
  }

  // A put that returned reads back, unless the capacity made it evict; even then it cannot
  // have evicted everything, its own value included: that is a no_memory error.
  ::testing::AssertionResult read_back(const std::string& key) {
    const Found found = look_up(key, model_[key]);
    if (found == Found::other)
      return ::testing::AssertionFailure() << "a put of " << key << " reads back other bytes";
    if (found == Found::same) return ::testing::AssertionSuccess();
    if (roomy_) return ::testing::AssertionFailure() << "a put of " << key << " does not read back";
    if (cache_->stats().entries == 0)
      return ::testing::AssertionFailure() << "a put of " << key << " returned, but the cache evicted"
                                           << " everything, its value too (" << cache_->stats().bytes_held
                                           << " bytes held of " << cache_->options().capacity_bytes << ")";
    ++vanished_;
    model_.erase(key);
    return ::testing::AssertionSuccess();
  }

  // no_memory: everything else was evicted first, and the key holds nothing.
  ::testing::AssertionResult after_no_memory(const std::string& key) {
    ++no_memory_;
    if (recovered_)
      return ::testing::AssertionFailure() << "no_memory for " << key << " after the source recovered";
    if (cache_->contains(key))
      return ::testing::AssertionFailure() << "a put that failed left " << key << " in the cache";
    model_.erase(key);
    ::testing::AssertionResult r = all_consistent();
    if (r && cache_->stats().entries != 0)
      r = ::testing::AssertionFailure() << "no_memory with " << cache_->stats().entries
                                        << " entries left to evict";
    return r;
  }

  ::testing::AssertionResult erase(uint32_t id) {
    const std::string key = cache_key(id);
    const bool erased = cache_->erase(key);
    const bool modelled = model_.erase(key) == 1;
    if (erased && !modelled)
      return ::testing::AssertionFailure() << "erase found " << key << ", which was never put or was erased";
    if (!erased && modelled) ++vanished_;  // evicted earlier
    return bounds_hold();
  }

  ::testing::AssertionResult end_phase() {
    if (plan_.mode == FaultPlan::until_phase_end && src_.failures() > 0 && !recovered_) {
      src_.recover();
      recovered_ = true;
    }
    return all_consistent();
  }

  // Every modelled entry reads back as its value or is gone; gone ones are accounted evicted.
  ::testing::AssertionResult all_consistent() {
    for (auto it = model_.begin(); it != model_.end();) {
      const Found found = look_up(it->first, it->second);
      if (found == Found::other)
        return ::testing::AssertionFailure() << it->first << " reads back other bytes";
      if (found == Found::same) {
        ++it;
      } else {
        ++vanished_;
        it = model_.erase(it);
      }
    }
    if (vanished_ > cache_->stats().evictions)
      return ::testing::AssertionFailure() << vanished_ << " entries vanished, "
                                           << cache_->stats().evictions << " evictions counted";
    return bounds_hold();
  }

  // The capacity holds and the source hands out exactly the pool's pages.
  ::testing::AssertionResult bounds_hold() {
    const zsm::CacheStats s = cache_->stats();
    if (s.bytes_held > cache_->options().capacity_bytes)
      return ::testing::AssertionFailure() << s.bytes_held << " bytes held, capacity "
                                           << cache_->options().capacity_bytes;
    const unsigned long total = zs_get_total_pages(cache_->pool());
    if (static_cast<unsigned long>(src_.in_use()) != total)
      return ::testing::AssertionFailure() << "the source has " << src_.in_use() << " pages out, the pool " << total;
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult clear_everything() {
    ::testing::AssertionResult r = all_consistent();
    if (!r) return r;
    cache_->clear();
    if (cache_->stats().entries != 0 || zs_get_total_pages(cache_->pool()) != 0 || src_.in_use() != 0)
      return ::testing::AssertionFailure() << "after clear(): " << cache_->stats().entries << " entries, "
                                           << zs_get_total_pages(cache_->pool()) << " pool pages, "
                                           << src_.in_use() << " pages out";
    return ::testing::AssertionSuccess();
  }

  FailingPageSource src_;  // outlives the cache
  bool roomy_;
  std::unique_ptr<zsm::Cache> cache_;
  std::map<std::string, Bytes> model_;
  Bytes buffer_ = Bytes(4096);  // a value of the largest size
  FaultPlan plan_;
  bool recovered_ = false;
  uint64_t vanished_ = 0;
  unsigned long no_memory_ = 0;
};

constexpr size_t kRoomyCapacity = size_t{64} << 20;  // never reached by the script

TEST(CacheFaults, EveryPageRequestFailsOnce) {
  const std::vector<CacheStep> script = build_cache_script();
  unsigned long requests = 0;
  {
    CacheRun base(kRoomyCapacity, 0, true);
    ASSERT_TRUE(base.replay(script, {}));
    EXPECT_EQ(base.evictions(), 0u);
    requests = base.page_requests();
  }
  ASSERT_GT(requests, 0u);
  for (unsigned long k = 1; k <= requests; ++k) {
    CacheRun run(kRoomyCapacity, 0, true);
    ASSERT_TRUE(run.replay(script, {FaultPlan::once, k})) << "page request " << k << " failing";
    EXPECT_EQ(run.page_failures(), 1u);
    // The put that met the failure made room (one eviction, or a compaction) and succeeded,
    // or found nothing to evict (the cache's first put) and was refused.
    EXPECT_LE(run.no_memory_errors() + run.evictions(), 1u) << "page request " << k << " failing";
  }
  ::testing::Test::RecordProperty("fault_points", std::to_string(requests));
  std::printf("[ summary  ] cache fail once: %lu fault points\n", requests);
}

TEST(CacheFaults, FailingFromEveryRequestUntilThePhaseEnds) {
  const std::vector<CacheStep> script = build_cache_script();
  unsigned long requests = 0;
  {
    CacheRun base(kRoomyCapacity, 0, true);
    ASSERT_TRUE(base.replay(script, {}));
    requests = base.page_requests();
  }
  unsigned long no_memory = 0;
  uint64_t evictions = 0;
  for (unsigned long k = 1; k <= requests; ++k) {
    CacheRun run(kRoomyCapacity, 0, true);
    ASSERT_TRUE(run.replay(script, {FaultPlan::until_phase_end, k})) << "failing from request " << k;
    ASSERT_GE(run.page_failures(), 1u);
    no_memory += run.no_memory_errors();
    evictions += run.evictions();
  }
  EXPECT_GT(no_memory, 0u) << "some put should find nothing left to evict";
  ::testing::Test::RecordProperty("fault_points", std::to_string(requests));
  std::printf("[ summary  ] cache fail until phase end: %lu fault points, %lu puts refused, "
              "%llu evictions\n",
              requests, no_memory, static_cast<unsigned long long>(evictions));
}

// What an empty cache with a one-shard pool holds: its pool's bookkeeping.
size_t empty_cache_footprint() {
  zsm::CacheOptions options;
  options.pool.nr_shards = 1;
  return zsm::Cache(options).stats().bytes_held;
}

// Capacities from 24 pages above an empty cache's own footprint to well past it: puts evict,
// the capacity holds after every call, and entries vanish only by eviction. (The pool's
// bookkeeping and the index grow with use and are never given back, so a smaller capacity
// ends up unable to hold the largest zspage, 8 pages, even with the cache empty.)
TEST(CacheFaults, CapacityReached) {
  const std::vector<CacheStep> script = build_cache_script();
  const size_t footprint = empty_cache_footprint();
  uint64_t evictions = 0;
  unsigned long no_memory = 0;
  const size_t capacities_in_pages[] = {24, 32, 48, 64, 96, 128};
  for (size_t pages : capacities_in_pages) {
    CacheRun run(footprint + pages * 4096, 1, false);
    ASSERT_TRUE(run.replay(script, {})) << "capacity " << pages << " pages above the footprint";
    evictions += run.evictions();
    no_memory += run.no_memory_errors();
  }
  EXPECT_GT(evictions, 0u);
  ::testing::Test::RecordProperty("fault_points", std::to_string(evictions + no_memory));
  std::printf("[ summary  ] cache capacity: %llu evictions, %lu puts refused over %zu capacities\n",
              static_cast<unsigned long long>(evictions), no_memory, std::size(capacities_in_pages));
}

}  // namespace
