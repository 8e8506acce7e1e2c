// tests/hardened_test.cpp: hardened pools (ZS_POOL_HARDENED). Each kind of misuse the mode
// promises to catch dies through the one fatal-report path with its message (death tests):
// a double free, a handle this pool never returned, a handle of another pool, an address
// that is no handle at all, reads and writes past an object's size, with huge objects too.
// Outside the death tests, a hardened pool must behave exactly like a default one (stores,
// reads, compaction, the cache on top of it), and a default pool must keep allowing reads up
// to the object's capacity.
#include <zsm/cache.hpp>
#include <zsm/zsmalloc.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "test_support.h"

namespace {

using zsm_test::check_object;
using zsm_test::make_pattern;
using zsm_test::seed_of;

zs_pool* hardened_pool(const char* name, unsigned shards = 2) {
  zs_pool_config cfg{};
  cfg.flags = ZS_POOL_HARDENED;
  cfg.nr_shards = shards;
  return zs_create_pool_ex(name, &cfg);
}

unsigned long store_pattern(zs_pool* pool, size_t size) {
  std::vector<uint8_t> bytes = make_pattern(size, size);
  return zs_store(pool, bytes.data(), size);
}

class HardenedDeath : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(HardenedDeath, DoubleFree) {
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h");
        unsigned long h = store_pattern(pool, 100);
        zs_free(pool, h);
        zs_free(pool, h);
      },
      "zsm: fatal: pool 'h': zs_free\\(handle 0x[0-9a-f]+\\): handle is not allocated");
}

TEST_F(HardenedDeath, DoubleFreeOfHugeObject) {
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h");
        unsigned long h = store_pattern(pool, 4000);
        zs_free(pool, h);
        zs_free(pool, h);
      },
      "zs_free\\(handle 0x[0-9a-f]+\\): handle is not allocated");
}

// A cell next to a live one, in the pool's region, that no store has used yet.
TEST_F(HardenedDeath, HandleNeverReturned) {
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h", 1);
        unsigned long h = store_pattern(pool, 100);
        zs_free(pool, h + 8 * 1000);
      },
      "zs_free\\(handle 0x[0-9a-f]+\\): handle is not allocated");
}

TEST_F(HardenedDeath, HandleOfAnotherPool) {
  EXPECT_DEATH(
      {
        zs_pool* mine = hardened_pool("mine");
        zs_pool* other = hardened_pool("other");
        unsigned long h = store_pattern(other, 100);
        zs_free(mine, h);
      },
      "pool 'mine': zs_free\\(handle 0x[0-9a-f]+\\): not a handle of this pool");
}

TEST_F(HardenedDeath, AddressThatIsNoHandle) {
  static long not_a_handle = 42;
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h");
        zs_free(pool, reinterpret_cast<unsigned long>(&not_a_handle));
      },
      "not a handle of this pool");
}

TEST_F(HardenedDeath, MisalignedHandle) {
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h");
        unsigned long h = store_pattern(pool, 100);
        zs_free(pool, h + 1);
      },
      "not a handle of this pool");
}

TEST_F(HardenedDeath, ReadPastObjectSize) {
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h");
        unsigned long h = store_pattern(pool, 100);  // class capacity is larger than 100
        char buf[200];
        zs_obj_read_begin(pool, h, 101, buf);
      },
      "zs_obj_read_begin\\(handle 0x[0-9a-f]+\\): 101 bytes of an object of 100 bytes");
}

TEST_F(HardenedDeath, ReadPastHugeObjectSize) {
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h");
        unsigned long h = store_pattern(pool, 3700);
        static char buf[4096];
        zs_obj_read_begin(pool, h, 3701, buf);
      },
      "3701 bytes of an object of 3700 bytes");
}

TEST_F(HardenedDeath, WritePastObjectSize) {
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h");
        unsigned long h = zs_malloc(pool, 64);
        char buf[72] = {};
        zs_obj_write(pool, h, buf, sizeof(buf));
      },
      "zs_obj_write\\(handle 0x[0-9a-f]+\\): 72 bytes of an object of 64 bytes");
}

TEST_F(HardenedDeath, ReadAfterFree) {
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h");
        unsigned long h = store_pattern(pool, 100);
        zs_free(pool, h);
        char buf[100];
        zs_obj_read_begin(pool, h, 10, buf);
      },
      "zs_obj_read_begin\\(handle 0x[0-9a-f]+\\): handle is not allocated");
}

TEST_F(HardenedDeath, CapacityOfForeignHandle) {
  EXPECT_DEATH(
      {
        zs_pool* a = hardened_pool("a");
        zs_pool* b = hardened_pool("b");
        zs_obj_capacity(a, store_pattern(b, 10));
      },
      "pool 'a': zs_obj_capacity\\(handle 0x[0-9a-f]+\\): not a handle of this pool");
}

// Under a valid workload a hardened pool behaves like a default one: no false report.
TEST(Hardened, BehavesLikeADefaultPool) {
  zs_pool* pool = hardened_pool("h", 4);
  ASSERT_NE(pool, nullptr);
  std::mt19937_64 rng(7);
  std::vector<std::pair<unsigned long, size_t>> live;
  for (int i = 0; i < 20000; i++) {
    if (!live.empty() && rng() % 3 == 0) {
      size_t k = rng() % live.size();
      zs_free(pool, live[k].first);
      live[k] = live.back();
      live.pop_back();
      continue;
    }
    size_t size = 1 + rng() % 4096;
    unsigned long h = zs_malloc(pool, size);
    ASSERT_NE(h, 0u);
    std::vector<uint8_t> bytes = make_pattern(size, seed_of(h, size));
    zs_obj_write(pool, h, bytes.data(), size);
    live.emplace_back(h, size);
  }
  zs_compact(pool);
  EXPECT_EQ(zs_check_pool(pool, stderr), 0);
  for (auto [h, size] : live) {
    ASSERT_TRUE(check_object(pool, h, make_pattern(size, seed_of(h, size))));
    EXPECT_GE(zs_obj_capacity(pool, h), size);
  }
  for (auto [h, size] : live) zs_free(pool, h);
  zs_compact(pool);
  EXPECT_EQ(zs_get_total_pages(pool), 0u);
  zs_destroy_pool(pool);
}

// The cache on a hardened pool: everything it does stays within what the mode allows.
TEST(Hardened, CacheRunsOnAHardenedPool) {
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

// Without the flag a read may cover the object's whole capacity (the kernel's contract);
// past the capacity it fails with EINVAL.
TEST(Hardened, DefaultPoolReadsUpToCapacity) {
  zs_pool* pool = zs_create_pool("d");
  unsigned long h = store_pattern(pool, 100);
  size_t capacity = zs_obj_capacity(pool, h);
  ASSERT_GT(capacity, 100u);
  std::vector<char> buf(capacity + 1);
  void* mem = zs_obj_read_begin(pool, h, capacity, buf.data());
  ASSERT_NE(mem, nullptr);
  zs_obj_read_end(pool, h, capacity, mem);
  errno = 0;
  EXPECT_EQ(zs_obj_read_begin(pool, h, capacity + 1, buf.data()), nullptr);
  EXPECT_EQ(errno, EINVAL);
  zs_free(pool, h);
  zs_destroy_pool(pool);
}

TEST(Hardened, UnknownFlagIsRejected) {
  zs_pool_config cfg{};
  cfg.flags = 0x80;
  errno = 0;
  EXPECT_EQ(zs_create_pool_ex("x", &cfg), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
