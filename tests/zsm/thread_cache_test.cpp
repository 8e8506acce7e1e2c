// tests/zsm/thread_cache_test.cpp: the per-thread caches (zsm/src/tcache/thread_cache.h) through the C
// API. A free keeps its slot reserved in the freeing thread's cache and the next store into
// the class reuses it; everything that needs the slots back (compaction, zs_check_pool,
// zs_drain_thread_caches, the memory limit, thread exit, pool destruction) gets them, and
// objects freed by another thread than the one that stored them are handled correctly.
#include <gtest/gtest.h>
#include <zsm/zsmalloc.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"
#include "watchdog.h"
#include "workload.h"

namespace {

using zsm_test::Check;
using zsm_test::Needs;
using zsm_test::PoolPtr;
using zsm_test::PoolTarget;
using zsm_test::Rng;
using zsm_test::Workload;

using zsm_test::check_object;
using zsm_test::check_stats_consistent;
using zsm_test::make_pattern;

PoolPtr make_pool(unsigned flags = 0, unsigned long max_pages = 0,
                  const zs_page_source* source = nullptr) {
  zs_pool_config cfg{};
  cfg.flags = flags;
  cfg.max_pages = max_pages;
  cfg.page_source = source;
  return PoolPtr(zs_create_pool_ex("thread_cache", &cfg));
}

struct zs_pool_stats pool_stats(zs_pool* pool) {
  struct zs_pool_stats s{};
  zs_pool_stats(pool, &s);
  return s;
}

unsigned long store_pattern(zs_pool* pool, size_t size, uint64_t seed) {
  std::vector<uint8_t> bytes = make_pattern(size, seed);
  return zs_store(pool, bytes.data(), size);
}

TEST(ThreadCache, AFreedSlotServesTheNextStoreOfItsClass) {
  PoolPtr pool = make_pool();
  ASSERT_NE(pool, nullptr);
  unsigned long keep = store_pattern(pool.get(), 300, 1);
  unsigned long h = store_pattern(pool.get(), 300, 2);
  zs_free(pool.get(), h);
  EXPECT_EQ(pool_stats(pool.get()).cached_objs, 1u);
  EXPECT_EQ(pool_stats(pool.get()).cached_bytes, 320u);  // the class of 300 + 8 bytes
  EXPECT_TRUE(check_stats_consistent(pool.get(), 1));
  // Another size of the same class takes the reserved slot, and handle.
  std::vector<uint8_t> bytes = make_pattern(310, 3);
  unsigned long again = zs_store(pool.get(), bytes.data(), bytes.size());
  EXPECT_EQ(again, h);
  EXPECT_EQ(pool_stats(pool.get()).cached_objs, 0u);
  EXPECT_TRUE(check_object(pool.get(), again, bytes));
  EXPECT_TRUE(check_object(pool.get(), keep, make_pattern(300, 1)));
  EXPECT_EQ(zs_obj_capacity(pool.get(), again), 312u);
  EXPECT_EQ(zs_check_pool(pool.get(), stderr), 0);
}

// A source that cannot give a zspage contiguous pages: the cached store takes its scattered
// branch, and objects that cross a page read back whole at every size, stored with zs_store
// and with zs_malloc + zs_obj_write, into fresh slots and into slots the cache reserved.
TEST(ThreadCache, StoresIntoScatteredZspagesReadBackAtEverySize) {
  zsm_test::ScatteredPageSource source;
  ASSERT_TRUE(source.ok());
  PoolPtr pool = make_pool(0, 0, source.source());
  ASSERT_NE(pool, nullptr);
  std::vector<unsigned long> kept;
  for (size_t size = 1; size <= 4096; size += 13) {
    unsigned long first = store_pattern(pool.get(), size, size);
    ASSERT_NE(first, 0u) << size;
    zs_free(pool.get(), first);  // reserved in this thread's cache
    unsigned long again = store_pattern(pool.get(), size, size + 1);
    ASSERT_NE(again, 0u) << size;
    EXPECT_TRUE(check_object(pool.get(), again, make_pattern(size, size + 1))) << size;
    kept.push_back(again);
    unsigned long written = zs_malloc(pool.get(), size);
    ASSERT_NE(written, 0u) << size;
    std::vector<uint8_t> bytes = make_pattern(size, size + 2);
    zs_obj_write(pool.get(), written, bytes.data(), size);
    EXPECT_TRUE(check_object(pool.get(), written, bytes)) << size;
    kept.push_back(written);
  }
  EXPECT_GT(source.breaks(), kept.size() / 4) << "the source scattered its pages";
  EXPECT_EQ(zs_check_pool(pool.get(), stderr), 0);
  size_t i = 0;
  for (size_t size = 1; size <= 4096; size += 13, i += 2) {
    EXPECT_TRUE(check_object(pool.get(), kept[i], make_pattern(size, size + 1))) << size;
    EXPECT_TRUE(check_object(pool.get(), kept[i + 1], make_pattern(size, size + 2))) << size;
  }
  for (unsigned long h : kept) zs_free(pool.get(), h);
  zs_compact(pool.get());
  EXPECT_EQ(zs_get_total_pages(pool.get()), 0u);
}

TEST(ThreadCache, KernelPathPoolsKeepNoSlot) {
  PoolPtr pool = make_pool(ZS_POOL_NO_THREAD_CACHE);
  ASSERT_NE(pool, nullptr);
  unsigned long h = store_pattern(pool.get(), 300, 1);
  zs_free(pool.get(), h);
  struct zs_pool_stats s = pool_stats(pool.get());
  EXPECT_EQ(s.cached_objs, 0u);
  EXPECT_EQ(s.thread_cache_bytes, 0u);
  EXPECT_TRUE(check_stats_consistent(pool.get(), 0));
}

TEST(ThreadCache, MagazinesAreBoundedByClassSize) {
  PoolPtr pool = make_pool();
  ASSERT_NE(pool, nullptr);
  // 32-byte class: at most 32 slots; 2048-byte class: 4096 / 2048 = 2; 3264: 1; the huge
  // class and classes above 4 KiB: none.
  for (auto [size, most] : {std::pair<size_t, unsigned long>{24, 32}, {2040, 2}, {3256, 1}, {4096, 0}}) {
    SCOPED_TRACE(size);
    std::vector<unsigned long> hs;
    for (int i = 0; i < 100; i++) hs.push_back(store_pattern(pool.get(), size, i));
    for (unsigned long h : hs) zs_free(pool.get(), h);
    EXPECT_EQ(pool_stats(pool.get()).cached_objs, most);
    zs_drain_thread_caches(pool.get());
    EXPECT_EQ(pool_stats(pool.get()).cached_objs, 0u);
    EXPECT_TRUE(check_stats_consistent(pool.get(), 0));
  }
  EXPECT_GT(pool_stats(pool.get()).thread_cache_bytes, 0u);
}

// Pools of one geometry share the map from a request's size to its magazine; pools of other
// geometries have theirs. With pools of four geometries made, destroyed and made again, a
// slot freed into every cached class of every pool serves that pool's next store of the
// size: the same handle, the class's capacity (as a pool without caches gives it) and the
// new bytes.
TEST(ThreadCache, EveryPoolFindsItsClassesMagazineWhicheverGeometriesCoexist) {
  struct Geometry {
    size_t page_size;
    unsigned chain;
  };
  const Geometry geometries[] = {{4096, 8}, {16384, 4}, {4096, 16}, {65536, 8}};
  auto make = [](Geometry g, unsigned flags) {
    zs_pool_config cfg{};
    cfg.page_size = g.page_size;
    cfg.chain_size = g.chain;
    cfg.flags = flags;
    return PoolPtr(zs_create_pool_ex("geometry", &cfg));
  };
  std::vector<PoolPtr> pools;
  std::vector<PoolPtr> uncached;
  for (int round = 0; round < 2; round++) {
    pools.clear();  // the second round makes every pool again, the maps already there
    for (int copy = 0; copy < 2; copy++)
      for (Geometry g : geometries) pools.push_back(make(g, 0));
    if (round == 0)
      for (Geometry g : geometries) uncached.push_back(make(g, ZS_POOL_NO_THREAD_CACHE));
    for (const PoolPtr& p : pools) ASSERT_NE(p, nullptr);
    for (const PoolPtr& p : uncached) ASSERT_NE(p, nullptr);
    for (size_t size = 8; size <= 4088; size += 40) {
      for (size_t i = 0; i < pools.size(); i++) {
        SCOPED_TRACE(testing::Message() << "round " << round << ", pool " << i << ", " << size
                                        << " bytes");
        zs_pool* pool = pools[i].get();
        zs_pool* reference = uncached[i % std::size(geometries)].get();
        unsigned long h = store_pattern(pool, size, size);
        unsigned long r = store_pattern(reference, size, size);
        ASSERT_NE(h, 0u);
        ASSERT_NE(r, 0u);
        zs_free(pool, h);
        std::vector<uint8_t> bytes = make_pattern(size, size + 1);
        unsigned long again = zs_store(pool, bytes.data(), size);
        EXPECT_EQ(again, h);
        EXPECT_EQ(zs_obj_capacity(pool, again), zs_obj_capacity(reference, r));
        EXPECT_TRUE(check_object(pool, again, bytes, geometries[i % std::size(geometries)].page_size));
        zs_free(pool, again);
        zs_free(reference, r);
      }
    }
    for (const PoolPtr& p : pools) EXPECT_EQ(zs_check_pool(p.get(), stderr), 0);
  }
}

TEST(ThreadCache, CompactionTakesTheSlotsBackAndCountsThePages) {
  PoolPtr pool = make_pool();
  ASSERT_NE(pool, nullptr);
  std::vector<unsigned long> hs;
  for (int i = 0; i < 2000; i++) hs.push_back(store_pattern(pool.get(), 200, i));
  for (unsigned long h : hs) zs_free(pool.get(), h);
  unsigned long before = zs_get_total_pages(pool.get());
  EXPECT_GT(before, 0u);  // reserved slots keep their zspages
  unsigned long freed = zs_compact(pool.get());
  EXPECT_EQ(zs_get_total_pages(pool.get()), 0u);
  EXPECT_EQ(freed, before);
  EXPECT_EQ(pool_stats(pool.get()).pages_compacted, before);
  EXPECT_EQ(pool_stats(pool.get()).cached_objs, 0u);
}

// A pool at its limit takes back what caches reserve before a store fails.
TEST(ThreadCache, APoolAtItsLimitTakesBackReservedSlots) {
  PoolPtr pool = make_pool(0, 16);
  ASSERT_NE(pool, nullptr);
  std::vector<unsigned long> hs;
  for (;;) {
    unsigned long h = store_pattern(pool.get(), 1000, hs.size());
    if (h == 0) break;
    hs.push_back(h);
  }
  ASSERT_EQ(errno, ENOMEM);
  // Free everything on another thread: its cache keeps some slots, and their zspages.
  std::thread([&] {
    for (unsigned long h : hs) zs_free(pool.get(), h);
  }).join();
  // This thread stores into another class: it needs a new zspage, which it gets.
  std::vector<unsigned long> small;
  for (int i = 0; i < 200; i++) {
    unsigned long h = store_pattern(pool.get(), 100, i);
    ASSERT_NE(h, 0u) << "store " << i << " failed with " << zs_get_total_pages(pool.get())
                     << " pages held";
    small.push_back(h);
  }
  for (size_t i = 0; i < small.size(); i++)
    EXPECT_TRUE(check_object(pool.get(), small[i], make_pattern(100, i)));
}

// Stores `size`-byte objects until one fails; returns them (the pool is then at its limit,
// every zspage of the class full).
std::vector<unsigned long> fill_to_the_limit(zs_pool* pool, size_t size) {
  std::vector<unsigned long> hs;
  for (;;) {
    unsigned long h = store_pattern(pool, size, hs.size());
    if (h == 0) break;
    hs.push_back(h);
  }
  EXPECT_EQ(errno, ENOMEM);
  return hs;
}

PoolPtr make_limited_pool(unsigned long max_pages, unsigned shards) {
  zs_pool_config cfg{};
  cfg.max_pages = max_pages;
  cfg.nr_shards = shards;
  return PoolPtr(zs_create_pool_ex("limited", &cfg));
}

// At the limit, a slot of the class reserved by another thread's cache serves a store: the
// drain at the limit frees it into the shard, and the store takes it.
TEST(ThreadCache, AStoreAtTheLimitTakesASlotAnotherThreadsCacheHeld) {
  PoolPtr pool = make_limited_pool(16, 1);
  ASSERT_NE(pool, nullptr);
  std::vector<unsigned long> hs = fill_to_the_limit(pool.get(), 1000);
  ASSERT_FALSE(hs.empty());
  std::mutex m;
  std::condition_variable cv;
  int phase = 0;
  std::thread freer([&] {
    zs_free(pool.get(), hs.back());  // its slot stays in this thread's cache
    std::unique_lock lock(m);
    phase = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return phase == 2; });  // alive until the store is done
  });
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return phase == 1; });
  }
  unsigned long h = store_pattern(pool.get(), 1000, 99);
  EXPECT_NE(h, 0u) << "ENOMEM with a free slot of the class, errno " << errno;
  {
    std::lock_guard lock(m);
    phase = 2;
    cv.notify_all();
  }
  freer.join();
  if (h != 0) {
    EXPECT_TRUE(check_object(pool.get(), h, make_pattern(1000, 99)));
  }
  hs.back() = h;
  for (size_t i = 0; i + 1 < hs.size(); i++)
    EXPECT_TRUE(check_object(pool.get(), hs[i], make_pattern(1000, i)));
  for (unsigned long x : hs) zs_free(pool.get(), x);
  EXPECT_TRUE(zsm_test::compact_and_check_empty(pool.get()));
}

