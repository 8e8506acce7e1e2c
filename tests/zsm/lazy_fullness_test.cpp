// tests/zsm/lazy_fullness_test.cpp: lazy fullness (zspage.h, "Lazy fullness"). A free that takes a
// full zspage to one short makes it the shard's hot zspage, off the fullness lists; the
// statistics must still count it in its group, compaction must still find it, frees between
// stores must put it back on its list, and zs_check_pool() must hold throughout, also in
// classes with few objects per zspage, whose group changes skip groups.
#include <zsm/zsmalloc.h>

#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <vector>

#include "test_support.h"
#include "workload.h"

namespace {

using zsm_test::Check;
using zsm_test::PoolPtr;
using zsm_test::PoolTarget;
using zsm_test::Rng;
using zsm_test::Workload;
using zsm_test::Needs;
using zsm_test::check_stats_consistent;

using zsm_test::check_object;
using zsm_test::fullness_group;
using zsm_test::make_pattern;
using zsm_test::seed_of;

// One shard, 4 KiB pages, chain 8: class 784 has 26 objects in 5 pages.
PoolPtr one_shard_pool() {
  zs_pool_config cfg{};
  cfg.nr_shards = 1;
  cfg.flags = ZS_POOL_NO_THREAD_CACHE;  // the locked path, where fullness is kept
  return PoolPtr(zs_create_pool_ex("lazy", &cfg));
}

constexpr size_t kReq = 784 - ZS_HANDLE_SIZE;
constexpr unsigned kObjs = 26;
constexpr unsigned kPages = 5;

// Stores one patterned object of kReq bytes; 0 on failure.
unsigned long store(zs_pool* pool) {
  unsigned long h = zs_malloc(pool, kReq);
  if (h == 0) return 0;
  std::vector<uint8_t> bytes = make_pattern(kReq, seed_of(h, kReq));
  zs_obj_write(pool, h, bytes.data(), kReq);
  return h;
}

// The class's zspages per group must be those of zspages holding `inuse` objects each.
::testing::AssertionResult groups_are(zs_pool* pool, const std::vector<unsigned>& inuse) {
  struct zs_class_stats st = zsm_test::class_for_request(pool, kReq);
  std::array<unsigned long, ZS_NR_FULLNESS_GROUPS> want{};
  unsigned long used = 0;
  for (unsigned n : inuse) {
    want[fullness_group(n, kObjs)]++;
    used += n;
  }
  for (int g = 0; g < ZS_NR_FULLNESS_GROUPS; g++)
    if (st.zspages[g] != want[g])
      return ::testing::AssertionFailure() << "group " << g << " counts " << st.zspages[g]
                                           << " zspages, want " << want[g];
  if (st.obj_used != used)
    return ::testing::AssertionFailure() << "obj_used " << st.obj_used << ", want " << used;
  if (zs_check_pool(pool, stderr) != 0)
    return ::testing::AssertionFailure() << "zs_check_pool() found violations";
  return ::testing::AssertionSuccess();
}

// Fills `n` zspages of the class; returns their handles, zspage by zspage.
std::vector<std::vector<unsigned long>> fill_zspages(zs_pool* pool, unsigned n) {
  std::vector<std::vector<unsigned long>> zspages(n);
  for (auto& objs : zspages)
    for (unsigned k = 0; k < kObjs; k++) objs.push_back(store(pool));
  return zspages;
}

void free_last(zs_pool* pool, std::vector<unsigned long>& objs, unsigned n) {
  for (unsigned k = 0; k < n; k++) {
    zs_free(pool, objs.back());
    objs.pop_back();
  }
}

// Each test gets one_shard_pool() as `p`.
class LazyFullness : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(p, nullptr); }

  PoolPtr pool_ = one_shard_pool();
  zs_pool* const p = pool_.get();
};

// A free from a full zspage makes it hot: the statistics count it in its group at every step,
// as it stays hot, drops below its group onto a list, and fills again.
TEST_F(LazyFullness, StatisticsCountTheHotZspage) {
  auto zspages = fill_zspages(p, 2);
  ASSERT_TRUE(groups_are(p, {26, 26}));
  for (unsigned left = 25; left >= 20; left--) {  // 96 % (hot) down to 76 % (listed)
    free_last(p, zspages[0], 1);
    ASSERT_TRUE(groups_are(p, {left, 26})) << left << " left";
  }
  for (unsigned left = 21; left <= 26; left++) {  // stores go back to it: the fullest
    zspages[0].push_back(store(p));
    ASSERT_TRUE(groups_are(p, {left, 26})) << left << " in use";
  }
  EXPECT_EQ(zs_get_total_pages(p), 2 * kPages);
  for (auto& objs : zspages)
    for (unsigned long h : objs) ASSERT_TRUE(check_object(p, h, make_pattern(kReq, seed_of(h, kReq))));
  for (auto& objs : zspages) free_last(p, objs, static_cast<unsigned>(objs.size()));
  EXPECT_TRUE(zsm_test::compact_and_check_empty(p));
}

