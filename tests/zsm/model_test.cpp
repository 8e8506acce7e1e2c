// tests/zsm/model_test.cpp: model-based randomized test. A workload (workload.h) of stores,
// malloc+writes, frees, reads, overwrites, compactions and statistics checks runs against the
// checked live set: every read and every free checks content, stats are checked for
// consistency along the way, and the pool must end empty. Several seeds, plus chain 4, chain 16
// and 16K pages. A watchdog aborts on an operation that does not return.
#include "test_support.h"
#include "watchdog.h"
#include "workload.h"

#include <iostream>

namespace {

using namespace zsm_test;

struct ModelParam {
  uint64_t seed;
  size_t page_size;
  unsigned chain;
};

class ModelTest : public ::testing::TestWithParam<ModelParam> {};

TEST_P(ModelTest, RandomOpsMatchReference) {
  const ModelParam prm = GetParam();
  zs_pool_config cfg{};
  cfg.page_size = prm.page_size;
  cfg.chain_size = prm.chain;
  PoolPtr pool(zs_create_pool_ex("model", &cfg));
  ASSERT_NE(pool, nullptr);

  PoolTarget target(pool.get(), prm.page_size);
  Watchdog dog("pool model");
  Workload<PoolTarget> mix(target, prm.seed);
  mix.op("store", 30, &PoolTarget::store, Needs::room)
      .op("malloc+write", 10, &PoolTarget::malloc_write, Needs::room)
      .op("free", 25, &PoolTarget::free, Needs::a_live_object)
      .op("read", 14, &PoolTarget::read, Needs::a_live_object)
      .op("read prefix", 4, &PoolTarget::read_prefix, Needs::a_live_object)
      .op("overwrite", 14, &PoolTarget::overwrite, Needs::a_live_object)
      .op("compact", 1, &PoolTarget::compact)
      .op("stats", 2, &PoolTarget::check_stats)
      .at_most(3000)  // the population hovers around 1500
      .on_step([&] { dog.beat(); });
  ASSERT_TRUE(mix.run(20000));
  std::cout << "[          ] ops: " << mix.counts().to_string() << "; live " << target.live_size()
            << ", pages " << zs_get_total_pages(pool.get()) << "\n";
  EXPECT_TRUE(target.finish());
}

INSTANTIATE_TEST_SUITE_P(
    Seeds, ModelTest,
    ::testing::Values(ModelParam{1, 4096, 8}, ModelParam{2, 4096, 8}, ModelParam{3, 4096, 8},
                      ModelParam{4, 4096, 8}, ModelParam{5, 4096, 8}, ModelParam{6, 4096, 4},
                      ModelParam{7, 4096, 16}, ModelParam{8, 16384, 8}),
    [](const ::testing::TestParamInfo<ModelParam>& info) {
      const ModelParam& p = info.param;
      return "seed" + std::to_string(p.seed) + "_page" + std::to_string(p.page_size / 1024) +
             "k_chain" + std::to_string(p.chain);
    });

}  // namespace
