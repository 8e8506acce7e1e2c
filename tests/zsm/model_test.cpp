// tests/zsm/model_test.cpp: model-based randomized test. A workload (workload.h) of stores,
// malloc+writes, frees, reads, overwrites, compactions and statistics checks runs against the
// checked live set: every read and every free checks content, stats are checked for
// consistency along the way, and the pool must end empty. Every pool configuration of
// pool_configs.h at two seeds, and the default configuration at chain 4, chain 16 and 16K
// pages (geometries the configurations do not vary). A watchdog aborts on an operation that
// does not return.
#include "pool_configs.h"
#include "test_support.h"
#include "watchdog.h"
#include "workload.h"

#include <iostream>
#include <vector>

namespace {

using namespace zsm_test;

struct ModelParam {
  PoolConfig config;
  uint64_t seed;
  size_t page_size;
  unsigned chain;
};

class ModelTest : public ::testing::TestWithParam<ModelParam> {};

TEST_P(ModelTest, RandomOpsMatchReference) {
  const ModelParam prm = GetParam();
  zs_pool_config cfg = pool_config(prm.config);
  cfg.page_size = prm.page_size;
  cfg.chain_size = prm.chain;
  PoolPtr pool(zs_create_pool_ex("model", &cfg));
  ASSERT_NE(pool, nullptr);

  PoolTarget target(pool.get(), prm.page_size, hardened(prm.config));
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

std::vector<ModelParam> model_params() {
  std::vector<ModelParam> params;
  for (const PoolConfig& config : kPoolConfigs)
    for (uint64_t seed : {1, 2}) params.push_back({config, seed, 4096, 8});
  const PoolConfig& standard = kPoolConfigs[0];
  params.push_back({standard, 6, 4096, 4});
  params.push_back({standard, 7, 4096, 16});
  params.push_back({standard, 8, 16384, 8});
  return params;
}

INSTANTIATE_TEST_SUITE_P(
    Seeds, ModelTest, ::testing::ValuesIn(model_params()),
    [](const ::testing::TestParamInfo<ModelParam>& info) {
      const ModelParam& p = info.param;
      return std::string(p.config.name) + "_seed" + std::to_string(p.seed) + "_page" +
             std::to_string(p.page_size / 1024) + "k_chain" + std::to_string(p.chain);
    });

}  // namespace
