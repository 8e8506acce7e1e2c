// Lock shards (zs_pool_config.nr_shards): configuration checks, threads storing into one
// class at once land in different shards and every object survives, threads alive at once
// get shards of their own however many came and went before, cross-thread frees reach
// the owning shard, the per-class statistics sum the shards, and the lock statistics count.
#include <zsm/zsmalloc.h>

#include <gtest/gtest.h>

#include <barrier>
#include <cerrno>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include "test_support.h"

namespace {

using namespace zsm_test;

zs_pool* make_pool(unsigned shards) {
  zs_pool_config cfg{};
  cfg.nr_shards = shards;
  return zs_create_pool_ex("shards", &cfg);
}

// A pool of `shards` shards into which `threads` threads, started together, each stored
// `per_thread` objects of zs_malloc(pool, size(t, i)); handles[t] holds thread t's handles.
struct StoredFromThreads {
  PoolPtr pool;
  std::vector<std::vector<unsigned long>> handles;
};

StoredFromThreads malloc_from_threads(unsigned shards, int threads, int per_thread,
                                      size_t (*size)(int t, int i)) {
  StoredFromThreads out{PoolPtr(make_pool(shards)), {}};
  out.handles.resize(threads);
  zs_pool* pool = out.pool.get();
  if (pool == nullptr) return out;
  std::barrier start(threads);
  std::vector<std::thread> running;
  for (int t = 0; t < threads; t++) {
    running.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < per_thread; i++) out.handles[t].push_back(zs_malloc(pool, size(t, i)));
    });
  }
  for (auto& th : running) th.join();
  return out;
}

TEST(Shards, CountMustBeAPowerOfTwoUpTo64) {
  for (unsigned bad : {3u, 6u, 100u, 128u}) {
    errno = 0;
    EXPECT_EQ(make_pool(bad), nullptr) << bad;
    EXPECT_EQ(errno, EINVAL) << bad;
  }
  for (unsigned good : {1u, 2u, 4u, 64u}) {
    zs_pool* pool = make_pool(good);
    ASSERT_NE(pool, nullptr) << good;
    unsigned long h = zs_malloc(pool, 100);
    EXPECT_NE(h, 0u);
    zs_free(pool, h);
    EXPECT_TRUE(compact_and_check_empty(pool));
    zs_destroy_pool(pool);
  }
}

// Four threads fill one class at the same moment, then each frees its neighbour's objects.
TEST(Shards, ConcurrentStoresIntoOneClassKeepEveryObject) {
  constexpr int kThreads = 4, kPerThread = 3000;
  constexpr size_t kSize = 776;
  zs_pool* pool = make_pool(4);
  ASSERT_NE(pool, nullptr);
  std::vector<std::vector<unsigned long>> handles(kThreads);
  std::barrier start(kThreads), filled(kThreads);
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> bytes(kSize);
      start.arrive_and_wait();
      for (int i = 0; i < kPerThread; i++) {
        unsigned long h = zs_malloc(pool, kSize);
        if (h == 0) {
          bad[t]++;
          continue;
        }
        fill_pattern(bytes.data(), kSize, seed_of(h, kSize));
        zs_obj_write(pool, h, bytes.data(), kSize);
        handles[t].push_back(h);
      }
      filled.arrive_and_wait();
      for (unsigned long h : handles[(t + 1) % kThreads]) {
        fill_pattern(bytes.data(), kSize, seed_of(h, kSize));
        if (!check_object(pool, h, bytes)) bad[t]++;
        zs_free(pool, h);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; t++) EXPECT_EQ(bad[t], 0) << "thread " << t;
  EXPECT_TRUE(check_stats_consistent(pool, 0));
  EXPECT_TRUE(compact_and_check_empty(pool));
  zs_destroy_pool(pool);
}

// zs_pool_stats counts lock waits and shard moves: none for one thread alone; with threads
// storing into one class at once, no more moves than stores, and every move lands a thread
// on another shard of the class (the objects of each thread stay intact: the test above).
TEST(Shards, LockStatisticsCountWaitsAndMoves) {
  zs_pool* pool = make_pool(4);
  ASSERT_NE(pool, nullptr);
  std::vector<unsigned long> mine;
  for (int i = 0; i < 2000; i++) mine.push_back(zs_malloc(pool, 500));
  for (unsigned long h : mine) zs_free(pool, h);
  struct zs_pool_stats st{};
  zs_pool_stats(pool, &st);
  EXPECT_EQ(st.lock_waits, 0u);
  EXPECT_EQ(st.shard_moves, 0u);

  constexpr int kThreads = 4, kPairs = 20000;
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int i = 0; i < kPairs; i++) zs_free(pool, zs_malloc(pool, 500));
    });
  }
  for (auto& th : threads) th.join();
  zs_pool_stats(pool, &st);
  EXPECT_LE(st.shard_moves, static_cast<unsigned long>(kThreads) * kPairs);
  EXPECT_LE(st.lock_waits, 2ul * kThreads * kPairs);
  EXPECT_TRUE(compact_and_check_empty(pool));
  zs_destroy_pool(pool);
}