// The same on one thread with allocation profiling on, whose stores take no slot from the
// thread's cache: the slot its own cache holds serves the store once drained.
TEST(ThreadCache, AProfiledStoreAtTheLimitTakesTheSlotItsOwnCacheHeld) {
  PoolPtr pool = make_limited_pool(16, 1);
  ASSERT_NE(pool, nullptr);
  std::vector<unsigned long> hs = fill_to_the_limit(pool.get(), 1000);
  ASSERT_FALSE(hs.empty());
  zs_free(pool.get(), hs.back());
  ASSERT_EQ(pool_stats(pool.get()).cached_objs, 1u);
  if (zs_alloc_profiling_set(1) < 0) GTEST_SKIP() << "profiling not built in";
  unsigned long h = store_pattern(pool.get(), 1000, 99);
  int err = errno;
  zs_alloc_profiling_set(0);
  EXPECT_NE(h, 0u) << "ENOMEM with a free slot of the class, errno " << err;
  hs.back() = h;
  if (h != 0) {
    EXPECT_TRUE(check_object(pool.get(), h, make_pattern(1000, 99)));
  }
  for (unsigned long x : hs) zs_free(pool.get(), x);
  EXPECT_TRUE(zsm_test::compact_and_check_empty(pool.get()));
}

TEST(ThreadCache, AnExitingThreadGivesItsSlotsBack) {
  PoolPtr pool = make_pool();
  ASSERT_NE(pool, nullptr);
  std::thread([&] {
    std::vector<unsigned long> hs;
    for (size_t size = 16; size <= 4000; size += 16)
      for (int i = 0; i < 40; i++) hs.push_back(store_pattern(pool.get(), size, i));
    for (unsigned long h : hs) zs_free(pool.get(), h);  // every magazine full
    EXPECT_GT(pool_stats(pool.get()).cached_objs, 500u);
  }).join();
  struct zs_pool_stats s = pool_stats(pool.get());
  EXPECT_EQ(s.cached_objs, 0u);
  EXPECT_EQ(s.thread_cache_bytes, 0u);
  EXPECT_TRUE(check_stats_consistent(pool.get(), 0));
  EXPECT_TRUE(zsm_test::compact_and_check_empty(pool.get()));
}

