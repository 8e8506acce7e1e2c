// zsm::RocksSecondaryCache against the real RocksDB library: the SecondaryCache contract (the
// operations RocksDB's own secondary cache tests exercise: insert, lookup, advise_erase,
// erase, capacity, create and save failures), bad input, and a real DB whose blocks are read
// back through the zsm tier after the primary block cache has evicted them; the codec the
// cache options name, recompress(), and a dense pool under RocksDB's advise_erase pattern.
#include <zsm/rocksdb_secondary_cache.hpp>

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/statistics.h>
#include <rocksdb/table.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <list>
#include <map>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <sys/stat.h>

#include "rocksdb_items.h"

namespace {

using rocksdb::Cache;
using rocksdb::Slice;
using rocksdb::Status;
using zsm::RocksSecondaryCache;

using zsm_test::Item;
using zsm_test::item_delete;
using zsm_test::item_size;
using zsm_test::make_item;
const Cache::CacheItemHelper& kHelper = zsm_test::kItemHelper;

Status item_save_fails(void*, size_t, size_t, void*) { return Status::IOError("save"); }
const Cache::CacheItemHelper kFailingHelper(item_size, item_save_fails, item_delete);

const Cache::CreateCallback kCreateFails = [](const void*, size_t, void**, size_t*) {
  return Status::Corruption("create");
};

// Text that compresses as blocks do (words, repeated with variation).
std::string block_text(size_t size, uint32_t seed) {
  static const char* const words[] = {"alpha ", "beta ", "gamma ", "delta ", "epsilon ",
                                      "zeta ",  "eta ",  "theta ", "iota ",  "kappa "};
  std::mt19937 rng(seed);
  std::string s;
  while (s.size() < size) s += words[rng() % 10];
  s.resize(size);
  return s;
}

// A tier on a cache made with `options`, in 4 shards.
std::shared_ptr<RocksSecondaryCache> make_tier_with(zsm::CacheOptions options) {
  options.shards = 4;
  std::shared_ptr<RocksSecondaryCache> tier;
  Status s = RocksSecondaryCache::Create(options, &tier);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return tier;
}

std::shared_ptr<RocksSecondaryCache> make_tier(size_t capacity = size_t{4} << 20) {
  zsm::CacheOptions options;
  options.capacity_bytes = capacity;
  return make_tier_with(options);
}

// The Item a lookup's handle holds, owned by the caller (nullptr for a miss).
std::unique_ptr<Item> lookup(RocksSecondaryCache& tier, const std::string& key,
                             bool advise_erase, bool* in_sec_cache) {
  bool in = true;
  auto handle = tier.Lookup(key, make_item(), /*wait=*/true, advise_erase, in);
  if (in_sec_cache) *in_sec_cache = in;
  if (!handle) return nullptr;
  EXPECT_TRUE(handle->IsReady());
  handle->Wait();
  std::unique_ptr<Item> item(static_cast<Item*>(handle->Value()));
  EXPECT_EQ(handle->Size(), item->data.size());
  return item;
}

TEST(RocksSecondaryCache, NameAndForceErase) {
  auto tier = make_tier();
  EXPECT_STREQ(tier->Name(), "ZsmSecondaryCache");
  EXPECT_TRUE(tier->SupportForceErase());
  EXPECT_NE(tier->GetPrintableOptions().find("mm_stat"), std::string::npos);
}

TEST(RocksSecondaryCache, InsertThenLookupReturnsTheSameBytes) {
  auto tier = make_tier();
  Item item{block_text(4000, 1)};
  ASSERT_TRUE(tier->Insert("k1", &item, &kHelper).ok());
  bool in_sec_cache = false;
  std::unique_ptr<Item> got = lookup(*tier, "k1", /*advise_erase=*/false, &in_sec_cache);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->data, item.data);
  EXPECT_TRUE(in_sec_cache);
  // Still there: a second lookup hits too.
  EXPECT_TRUE(lookup(*tier, "k1", false, nullptr));
  const zsm::RocksSecondaryCacheStats s = tier->stats();
  EXPECT_EQ(s.inserts, 1u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.cache.entries, 1u);
  EXPECT_LT(s.cache.compr_data_size, s.cache.orig_data_size);  // it was compressed
  EXPECT_FALSE(tier->mm_stat().empty());
}

TEST(RocksSecondaryCache, LookupOfAnAbsentKeyMisses) {
  auto tier = make_tier();
  bool in_sec_cache = true;
  EXPECT_FALSE(lookup(*tier, "absent", false, &in_sec_cache));
  EXPECT_FALSE(in_sec_cache);
  EXPECT_EQ(tier->stats().misses, 1u);
}

TEST(RocksSecondaryCache, AdviseEraseDropsTheBlockAfterTheHit) {
  auto tier = make_tier();
  Item item{block_text(1000, 2)};
  ASSERT_TRUE(tier->Insert("k", &item, &kHelper).ok());
  bool in_sec_cache = true;
  std::unique_ptr<Item> got = lookup(*tier, "k", /*advise_erase=*/true, &in_sec_cache);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->data, item.data);
  EXPECT_FALSE(in_sec_cache);
  EXPECT_FALSE(lookup(*tier, "k", false, nullptr));
  EXPECT_EQ(tier->stats().erases, 1u);
}

