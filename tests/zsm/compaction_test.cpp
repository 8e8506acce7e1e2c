// tests/zsm/compaction_test.cpp: zs_compact(). A fragmented pool (many objects of a few sizes, a
// random half freed) shrinks by exactly the pages zs_compact() reports, every object survives
// the move, stats (pages_compacted, obj_used, freeable) agree afterwards; spares are released;
// two threads compacting at once report exactly the pages freed. Every pool configuration of
// pool_configs.h; other geometries on the default one.
#include "pool_configs.h"
#include "test_support.h"

#include <algorithm>
#include <latch>
#include <random>
#include <thread>

namespace {

using namespace zsm_test;

// Each Compaction test runs on every pool configuration of pool_configs.h.
class Compaction : public PoolConfigFixture {
 protected:
  // Store `count` objects cycling through `sizes`, then free a random half.
  void fragment(size_t count, std::initializer_list<size_t> sizes, uint64_t seed) {
    std::vector<size_t> sz(sizes);
    std::vector<unsigned long> hs;
    hs.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      size_t size = sz[i % sz.size()];
      unsigned long h = store(size, seed * 1000003 + i);
      ASSERT_NE(h, 0u) << "store " << i << " errno " << errno;
      hs.push_back(h);
    }
    std::mt19937_64 rng(seed);
    std::shuffle(hs.begin(), hs.end(), rng);
    for (size_t i = 0; i < hs.size() / 2; ++i) {
      zs_free(pool_, hs[i]);  // content is checked for the survivors
      live_.erase(hs[i]);
    }
  }
};

TEST_P(Compaction, FragmentedPoolShrinksByReturnedPages) {
  fragment(50000, {48, 200, 500, 1000, 2000}, 42);
  ASSERT_TRUE(check_stats_consistent(pool_, live_.size()));
  PoolTotals t0;
  ASSERT_TRUE(collect_totals(pool_, &t0));
  const unsigned long before = zs_get_total_pages(pool_);
  struct zs_pool_stats s0{};
  zs_pool_stats(pool_, &s0);

  const unsigned long freed = zs_compact(pool_);
  const unsigned long after = zs_get_total_pages(pool_);
  std::cout << "[          ] compaction: pages before " << before << ", after " << after
            << ", zs_compact returned " << freed << " (freeable predicted " << t0.freeable << ")\n";
  EXPECT_GT(freed, 0u);
  EXPECT_LT(after, before);
  EXPECT_EQ(after, before - freed);
  // The stats' prediction is a lower bound (released spares come on top).
  EXPECT_GE(freed, t0.freeable);

  struct zs_pool_stats s1{};
  zs_pool_stats(pool_, &s1);
  EXPECT_EQ(s1.pages_compacted, s0.pages_compacted + freed);

  for (auto& [h, bytes] : live_) ASSERT_TRUE(check_object(pool_, h, bytes));
  ASSERT_TRUE(check_stats_consistent(pool_, live_.size()));
  PoolTotals t1;
  ASSERT_TRUE(collect_totals(pool_, &t1));
  EXPECT_EQ(t1.freeable, 0u) << "single-threaded compaction should leave nothing freeable";
  // No empty zspage (spare) survives a compaction.
  for (unsigned i = 0; i < zs_class_count(pool_); ++i) {
    struct zs_class_stats st{};
    if (zs_class_stats(pool_, i, &st) != 1) continue;
    EXPECT_EQ(st.zspages[0], 0u) << "class " << st.size;
  }

  // A second compaction has nothing to do.
  EXPECT_EQ(zs_compact(pool_), 0u);
  EXPECT_EQ(zs_get_total_pages(pool_), after);
  struct zs_pool_stats s2{};
  zs_pool_stats(pool_, &s2);
  EXPECT_EQ(s2.pages_compacted, s1.pages_compacted);

  // The pool still works: store more, overwrite some moved objects, read everything.
  for (size_t i = 0; i < 2000; ++i) ASSERT_NE(store(1 + (i * 97) % 4096, 7000000 + i), 0u);
  size_t k = 0;
  for (auto& [h, bytes] : live_) {
    if (++k % 7) continue;
    fill_pattern(bytes.data(), bytes.size(), seed_of(h, bytes.size()));
    zs_obj_write(pool_, h, bytes.data(), bytes.size());
  }
  for (auto& [h, bytes] : live_) ASSERT_TRUE(check_object(pool_, h, bytes));
}

