// tests/cache/cache_soak_test.cpp: a long concurrent run on one zsm::Cache in which every
// value read is checked (the pool's soak is tests/zsm/soak_test.cpp).
//
// Four threads put, get and erase on one zsm::Cache whose capacity is far below the data, so
// puts evict. A value carries its key and version in its first 8 bytes and its other bytes
// follow from them, so a get either misses or returns exactly some version put under that key
// (and not a newer one than has been put). The cache's hit and miss counters must match the
// threads' own counts; evictions must happen. Zero mismatches is the only pass. Length:
// soak.h (ZSM_SOAK_OPS). A watchdog (watchdog.h) aborts the run when a thread stops making
// progress (a hang).
#include <zsm/cache.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "soak.h"
#include "test_support.h"
#include "watchdog.h"

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

struct CacheCounts {
  uint64_t ops = 0, puts = 0, gets = 0, hits = 0, misses = 0, erases = 0, errors = 0;
  void add(const CacheCounts& o) {
    ops += o.ops, puts += o.puts, gets += o.gets, hits += o.hits, misses += o.misses;
    erases += o.erases, errors += o.errors;
  }
};

class CacheWorker {
 public:
  static constexpr uint32_t kKeys = 4096;

  CacheWorker(zsm::Cache& cache, std::vector<std::atomic<uint32_t>>& versions, int id, Mismatches& bad)
      : cache_(cache), versions_(versions), id_(id), rng_(9000 + id), bad_(bad) {}

  void run(uint64_t ops, Watchdog& dog) {
    Bytes out(4096);
    for (uint64_t op = 0; op < ops; ++op, dog.beat(id_)) {
      const auto key = static_cast<uint32_t>(rng_() % kKeys);
      const unsigned r = rng_() % 100;
      try {
        if (r < 40)
          put(key);
        else if (r < 65)
          get_copy(key);
        else if (r < 90)
          get_into(key, out);
        else
          erase(key);
      } catch (const std::system_error& e) {
        ++counts_.errors;
        bad_.record("thread " + std::to_string(id_) + ": " + e.what());
      }
    }
    counts_.ops = ops;
    dog.retire(id_);
  }

  const CacheCounts& counts() const { return counts_; }

 private:
  void put(uint32_t key) {
    const uint32_t version = ++versions_[key];
    cache_.put(soak_key(key), versioned_value(key, version));
    ++counts_.puts;
  }
  void get_copy(uint32_t key) {
    std::optional<Bytes> got = cache_.get(soak_key(key));
    if (got) check(key, *got);
    count_get(got.has_value());
  }
  void get_into(uint32_t key, Bytes& out) {
    std::optional<size_t> n = cache_.get(soak_key(key), out);
    if (n) check(key, std::span<const std::byte>(out.data(), *n));
    count_get(n.has_value());
  }
  void erase(uint32_t key) {
    cache_.erase(soak_key(key));
    ++counts_.erases;
  }
  void check(uint32_t key, std::span<const std::byte> got) {
    if (!consistent_value(key, got, versions_[key].load()))
      bad_.record("thread " + std::to_string(id_) + ": " + soak_key(key) + " returned " +
                  std::to_string(got.size()) + " bytes that are no version of it");
  }
  void count_get(bool hit) {
    ++counts_.gets;
    ++(hit ? counts_.hits : counts_.misses);
  }

  zsm::Cache& cache_;
  std::vector<std::atomic<uint32_t>>& versions_;
  int id_;
  std::mt19937_64 rng_;
  Mismatches& bad_;
  CacheCounts counts_;
};

TEST(Soak, CacheThreadsWithEvictions) {
  zsm::CacheOptions options;
  options.capacity_bytes = size_t{4} << 20;  // about half of what the key space holds
  options.pool.nr_shards = 4;
  zsm::Cache cache(options);
  std::vector<std::atomic<uint32_t>> versions(CacheWorker::kKeys);
  const uint64_t ops_per_thread = soak_ops(2'000'000) / kThreads;
  Mismatches bad;
  std::vector<CacheWorker> workers;
  for (int i = 0; i < kThreads; ++i) workers.emplace_back(cache, versions, i, bad);
  Watchdog dog("cache soak", kThreads);
  std::vector<std::thread> threads;
  for (CacheWorker& w : workers)
    threads.emplace_back([&w, &dog, ops_per_thread] { w.run(ops_per_thread, dog); });
  for (std::thread& t : threads) t.join();

  CacheCounts total;
  for (const CacheWorker& w : workers) total.add(w.counts());
  const zsm::CacheStats s = cache.stats();
  std::printf("[ summary  ] cache soak: %d threads, %llu ops (%llu puts, %llu gets: %llu hits,"
              " %llu misses; %llu erases), %llu evictions, %lu mismatches\n",
              kThreads, static_cast<unsigned long long>(total.ops),
              static_cast<unsigned long long>(total.puts), static_cast<unsigned long long>(total.gets),
              static_cast<unsigned long long>(total.hits), static_cast<unsigned long long>(total.misses),
              static_cast<unsigned long long>(total.erases), static_cast<unsigned long long>(s.evictions),
              bad.count());
  ::testing::Test::RecordProperty("ops", std::to_string(total.ops));
  ::testing::Test::RecordProperty("threads", kThreads);
  ::testing::Test::RecordProperty("evictions", std::to_string(s.evictions));
  ::testing::Test::RecordProperty("mismatches", std::to_string(bad.count()));
  EXPECT_EQ(bad.count(), 0u) << bad.first();
  EXPECT_GT(s.evictions, 0u);
  EXPECT_GT(total.hits, 0u);
  EXPECT_EQ(s.hits, total.hits);
  EXPECT_EQ(s.misses, total.misses);
  EXPECT_LE(s.bytes_held, options.capacity_bytes);
  cache.clear();
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(zs_get_total_pages(cache.pool()), 0u);
}

}  // namespace