std::shared_ptr<RocksSecondaryCache> make_second_eviction_tier(size_t capacity) {
  zsm::CacheOptions options;
  options.capacity_bytes = capacity;
  options.shards = 4;
  std::shared_ptr<RocksSecondaryCache> tier;
  Status s = RocksSecondaryCache::Create(options, &tier, zsm::Admission::second_eviction);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return tier;
}

TEST(RocksSecondaryCacheAdmission, SecondEvictionStoresOnlyTheSecondInsert) {
  auto tier = make_second_eviction_tier(size_t{4} << 20);
  Item item{block_text(3000, 11)};
  ASSERT_TRUE(tier->Insert("k", &item, &kHelper).ok());  // remembered, not stored
  EXPECT_FALSE(lookup(*tier, "k", false, nullptr));
  EXPECT_EQ(tier->stats().first_evictions, 1u);
  EXPECT_EQ(tier->stats().inserts, 0u);
  ASSERT_TRUE(tier->Insert("k", &item, &kHelper).ok());  // the second eviction: stored
  std::unique_ptr<Item> got = lookup(*tier, "k", false, nullptr);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->data, item.data);
  EXPECT_EQ(tier->stats().inserts, 1u);
}

TEST(RocksSecondaryCacheAdmission, AdviseEraseAdmitsTheNextInsert) {
  auto tier = make_second_eviction_tier(size_t{4} << 20);
  Item item{block_text(3000, 12)};
  ASSERT_TRUE(tier->Insert("k", &item, &kHelper).ok());
  ASSERT_TRUE(tier->Insert("k", &item, &kHelper).ok());
  bool in_sec_cache = true;
  ASSERT_TRUE(lookup(*tier, "k", /*advise_erase=*/true, &in_sec_cache));
  EXPECT_FALSE(in_sec_cache);
  // The primary holds the block now; its next eviction stores it at once.
  ASSERT_TRUE(tier->Insert("k", &item, &kHelper).ok());
  EXPECT_TRUE(lookup(*tier, "k", false, nullptr));
  EXPECT_EQ(tier->stats().first_evictions, 1u);
}

TEST(RocksSecondaryCacheAdmission, TheTableCountsAgainstTheCapacity) {
  const size_t capacity = size_t{4} << 20;
  auto tier = make_second_eviction_tier(capacity);
  const zsm::RocksSecondaryCacheStats s = tier->stats();
  EXPECT_EQ(s.admission_bytes, capacity / 1024 * 8);  // one word per KiB
  EXPECT_EQ(s.cache.mem_limit + s.admission_bytes, capacity);
  size_t got = 0;
  ASSERT_TRUE(tier->GetCapacity(got).ok());
  EXPECT_EQ(got, capacity);
  ASSERT_TRUE(tier->SetCapacity(capacity / 2).ok());
  ASSERT_TRUE(tier->GetCapacity(got).ok());
  EXPECT_EQ(got, capacity / 2);
  EXPECT_EQ(tier->stats().cache.mem_limit + s.admission_bytes, capacity / 2);
  EXPECT_TRUE(tier->SetCapacity(s.admission_bytes).IsInvalidArgument());
  EXPECT_NE(tier->GetPrintableOptions().find("second_eviction"), std::string::npos);
}

TEST(RocksSecondaryCacheAdmission, EveryBlockHasNoTable) {
  auto tier = make_tier();
  EXPECT_EQ(tier->stats().admission_bytes, 0u);
  Item item{block_text(3000, 13)};
  ASSERT_TRUE(tier->Insert("k", &item, &kHelper).ok());
  EXPECT_TRUE(lookup(*tier, "k", false, nullptr));
}

TEST(RocksSecondaryCacheCodec, TheOptionsCodecStoresTheBlocks) {
  zsm::CacheOptions lz4, zstd;
  zstd.codec = zsm::parse_codec("zstd:1");
  auto lz4_tier = make_tier_with(lz4), zstd_tier = make_tier_with(zstd);
  EXPECT_NE(zstd_tier->GetPrintableOptions().find("codec : zstd"), std::string::npos);
  std::vector<Item> items;
  for (uint32_t i = 0; i < 64; ++i) items.push_back(Item{block_text(3500, 100 + i)});
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(lz4_tier->Insert(key, &items[i], &kHelper).ok());
    ASSERT_TRUE(zstd_tier->Insert(key, &items[i], &kHelper).ok());
  }
  for (size_t i = 0; i < items.size(); ++i) {
    std::unique_ptr<Item> got = lookup(*zstd_tier, "k" + std::to_string(i), false, nullptr);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->data, items[i].data);
  }
  // The same blocks, smaller with zstd (entropy coding) than with lz4.
  EXPECT_EQ(zstd_tier->stats().cache.orig_data_size, lz4_tier->stats().cache.orig_data_size);
  EXPECT_LT(zstd_tier->stats().cache.compr_data_size, lz4_tier->stats().cache.compr_data_size);
}

