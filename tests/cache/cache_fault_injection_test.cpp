// tests/cache/cache_fault_injection_test.cpp: every page request of a scripted cache workload,
// failed in turn (the pool's own sweep is tests/zsm/fault_injection_test.cpp).
//
// A put / erase / read-back script runs on zsm::Cache over a failing page source: a put makes
// room by evicting (cache.hpp) and throws no_memory only once nothing is left to evict. Under
// a capacity it keeps reaching, puts evict and the capacity holds. Either way every entry
// reads back as the value last put or as absent (evicted), never as other bytes, and no page
// leaks. Each sweep records how many fault points it exercised (test property
// "fault_points") and prints it on a summary line.
#include <zsm/cache.hpp>

#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "bytes.h"
#include "test_support.h"

namespace {

using namespace zsm_test;

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
    src_.start(plan);
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
    if (src_.recovered())
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
    src_.end_phase();
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
