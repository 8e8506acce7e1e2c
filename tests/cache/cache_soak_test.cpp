// tests/cache/cache_soak_test.cpp: a long concurrent run on one zsm::Cache in which every
// value read is checked (the pool's soak is tests/zsm/soak_test.cpp).
//
// Four threads run workloads (workload.h) that put, get and erase on one zsm::Cache whose
// capacity is far below the data, so puts evict. A value carries its key and version in its
// first 8 bytes and its other bytes follow from them, so a get either misses or returns exactly
// some version put under that key (and not a newer one than has been put). The cache's hit and
// miss counters must match the threads' own counts; evictions must happen. Zero mismatches is
// the only pass. Length: soak.h (ZSM_SOAK_OPS). A watchdog (watchdog.h) aborts the run when a
// thread stops making progress (a hang).
#include <zsm/cache.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "soak.h"
#include "test_support.h"
#include "watchdog.h"
#include "workload.h"

namespace {

using namespace zsm_test;

using Bytes = std::vector<std::byte>;

// The value of `key` at `version`: 8 bytes naming both (the whole value, repeated, when it is
// same-filled), then bytes that follow from them, compressible or not; up to a page long.
Bytes versioned_value(uint32_t key, uint32_t version) {
  const uint64_t name = (uint64_t{key} << 32) | version;
  const uint64_t seed = mix64(name);
  const size_t n = seed % 4 == 3 ? 4096 : 8 * (1 + (seed >> 8) % 512);
  Bytes v(n);
  switch (seed % 4) {
    case 0:  // compressible: a 40-byte motif repeated
      fill_pattern(v.data(), std::min<size_t>(n, 48), seed);
      for (size_t i = 48; i < n; ++i) v[i] = v[8 + (i - 8) % 40];
      break;
    case 2:  // same-filled: the name, repeated
      break;
    default:  // incompressible, a whole page for case 3
      fill_pattern(v.data(), n, seed);
  }
  for (size_t i = 0; i < n; i += 8) {
    std::memcpy(v.data() + i, &name, 8);
    if (seed % 4 != 2) break;
  }
  return v;
}

// Whether `got` is exactly a version of `key` no newer than `latest`.
bool consistent_value(uint32_t key, std::span<const std::byte> got, uint32_t latest) {
  uint64_t name = 0;
  if (got.size() < 8) return false;
  std::memcpy(&name, got.data(), 8);
  const auto version = static_cast<uint32_t>(name);
  if (name >> 32 != key || version == 0 || version > latest) return false;
  const Bytes want = versioned_value(key, version);
  return want.size() == got.size() && std::memcmp(want.data(), got.data(), got.size()) == 0;
}

std::string soak_key(uint32_t key) { return "soak/" + std::to_string(key); }

// One thread's operations on the shared cache: its workload's target. Every value a get
// returns is checked against the versions put under its key.
class CacheWorker {
 public:
  static constexpr uint32_t kKeys = 4096;

  CacheWorker(zsm::Cache& cache, std::vector<std::atomic<uint32_t>>& versions)
      : cache_(cache), versions_(versions) {}

  Check put(Rng& rng) {
    const auto key = draw_key(rng);
    const uint32_t version = ++versions_[key];
    return calling(key, [&] { cache_.put(soak_key(key), versioned_value(key, version)); });
  }
  Check get_copy(Rng& rng) {
    const auto key = draw_key(rng);
    std::optional<Bytes> got;
    if (Check c = calling(key, [&] { got = cache_.get(soak_key(key)); }); !c) return c;
    count_get(got.has_value());
    return got ? check(key, *got) : ::testing::AssertionSuccess();
  }
  Check get_into(Rng& rng) {
    const auto key = draw_key(rng);
    std::optional<size_t> n;
    if (Check c = calling(key, [&] { n = cache_.get(soak_key(key), out_); }); !c) return c;
    count_get(n.has_value());
    if (!n) return ::testing::AssertionSuccess();
    return check(key, std::span<const std::byte>(out_.data(), *n));
  }
  Check erase(Rng& rng) {
    const auto key = draw_key(rng);
    return calling(key, [&] { cache_.erase(soak_key(key)); });
  }