// The documented contract: a pool may be destroyed while other threads' caches hold its
// slots, as long as those threads do not use it meanwhile. They go on with other pools
// (perhaps at the same address) and exit cleanly.
TEST(ThreadCache, DestroyingAPoolWhileOtherThreadsCacheItsSlots) {
  zs_pool* pool = zs_create_pool("doomed");
  ASSERT_NE(pool, nullptr);
  std::mutex m;
  std::condition_variable cv;
  int phase = 0;
  auto wait_for = [&](int p) {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return phase >= p; });
  };
  auto advance = [&] {
    std::lock_guard lock(m);
    phase++;
    cv.notify_all();
  };
  std::atomic<zs_pool*> next{nullptr};
  bool ok = true;
  std::thread worker([&] {
    std::vector<unsigned long> hs;
    for (int i = 0; i < 100; i++) hs.push_back(store_pattern(pool, 500, i));
    for (unsigned long h : hs) zs_free(pool, h);
    ok = ok && pool_stats(pool).cached_objs > 0;
    advance();  // 1: slots cached
    wait_for(2);
    zs_pool* fresh = next.load();
    std::vector<unsigned long> again;
    for (int i = 0; i < 100; i++) again.push_back(store_pattern(fresh, 500, i + 1000));
    for (int i = 0; i < 100; i++)
      ok = ok && check_object(fresh, again[i], make_pattern(500, i + 1000));
    for (int i = 0; i < 50; i++) zs_free(fresh, again[i]);
    advance();  // 3
  });
  wait_for(1);
  zs_destroy_pool(pool);
  next.store(zs_create_pool("fresh"));
  advance();  // 2
  wait_for(3);
  worker.join();
  EXPECT_TRUE(ok);
  zs_pool* fresh = next.load();
  EXPECT_EQ(pool_stats(fresh).cached_objs, 0u);  // the worker's exit gave them back
  EXPECT_TRUE(check_stats_consistent(fresh, 50));
  zs_destroy_pool(fresh);
}