TEST(RocksSecondaryCacheCodec, RecompressMovesBlocksAndKeepsThemReadable) {
  zsm::CacheOptions options;
  options.recompress_codec = zsm::parse_codec("zstd:1");
  auto tier = make_tier_with(options);
  std::vector<Item> items;
  for (uint32_t i = 0; i < 64; ++i) items.push_back(Item{block_text(3500, 200 + i)});
  for (size_t i = 0; i < items.size(); ++i) {
    ASSERT_TRUE(tier->Insert("k" + std::to_string(i), &items[i], &kHelper).ok());
  }
  const uint64_t lz4_bytes = tier->stats().cache.compr_data_size;
  EXPECT_EQ(tier->recompress(10), 10u) << "each of the first ten moves to a smaller class";
  const size_t moved = 10 + tier->recompress(SIZE_MAX);
  EXPECT_EQ(moved, items.size());
  EXPECT_EQ(tier->stats().cache.recompressed, moved);
  EXPECT_LT(tier->stats().cache.compr_data_size, lz4_bytes);
  EXPECT_EQ(tier->recompress(SIZE_MAX), 0u) << "blocks already tried are not tried again";
  for (size_t i = 0; i < items.size(); ++i) {
    std::unique_ptr<Item> got = lookup(*tier, "k" + std::to_string(i), false, nullptr);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->data, items[i].data);
  }
}

TEST(RocksSecondaryCacheCodec, NoRecompressCodecRecompressesNothing) {
  auto tier = make_tier();
  Item item{block_text(3500, 300)};
  ASSERT_TRUE(tier->Insert("k", &item, &kHelper).ok());
  EXPECT_EQ(tier->recompress(SIZE_MAX), 0u);
  EXPECT_EQ(tier->stats().cache.recompressed, 0u);
  EXPECT_TRUE(lookup(*tier, "k", false, nullptr));
}

// The adapter's cache with a backing file (CacheOptions::backing_file): RocksDB's compressed
// tier and flash tier in one. Blocks the memory evicts are looked up from the file.
TEST(RocksSecondaryCacheBackingFile, BlocksEvictedFromMemoryAreServedFromTheFile) {
  zsm::CacheOptions options;
  options.capacity_bytes = size_t{4} << 20;
  zsm::BackingFileOptions file;
  file.path = std::filesystem::current_path().string();  // an unnamed file in it
  file.capacity_bytes = size_t{32} << 20;
  file.batch_bytes = size_t{128} << 10;
  options.backing_file = file;
  auto tier = make_tier_with(options);
  std::vector<Item> items;
  for (uint32_t i = 0; i < 6000; ++i) items.push_back(Item{block_text(4000, 900 + i)});
  for (size_t i = 0; i < items.size(); ++i)
    ASSERT_TRUE(tier->Insert("b" + std::to_string(i), &items[i], &kHelper).ok());
  size_t found = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    std::unique_ptr<Item> got = lookup(*tier, "b" + std::to_string(i), false, nullptr);
    if (!got) continue;
    ASSERT_EQ(got->data, items[i].data) << i;
    found++;
  }
  const zsm::CacheStats s = tier->stats().cache;
  EXPECT_GT(s.backing_file.hits, 0u);
  EXPECT_GT(found, s.entries) << "more blocks served than memory holds";
  EXPECT_LE(s.bytes_held, options.capacity_bytes);
}