TEST_P(Compaction, PagesCompactedAccumulates) {
  unsigned long sum = 0;
  for (int round = 0; round < 4; ++round) {
    fragment(6000, {100, 700, 1500, 3000}, 100 + round);
    unsigned long before = zs_get_total_pages(pool_);
    unsigned long freed = zs_compact(pool_);
    EXPECT_EQ(zs_get_total_pages(pool_), before - freed);
    sum += freed;
    struct zs_pool_stats s{};
    zs_pool_stats(pool_, &s);
    EXPECT_EQ(s.pages_compacted, sum);
    for (auto& [h, bytes] : live_) ASSERT_TRUE(check_object(pool_, h, bytes));
  }
  EXPECT_GT(sum, 0u);
}

TEST_P(Compaction, EmptyPoolCompactsToZero) {
  EXPECT_EQ(zs_compact(pool_), 0u);
  EXPECT_EQ(zs_get_total_pages(pool_), 0u);
  struct zs_pool_stats s{};
  zs_pool_stats(pool_, &s);
  EXPECT_EQ(s.pages_compacted, 0u);
}

// Emptied zspages may linger as spares (at most one per class); zs_compact releases them all
// and counts them.
TEST_P(Compaction, SparesAreReleasedAndCounted) {
  std::vector<unsigned long> hs;
  unsigned long classes_pages = 0;
  for (unsigned i = 0; i < zs_class_count(pool_); ++i) {
    struct zs_class_stats st{};
    if (zs_class_stats(pool_, i, &st) != 1) continue;
    size_t req = st.objs_per_zspage == 1 ? 4096 : st.size - ZS_HANDLE_SIZE;
    // Two zspages' worth, so that at most one can be a spare.
    for (unsigned k = 0; k < 2 * st.objs_per_zspage; ++k) {
      unsigned long h = zs_malloc(pool_, req);
      ASSERT_NE(h, 0u);
      hs.push_back(h);
    }
    classes_pages += 2 * st.pages_per_zspage;
  }
  EXPECT_EQ(zs_get_total_pages(pool_), classes_pages);
  for (unsigned long h : hs) zs_free(pool_, h);
  zs_drain_thread_caches(pool_);  // the slots this thread's cache kept go back too
  const unsigned long lingering = zs_get_total_pages(pool_);
  std::cout << "[          ] after freeing all: " << lingering << " of " << classes_pages
            << " pages kept as spares\n";
  EXPECT_LE(lingering, classes_pages / 2) << "more than one spare zspage kept in some class";
  PoolTotals t;
  ASSERT_TRUE(collect_totals(pool_, &t));
  EXPECT_EQ(t.obj_used, 0u);
  EXPECT_EQ(t.pages_used, lingering);
  EXPECT_EQ(zs_compact(pool_), lingering);
  EXPECT_EQ(zs_get_total_pages(pool_), 0u);
  struct zs_pool_stats s{};
  zs_pool_stats(pool_, &s);
  EXPECT_EQ(s.pages_compacted, lingering);
}

// Huge zspages hold one object: compaction never moves them and they never fragment.
TEST_P(Compaction, HugeObjectsAreNotMoved) {
  for (size_t i = 0; i < 200; ++i) ASSERT_NE(store(3700 + i, i), 0u);
  std::vector<unsigned long> hs;
  for (auto& [h, bytes] : live_) hs.push_back(h);
  for (size_t i = 0; i < hs.size(); i += 2) free_tracked(hs[i]);
  zs_compact(pool_);  // drops the one spare, if any
  EXPECT_EQ(zs_get_total_pages(pool_), live_.size());
  PoolTotals t;
  ASSERT_TRUE(collect_totals(pool_, &t));
  EXPECT_EQ(t.freeable, 0u);
}