// Frees from two full zspages between stores: the second becomes hot and the first goes back
// on its list. The next stores fill both again without a new zspage.
TEST_F(LazyFullness, AnotherFreeFromFullPutsTheHotZspageBack) {
  auto zspages = fill_zspages(p, 3);
  free_last(p, zspages[0], 1);
  free_last(p, zspages[1], 1);
  free_last(p, zspages[2], 2);
  ASSERT_TRUE(groups_are(p, {25, 25, 24}));
  for (int k = 0; k < 4; k++) ASSERT_NE(store(p), 0u);
  ASSERT_TRUE(groups_are(p, {26, 26, 26}));
  EXPECT_EQ(zs_get_total_pages(p), 3 * kPages);
}

// A store with no hot zspage takes the fullest listed one: with one at 3 and one at 2 of 26
// objects, it takes the first, which is then hot and on no list. Compaction must find it
// (it puts hot zspages back first): it moves the sparser one's objects into it and frees
// one zspage. Were the hot one left out, compaction would see one listed zspage and free
// nothing.
TEST_F(LazyFullness, CompactionFindsTheHotZspage) {
  auto zspages = fill_zspages(p, 3);
  free_last(p, zspages[0], 23);
  free_last(p, zspages[1], 24);
  unsigned long h = store(p);
  ASSERT_NE(h, 0u);
  zspages[0].push_back(h);
  ASSERT_TRUE(groups_are(p, {4, 2, 26}));
  EXPECT_EQ(zs_compact(p), kPages);
  ASSERT_TRUE(groups_are(p, {6, 26}));
  for (auto& objs : zspages)
    for (unsigned long k : objs) ASSERT_TRUE(check_object(p, k, make_pattern(kReq, seed_of(k, kReq))));
  for (auto& objs : zspages) free_last(p, objs, static_cast<unsigned>(objs.size()));
  EXPECT_TRUE(zsm_test::compact_and_check_empty(p));
}

// Random stores and frees in the classes with the fewest objects per zspage (where a group
// change skips groups, and the huge class, whose zspages are never hot), and in a common
// class, with one and with four shards (the parameter), through zs_store() and zs_malloc():
// zs_check_pool() holds after every call, and the statistics add up (a workload, workload.h).
class LazyFullnessRandomMix : public ::testing::TestWithParam<unsigned> {};

TEST_P(LazyFullnessRandomMix, CheckPoolHolds) {
  const unsigned shards = GetParam();
  zs_pool_config cfg{};
  cfg.nr_shards = shards;
  cfg.flags = ZS_POOL_NO_THREAD_CACHE;
  PoolPtr pool(zs_create_pool_ex("lazy-mix", &cfg));
  ASSERT_NE(pool, nullptr);
  zs_pool* p = pool.get();
  std::vector<size_t> sizes = {kReq};
  for (unsigned i = 0; i < zs_class_count(p); i++) {
    struct zs_class_stats st{};
    if (zs_class_stats(p, i, &st) == 1 && st.objs_per_zspage <= 4)
      sizes.push_back(st.size - ZS_HANDLE_SIZE);
  }
  ASSERT_GT(sizes.size(), 2u);
  PoolTarget target(p);
  target.sizes = zsm_test::sizes_of(sizes);
  // zs_store(), whose copy comes from the store's own path, read back at once.
  auto store_and_read = [](PoolTarget& t, Rng& rng) {
    Check c = t.store(rng);
    return c ? t.check(t.live.newest()) : c;
  };
  auto stats = [](PoolTarget& t, Rng&) { return check_stats_consistent(t.pool(), t.live_size()); };
  Workload<PoolTarget> mix(target, shards);
  mix.op("free", 45, &PoolTarget::free, Needs::a_live_object)
      .op("store", 28, store_and_read, Needs::room)
      .op("malloc+write", 27, &PoolTarget::malloc_write, Needs::room)
      .every(1, "zs_check_pool", &PoolTarget::check_pool)
      .every(100, "stats", stats);
  ASSERT_TRUE(mix.run(3000)) << shards << " shards";
  EXPECT_TRUE(target.free_all());
  EXPECT_TRUE(zsm_test::compact_and_check_empty(p));
}

INSTANTIATE_TEST_SUITE_P(LazyFullness, LazyFullnessRandomMix, ::testing::Values(1u, 4u),
                         [](const ::testing::TestParamInfo<unsigned>& info) {
                           return "Shards" + std::to_string(info.param);
                         });

}  // namespace
