// tests/support/pool_configs.h: the pool configurations that a test runs one body over, as a
// value-parameterised test (scudo's habit: every test across several configs):
//
//   class Concurrency : public ::testing::TestWithParam<zsm_test::PoolConfig> {};
//   TEST_P(Concurrency, ...) { zsm_test::PoolPtr pool(zsm_test::create_pool(GetParam(), "name")); }
//   INSTANTIATE_TEST_SUITE_P(Pools, Concurrency, ::testing::ValuesIn(zsm_test::kPoolConfigs),
//                            zsm_test::config_name);
//
// or, for a PoolFixture test, class RoundTrip : public zsm_test::PoolConfigFixture {}.
#pragma once

#include <zsm/zsmalloc.h>

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "test_support.h"

namespace zsm_test {

struct PoolConfig {
  const char* name;  // the parameter's name in the test's name
  unsigned flags;    // ZS_POOL_*
  unsigned shards;   // nr_shards; 0 = one per CPU
  bool scattered = false;  // on a ScatteredPageSource: no zspage's pages contiguous
};

inline constexpr PoolConfig kPoolConfigs[] = {
    {"Default", 0, 0},                              // per-thread caches, a shard per CPU
    {"NoThreadCache", ZS_POOL_NO_THREAD_CACHE, 0},  // the locked path on every call
    {"Hardened", ZS_POOL_HARDENED, 0},              // every handle and size checked
    {"OneLockPerClass", ZS_POOL_NO_THREAD_CACHE, 1},  // the kernel's design exactly
    {"ScatteredPages", 0, 0, true},                 // caches over pages a source scatters
};

// The zs_pool_config of `config` (at 4 KiB pages, the only size the scattered source serves).
inline zs_pool_config pool_config(const PoolConfig& config) {
  // One source for every such pool of the process, never destroyed (pools may outlive it
  // otherwise at exit).
  static ScatteredPageSource* const scattered = new ScatteredPageSource;
  zs_pool_config cfg{};
  cfg.flags = config.flags;
  cfg.nr_shards = config.shards;
  if (config.scattered) cfg.page_source = scattered->source();
  return cfg;
}

inline zs_pool* create_pool(const PoolConfig& config, const char* name) {
  const zs_pool_config cfg = pool_config(config);
  return zs_create_pool_ex(name, &cfg);
}

// A hardened pool takes writes only up to an object's size, not its capacity.
inline bool hardened(const PoolConfig& config) { return (config.flags & ZS_POOL_HARDENED) != 0; }

// PoolFixture over each configuration: TEST_P bodies get the parameter's pool as pool_.
class PoolConfigFixture : public PoolFixture, public ::testing::WithParamInterface<PoolConfig> {
 protected:
  void SetUp() override { create_pool(pool_config(GetParam())); }
};

inline std::string config_name(const ::testing::TestParamInfo<PoolConfig>& info) {
  return info.param.name;
}

// GoogleTest prints a configuration by its name (in the test's listing, and on failure).
inline void PrintTo(const PoolConfig& config, std::ostream* os) { *os << config.name; }

}  // namespace zsm_test
