// The compressed cache (compress/include/zsm/cache.hpp, compress/cache/): round trips for every codec and value
// shape, same-filled and raw storage, errors that leave every other entry intact, capacity
// under a randomized workload, an exact single-threaded model in geometries of few large
// pages (every call under a watchdog: a put once looped forever there), CLOCK eviction order,
// recompression, a failing page source, corrupted pool memory, and concurrent readers and
// writers; and the pattern a RocksDB tier makes (hits erased, second-eviction admission, skewed
// keys), under which the pool must stay dense.
#include <zsm/cache.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <cmath>
#include <functional>
#include <list>
#include <map>
#include <sstream>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bytes.h"
#include "cache_workload.h"
#include "watchdog.h"

namespace {

using zsm_test::Bytes;
using zsm_test::CacheTarget;
using zsm_test::Check;
using zsm_test::Rng;
using zsm_test::Workload;
using zsm_test::random_bytes;
using zsm_test::Watchdog;

// Compressible bytes whose content depends on `seed`.
Bytes text_bytes(size_t n, uint64_t seed) {
  static const std::string words[] = {"alpha ", "beta ", "gamma ", "delta ", "zram ", "page "};
  std::mt19937_64 rng(seed);
  Bytes b;
  while (b.size() < n) {
    const std::string& w = words[rng() % 6];
    for (char c : w) b.push_back(static_cast<std::byte>(c));
  }
  b.resize(n);
  return b;
}

// A block that compresses to about `incompressible` bytes (text, then random bytes), so that
// the blocks spread over many size classes as a DB's do.
Bytes block_of(size_t size, size_t incompressible, uint64_t seed) {
  Bytes b = text_bytes(size - incompressible, seed);
  Bytes r = random_bytes(incompressible, seed + 1);
  b.insert(b.end(), r.begin(), r.end());
  return b;
}

Bytes same_filled(size_t n, uint64_t word) {
  Bytes b(n);
  for (size_t i = 0; i < n; i += 8) std::memcpy(b.data() + i, &word, 8);
  return b;
}

zsm::CacheError error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::system_error& e) {
    if (e.code().category() == zsm::cache_category()) return static_cast<zsm::CacheError>(e.code().value());
    ADD_FAILURE() << "unexpected error " << e.what();
  }
  return static_cast<zsm::CacheError>(0);
}

zsm::CacheOptions small_cache(size_t capacity, unsigned shards = 4) {
  zsm::CacheOptions o;
  o.capacity_bytes = capacity;
  o.shards = shards;
  return o;
}

TEST(Cache, RoundTripsEveryCodecAndShape) {
  for (auto kind : {zsm::CodecKind::none, zsm::CodecKind::lz4, zsm::CodecKind::lz4hc,
                    zsm::CodecKind::zstd}) {
    zsm::CacheOptions o;
    o.codec.kind = kind;
    zsm::Cache cache(o);
    std::map<std::string, Bytes> shapes = {
        {"empty", {}},
        {"one", Bytes{std::byte{7}}},
        {"tiny", text_bytes(5, 1)},
        {"eight same", same_filled(8, 0x1122334455667788ull)},
        {"page same", same_filled(4096, 0)},
        {"page text", text_bytes(4096, 2)},
        {"page random", random_bytes(4096, 3)},
        {"3000 random", random_bytes(3000, 4)},
        {"3625 random", random_bytes(3625, 5)},
        {"4095 text", text_bytes(4095, 6)},
    };
    for (const auto& [key, value] : shapes) cache.put(key, value);
    for (const auto& [key, value] : shapes) {
      SCOPED_TRACE(std::string(zsm::Codec::create(o.codec)->name()) + " " + key);
      auto got = cache.get(key);
      ASSERT_TRUE(got.has_value());
      EXPECT_EQ(*got, value);
      Bytes out(4096);
      EXPECT_EQ(cache.get(key, out), value.size());
      EXPECT_TRUE(std::equal(value.begin(), value.end(), out.begin()));
    }
    zsm::CacheStats s = cache.stats();
    EXPECT_EQ(s.entries, shapes.size());
    EXPECT_EQ(s.same_pages, 2u);
    if (kind != zsm::CodecKind::none) {
      EXPECT_GE(s.huge_pages, 3u);  // the random ones
    }
    EXPECT_LE(s.bytes_held, o.capacity_bytes);
  }
}