// Several threads store, read, free their own objects and objects handed over by others,
// while one thread compacts, drains and checks the pool: every value read back is the one
// stored, and at the end the figures are exact.
TEST(ThreadCache, ThreadsWithCrossThreadFreesAndACompactor) {
  PoolPtr pool = make_pool();
  ASSERT_NE(pool, nullptr);
  constexpr int kThreads = 4;
#ifdef ZSM_TEST_SANITIZED
  constexpr int kOps = 20000;
#else
  constexpr int kOps = 200000;
#endif
  zsm_test::Handoff handover;
  std::atomic<bool> stop{false};
  const unsigned long kMostPerThread = pool_stats(pool.get()).cached_bytes_per_thread;
  std::atomic<unsigned long> check_failures{0};
  zsm_test::Mismatches bad;
  zsm_test::Watchdog watchdog("ThreadCache.ThreadsWithCrossThreadFreesAndACompactor", kThreads + 1);
  std::vector<std::unique_ptr<PoolTarget>> survivors;
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; t++) {
    survivors.push_back(std::make_unique<PoolTarget>(pool.get()));
    survivors.back()->sizes = zsm_test::uniform_sizes(16, 3015);
    workers.emplace_back([&, t, &mine = *survivors.back()] {
      Workload<PoolTarget> mix(mine, t + 1);
      mix.op("store", 45, &PoolTarget::store, Needs::room)
          .op("read", 25, &PoolTarget::read, Needs::a_live_object)
          .op("free", 15, &PoolTarget::free, Needs::a_live_object)
          .op("hand over", 8,
              [&](PoolTarget& p, Rng& rng) { return p.hand_off(handover, rng); },
              Needs::a_live_object)
          // freed by another thread than the one that stored it
          .op("receive", 7, [&](PoolTarget& p, Rng&) { return p.receive(handover, false); })
          .on_step([&watchdog, t] { watchdog.beat(t); });
      if (Check c = mix.run(kOps); !c) bad.record(c.message());
    });
  }
  std::thread compactor([&] {
    unsigned round = 0;
    while (!stop.load()) {
      watchdog.beat(kThreads);
      if (round % 3 == 0) zs_compact(pool.get());
      if (round % 3 == 1) zs_drain_thread_caches(pool.get());
      if (round % 3 == 2 && pool_stats(pool.get()).cached_bytes > kThreads * kMostPerThread) check_failures++;
      round++;
      std::this_thread::yield();
    }
  });
  for (auto& w : workers) w.join();
  stop = true;
  compactor.join();
  EXPECT_EQ(bad.count(), 0u) << bad.first();
  EXPECT_EQ(check_failures.load(), 0u);
  uint64_t cross_frees = 0;
  size_t live = handover.size();
  for (const auto& mine : survivors) {
    for (const auto& o : mine->live) EXPECT_TRUE(mine->check(o));
    live += mine->live_size();
    cross_frees += mine->cross_frees();
  }
  EXPECT_GT(cross_frees, 0u);
  EXPECT_TRUE(check_stats_consistent(pool.get(), live));
  EXPECT_EQ(zs_check_pool(pool.get(), stderr), 0);
  EXPECT_EQ(pool_stats(pool.get()).cached_objs, 0u);  // every worker has exited
  EXPECT_TRUE(survivors[0]->receive_all(handover));
  for (const auto& mine : survivors) EXPECT_TRUE(mine->free_all());
  EXPECT_TRUE(zsm_test::compact_and_check_empty(pool.get()));
}