// SetCapacity() on a tier with a file keeps that file (the same inode, never truncated): the
// blocks it held before are still served from it after, and it is removed once, at the end.
TEST(RocksSecondaryCacheBackingFile, SetCapacityKeepsTheFileAndWhatItHolds) {
  const std::filesystem::path path = std::filesystem::current_path() / "rocksdb_test.resized";
  std::filesystem::remove(path);
  zsm::CacheOptions options;
  options.capacity_bytes = size_t{4} << 20;
  zsm::BackingFileOptions file;
  file.path = path.string();
  file.capacity_bytes = size_t{32} << 20;
  file.batch_bytes = size_t{128} << 10;
  options.backing_file = file;
  auto tier = make_tier_with(options);
  std::vector<Item> items;
  for (uint32_t i = 0; i < 6000; ++i) items.push_back(Item{block_text(4000, 900 + i)});
  for (size_t i = 0; i < items.size(); ++i)
    ASSERT_TRUE(tier->Insert("b" + std::to_string(i), &items[i], &kHelper).ok());
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  const uint64_t on_file = tier->stats().cache.backing_file.entries_on_file;
  ASSERT_GT(on_file, 1000u);
  for (size_t capacity : {size_t{8} << 20, size_t{5} << 20}) {
    ASSERT_TRUE(tier->SetCapacity(capacity).ok());
    struct stat after {};
    ASSERT_EQ(::stat(path.c_str(), &after), 0) << "the file was removed";
    EXPECT_EQ(after.st_ino, before.st_ino);
    EXPECT_GE(after.st_size, before.st_size) << "the file was truncated";
  }
  size_t found = 0;
  for (size_t i = 0; i < 1000; ++i) {  // the oldest: on file since before the resizes
    std::unique_ptr<Item> got = lookup(*tier, "b" + std::to_string(i), false, nullptr);
    if (!got) continue;
    ASSERT_EQ(got->data, items[i].data) << i;
    found++;
  }
  EXPECT_GT(found, 900u);
  EXPECT_GT(tier->stats().cache.backing_file.hits, 900u);
  tier.reset();
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(RocksSecondaryCache, LookupAfterEraseMisses) {
  auto tier = make_tier();
  Item item{block_text(2000, 3)};
  ASSERT_TRUE(tier->Insert("k", &item, &kHelper).ok());
  tier->Erase("k");
  EXPECT_FALSE(lookup(*tier, "k", false, nullptr));
  tier->Erase("k");  // erasing an absent key does nothing
  EXPECT_EQ(tier->stats().erases, 1u);
  EXPECT_EQ(tier->stats().cache.entries, 0u);
}

TEST(RocksSecondaryCache, InsertReplacesTheBlock) {
  auto tier = make_tier();
  Item first{block_text(800, 4)}, second{block_text(900, 5)};
  ASSERT_TRUE(tier->Insert("k", &first, &kHelper).ok());
  ASSERT_TRUE(tier->Insert("k", &second, &kHelper).ok());
  std::unique_ptr<Item> got = lookup(*tier, "k", false, nullptr);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->data, second.data);
  EXPECT_EQ(tier->stats().cache.entries, 1u);
}

TEST(RocksSecondaryCache, FailingCreateIsAMissAndKeepsTheBlock) {
  auto tier = make_tier();
  Item item{block_text(500, 6)};
  ASSERT_TRUE(tier->Insert("k", &item, &kHelper).ok());
  bool in_sec_cache = true;
  EXPECT_FALSE(tier->Lookup("k", kCreateFails, true, false, in_sec_cache));
  EXPECT_FALSE(in_sec_cache);
  EXPECT_EQ(tier->stats().misses, 1u);
  EXPECT_TRUE(lookup(*tier, "k", false, nullptr));
}

TEST(RocksSecondaryCache, FailingSaveIsRefused) {
  auto tier = make_tier();
  Item item{block_text(500, 7)};
  EXPECT_FALSE(tier->Insert("k", &item, &kFailingHelper).ok());
  EXPECT_FALSE(lookup(*tier, "k", false, nullptr));
  EXPECT_EQ(tier->stats().inserts_refused, 1u);
}

// Each error of the cache's core becomes one Status: the save callback's own, InvalidArgument
// for a key the cache refuses, MemoryLimit when the block finds no room; each is counted.
TEST(RocksSecondaryCache, InsertErrorsMapToOneStatusEach) {
  Item item{block_text(500, 9)};
  auto tier = make_tier();
  EXPECT_TRUE(tier->Insert("k", &item, &kFailingHelper).IsIOError());

  zsm::CacheOptions short_keys;
  short_keys.capacity_bytes = size_t{4} << 20;
  short_keys.max_key_size = 4;
  auto keyed = make_tier_with(short_keys);
  EXPECT_TRUE(keyed->Insert("a long key", &item, &kHelper).IsInvalidArgument());
  EXPECT_TRUE(keyed->Insert("key", &item, &kHelper).ok());

  // Two pages: less than an empty cache's own bookkeeping, so no block ever fits.
  auto full = make_tier(8192);
  Status s = full->Insert("k", &item, &kHelper);
  EXPECT_TRUE(s.IsMemoryLimit()) << s.ToString();
  EXPECT_FALSE(lookup(*full, "k", false, nullptr));
  EXPECT_EQ(tier->stats().inserts_refused, 1u);
  EXPECT_EQ(keyed->stats().inserts_refused, 1u);
  EXPECT_EQ(keyed->stats().inserts, 1u);
  EXPECT_EQ(full->stats().inserts_refused, 1u);
}

