// tests/zsm/invariants_test.cpp: zs_check_pool(). It must pass at every quiescent point of a
// randomized workload (stores, frees, overwrites, compactions, over several geometries and
// shard counts) and must catch a broken pool: an object header overwritten through a read
// pointer, which is what a stray write from a user would do. Builds with
// ZSM_DEBUG_INVARIANTS also check every class after every call of the same workload.
#include <zsm/zsmalloc.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "test_support.h"

namespace {

using zsm_test::check_object;
using zsm_test::make_pattern;
using zsm_test::seed_of;

struct Geometry {
  size_t page_size;
  unsigned chain;
  unsigned shards;
};

class Invariants : public ::testing::TestWithParam<Geometry> {};

TEST_P(Invariants, HoldThroughoutARandomWorkload) {
  const Geometry g = GetParam();
  zs_pool_config cfg{};
  cfg.page_size = g.page_size;
  cfg.chain_size = g.chain;
  cfg.nr_shards = g.shards;
  zs_pool* pool = zs_create_pool_ex("inv", &cfg);
  ASSERT_NE(pool, nullptr);
  std::mt19937_64 rng(g.page_size + g.chain + g.shards);
  std::vector<std::pair<unsigned long, size_t>> live;
  for (int op = 0; op < 6000; op++) {
    unsigned r = rng() % 100;
    if (r < 40 && !live.empty()) {
      size_t k = rng() % live.size();
      ASSERT_TRUE(check_object(pool, live[k].first,
                               make_pattern(live[k].second, seed_of(live[k].first, live[k].second)),
                               g.page_size));
      zs_free(pool, live[k].first);
      live[k] = live.back();
      live.pop_back();
    } else if (r < 42) {
      zs_compact(pool);
    } else {
      size_t size = 1 + rng() % g.page_size;
      std::vector<uint8_t> bytes(size);
      unsigned long h = zs_malloc(pool, size);
      ASSERT_NE(h, 0u);
      zsm_test::fill_pattern(bytes.data(), size, seed_of(h, size));
      zs_obj_write(pool, h, bytes.data(), size);
      live.emplace_back(h, size);
    }
    if (op % 500 == 0) {
      ASSERT_EQ(zs_check_pool(pool, stderr), 0) << "after op " << op;
    }
  }
  ASSERT_EQ(zs_check_pool(pool, stderr), 0);
  for (auto [h, size] : live) zs_free(pool, h);
  zs_compact(pool);
  EXPECT_EQ(zs_check_pool(pool, stderr), 0);
  EXPECT_EQ(zs_get_total_pages(pool), 0u);
  zs_destroy_pool(pool);
}

INSTANTIATE_TEST_SUITE_P(Geometries, Invariants,
                         ::testing::Values(Geometry{4096, 8, 1}, Geometry{4096, 4, 4},
                                           Geometry{4096, 16, 2}, Geometry{16384, 8, 1},
                                           Geometry{65536, 4, 2}));

// The header sits in the 8 bytes before the payload of a non-huge object.
TEST(InvariantsCheck, CatchesAnOverwrittenHeader) {
  zs_pool* pool = zs_create_pool_ex("broken", nullptr);
  std::vector<unsigned long> handles;
  for (int i = 0; i < 100; i++) handles.push_back(zs_malloc(pool, 200));
  char buf[200];
  auto* mem = static_cast<char*>(zs_obj_read_begin(pool, handles[50], 200, buf));
  ASSERT_NE(mem, buf) << "a 200-byte object at slot 50 should not span pages";
  unsigned long saved;
  std::memcpy(&saved, mem - 8, 8);
  const unsigned long garbage = 0x5a5a5a5a5a5a5a5aUL;
  std::memcpy(mem - 8, &garbage, 8);
  zs_obj_read_end(pool, handles[50], 200, mem);

  char* text = nullptr;
  size_t len = 0;
  FILE* report = open_memstream(&text, &len);
  errno = 0;
  EXPECT_EQ(zs_check_pool(pool, report), -1);
  EXPECT_EQ(errno, EUCLEAN);
  std::fclose(report);
  EXPECT_NE(std::string(text, len).find("has header 0x5a5a5a5a5a5a5a5a"), std::string::npos)
      << std::string(text, len);
  std::free(text);

  mem = static_cast<char*>(zs_obj_read_begin(pool, handles[50], 200, buf));
  std::memcpy(mem - 8, &saved, 8);  // repaired: the pool is whole again
  zs_obj_read_end(pool, handles[50], 200, mem);
  EXPECT_EQ(zs_check_pool(pool, nullptr), 0);
  for (unsigned long h : handles) zs_free(pool, h);
  zs_destroy_pool(pool);
}

// A zs_obj_read_end() without a read (undefined in a default pool) leaves the zspage's reader
// count at -1, "a writer holds it": no writer runs while the check holds the class locks.
TEST(InvariantsCheck, CatchesANegativeReaderCount) {
  zs_pool* pool = zs_create_pool_ex("broken", nullptr);
  unsigned long h = zs_malloc(pool, 200);
  zs_obj_read_end(pool, h, 200, nullptr);
  char* text = nullptr;
  size_t len = 0;
  FILE* report = open_memstream(&text, &len);
  EXPECT_EQ(zs_check_pool(pool, report), -1);
  std::fclose(report);
  EXPECT_NE(std::string(text, len).find("reader count -1"), std::string::npos)
      << std::string(text, len);
  std::free(text);
  zs_destroy_pool(pool);  // a read of h would now wait for ever
}

TEST(InvariantsCheck, NullPool) {
  errno = 0;
  EXPECT_EQ(zs_check_pool(nullptr, stderr), -1);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