// A page source whose free_page calls into another pool: statistics, compaction, a drain,
// and creating and destroying a pool. Pages are freed by drains, compaction and exiting
// threads, which take the reserved slots back: none of them may call the source with a
// lock held that those calls take (they deadlocked on the process-wide cache registry).
class CallingSource {
 public:
  explicit CallingSource(zs_pool* other) : other_(other), vm_(zs_vm_source_create(4096, 0, 0)) {
    inner_ = zs_vm_source_ops(vm_);
    ops_ = {alloc_thunk, free_thunk, this};
  }
  ~CallingSource() { zs_vm_source_destroy(vm_); }
  const zs_page_source* source() const { return &ops_; }
  unsigned long calls() const { return calls_.load(); }

 private:
  static void* alloc_thunk(void* ctx) {
    auto* self = static_cast<CallingSource*>(ctx);
    return self->inner_.alloc_page(self->inner_.ctx);
  }
  static void free_thunk(void* ctx, void* page) {
    auto* self = static_cast<CallingSource*>(ctx);
    self->inner_.free_page(self->inner_.ctx, page);
    self->calls_++;
    struct zs_pool_stats stats{};
    zs_pool_stats(self->other_, &stats);
    zs_drain_thread_caches(self->other_);
    zs_compact(self->other_);
    zs_destroy_pool(zs_create_pool("made and destroyed in free_page"));
  }
  zs_pool* other_;
  zs_vm_source* vm_;
  zs_page_source inner_{};
  zs_page_source ops_{};
  std::atomic<unsigned long> calls_{0};
};