// Blocks above a pool page are stored up to 64 KiB by default; a larger one is refused,
// counted, and said on stderr once.
TEST(RocksSecondaryCache, BlocksUpTo64KiBAreStoredAndLargerOnesRefusedAloud) {
  auto tier = make_tier();
  for (size_t n : {4097u, 8192u, 65536u}) {
    Item item{block_text(n, static_cast<uint32_t>(n))};
    ASSERT_TRUE(tier->Insert("b" + std::to_string(n), &item, &kHelper).ok()) << n;
    std::unique_ptr<Item> got = lookup(*tier, "b" + std::to_string(n), false, nullptr);
    ASSERT_TRUE(got) << n;
    EXPECT_EQ(got->data, item.data);
  }
  Item big{block_text(65537, 8)};
  testing::internal::CaptureStderr();
  Status s = tier->Insert("big", &big, &kHelper);
  Status again = tier->Insert("big2", &big, &kHelper);
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_TRUE(again.IsInvalidArgument()) << again.ToString();
  EXPECT_NE(said.find("a block of 65537 bytes is above max_value_size (65536 bytes)"),
            std::string::npos) << said;
  EXPECT_EQ(said.find("zsm secondary cache:"), said.rfind("zsm secondary cache:")) << said;
  EXPECT_FALSE(lookup(*tier, "big", false, nullptr));
  const zsm::RocksSecondaryCacheStats stats = tier->stats();
  EXPECT_EQ(stats.inserts, 3u);
  EXPECT_EQ(stats.inserts_refused, 2u);
  EXPECT_EQ(stats.inserts_too_large, 2u);
  EXPECT_EQ(stats.cache.entries, 3u);
}

TEST(RocksSecondaryCache, NoValueOrNoHelperIsRefused) {
  auto tier = make_tier();
  Item item{"x"};
  EXPECT_TRUE(tier->Insert("k", nullptr, &kHelper).IsInvalidArgument());
  EXPECT_TRUE(tier->Insert("k", &item, nullptr).IsInvalidArgument());
}

TEST(RocksSecondaryCache, ZeroCapacityIsRefused) {
  zsm::CacheOptions options;
  options.capacity_bytes = 0;
  std::shared_ptr<RocksSecondaryCache> tier;
  EXPECT_TRUE(RocksSecondaryCache::Create(options, &tier).IsInvalidArgument());
  EXPECT_FALSE(tier);

  auto made = make_tier(size_t{1} << 20);
  EXPECT_TRUE(made->SetCapacity(0).IsInvalidArgument());
  size_t capacity = 0;
  ASSERT_TRUE(made->GetCapacity(capacity).ok());
  EXPECT_EQ(capacity, size_t{1} << 20);
}

TEST(RocksSecondaryCache, CapacityBoundsWhatIsHeldAndEvictsTheRest) {
  const size_t capacity = size_t{256} << 10;
  auto tier = make_tier(capacity);
  std::vector<std::string> values;
  for (uint32_t i = 0; i < 400; ++i) {  // ~1.6 MB of values, compressing to well over 256 KiB
    Item item{block_text(4000, 100 + i) + std::to_string(i)};
    item.data.resize(4000);
    ASSERT_TRUE(tier->Insert("key" + std::to_string(i), &item, &kHelper).ok());
    values.push_back(item.data);
  }
  const zsm::RocksSecondaryCacheStats s = tier->stats();
  EXPECT_LE(s.cache.bytes_held, capacity);
  EXPECT_GT(s.cache.evictions, 0u);
  size_t found = 0;
  for (uint32_t i = 0; i < 400; ++i) {
    if (std::unique_ptr<Item> got = lookup(*tier, "key" + std::to_string(i), false, nullptr)) {
      EXPECT_EQ(got->data, values[i]) << i;
      ++found;
    }
  }
  EXPECT_EQ(found, s.cache.entries);
  EXPECT_GT(found, 0u);
}

TEST(RocksSecondaryCache, SetCapacityKeepsTheBlocksThatFit) {
  auto tier = make_tier(size_t{4} << 20);
  std::vector<std::string> values;
  for (uint32_t i = 0; i < 200; ++i) {
    Item item{block_text(3000, 1000 + i)};
    ASSERT_TRUE(tier->Insert("key" + std::to_string(i), &item, &kHelper).ok());
    values.push_back(item.data);
  }
  ASSERT_EQ(tier->stats().cache.entries, 200u);

  ASSERT_TRUE(tier->SetCapacity(size_t{8} << 20).ok());  // larger: everything stays
  size_t capacity = 0;
  ASSERT_TRUE(tier->GetCapacity(capacity).ok());
  EXPECT_EQ(capacity, size_t{8} << 20);
  EXPECT_EQ(tier->stats().cache.entries, 200u);

  // Smaller than what is held: the new cache evicts what does not fit.
  const size_t small = tier->stats().cache.bytes_held / 2;
  ASSERT_GE(small, size_t{128} << 10);
  ASSERT_TRUE(tier->SetCapacity(small).ok());
  const zsm::RocksSecondaryCacheStats s = tier->stats();
  EXPECT_LE(s.cache.bytes_held, small);
  EXPECT_GT(s.cache.entries, 0u);
  EXPECT_LT(s.cache.entries, 200u);
  for (uint32_t i = 0; i < 200; ++i) {
    if (std::unique_ptr<Item> got = lookup(*tier, "key" + std::to_string(i), false, nullptr)) {
      EXPECT_EQ(got->data, values[i]) << i;
    }
  }
}

