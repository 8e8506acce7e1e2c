// tests/zsm/invariants_test.cpp: zs_check_pool(). It must pass at every quiescent point of a
// randomized workload (workload.h: stores, frees, compactions, over several geometries and
// shard counts) and must catch a broken pool: an object header overwritten through a read
// pointer, which is what a stray write from a user would do. Builds with
// ZSM_DEBUG_INVARIANTS also check every class after every call of the same workload.
#include <zsm/zsmalloc.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "test_support.h"
#include "workload.h"

namespace {

using namespace zsm_test;

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
  PoolPtr pool(zs_create_pool_ex("inv", &cfg));
  ASSERT_NE(pool, nullptr);
  PoolTarget target(pool.get(), g.page_size);
  target.sizes = uniform_sizes(1, g.page_size);
  Workload<PoolTarget> mix(target, g.page_size + g.chain + g.shards);
  mix.op("free", 40, &PoolTarget::free, Needs::a_live_object)
      .op("compact", 2, &PoolTarget::compact)
      .op("malloc+write", 58, &PoolTarget::malloc_write, Needs::room)
      .every(500, "zs_check_pool", &PoolTarget::check_pool);
  ASSERT_TRUE(mix.run(6000));
  Rng unused;
  ASSERT_TRUE(target.check_pool(unused));
  EXPECT_TRUE(target.finish());
  EXPECT_TRUE(target.check_pool(unused));
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