// Runs `body` on a thread of its own and waits for it; one still running after `limit` (a
// deadlock) is reported, and the process exits, so that the test fails instead of hanging.
void run_or_exit(const char* what, const std::function<void()>& body,
                 std::chrono::seconds limit = std::chrono::seconds(60)) {
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  std::thread runner([&] {
    body();
    done.set_value();
  });
  if (finished.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "%s: still running after %lld s (deadlocked)\n", what,
                 static_cast<long long>(limit.count()));
    std::_Exit(1);
  }
  runner.join();
}

// Stores and frees objects on this thread so that its cache reserves slots in zspages that
// hold nothing else: taking them back frees those zspages.
void reserve_slots_alone_in_their_zspages(zs_pool* pool) {
  std::vector<unsigned long> hs;
  for (int i = 0; i < 2000; i++) hs.push_back(store_pattern(pool, 200, i));
  for (unsigned long h : hs) zs_free(pool, h);  // the first ones stay reserved
}

TEST(ThreadCache, APageSourceMayCallIntoAnotherPoolWhenPagesAreFreed) {
  PoolPtr other = make_pool();
  ASSERT_NE(other, nullptr);
  for (int i = 0; i < 100; i++) zs_free(other.get(), store_pattern(other.get(), 500, i));
  CallingSource source(other.get());
  zs_pool_config cfg{};
  cfg.page_source = source.source();
  cfg.nr_shards = 1;
  for (const char* how : {"zs_drain_thread_caches", "zs_compact", "thread exit"}) {
    SCOPED_TRACE(how);
    PoolPtr pool(zs_create_pool_ex("calls out", &cfg));
    ASSERT_NE(pool, nullptr);
    unsigned long before = 0;
    run_or_exit(how, [&] {
      if (std::string(how) == "thread exit") {
        std::thread([&] {
          reserve_slots_alone_in_their_zspages(pool.get());
          before = source.calls();
        }).join();
        return;
      }
      reserve_slots_alone_in_their_zspages(pool.get());
      before = source.calls();
      if (std::string(how) == "zs_compact")
        zs_compact(pool.get());
      else
        zs_drain_thread_caches(pool.get());
    });
    EXPECT_GT(source.calls(), before) << "no page was freed while the slots were taken back";
    EXPECT_EQ(pool_stats(pool.get()).cached_objs, 0u);
    EXPECT_EQ(zs_check_pool(pool.get(), stderr), 0);
    run_or_exit("zs_destroy_pool", [&] { pool.reset(); });
  }
  EXPECT_EQ(zs_check_pool(other.get(), stderr), 0);
}