// The huge threshold: a record that compression cannot take below the pool's huge class is
// stored raw, and raw page-sized values with their key span two pool objects.
TEST(Cache, RawAndSplitRecordsAroundTheHugeClass) {
  zsm::Cache cache;
  size_t huge = zs_huge_class_size(cache.pool());
  std::vector<std::pair<std::string, Bytes>> values;
  for (size_t n : {huge - 64, huge - 16, huge - 1, huge, huge + 1, size_t{4088}, size_t{4096}}) {
    std::string key = "raw-" + std::to_string(n) + std::string(100, 'k');
    values.emplace_back(key, random_bytes(n, n));
    cache.put(key, values.back().second);
  }
  EXPECT_EQ(cache.stats().huge_pages, values.size());
  for (const auto& [key, value] : values) EXPECT_EQ(cache.get(key), value) << key;
  for (const auto& [key, value] : values) EXPECT_TRUE(cache.erase(key));
  cache.clear();
  EXPECT_EQ(zs_get_total_pages(cache.pool()), 0u);
}

TEST(Cache, OverwriteEraseContainsIterateClear) {
  zsm::Cache cache(small_cache(8 << 20));
  for (int i = 0; i < 500; i++) cache.put("k" + std::to_string(i), text_bytes(100 + i, i));
  cache.put("k7", text_bytes(3000, 77));
  EXPECT_EQ(cache.get("k7"), text_bytes(3000, 77));
  EXPECT_TRUE(cache.contains("k8"));
  EXPECT_TRUE(cache.erase("k8"));
  EXPECT_FALSE(cache.erase("k8"));
  EXPECT_FALSE(cache.contains("k8"));
  EXPECT_FALSE(cache.get("k8").has_value());
  std::set<std::string> keys;
  cache.for_each_key([&](std::string_view k) { keys.insert(std::string(k)); });
  EXPECT_EQ(keys.size(), 499u);
  EXPECT_EQ(keys.count("k8"), 0u);
  EXPECT_EQ(keys.count("k499"), 1u);
  EXPECT_EQ(cache.stats().entries, 499u);
  cache.clear();
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().orig_data_size, 0u);
  EXPECT_EQ(zs_get_total_pages(cache.pool()), 0u);
  cache.put("again", text_bytes(10, 1));
  EXPECT_EQ(cache.get("again"), text_bytes(10, 1));
}

TEST(Cache, BadInputIsAClearErrorAndChangesNothing) {
  zsm::Cache cache(small_cache(4 << 20));
  cache.put("keep", text_bytes(1000, 1));
  EXPECT_EQ(error_of([&] { cache.put("big", Bytes(4097)); }), zsm::CacheError::value_too_large);
  EXPECT_EQ(error_of([&] { cache.put("", Bytes(10)); }), zsm::CacheError::key_too_large);
  EXPECT_EQ(error_of([&] { cache.put(std::string(257, 'x'), Bytes(10)); }),
            zsm::CacheError::key_too_large);
  Bytes small(10);
  EXPECT_EQ(error_of([&] { cache.get("keep", small); }), zsm::CacheError::buffer_too_small);
  EXPECT_EQ(cache.get("keep"), text_bytes(1000, 1));
  EXPECT_EQ(cache.stats().entries, 1u);

  auto bad = [](zsm::CacheOptions o) {
    return error_of([&] { zsm::Cache c(o); });
  };
  zsm::CacheOptions o;
  o.shards = 3;
  EXPECT_EQ(bad(o), zsm::CacheError::bad_options);
  o = {};
  o.max_value_size = (size_t{1} << 20) + 1;  // values up to 1 MiB
  EXPECT_EQ(bad(o), zsm::CacheError::bad_options);
  o = {};
  o.capacity_bytes = 100;
  EXPECT_EQ(bad(o), zsm::CacheError::bad_options);
  o = {};
  o.codec.level = 1000;
  o.codec.kind = zsm::CodecKind::zstd;
  EXPECT_THROW(zsm::Cache c(o), std::system_error);
}

// Each option out of range is named in the error, with the range it must be in.
TEST(Cache, BadOptionsAreNamedWithTheirRange) {
  auto message = [](zsm::CacheOptions o) -> std::string {
    try {
      zsm::Cache c(o);
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code(), zsm::CacheError::bad_options);
      return e.what();
    }
    return "no error";
  };
  auto expect_names = [&](zsm::CacheOptions o, const std::string& want) {
    const std::string got = message(o);
    EXPECT_NE(got.find(want), std::string::npos) << got;
  };
  zsm::CacheOptions o;
  o.capacity_bytes = 0;
  expect_names(o, "capacity_bytes 0: want at least the pool's page size, 4096");
  o.capacity_bytes = 100;
  expect_names(o, "capacity_bytes 100: want at least the pool's page size, 4096");
  o = {};
  o.shards = 3;
  expect_names(o, "shards 3: want a power of two in 1 .. 1024");
  o = {};
  o.max_value_size = 2 << 20;
  expect_names(o, "max_value_size 2097152: want 0 (a page) or 1 .. 1048576");
  o = {};
  o.max_key_size = 4000;
  expect_names(o, "max_key_size 4000: want 1 .. half a page, 2048");
  o = {};
  o.pool.chain_size = 99;
  expect_names(o, "pool: zs_create_pool_ex() refused");
}