  uint64_t hits = 0, misses = 0;

 private:
  static uint32_t draw_key(Rng& rng) { return static_cast<uint32_t>(rng() % kKeys); }

  // Runs a call of the cache on `key`; an exception is a failure.
  template <class Call>
  static Check calling(uint32_t key, Call call) {
    try {
      call();
    } catch (const std::system_error& e) {
      return ::testing::AssertionFailure() << soak_key(key) << ": " << e.what();
    }
    return ::testing::AssertionSuccess();
  }
  Check check(uint32_t key, std::span<const std::byte> got) {
    if (!consistent_value(key, got, versions_[key].load()))
      return ::testing::AssertionFailure() << soak_key(key) << " returned " << got.size()
                                           << " bytes that are no version of it";
    return ::testing::AssertionSuccess();
  }
  void count_get(bool hit) { ++(hit ? hits : misses); }

  zsm::Cache& cache_;
  std::vector<std::atomic<uint32_t>>& versions_;
  Bytes out_ = Bytes(4096);
};

TEST(Soak, CacheThreadsWithEvictions) {
  zsm::CacheOptions options;
  options.capacity_bytes = size_t{4} << 20;  // about half of what the key space holds
  options.pool.nr_shards = 4;
  zsm::Cache cache(options);
  std::vector<std::atomic<uint32_t>> versions(CacheWorker::kKeys);
  const uint64_t ops_per_thread = soak_ops(2'000'000) / kThreads;
  Mismatches bad;
  std::vector<std::unique_ptr<CacheWorker>> workers;
  std::vector<std::unique_ptr<Workload<CacheWorker>>> mixes;
  for (int i = 0; i < kThreads; ++i) {
    workers.push_back(std::make_unique<CacheWorker>(cache, versions));
    mixes.push_back(std::make_unique<Workload<CacheWorker>>(*workers.back(), 9000 + i));
    mixes.back()->op("put", 40, &CacheWorker::put)
        .op("get", 25, &CacheWorker::get_copy)
        .op("get into", 25, &CacheWorker::get_into)
        .op("erase", 10, &CacheWorker::erase);
  }
  Watchdog dog("cache soak", kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      mixes[i]->on_step([&dog, i] { dog.beat(i); });
      if (Check c = mixes[i]->run(ops_per_thread); !c)
        bad.record("thread " + std::to_string(i) + ": " + c.message());
      dog.retire(i);
    });
  for (std::thread& t : threads) t.join();

  OpCounts total;
  uint64_t hits = 0, misses = 0;
  for (int i = 0; i < kThreads; ++i) {
    total += mixes[i]->counts();
    hits += workers[i]->hits;
    misses += workers[i]->misses;
  }
  const zsm::CacheStats s = cache.stats();
  std::printf("[ summary  ] cache soak: %d threads, %llu ops (%s; %llu hits, %llu misses),"
              " %llu evictions, %lu mismatches\n",
              kThreads, static_cast<unsigned long long>(total.total()), total.to_string().c_str(),
              static_cast<unsigned long long>(hits), static_cast<unsigned long long>(misses),
              static_cast<unsigned long long>(s.evictions), bad.count());
  ::testing::Test::RecordProperty("ops", std::to_string(total.total()));
  ::testing::Test::RecordProperty("threads", kThreads);
  ::testing::Test::RecordProperty("evictions", std::to_string(s.evictions));
  ::testing::Test::RecordProperty("mismatches", std::to_string(bad.count()));
  EXPECT_EQ(bad.count(), 0u) << bad.first();
  EXPECT_GT(s.evictions, 0u);
  EXPECT_GT(hits, 0u);
  EXPECT_EQ(s.hits, hits);
  EXPECT_EQ(s.misses, misses);
  EXPECT_LE(s.bytes_held, options.capacity_bytes);
  cache.clear();
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(zs_get_total_pages(cache.pool()), 0u);
}

}  // namespace