TEST(RocksSecondaryCache, WaitAllOnReadyHandles) {
  auto tier = make_tier();
  Item item{block_text(100, 10)};
  ASSERT_TRUE(tier->Insert("k", &item, &kHelper).ok());
  bool in = false;
  auto h1 = tier->Lookup("k", make_item(), /*wait=*/false, false, in);
  auto h2 = tier->Lookup("k", make_item(), /*wait=*/false, false, in);
  ASSERT_TRUE(h1 && h2);
  tier->WaitAll({h1.get(), h2.get()});
  for (auto* h : {h1.get(), h2.get()}) {
    ASSERT_TRUE(h->IsReady());
    std::unique_ptr<Item> got(static_cast<Item*>(h->Value()));
    EXPECT_EQ(got->data, item.data);
  }
}

TEST(RocksSecondaryCache, ThreadsInsertAndLookUpAtOnce) {
  auto tier = make_tier(size_t{1} << 20);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&tier, t] {
      for (uint32_t i = 0; i < 500; ++i) {
        const uint32_t id = (i * 7 + t) % 300;
        const std::string key = "key" + std::to_string(id);
        Item item{block_text(2000, id)};
        if (i % 3 == 0) {
          EXPECT_TRUE(tier->Insert(key, &item, &kHelper).ok());
        } else if (std::unique_ptr<Item> got = lookup(*tier, key, false, nullptr)) {
          EXPECT_EQ(got->data, item.data);
        }
        if (t == 0 && i == 250) {
          EXPECT_TRUE(tier->SetCapacity(size_t{512} << 10).ok());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(tier->stats().cache.bytes_held, size_t{512} << 10);
}

// --- the pool stays dense under RocksDB's pattern ---------------------------------------------

// A block that compresses to about `incompressible` bytes (text, then random bytes), so that
// the blocks spread over many size classes as a DB's do.
std::string block_of(size_t size, size_t incompressible, uint32_t seed) {
  std::string b = block_text(size - incompressible, seed);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < incompressible; i++) b.push_back(static_cast<char>(rng()));
  return b;
}

// What LRUCache does to its secondary tier in RocksDB 7.8, block by block: an LRU primary of
// `primary` blocks over `keys` blocks, read with db_bench's --read_random_exp_range=10 skew
// (key = keys * exp(-10 u)) or uniformly; a read that misses the primary looks the block up in
// the tier with advise_erase (the tier drops it, the primary takes it), and the primary's
// evictions are offered to a tier that admits a block on its second eviction.
std::string block_key(uint32_t k) { return "block" + std::to_string(k); }

struct RocksPattern {
  RocksPattern(RocksSecondaryCache& tier, uint32_t keys, size_t primary, bool skewed)
      : tier_(tier), keys_(keys), primary_(primary), skewed_(skewed) {}

  void read(uint32_t n) {
    for (uint32_t i = 0; i < n; i++) read_one(next_key());
  }
  uint64_t hits = 0;

 private:
  uint32_t next_key() {
    if (!skewed_) return rng_() % keys_;
    double u = std::uniform_real_distribution<double>(0, 1)(rng_);
    return static_cast<uint32_t>(keys_ * std::exp(-10.0 * u)) % keys_;
  }
  void read_one(uint32_t k) {
    if (auto at = where_.find(k); at != where_.end()) {
      lru_.splice(lru_.begin(), lru_, at->second);
      return;
    }
    bool in_sec_cache = false;
    if (auto handle = tier_.Lookup(block_key(k), make_item(), true, /*advise_erase=*/true,
                                   in_sec_cache)) {
      hits++;
      delete static_cast<Item*>(handle->Value());
    }
    lru_.push_front(k);
    where_[k] = lru_.begin();
    if (lru_.size() > primary_) evict_from_primary();
  }
  void evict_from_primary() {
    uint32_t victim = lru_.back();
    lru_.pop_back();
    where_.erase(victim);
    Item item{block_of(4096, 300 + victim * 7919 % 2200, victim)};
    EXPECT_TRUE(tier_.Insert(block_key(victim), &item, &kHelper).ok());
  }

  RocksSecondaryCache& tier_;
  uint32_t keys_;
  size_t primary_;
  bool skewed_;
  std::mt19937_64 rng_{42};
  std::list<uint32_t> lru_;
  std::map<uint32_t, std::list<uint32_t>::iterator> where_;
};

// The db_bench run, in small: with hits erased and second-eviction admission, the
// tier's pool is at least 90 % compressed blocks at the end, skewed or uniform, and compaction
// ran (a skewed run held 21.6 MB of blocks in 32.3 MB of pages, pages_compacted 0).
TEST(RocksSecondaryCacheDensity, AdviseEraseAndSecondEvictionKeepThePoolDense) {
  for (bool skewed : {true, false}) {
    SCOPED_TRACE(skewed ? "skewed keys" : "uniform keys");
    auto tier = make_second_eviction_tier(size_t{4} << 20);
    RocksPattern pattern(*tier, 12000, 600, skewed);
    pattern.read(80000);
    const zsm::RocksSecondaryCacheStats s = tier->stats();
    ASSERT_GT(pattern.hits, 1000u);
    ASSERT_GT(s.erases, 1000u);
    ASSERT_GT(s.cache.mem_used_total, size_t{3} << 20) << "the pattern must fill the tier";
    EXPECT_GT(s.cache.pages_compacted, 0u) << tier->mm_stat();
    EXPECT_GE(static_cast<double>(s.cache.compr_data_size) /
                  static_cast<double>(s.cache.mem_used_total),
              0.90)
        << tier->mm_stat();
  }
}


// A temporary folder, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "zsm-rocksdb-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string db_key(uint32_t i) {
  char key[16];
  std::snprintf(key, sizeof key, "key%08u", i);
  return key;
}
std::string db_value(uint32_t i) { return block_text(100 + i % 200, i) + std::to_string(i); }