// Values above a page are stored as chains of page-sized objects and one for the rest: every
// size up to 64 KiB round-trips, raw or compressed, and a compressed chain takes the pool
// pages of its compressed bytes (plus a link a page), not of its raw size.
TEST(Cache, ValuesAboveAPageAreChainedAndKeepTheirCompression) {
  zsm::CacheOptions o = small_cache(32 << 20);
  o.max_value_size = 65536;
  zsm::Cache cache(o);
  std::vector<std::pair<std::string, Bytes>> values;
  for (size_t n : {4097u, 8183u, 8184u, 8192u, 12280u, 16384u, 40000u, 65535u, 65536u}) {
    values.emplace_back("raw" + std::to_string(n), random_bytes(n, n));
    values.emplace_back("text" + std::to_string(n), block_of(n, n / 2, n));
  }
  for (const auto& [key, value] : values) cache.put(key, value);
  EXPECT_EQ(cache.stats().entries, values.size());
  EXPECT_EQ(cache.stats().huge_pages, values.size() / 2) << "the random ones alone are raw";
  for (const auto& [key, value] : values) EXPECT_EQ(cache.get(key), value) << key;
  EXPECT_EQ(error_of([&] { cache.put("big", Bytes(65537)); }), zsm::CacheError::value_too_large);
  for (const auto& [key, value] : values) EXPECT_TRUE(cache.erase(key));
  cache.clear();
  EXPECT_EQ(zs_get_total_pages(cache.pool()), 0u) << "every piece of every chain was freed";

  // 2000 values of 8 KiB that compress to about 5 KiB: the pool holds them in about 5 KiB each.
  for (int i = 0; i < 2000; i++) cache.put("v" + std::to_string(i), block_of(8192, 4800, i));
  zsm::CacheStats s = cache.stats();
  EXPECT_EQ(s.entries, 2000u);
  EXPECT_EQ(s.huge_pages, 0u);
  EXPECT_LT(static_cast<double>(s.mem_used_total), 1.08 * static_cast<double>(s.compr_data_size))
      << cache.mm_stat();
  for (int i = 0; i < 2000; i += 97)
    EXPECT_EQ(cache.get("v" + std::to_string(i)), block_of(8192, 4800, i));
}

// A randomized workload in a cache far smaller than the data: the capacity holds after every
// call, and a get returns the last value put under that key or nothing (evicted).
TEST(Cache, CapacityIsNeverExceeded) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    constexpr size_t kCapacity = 1 << 20;
    zsm::Cache cache(small_cache(kCapacity));
    CacheTarget target(cache);
    target.keys = [](Rng& rng) { return "key" + std::to_string(rng() % 2000); };
    target.values = [](Rng& rng) {
      const size_t n = rng() % 4097;
      return rng() % 4 == 0 ? random_bytes(n, rng()) : text_bytes(n, rng());
    };
    auto within_capacity = [](CacheTarget& t, Rng&) -> Check {
      if (t.cache().stats().bytes_held > kCapacity)
        return ::testing::AssertionFailure() << "bytes_held " << t.cache().stats().bytes_held;
      return ::testing::AssertionSuccess();
    };
    Workload<CacheTarget> mix(target, seed);
    mix.op("put", 6, &CacheTarget::put)
        .op("get", 3, &CacheTarget::get)
        .op("erase", 1, &CacheTarget::erase)
        .every(1, "capacity", within_capacity);
    ASSERT_TRUE(mix.run(6000));
    zsm::CacheStats s = cache.stats();
    EXPECT_GT(s.evictions, 0u);
    EXPECT_LE(s.mem_used_max, kCapacity);
  }
}

// Pages zs_compact() could free now, over the pool's distinct classes.
unsigned long freeable_pages(zs_pool* pool) {
  unsigned long pages = 0;
  for (unsigned i = 0; i < zs_class_count(pool); i++) {
    struct zs_class_stats c{};
    if (zs_class_stats(pool, i, &c) == 1) pages += c.freeable;
  }
  return pages;
}