// Two threads compacting at once: one may return 0 at once (compaction in progress), and the
// sum of what they report is exactly the pages freed.
TEST_P(Compaction, ConcurrentCompactCallsAccountExactly) {
  fragment(30000, {64, 300, 900, 1800, 2700}, 7);
  const unsigned long before = zs_get_total_pages(pool_);
  std::atomic<unsigned long> sum{0};
  std::atomic<unsigned> zero_returns{0};
  std::latch start(2);
  auto worker = [&] {
    start.arrive_and_wait();
    for (int i = 0; i < 20; ++i) {
      unsigned long r = zs_compact(pool_);
      if (r == 0) ++zero_returns;
      sum += r;
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  const unsigned long after = zs_get_total_pages(pool_);
  std::cout << "[          ] concurrent compaction: pages before " << before << ", after " << after
            << ", returned sum " << sum.load() << ", zero returns " << zero_returns.load() << "\n";
  EXPECT_GT(sum.load(), 0u);
  EXPECT_EQ(before - after, sum.load());
  struct zs_pool_stats s{};
  zs_pool_stats(pool_, &s);
  EXPECT_EQ(s.pages_compacted, sum.load());
  for (auto& [h, bytes] : live_) ASSERT_TRUE(check_object(pool_, h, bytes));
  EXPECT_TRUE(check_stats_consistent(pool_, live_.size()));
  PoolTotals t;
  ASSERT_TRUE(collect_totals(pool_, &t));
  EXPECT_EQ(t.freeable, 0u);
}

INSTANTIATE_TEST_SUITE_P(Pools, Compaction, ::testing::ValuesIn(kPoolConfigs), config_name);

// Compaction on 16K and 64K pages and with chain 4 and 16, on the default configuration only:
// these are about the geometry, which the configurations do not vary.
class CompactionConfig : public PoolFixture,
                         public ::testing::WithParamInterface<std::pair<size_t, unsigned>> {
 protected:
  void SetUp() override {
    zs_pool_config cfg{};
    cfg.page_size = GetParam().first;
    cfg.chain_size = GetParam().second;
    create_pool(cfg);
  }
};

TEST_P(CompactionConfig, ShrinksAndKeepsObjects) {
  const size_t page = GetParam().first;
  std::vector<unsigned long> hs;
  for (size_t i = 0; i < 6000; ++i) {
    size_t size = 1 + (i * 7919) % std::min<size_t>(page / 2, 6000);
    unsigned long h = store(size, i);
    ASSERT_NE(h, 0u);
    hs.push_back(h);
  }
  std::mt19937_64 rng(page + GetParam().second);
  std::shuffle(hs.begin(), hs.end(), rng);
  for (size_t i = 0; i < hs.size() * 2 / 3; ++i) {
    zs_free(pool_, hs[i]);
    live_.erase(hs[i]);
  }
  const unsigned long before = zs_get_total_pages(pool_);
  const unsigned long freed = zs_compact(pool_);
  EXPECT_GT(freed, 0u);
  EXPECT_EQ(zs_get_total_pages(pool_), before - freed);
  for (auto& [h, bytes] : live_) ASSERT_TRUE(check_object(pool_, h, bytes, page));
  EXPECT_TRUE(check_stats_consistent(pool_, live_.size()));
  PoolTotals t;
  ASSERT_TRUE(collect_totals(pool_, &t));
  EXPECT_EQ(t.freeable, 0u);
}

INSTANTIATE_TEST_SUITE_P(Configs, CompactionConfig,
                         ::testing::Values(std::pair<size_t, unsigned>{4096, 4},
                                           std::pair<size_t, unsigned>{4096, 16},
                                           std::pair<size_t, unsigned>{16384, 8},
                                           std::pair<size_t, unsigned>{65536, 8}),
                         [](const auto& info) {
                           return "page" + std::to_string(info.param.first / 1024) + "k_chain" +
                                  std::to_string(info.param.second);
                         });

}  // namespace