// Loads a DB, then reads every key through a primary block cache far smaller than the data:
// blocks evicted from it go to the zsm tier and come back from there on the second pass.
TEST(RocksSecondaryCacheDb, ReadsEveryValueBackThroughTheSecondaryTier) {
  TempDir dir;
  auto tier = make_tier(size_t{16} << 20);
  rocksdb::LRUCacheOptions lru;
  lru.capacity = size_t{256} << 10;
  lru.num_shard_bits = 0;
  lru.secondary_cache = tier;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(lru);
  table.block_size = 8192;  // blocks above the pool's 4 KiB page: stored as chains
  rocksdb::Options options;
  options.create_if_missing = true;
  options.compression = rocksdb::kNoCompression;
  options.statistics = rocksdb::CreateDBStatistics();
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));

  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, dir.path(), &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  constexpr uint32_t kKeys = 20000;  // ~4.5 MB of values
  for (uint32_t i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), db_key(i), db_value(i)).ok());
  }
  ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());

  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t i = 0; i < kKeys; ++i) {
      std::string value;
      ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), db_key(i), &value).ok()) << i;
      ASSERT_EQ(value, db_value(i)) << "key " << i << " pass " << pass;
    }
  }
  const zsm::RocksSecondaryCacheStats s = tier->stats();
  EXPECT_GT(s.inserts, 0u);
  EXPECT_EQ(s.inserts_refused, 0u);
  EXPECT_GT(s.hits, 0u);
  EXPECT_EQ(options.statistics->getTickerCount(rocksdb::SECONDARY_CACHE_HITS), s.hits);
  EXPECT_LE(s.cache.bytes_held, size_t{16} << 20);
  db.reset();
}

}  // namespace

namespace {

// The zsm:// grammar: sizes with K/M/G, every key applied; the bad cases are in
// rocksdb_plugin_test (through CreateFromString()).
TEST(ZsmUri, ParsesEveryKeyAndSuffix) {
  zsm::RocksTierConfig c;
  ASSERT_TRUE(zsm::ParseZsmUri("zsm://32M", &c).ok());
  EXPECT_EQ(c.cache.capacity_bytes, size_t{32} << 20);
  EXPECT_EQ(c.cache.max_value_size, RocksSecondaryCache::kDefaultMaxBlock);
  EXPECT_EQ(c.admission, zsm::Admission::every_block);
  EXPECT_EQ(c.cache.codec.kind, zsm::CodecKind::lz4);
  ASSERT_TRUE(zsm::ParseZsmUri("zsm://2g;codec=zstd:7;admission=second;max_value=100k;"
                               "page=64K;chain=16;shards=1",
                               &c).ok());
  EXPECT_EQ(c.cache.capacity_bytes, size_t{2} << 30);
  EXPECT_EQ(c.cache.codec.kind, zsm::CodecKind::zstd);
  EXPECT_EQ(c.cache.codec.level, 7);
  EXPECT_EQ(c.admission, zsm::Admission::second_eviction);
  EXPECT_EQ(c.cache.max_value_size, 100u << 10);
  EXPECT_EQ(c.cache.pool.page_size, 65536u);
  EXPECT_EQ(c.cache.pool.chain_size, 16u);
  EXPECT_EQ(c.cache.shards, 1u);
  ASSERT_TRUE(zsm::ParseZsmUri("zsm://65536", &c).ok());
  EXPECT_EQ(c.cache.capacity_bytes, 65536u);
  Status s = zsm::ParseZsmUri("zsm://99999999999G", &c);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.ToString().find("bad capacity '99999999999G'"), std::string::npos) << s.ToString();
  std::shared_ptr<RocksSecondaryCache> tier;
  ASSERT_TRUE(RocksSecondaryCache::CreateFromUri("zsm://8M;admission=second", &tier).ok());
  EXPECT_GT(tier->stats().admission_bytes, 0u);
}