// A full cache replacing entries of many sizes keeps its pool tight: the holes evictions leave
// are compacted once they grow by two zspages, not once they are a quarter of the pool (which
// let 16 % of a RocksDB tier's pages be freeable and held that many fewer blocks).
TEST(Cache, ChurnAtCapacityLeavesFewFreeablePages) {
  const size_t capacity = 4 << 20;
  const unsigned long zspage_pages = ZS_DEFAULT_CHAIN_SIZE;
  zsm::Cache cache(small_cache(capacity));
  std::mt19937_64 rng(5);
  unsigned long worst = 0;
  for (int i = 0; i < 20000; i++) {
    cache.put("k" + std::to_string(i), random_bytes(1000 + rng() % 2000, rng()));
    cache.get("k" + std::to_string(i - rng() % std::min(i + 1, 3000)));  // keeps some in CLOCK
    if (i >= 5000 && i % 100 == 0) worst = std::max(worst, freeable_pages(cache.pool()));
  }
  ASSERT_GT(cache.stats().evictions, 10000u);
  EXPECT_GT(cache.stats().pages_compacted, 0u);
  // Two zspages of new holes, with what compaction left in each class: 28 pages measured;
  // compacting at a quarter of the pool in holes, 129.
  EXPECT_LE(worst, 6 * zspage_pages) << "of " << capacity / 4096 << " pages";
}

// A split record whose tail takes the pool's last pages, so that its head finds none: the
// tail's zspage, freed again, stays as its class's spare, and compaction frees exactly that.
// The put counted that as room made and retried forever; it must evict instead.
TEST(Cache, SplitPutIntoAFullPoolEvictsInsteadOfLooping) {
  zsm::CacheOptions o;
  o.pool.page_size = 65536;
  o.capacity_bytes = 1 << 20;  // 16 pool pages
  o.max_key_size = 512;
  zsm::Cache cache(o);
  Watchdog dog("split put into a full pool");
  cache.put("a", random_bytes(22500, 1));  // one 8-page zspage
  cache.put("b", random_bytes(5, 2));      // one 1-page zspage
  std::string c = "c";
  c.resize(291, '.');
  cache.put(c, random_bytes(65536, 3));    // a 7-page zspage for the tail fills the pool
  dog.beat();
  EXPECT_EQ(cache.get(c), random_bytes(65536, 3));
  EXPECT_GT(cache.stats().evictions, 0u);
  EXPECT_LE(cache.stats().bytes_held, o.capacity_bytes);
}

// The cache against an exact model, one thread, where a zspage holds few records and the
// capacity is a few pool pages (16 and 64 KiB pages, values up to a page, so records split):
// a get returns the last value put under its key or misses (evicted: the model forgets it),
// an erase finds only what the model holds, a put that fails for no memory leaves its key
// absent, and every 50 calls the cache's keys, values and statistics are exactly the model's.
// A watchdog aborts on a call that does not return.
struct CacheModelParam {
  size_t page_size;
  unsigned chain;
  size_t capacity;
  uint64_t seed;
};

class CacheModel : public ::testing::TestWithParam<CacheModelParam> {};

