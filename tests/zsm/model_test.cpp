// tests/zsm/model_test.cpp: model-based randomized test. Random store / malloc+write / free /
// read / overwrite / compact operations run against a reference map handle -> bytes; every
// read and every free checks content, stats are checked for consistency along the way, and
// the pool must end empty. Several seeds, plus chain 4, chain 16 and 16K pages. A watchdog
// aborts on an operation that does not return.
#include "test_support.h"
#include "watchdog.h"

#include <random>

namespace {

using namespace zsm_test;

struct ModelParam {
  uint64_t seed;
  size_t page_size;
  unsigned chain;
  unsigned ops;
};

class ModelTest : public ::testing::TestWithParam<ModelParam> {};

// Sizes skewed toward typical compressed pages: mostly 100..3000, some anywhere in 1..4096,
// a few anywhere up to the page (which differs only for 16K/64K pages).
size_t draw_size(std::mt19937_64& rng, size_t page_size) {
  unsigned r = rng() % 100;
  if (r < 80) return 100 + rng() % 2901;
  if (r < 95) return 1 + rng() % 4096;
  return 1 + rng() % page_size;
}

TEST_P(ModelTest, RandomOpsMatchReference) {
  const ModelParam prm = GetParam();
  zs_pool_config cfg{};
  cfg.page_size = prm.page_size;
  cfg.chain_size = prm.chain;
  zs_pool* pool = zs_create_pool_ex("model", &cfg);
  ASSERT_NE(pool, nullptr);

  std::mt19937_64 rng(prm.seed);
  std::unordered_map<unsigned long, std::vector<uint8_t>> ref;
  std::vector<unsigned long> order;                 // live handles, for random picks
  std::unordered_map<unsigned long, size_t> pos;    // handle -> index in `order`
  const size_t kTarget = 1500;                      // live objects the mix hovers around
  unsigned long compacted = 0;
  size_t counts[8] = {};

  auto add = [&](unsigned long h, std::vector<uint8_t> bytes) {
    ASSERT_EQ(ref.count(h), 0u) << "handle " << h << " handed out while live";
    pos[h] = order.size();
    order.push_back(h);
    ref.emplace(h, std::move(bytes));
  };
  auto remove = [&](unsigned long h) {
    size_t i = pos[h];
    pos[order.back()] = i;
    order[i] = order.back();
    order.pop_back();
    pos.erase(h);
    ref.erase(h);
  };
  auto pick = [&]() { return order[rng() % order.size()]; };

  Watchdog dog("pool model");
  for (unsigned op = 0; op < prm.ops; ++op, dog.beat()) {
    unsigned r = rng() % 100;
    // Keep the population near the target: grow when small, shrink when large.
    if (order.empty() && r >= 40) r = 0;
    if (order.size() > 2 * kTarget && r < 40) r = 50;
    if (r < 30) {  // store
      size_t size = draw_size(rng, prm.page_size);
      std::vector<uint8_t> bytes = make_pattern(size, rng());
      unsigned long h = zs_store(pool, bytes.data(), size);
      ASSERT_NE(h, 0u) << "op " << op << " zs_store(" << size << ") errno " << errno;
      ASSERT_GE(zs_obj_capacity(pool, h), size);
      add(h, std::move(bytes));
      ++counts[0];
    } else if (r < 40) {  // malloc + write
      size_t size = draw_size(rng, prm.page_size);
      unsigned long h = zs_malloc(pool, size);
      ASSERT_NE(h, 0u) << "op " << op << " zs_malloc(" << size << ") errno " << errno;
      std::vector<uint8_t> bytes = make_pattern(size, seed_of(h, size));
      errno = 0;
      zs_obj_write(pool, h, bytes.data(), size);
      ASSERT_EQ(errno, 0);
      add(h, std::move(bytes));
      ++counts[1];
    } else if (r < 65) {  // free (check first)
      unsigned long h = pick();
      ASSERT_TRUE(check_object(pool, h, ref[h], prm.page_size)) << "op " << op << " before free";
      zs_free(pool, h);
      remove(h);
      ++counts[2];
    } else if (r < 83) {  // read: whole, or a prefix
      unsigned long h = pick();
      const std::vector<uint8_t>& bytes = ref[h];
      size_t len = (rng() % 4 == 0) ? 1 + rng() % bytes.size() : bytes.size();
      ASSERT_TRUE(check_object(pool, h, bytes.data(), len, prm.page_size)) << "op " << op;
      ++counts[3];
    } else if (r < 97) {  // overwrite a prefix, up to the whole capacity
      unsigned long h = pick();
      std::vector<uint8_t>& bytes = ref[h];
      const size_t cap = zs_obj_capacity(pool, h);
      ASSERT_GE(cap, bytes.size());
      size_t len = 1 + rng() % cap;
      std::vector<uint8_t> fresh = make_pattern(len, rng());
      errno = 0;
      zs_obj_write(pool, h, fresh.data(), len);
      ASSERT_EQ(errno, 0);
      if (len > bytes.size()) bytes.resize(len);
      std::copy(fresh.begin(), fresh.end(), bytes.begin());
      ASSERT_TRUE(check_object(pool, h, bytes, prm.page_size)) << "op " << op << " after overwrite";
      ++counts[4];
    } else if (r < 98) {  // compact
      unsigned long before = zs_get_total_pages(pool);
      unsigned long freed = zs_compact(pool);
      compacted += freed;
      ASSERT_EQ(zs_get_total_pages(pool), before - freed) << "op " << op;
      PoolTotals t;
      ASSERT_TRUE(collect_totals(pool, &t));
      EXPECT_EQ(t.freeable, 0u) << "single-threaded compaction left freeable pages";
      ++counts[5];
    } else {  // stats
      ASSERT_TRUE(check_stats_consistent(pool, ref.size())) << "op " << op;
      struct zs_pool_stats ps{};
      zs_pool_stats(pool, &ps);
      ASSERT_EQ(ps.pages_compacted, compacted);
      ++counts[6];
    }
  }
  std::cout << "[          ] ops: store " << counts[0] << " malloc+write " << counts[1] << " free "
            << counts[2] << " read " << counts[3] << " overwrite " << counts[4] << " compact "
            << counts[5] << " stats " << counts[6] << "; live " << ref.size() << ", pages "
            << zs_get_total_pages(pool) << ", compacted " << compacted << "\n";

  // Every live object once more, then free all; the pool must end empty.
  ASSERT_TRUE(check_stats_consistent(pool, ref.size()));
  for (auto& [h, bytes] : ref) ASSERT_TRUE(check_object(pool, h, bytes, prm.page_size));
  for (auto& [h, bytes] : ref) {
    ASSERT_TRUE(check_object(pool, h, bytes, prm.page_size));
    zs_free(pool, h);
  }
  ref.clear();
  ASSERT_TRUE(check_stats_consistent(pool, 0));
  EXPECT_TRUE(compact_and_check_empty(pool));
  EXPECT_EQ(zs_get_total_pages(pool), 0u);
  zs_destroy_pool(pool);
}

INSTANTIATE_TEST_SUITE_P(
    Seeds, ModelTest,
    ::testing::Values(ModelParam{1, 4096, 8, 20000}, ModelParam{2, 4096, 8, 20000},
                      ModelParam{3, 4096, 8, 20000}, ModelParam{4, 4096, 8, 20000},
                      ModelParam{5, 4096, 8, 20000}, ModelParam{6, 4096, 4, 20000},
                      ModelParam{7, 4096, 16, 20000}, ModelParam{8, 16384, 8, 20000}),
    [](const ::testing::TestParamInfo<ModelParam>& info) {
      const ModelParam& p = info.param;
      return "seed" + std::to_string(p.seed) + "_page" + std::to_string(p.page_size / 1024) +
             "k_chain" + std::to_string(p.chain);
    });

}  // namespace