// Hardened pools keep no cache: a second free of a handle is caught as before, with caches
// on by default.
TEST(ThreadCacheDeathTest, HardenedDoubleFreeIsCaught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  PoolPtr pool = make_pool(ZS_POOL_HARDENED);
  ASSERT_NE(pool, nullptr);
  unsigned long h = store_pattern(pool.get(), 300, 1);
  zs_free(pool.get(), h);
  EXPECT_EQ(pool_stats(pool.get()).cached_objs, 0u);
  EXPECT_DEATH(zs_free(pool.get(), h), "zs_free");
}

// Slots the caches reserve while the page source fails: the pool stays consistent, the
// reserved slots are reused, and draining them gives their pages back.
TEST(ThreadCache, FailingPagesWhileCachesHoldSlots) {
  zsm_test::FailingPageSource source;
  ASSERT_TRUE(source.ok());
  PoolPtr pool = make_pool(0, 0, source.source());
  ASSERT_NE(pool, nullptr);
  std::vector<unsigned long> hs;
  for (int i = 0; i < 300; i++) hs.push_back(store_pattern(pool.get(), 700, i));
  for (int i = 0; i < 300; i += 2) zs_free(pool.get(), hs[i]);  // some reserved, some freed
  source.fail_from(1);
  unsigned long stored = 0;
  for (int i = 0; i < 300; i++) {
    unsigned long h = store_pattern(pool.get(), 700, 1000 + i);
    if (h == 0) {
      EXPECT_EQ(errno, ENOMEM);
      continue;
    }
    EXPECT_TRUE(check_object(pool.get(), h, make_pattern(700, 1000 + i)));
    zs_free(pool.get(), h);
    stored++;
  }
  EXPECT_GT(stored, 0u);
  for (int i = 1; i < 300; i += 2) EXPECT_TRUE(check_object(pool.get(), hs[i], make_pattern(700, i)));
  EXPECT_EQ(zs_check_pool(pool.get(), stderr), 0);
  source.recover();
  for (int i = 1; i < 300; i += 2) zs_free(pool.get(), hs[i]);
  EXPECT_TRUE(zsm_test::compact_and_check_empty(pool.get()));
  EXPECT_EQ(source.in_use(), 0);
}

}  // namespace