TEST_P(CacheModel, MatchesTheModelAndEveryCallReturns) {
  const CacheModelParam p = GetParam();
  zsm::CacheOptions o = small_cache(p.capacity, 2);
  o.pool.page_size = p.page_size;
  o.pool.chain_size = p.chain;
  zsm::Cache cache(o);
  CacheTarget target(cache);
  target.puts_may_fail = true;
  target.keys = [](Rng& rng) {
    std::string key = "key" + std::to_string(rng() % 64);
    if (rng() % 4 == 0) key.resize(100 + rng() % 157, '.');  // long keys split page-sized values
    return key;
  };
  target.values = [page_size = p.page_size](Rng& rng) -> Bytes {
    switch (rng() % 4) {
      case 0: return random_bytes(page_size - rng() % 64, rng());  // raw, split with its key
      case 1: return random_bytes(1 + rng() % page_size, rng());
      case 2: return text_bytes(1 + rng() % page_size, rng());
      default: return text_bytes(1 + rng() % 3000, rng());
    }
  };
  auto within_capacity = [capacity = p.capacity](CacheTarget& t, Rng&) -> Check {
    const zsm::CacheStats s = t.cache().stats();
    if (s.mem_used_total > capacity)
      return ::testing::AssertionFailure() << "mem_used_total " << s.mem_used_total;
    if (s.bytes_held > capacity && s.entries != 0)
      return ::testing::AssertionFailure() << "bytes_held " << s.bytes_held;
    return ::testing::AssertionSuccess();
  };
  Watchdog dog("cache model");
  Workload<CacheTarget> mix(target, p.seed);
  mix.op("put", 5, &CacheTarget::put)
      .op("get", 3, &CacheTarget::get)
      .op("erase", 2, &CacheTarget::erase)
      .every(1, "capacity", within_capacity)
      .every(50, "reconcile", &CacheTarget::reconcile)
      .on_step([&] { dog.beat(); });
  ASSERT_TRUE(mix.run(3000));
  EXPECT_GT(cache.stats().evictions, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    FewLargePages, CacheModel,
    ::testing::Values(CacheModelParam{4096, 8, 256 << 10, 1},
                      CacheModelParam{16384, 16, 640 << 10, 2},
                      CacheModelParam{16384, 4, 256 << 10, 3},
                      CacheModelParam{65536, 8, 1 << 20, 4},
                      CacheModelParam{65536, 4, 1 << 20, 5},
                      CacheModelParam{65536, 8, 4 << 20, 6},
                      CacheModelParam{65536, 16, 16 << 20, 7}),
    [](const ::testing::TestParamInfo<CacheModelParam>& info) {
      const CacheModelParam& p = info.param;
      return "page" + std::to_string(p.page_size / 1024) + "k_chain" + std::to_string(p.chain) +
             "_" + std::to_string(p.capacity >> 10) + "k";
    });

// A full cache whose hand has swept once (every bit clear): reads every other key of `keys`
// still held, then puts values of `value_size` bytes until half as many entries as the
// unread survivors (more than `min_unread` of them) are evicted. CLOCK must take those from
// the unread ones: every entry read must still be held.
void expect_read_entries_survive(zsm::Cache& cache, const std::vector<std::string>& keys,
                                 size_t min_unread, size_t value_size) {
  std::set<std::string> read;
  for (size_t i = 0; i < keys.size(); i += 2)
    if (cache.get(keys[i])) read.insert(keys[i]);
  size_t unread_alive = 0;
  for (size_t i = 1; i < keys.size(); i += 2) unread_alive += cache.contains(keys[i]);
  ASSERT_GT(unread_alive, min_unread);
  uint64_t before = cache.stats().evictions;
  for (int i = 0; cache.stats().evictions - before < unread_alive / 2; i++)
    cache.put("new" + std::to_string(i), random_bytes(value_size, 1000000 + i));
  for (const std::string& k : read) EXPECT_TRUE(cache.contains(k)) << k << " was read but evicted";
}

// CLOCK: entries read since the hand last passed survive the first sweep.
TEST(Cache, EvictionSparesRecentlyReadEntries) {
  const size_t capacity = 512 << 10;
  zsm::Cache cache(small_cache(capacity, 1));
  std::vector<std::string> keys;
  for (int i = 0; cache.stats().evictions == 0 && i < 100000; i++) {
    keys.push_back("k" + std::to_string(i));
    cache.put(keys.back(), random_bytes(1000, i));
  }
  ASSERT_GT(cache.stats().evictions, 0u);
  expect_read_entries_survive(cache, keys, 10, 1000);
}

// The same when evictions prefer the class of the put (a full pool): looking ahead of the hand
// for an entry of that class must not clear the bits of the entries it looks at. Entries of
// many classes, then puts of a class none of them has: the look-ahead finds no entry of it.
TEST(Cache, EvictionPreferringAClassSparesRecentlyReadEntries) {
  const size_t capacity = 2 << 20;
  zsm::Cache cache(small_cache(capacity, 1));
  std::mt19937_64 rng(11);
  std::vector<std::string> keys;
  for (int i = 0; cache.stats().evictions == 0 && i < 100000; i++) {
    keys.push_back("k" + std::to_string(i));
    cache.put(keys.back(), random_bytes(1500 + rng() % 320, i));
  }
  ASSERT_GT(cache.stats().evictions, 0u);
  expect_read_entries_survive(cache, keys, 100, 600);
}

TEST(Cache, RecompressKeepsOnlySmallerClasses) {
  zsm::CacheOptions o;
  o.codec = {zsm::CodecKind::lz4, 0, {}};
  o.recompress_codec = zsm::CodecOptions{zsm::CodecKind::zstd, 19, {}};
  zsm::Cache cache(o);
  for (int i = 0; i < 300; i++) cache.put("k" + std::to_string(i), text_bytes(4096, i));
  uint64_t before = cache.stats().compr_data_size;
  size_t moved = cache.recompress();
  EXPECT_GT(moved, 0u);
  EXPECT_EQ(cache.stats().recompressed, moved);
  EXPECT_LT(cache.stats().compr_data_size, before);
  EXPECT_EQ(cache.recompress(), 0u) << "values already tried are not tried again";
  for (int i = 0; i < 300; i++) EXPECT_EQ(cache.get("k" + std::to_string(i)), text_bytes(4096, i));
}

// A page source that fails once it has handed out `limit` pages.
struct LimitedSource {
  zs_vm_source* vm = zs_vm_source_create(4096, size_t{64} << 20, 16);
  zs_page_source inner = zs_vm_source_ops(vm);
  size_t limit = SIZE_MAX, handed = 0;
  std::vector<void*> pages;
  zs_page_source ops() {
    return {[](void* self) -> void* {
              auto* s = static_cast<LimitedSource*>(self);
              if (s->handed >= s->limit) return nullptr;
              void* p = s->inner.alloc_page(s->inner.ctx);
              if (p != nullptr) {
                s->handed++;
                s->pages.push_back(p);
              }
              return p;
            },
            [](void* self, void* page) {
              auto* s = static_cast<LimitedSource*>(self);
              s->handed--;
              std::erase(s->pages, page);
              s->inner.free_page(s->inner.ctx, page);
            },
            this};
  }
  ~LimitedSource() { zs_vm_source_destroy(vm); }
};

// A page source out of pages: the cache makes room by evicting (its pages go back to the
// source and are reused), and when nothing can make room the put is a clear no_memory error.
TEST(Cache, FailingPageSourceIsNoMemoryAndKeepsEntries) {
  LimitedSource src;
  zs_page_source ops = src.ops();
  zsm::CacheOptions o = small_cache(64 << 20);
  o.pool.page_source = &ops;
  zsm::Cache cache(o);
  for (int i = 0; i < 50; i++) cache.put("k" + std::to_string(i), text_bytes(2000, i));
  src.limit = src.handed;  // no more pages than now
  for (int i = 50; i < 400; i++) {
    try {
      cache.put("k" + std::to_string(i), random_bytes(3000, i));
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code(), zsm::CacheError::no_memory);
    }
    ASSERT_LE(src.handed, src.limit);
  }
  EXPECT_GT(cache.stats().evictions, 0u);
  for (int i = 0; i < 400; i++) {
    auto got = cache.get("k" + std::to_string(i));
    if (got) {
      EXPECT_EQ(*got, i < 50 ? text_bytes(2000, i) : random_bytes(3000, i)) << i;
    }
  }
  cache.put("same", same_filled(4096, 3));  // a same-filled value needs almost nothing
  cache.clear();
  src.limit = 0;
  EXPECT_EQ(error_of([&] { cache.put("none", text_bytes(100, 1)); }), zsm::CacheError::no_memory);
  src.limit = SIZE_MAX;
  cache.put("after", text_bytes(100, 1));
  EXPECT_EQ(cache.get("after"), text_bytes(100, 1));
}

