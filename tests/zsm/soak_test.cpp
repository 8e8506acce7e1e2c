// tests/zsm/soak_test.cpp: long concurrent runs in which every byte read is checked.
//
// Pool soak. Four worker threads on one pool each run a workload (workload.h) that stores
// (zs_store, or zs_malloc + zs_obj_write), reads, overwrites (zs_obj_write, to any length up
// to the capacity) and frees objects of random sizes, while a fifth thread calls zs_compact()
// without pause. Each worker's checked live set holds the bytes of its objects, checked on
// every read and before every free. Workers also hand objects (with their bytes) to one
// another through a queue; the receiver checks each one, then frees it or keeps it (to
// overwrite and free it later), so frees land in shards other than the one the object was
// stored in (the pool has 8 shards, and storing threads move to another shard whenever they
// meet in one).
//
// The cache's soak is tests/cache/cache_soak_test.cpp.
//
// Zero mismatches is the only pass. Length: ZSM_SOAK_OPS in the environment sets the operations
// of each test; otherwise millions in an optimised build, an eighth of that under sanitizers
// (ZSM_TEST_SANITIZED, set by CMake when ZSM_SANITIZE is). Each test prints a summary line.
// A watchdog (watchdog.h) aborts the run when a thread stops making progress (a hang).
#include <zsm/zsmalloc.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "soak.h"
#include "test_support.h"
#include "watchdog.h"
#include "workload.h"

namespace {

using namespace zsm_test;

// One worker: a workload over its own objects on the shared pool, handing some to the others.
struct PoolWorker {
  static constexpr size_t kMaxLive = 1500;

  PoolWorker(zs_pool* pool, int id, Handoff& handoff) : mine(pool), mix(mine, 7000 + id) {
    mix.op("store", 15, &PoolTarget::store, Needs::room)
        .op("malloc+write", 15, &PoolTarget::malloc_write, Needs::room)
        .op("read", 25, &PoolTarget::read, Needs::a_live_object)
        .op("overwrite", 15, &PoolTarget::overwrite, Needs::a_live_object)
        .op("free", 14, &PoolTarget::free, Needs::a_live_object)
        .op("hand off", 8,
            [&handoff](PoolTarget& t, Rng& rng) { return t.hand_off(handoff, rng); },
            Needs::a_live_object)
        .op("receive", 8,
            [&handoff](PoolTarget& t, Rng& rng) {
              return t.receive(handoff, rng() % 2 == 0 && t.live_size() < kMaxLive);
            })
        .at_most(kMaxLive);
  }

  // Runs the workload, then checks and frees what is left; a failure is recorded in `bad`.
  void run(uint64_t ops, Watchdog& dog, int id, Mismatches& bad) {
    mix.on_step([&dog, id] { dog.beat(id); });
    const std::string who = "thread " + std::to_string(id) + ": ";
    if (Check c = mix.run(ops); !c) bad.record(who + c.message());
    if (Check c = mine.free_all(); !c) bad.record(who + c.message());
    dog.retire(id);
  }

  PoolTarget mine;
  Workload<PoolTarget> mix;
};

TEST(Soak, PoolThreadsWithCompactionAndCrossThreadFrees) {
  zs_pool_config cfg{};
  cfg.nr_shards = 8;
  PoolPtr pool(zs_create_pool_ex("soak", &cfg));
  ASSERT_NE(pool, nullptr);
  const uint64_t ops_per_thread = soak_ops(12'000'000) / kThreads;
  Mismatches bad;
  Handoff handoff;
  std::vector<std::unique_ptr<PoolWorker>> workers;
  for (int i = 0; i < kThreads; ++i)
    workers.push_back(std::make_unique<PoolWorker>(pool.get(), i, handoff));
  Compactor compactor(pool.get());
  Watchdog dog("pool soak", kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] { workers[i]->run(ops_per_thread, dog, i, bad); });
  for (std::thread& t : threads) t.join();
  compactor.stop();

  // What is still in transit: checked and freed here.
  PoolTarget rest(pool.get());
  if (Check c = rest.receive_all(handoff); !c) bad.record(c.message());
  OpCounts total;
  uint64_t stored = 0, freed = rest.freed(), cross_frees = rest.cross_frees();
  for (const auto& w : workers) {
    total += w->mix.counts();
    stored += w->mine.stored();
    freed += w->mine.freed();
    cross_frees += w->mine.cross_frees();
  }
  std::printf("[ summary  ] pool soak: %d threads + 1 compacting, %llu ops (%s; %llu freed by"
              " another thread), %lu compactions freed %lu pages, %lu mismatches\n",
              kThreads, static_cast<unsigned long long>(total.total()), total.to_string().c_str(),
              static_cast<unsigned long long>(cross_frees), compactor.calls(), compactor.freed(),
              bad.count());
  ::testing::Test::RecordProperty("ops", std::to_string(total.total()));
  ::testing::Test::RecordProperty("threads", kThreads);
  ::testing::Test::RecordProperty("mismatches", std::to_string(bad.count()));
  EXPECT_EQ(bad.count(), 0u) << bad.first();
  EXPECT_GT(cross_frees, 0u);
  EXPECT_EQ(stored, freed) << "every object freed once";
  EXPECT_TRUE(check_stats_consistent(pool.get(), 0));
  EXPECT_TRUE(compact_and_check_empty(pool.get()));
}

}  // namespace