TEST(ZsmUri, TheBackingFileKeys) {
  const std::string path = (std::filesystem::current_path() / "rocksdb_test.uri-file").string();
  zsm::RocksTierConfig c;
  ASSERT_TRUE(zsm::ParseZsmUri("zsm://32M;file=" + path + ";file_size=64M;writeback_limit=8M", &c)
                  .ok());
  ASSERT_TRUE(c.cache.backing_file);
  EXPECT_EQ(c.cache.backing_file->path, path);
  EXPECT_EQ(c.cache.backing_file->capacity_bytes, uint64_t{64} << 20);
  EXPECT_EQ(c.cache.backing_file->write_limit_bytes, uint64_t{8} << 20);
  for (const char* bad : {"zsm://32M;file_size=64M", "zsm://32M;file=", "zsm://32M;file=x;file_size=1K",
                          "zsm://32M;file=x;writeback_limit=lots"}) {
    Status s = zsm::ParseZsmUri(bad, &c);
    EXPECT_TRUE(s.IsInvalidArgument()) << bad;
    EXPECT_NE(s.ToString().find("file"), std::string::npos) << s.ToString();
  }
  std::shared_ptr<RocksSecondaryCache> tier;
  ASSERT_TRUE(RocksSecondaryCache::CreateFromUri("zsm://8M;file=" + path, &tier).ok());
  EXPECT_TRUE(std::filesystem::exists(path));
  tier.reset();
  EXPECT_FALSE(std::filesystem::exists(path));
}

// RocksDB's own spelling: the capacity as a key (the leading part may be an option), and the
// codec by its CompressionType name; the periodic work's keys and what they need.
TEST(ZsmUri, RocksDbsKeysAndThePeriodicWork) {
  zsm::RocksTierConfig c;
  ASSERT_TRUE(zsm::ParseZsmUri("zsm://capacity=33554432;compression_type=kZSTD", &c).ok());
  EXPECT_EQ(c.cache.capacity_bytes, size_t{32} << 20);
  EXPECT_EQ(c.cache.codec.kind, zsm::CodecKind::zstd);
  ASSERT_TRUE(zsm::ParseZsmUri("zsm://codec=lz4hc;capacity=8M", &c).ok());
  EXPECT_EQ(c.cache.capacity_bytes, size_t{8} << 20);
  EXPECT_EQ(c.cache.codec.kind, zsm::CodecKind::lz4hc);
  ASSERT_TRUE(zsm::ParseZsmUri("zsm://8M;compression_type=kNoCompression", &c).ok());
  EXPECT_EQ(c.cache.codec.kind, zsm::CodecKind::none);
  const std::string dir = std::filesystem::current_path().string();
  ASSERT_TRUE(zsm::ParseZsmUri("zsm://8M;recompress=zstd:3;recompress_every=60;file=" + dir +
                                   ";idle_writeback=30",
                               &c).ok());
  ASSERT_TRUE(c.cache.recompress_codec);
  EXPECT_EQ(c.cache.recompress_codec->kind, zsm::CodecKind::zstd);
  EXPECT_EQ(c.recompress_every, std::chrono::seconds(60));
  EXPECT_EQ(c.idle_writeback_every, std::chrono::seconds(30));
  const std::pair<const char*, const char*> bad[] = {
      {"zsm://codec=lz4", "no capacity"},
      {"zsm://8M;capacity=16M", "given twice (it is the URI's first part)"},
      {"zsm://8M;codec=lz4;compression_type=kZSTD", "given twice (as codec)"},
      {"zsm://8M;compression_type=kSnappyCompression", "bad compression_type"},
      {"zsm://8M;recompress_every=60", "recompress_every without recompress="},
      {"zsm://8M;idle_writeback=60", "idle_writeback without file=PATH"},
      {"zsm://8M;recompress=zstd;recompress_every=0", "want seconds, 1 .. 86400"},
      {"zsm://8M;recompress=zstd;recompress_every=86401", "want seconds, 1 .. 86400"},
      {"zsm://8M;recompress=brotli", "bad recompress"},
      {"zsm://capacity=lots", "bad capacity"},
  };
  for (const auto& [uri, why] : bad) {
    Status s = zsm::ParseZsmUri(uri, &c);
    EXPECT_TRUE(s.IsInvalidArgument()) << uri;
    EXPECT_NE(s.ToString().find(why), std::string::npos) << uri << ": " << s.ToString();
    EXPECT_NE(s.ToString().find(uri), std::string::npos) << "the message quotes the URI";
  }
}

// A tier named by a string does its periodic work on its own thread: a block nobody reads is
// written to the file by the idle writeback within two periods, and still read back right.
TEST(ZsmUri, IdleWritebackRunsOnTheTiersOwnThread) {
  const std::string dir = std::filesystem::current_path().string();
  std::shared_ptr<RocksSecondaryCache> tier;
  ASSERT_TRUE(
      RocksSecondaryCache::CreateFromUri("zsm://8M;file=" + dir + ";idle_writeback=1", &tier).ok());
  Item item{block_text(4000, 77)};
  ASSERT_TRUE(tier->Insert("idle", &item, &kHelper).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (tier->stats().cache.written_back == 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GT(tier->stats().cache.written_back, 0u) << "no idle writeback in 30 s";
  std::unique_ptr<Item> got = lookup(*tier, "idle", false, nullptr);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->data, item.data);
}

}  // namespace