// Stored bytes scribbled over: gets report corrupt (and drop the entry) or miss, or return
// bytes the codec could not tell were wrong; never a crash or an access out of bounds (ASan).
// (Only gets and erases follow: the scribbles also hit the pool's free-slot links, and a
// pool whose own memory is corrupted may not allocate safely.) A build with
// ZSM_DEBUG_INVARIANTS must instead stop at the first free of a scribbled zspage.
void get_scribbled_entries() {
  LimitedSource src;
  zs_page_source ops = src.ops();
  zsm::CacheOptions o = small_cache(64 << 20);
  o.pool.page_source = &ops;
  zsm::Cache cache(o);
  for (int i = 0; i < 200; i++) cache.put("k" + std::to_string(i), text_bytes(3000, i));
  std::mt19937_64 rng(9);
  for (void* page : src.pages)
    for (int n = 0; n < 64; n++) static_cast<unsigned char*>(page)[rng() % 4096] ^= 0x5a;
  size_t corrupt = 0;
  for (int i = 0; i < 200; i++) {
    try {
      cache.get("k" + std::to_string(i));
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code(), zsm::CacheError::corrupt);
      corrupt++;
    }
  }
  EXPECT_GT(corrupt, 0u);
  EXPECT_EQ(cache.stats().entries + corrupt, 200u) << "each corrupt entry is dropped";
}