// The pages that hold the payloads of `handles` (objects that cross into a next page are read
// through a copy and left out).
std::set<uintptr_t> pages_holding(zs_pool* pool, const std::vector<unsigned long>& handles,
                                  size_t size) {
  std::vector<unsigned char> copy(size);
  std::set<uintptr_t> pages;
  for (unsigned long h : handles) {
    void* mem = zs_obj_read_begin(pool, h, size, copy.data());
    if (mem != copy.data()) pages.insert(reinterpret_cast<uintptr_t>(mem) & ~uintptr_t{4095});
    zs_obj_read_end(pool, h, size, mem);
  }
  return pages;
}

// Threads alive at the same time store into shards of their own, however many threads came
// and went before: a new thread takes the place of one that exited. (When shards were given
// in turn, every 64th new thread of a 64-shard pool got the shard of a thread still running,
// and every other one of a 2-shard pool.) The main thread leaves holes in its shard's
// zspages, which a thread on the same shard would fill: no page may hold objects of both.
TEST(Shards, ThreadsAliveAtOnceGetShardsOfTheirOwn) {
  zs_pool* pool = make_pool(64);
  ASSERT_NE(pool, nullptr);
  constexpr size_t kSize = 200;
  std::vector<unsigned char> bytes(kSize, 0x5a);
  std::vector<unsigned long> mine, freed;
  for (int i = 0; i < 400; i++) (i % 2 ? mine : freed).push_back(zs_store(pool, bytes.data(), kSize));
  for (unsigned long h : freed) zs_free(pool, h);
  const std::set<uintptr_t> my_pages = pages_holding(pool, mine, kSize);
  ASSERT_FALSE(my_pages.empty());
  for (int round = 0; round < 64; round++) {
    std::thread([&] { zs_free(pool, zs_store(pool, bytes.data(), kSize)); }).join();
    std::vector<unsigned long> theirs;
    std::set<uintptr_t> their_pages;
    std::thread([&] {
      for (int i = 0; i < 50; i++) theirs.push_back(zs_store(pool, bytes.data(), kSize));
      their_pages = pages_holding(pool, theirs, kSize);
      for (unsigned long h : theirs) zs_free(pool, h);
    }).join();
    for (uintptr_t page : their_pages) ASSERT_EQ(my_pages.count(page), 0u) << "round " << round;
  }
  for (unsigned long h : mine) zs_free(pool, h);
  EXPECT_TRUE(compact_and_check_empty(pool));
  zs_destroy_pool(pool);
}

// With one shard per thread, a class's statistics are the sum of what each thread stored.
TEST(Shards, ClassStatsSumTheShards) {
  constexpr int kThreads = 2, kPerThread = 500;
  auto [owner, handles] =
      malloc_from_threads(2, kThreads, kPerThread, [](int, int) -> size_t { return 1000; });
  zs_pool* pool = owner.get();
  ASSERT_NE(pool, nullptr);
  struct zs_class_stats st = class_for_request(pool, 1000);
  EXPECT_EQ(st.obj_used, static_cast<unsigned long>(kThreads * kPerThread));
  EXPECT_TRUE(check_stats_consistent(pool, kThreads * kPerThread));
  for (auto& hs : handles)
    for (unsigned long h : hs) zs_free(pool, h);
  EXPECT_TRUE(compact_and_check_empty(pool));
}

// Compaction treats a class's shards as one: after threads spread a class over the shards and
// most objects are freed, one compaction leaves nothing freeable in any class.
TEST(Shards, CompactionMergesAcrossShards) {
  constexpr int kThreads = 4, kPerThread = 20000;
  auto [owner, handles] = malloc_from_threads(
      4, kThreads, kPerThread, [](int t, int i) -> size_t { return 200 + 37 * ((i + t) % 40); });
  zs_pool* pool = owner.get();
  ASSERT_NE(pool, nullptr);
  std::vector<unsigned long> kept;
  size_t n = 0;
  for (auto& hs : handles) {
    for (unsigned long h : hs) {
      ASSERT_NE(h, 0u);
      if (n++ % 20 == 0)
        kept.push_back(h);
      else
        zs_free(pool, h);
    }
  }
  unsigned long before = zs_get_total_pages(pool);
  unsigned long freed = zs_compact(pool);
  EXPECT_EQ(zs_get_total_pages(pool), before - freed);
  PoolTotals totals;
  ASSERT_TRUE(collect_totals(pool, &totals));
  EXPECT_EQ(totals.freeable, 0u) << "pages a single-lock pool would have freed are left";
  EXPECT_TRUE(check_stats_consistent(pool, kept.size()));
  for (unsigned long h : kept) zs_free(pool, h);
  EXPECT_TRUE(compact_and_check_empty(pool));
}

}  // namespace