TEST(Cache, CorruptedPoolMemoryNeverCrashes) {
#if ZSM_TEST_DEBUG_INVARIANTS
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(get_scribbled_entries(), "zsm: fatal: pool '.*': invariant broken");
#else
  get_scribbled_entries();
#endif
}

// A value that would fit only by evicting itself is refused with no_memory and leaves no entry:
// a put that returns has kept its value.
TEST(Cache, PutThatCannotKeepItsValueFails) {
  zsm::CacheOptions probe;
  probe.pool.nr_shards = 1;
  const size_t footprint = zsm::Cache(probe).stats().bytes_held;
  for (size_t extra : {4096u, 8192u, 16384u}) {
    zsm::CacheOptions o = probe;
    o.capacity_bytes = footprint + extra;
    zsm::Cache cache(o);
    try {
      cache.put("key", random_bytes(3000, extra));
      EXPECT_TRUE(cache.contains("key")) << "a put that returns keeps its value";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code(), zsm::CacheError::no_memory);
      EXPECT_FALSE(cache.contains("key"));
      EXPECT_EQ(cache.stats().entries, 0u);
    }
    EXPECT_LE(cache.stats().bytes_held, o.capacity_bytes);
  }
}

// Every object of a record goes to the pool from store_record() (through zs_store()): one
// object for a record within a page, one per piece for a chain, and the chain reads back whole.
TEST(Cache, RecordsAreStoredByStoreRecordPieceByPiece) {
  if (zs_alloc_profiling_set(1) < 0) GTEST_SKIP() << "built without ZSM_PROFILING";
  auto store_record_calls = [] {
    std::vector<zs_alloc_info> sites(256);
    sites.resize(std::min(sites.size(), zs_alloc_info_read(sites.data(), sites.size())));
    unsigned long calls = 0;
    for (const zs_alloc_info& site : sites)
      if (std::string_view(site.func) == "store_record" &&
          std::string_view(site.file) == "compress/cache/record_store.cpp")
        calls += site.calls;
    return calls;
  };
  {
    zsm::CacheOptions o = small_cache(8 << 20);
    o.max_value_size = 3 * 4096;
    o.codec.kind = zsm::CodecKind::none;
    zsm::Cache cache(o);
    const unsigned long before = store_record_calls();
    cache.put("one", random_bytes(1000, 1));
    EXPECT_EQ(store_record_calls() - before, 1u);
    const Bytes chained = random_bytes(3 * 4096 - 100, 2);  // 3 pieces: two pages and the rest
    cache.put("chain", chained);
    EXPECT_EQ(store_record_calls() - before, 4u);
    EXPECT_EQ(cache.get("chain"), chained);
    EXPECT_EQ(cache.get("one"), random_bytes(1000, 1));
  }
  zs_alloc_profiling_set(0);
}

// Readers and writers on shared keys: a value always matches its key (it is derived from it).
TEST(Cache, ConcurrentReadersAndWriters) {
  zsm::Cache cache(small_cache(2 << 20, 8));
  auto value_for = [](int key, int version) {
    Bytes v = text_bytes(200 + (key * 37 + version) % 3000, key * 100003 + version);
    return v;
  };
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int op = 0; op < 5000; op++) {
        int key = static_cast<int>(rng() % 300);
        std::string k = "key" + std::to_string(key);
        if (rng() % 3 == 0) {
          cache.put(k, value_for(key, static_cast<int>(rng() % 4)));
        } else if (auto got = cache.get(k)) {
          bool ok = false;
          for (int v = 0; v < 4 && !ok; v++) ok = *got == value_for(key, v);
          if (!ok) bad[t]++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; t++) EXPECT_EQ(bad[t], 0) << "thread " << t;
  EXPECT_LE(cache.stats().bytes_held, cache.options().capacity_bytes);
}

TEST(Cache, MmStatHasNineColumns) {
  zsm::Cache cache;
  cache.put("a", same_filled(4096, 1));
  cache.put("b", text_bytes(4096, 1));
  std::istringstream line(cache.mm_stat());
  std::vector<uint64_t> cols;
  for (uint64_t v; line >> v;) cols.push_back(v);
  ASSERT_EQ(cols.size(), 9u);
  EXPECT_EQ(cols[0], 8192u);                      // orig_data_size
  EXPECT_EQ(cols[3], cache.options().capacity_bytes);  // mem_limit
  EXPECT_EQ(cols[5], 1u);                         // same_pages
}

// The cache on a hardened pool: everything it does stays within what the mode allows.
TEST(Cache, RunsOnAHardenedPool) {
  zsm::CacheOptions options;
  options.capacity_bytes = 1 << 20;
  options.pool.flags = ZS_POOL_HARDENED;
  zsm::Cache cache(options);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 5000; i++) {
    std::string key = "k" + std::to_string(rng() % 700);
    std::vector<std::byte> value(1 + rng() % 4096, std::byte{static_cast<unsigned char>(i)});
    cache.put(key, value);
    auto got = cache.get(key);
    ASSERT_TRUE(got.has_value());
    ASSERT_EQ(*got, value);
    if (i % 7 == 0) cache.erase(key);
  }
  cache.recompress();
  EXPECT_EQ(zs_check_pool(cache.pool(), stderr), 0);
}

}  // namespace

// --- a secondary cache's pattern: hits erased, second-eviction admission, skewed keys --------


// A skewed key: RocksDB db_bench's --read_random_exp_range=10, key = n * exp(-10 u) with u
// uniform, so a few keys take most reads.
uint64_t skewed_key(std::mt19937_64& rng, uint64_t n) {
  double u = std::uniform_real_distribution<double>(0, 1)(rng);
  return static_cast<uint64_t>(static_cast<double>(n) * std::exp(-10.0 * u)) % n;
}

// The pool's payload share: compressed bytes stored over pool pages (mm_stat's
// compr_data_size / mem_used_total).
double payload_share(const zsm::CacheStats& s) {
  return s.mem_used_total == 0 ? 1.0
                               : static_cast<double>(s.compr_data_size) /
                                     static_cast<double>(s.mem_used_total);
}

// What RocksDB's block cache does to a secondary tier, on the cache alone: an LRU primary of
// `primary` blocks over `keys` blocks; a read that misses the primary looks the block up in
// the tier and, on a hit, erases it there (advise_erase: the primary takes it); the block the
// primary evicts is put in the tier on its second eviction only (a first one is remembered).
// Every put finds room by evicting an entry of its own class, so the pool never passes its
// page limit, and nothing compacted it: the erased blocks' slots stayed holes (a third of a
// RocksDB tier under skewed reads).
struct TierPattern {
  explicit TierPattern(zsm::Cache& cache, uint64_t keys, size_t primary, bool skewed)
      : cache_(cache), keys_(keys), primary_(primary), skewed_(skewed) {}

  void read(uint64_t n) {
    for (uint64_t i = 0; i < n; i++) read_one(skewed_ ? skewed_key(rng_, keys_) : rng_() % keys_);
  }
  uint64_t hits = 0;

 private:
  void read_one(uint64_t k) {
    if (auto at = where_.find(k); at != where_.end()) {
      lru_.splice(lru_.begin(), lru_, at->second);
      return;
    }
    std::string key = "block" + std::to_string(k);
    if (cache_.get(key)) {
      hits++;
      cache_.erase(key);
      evicted_once_.insert(k);  // the primary holds it: its next eviction is its second
    }
    lru_.push_front(k);
    where_[k] = lru_.begin();
    if (lru_.size() > primary_) evict_from_primary();
  }
  void evict_from_primary() {
    uint64_t victim = lru_.back();
    lru_.pop_back();
    where_.erase(victim);
    if (evicted_once_.erase(victim) == 0) {
      evicted_once_.insert(victim);
      return;
    }
    cache_.put("block" + std::to_string(victim),
               block_of(4096, 300 + victim * 7919 % 2200, victim));
  }

  zsm::Cache& cache_;
  uint64_t keys_;
  size_t primary_;
  bool skewed_;
  std::mt19937_64 rng_{42};
  std::list<uint64_t> lru_;
  std::map<uint64_t, std::list<uint64_t>::iterator> where_;
  std::set<uint64_t> evicted_once_;
};

// The pool stays dense under the pattern, skewed and uniform: at least 90 % of its pages are
// compressed bytes at the end, and compaction ran.
TEST(Cache, SecondaryTierPatternKeepsThePoolDense) {
  for (bool skewed : {true, false}) {
    SCOPED_TRACE(skewed ? "skewed keys" : "uniform keys");
    zsm::Cache cache(small_cache(4 << 20));
    TierPattern pattern(cache, 12000, 600, skewed);
    pattern.read(60000);
    zsm::CacheStats s = cache.stats();
    ASSERT_GT(pattern.hits, 1000u);
    ASSERT_GT(s.mem_used_total, (3u << 20)) << "the pattern must fill the cache";
    EXPECT_GT(s.pages_compacted, 0u) << cache.mm_stat();
    EXPECT_GE(payload_share(s), 0.90) << cache.mm_stat();
  }
}
