// tests/zsm/soak_test.cpp: long concurrent runs in which every byte read is checked.
//
// Pool soak. Four worker threads on one pool store (zs_store, or zs_malloc + zs_obj_write),
// read, overwrite (zs_obj_write, to any length up to the capacity) and free objects of random
// sizes, while a fifth thread calls zs_compact() without pause. An object's bytes follow from
// its tag and its generation, which every overwrite bumps: the tag is the handle for an object
// made by zs_malloc, and a unique store number for one made by zs_store (whose bytes exist
// before its handle does). Any thread can therefore check any object, and does on every read
// and before every free. Workers also hand objects to one another through a queue; the
// receiver checks each one, then frees it or keeps it (to overwrite and free it later), so
// frees land in shards other than the one the object was stored in (the pool has 8 shards,
// and storing threads move to another shard whenever they meet in one).
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
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "soak.h"
#include "test_support.h"
#include "watchdog.h"

namespace {

using namespace zsm_test;

// ---- the pool soak ---------------------------------------------------------------------------

// An object a thread owns: its bytes are the pattern for (tag, generation), `len` long.
struct Tracked {
  unsigned long handle;
  uint64_t tag;
  uint64_t generation;
  uint32_t len;
};

uint64_t pattern_seed(const Tracked& o) { return mix64(o.tag * 0x100000001b3ull ^ mix64(o.generation)); }

// Objects in transit between threads, at most kMaxQueued at a time.
class Handoff {
 public:
  static constexpr size_t kMaxQueued = 4096;
  bool push(const Tracked& o) {
    std::lock_guard<std::mutex> guard(mu_);
    if (queue_.size() >= kMaxQueued) return false;
    queue_.push_back(o);
    return true;
  }
  std::optional<Tracked> pop() {
    std::lock_guard<std::mutex> guard(mu_);
    if (queue_.empty()) return std::nullopt;
    Tracked o = queue_.front();
    queue_.pop_front();
    return o;
  }

 private:
  std::mutex mu_;
  std::deque<Tracked> queue_;
};

struct PoolCounts {
  uint64_t ops = 0, stores = 0, reads = 0, overwrites = 0, frees = 0, handed = 0, received = 0,
           cross_thread_frees = 0, failed = 0;
  void add(const PoolCounts& o) {
    ops += o.ops, stores += o.stores, reads += o.reads, overwrites += o.overwrites;
    frees += o.frees, handed += o.handed, received += o.received;
    cross_thread_frees += o.cross_thread_frees, failed += o.failed;
  }
};

// One worker's objects and operations on the shared pool.
class PoolWorker {
 public:
  static constexpr size_t kMaxLive = 1500;

  PoolWorker(zs_pool* pool, int id, Handoff& handoff, Mismatches& bad)
      : pool_(pool), id_(id), rng_(7000 + id), handoff_(handoff), bad_(bad) {}

  void run(uint64_t ops, Watchdog& dog) {
    for (uint64_t op = 0; op < ops; ++op, dog.beat(id_)) {
      const unsigned r = rng_() % 100;
      if (mine_.empty() || (r < 30 && mine_.size() < kMaxLive))
        store();
      else if (r < 55)
        check(mine_[rng_() % mine_.size()]);
      else if (r < 70)
        overwrite(mine_[rng_() % mine_.size()]);
      else if (r < 84)
        free_at(rng_() % mine_.size());
      else if (r < 92)
        hand_off(rng_() % mine_.size());
      else
        receive();
    }
    counts_.ops = ops;
    while (!mine_.empty()) free_at(mine_.size() - 1);
    dog.retire(id_);
  }

  const PoolCounts& counts() const { return counts_; }

  // Checks the object's bytes through zs_obj_read_begin/end; false (and recorded) on mismatch.
  bool check(const Tracked& o) {
    ++counts_.reads;
    scratch_.resize(o.len);
    fill_pattern(scratch_.data(), o.len, pattern_seed(o));
    ::testing::AssertionResult r = check_object(pool_, o.handle, scratch_.data(), o.len);
    if (!r) bad_.record("thread " + std::to_string(id_) + ": " + r.message());
    return static_cast<bool>(r);
  }

 private:
  void store() {
    Tracked o{0, 0, 0, draw_size()};
    scratch_.resize(o.len);
    if (rng_() % 2) {
      o.tag = (uint64_t{1} << 63) | (uint64_t(id_) << 48) | counts_.stores;
      fill_pattern(scratch_.data(), o.len, pattern_seed(o));
      o.handle = zs_store(pool_, scratch_.data(), o.len);
    } else {
      o.handle = zs_malloc(pool_, o.len);
      o.tag = o.handle;
      fill_pattern(scratch_.data(), o.len, pattern_seed(o));
      if (o.handle != 0) zs_obj_write(pool_, o.handle, scratch_.data(), o.len);
    }
    if (o.handle == 0) {
      ++counts_.failed;
      return;
    }
    ++counts_.stores;
    mine_.push_back(o);
  }

  // A new generation, any length up to the object's capacity.
  void overwrite(Tracked& o) {
    const size_t capacity = zs_obj_capacity(pool_, o.handle);
    o.generation++;
    o.len = static_cast<uint32_t>(1 + rng_() % capacity);
    scratch_.resize(o.len);
    fill_pattern(scratch_.data(), o.len, pattern_seed(o));
    errno = 0;
    zs_obj_write(pool_, o.handle, scratch_.data(), o.len);
    if (errno != 0) bad_.record("zs_obj_write within the capacity set errno " + std::to_string(errno));
    ++counts_.overwrites;
  }

  void free_at(size_t i) {
    check(mine_[i]);
    zs_free(pool_, mine_[i].handle);
    ++counts_.frees;
    mine_[i] = mine_.back();
    mine_.pop_back();
  }

  void hand_off(size_t i) {
    if (!handoff_.push(mine_[i])) return;
    ++counts_.handed;
    mine_[i] = mine_.back();
    mine_.pop_back();
  }

  // Another thread's object: checked, then freed here or kept.
  void receive() {
    std::optional<Tracked> o = handoff_.pop();
    if (!o) return;
    ++counts_.received;
    check(*o);
    if (rng_() % 2 || mine_.size() >= kMaxLive) {
      zs_free(pool_, o->handle);
      ++counts_.cross_thread_frees;
    } else {
      mine_.push_back(*o);
    }
  }

  uint32_t draw_size() {
    return static_cast<uint32_t>(rng_() % 10 < 8 ? 100 + rng_() % 2901 : 1 + rng_() % 4096);
  }

  zs_pool* pool_;
  int id_;
  std::mt19937_64 rng_;
  Handoff& handoff_;
  Mismatches& bad_;
  std::vector<Tracked> mine_;
  std::vector<uint8_t> scratch_;
  PoolCounts counts_;
};

TEST(Soak, PoolThreadsWithCompactionAndCrossThreadFrees) {
  zs_pool_config cfg{};
  cfg.nr_shards = 8;
  zs_pool* pool = zs_create_pool_ex("soak", &cfg);
  ASSERT_NE(pool, nullptr);
  const uint64_t ops_per_thread = soak_ops(16'000'000) / kThreads;
  Mismatches bad;
  Handoff handoff;
  std::vector<PoolWorker> workers;
  for (int i = 0; i < kThreads; ++i) workers.emplace_back(pool, i, handoff, bad);
  Compactor compactor(pool);
  Watchdog dog("pool soak", kThreads);
  std::vector<std::thread> threads;
  for (PoolWorker& w : workers)
    threads.emplace_back([&w, &dog, ops_per_thread] { w.run(ops_per_thread, dog); });
  for (std::thread& t : threads) t.join();
  compactor.stop();

  // What is still in transit: checked and freed here.
  PoolCounts total;
  while (std::optional<Tracked> o = handoff.pop()) {
    workers[0].check(*o);
    zs_free(pool, o->handle);
    ++total.cross_thread_frees;
  }
  for (const PoolWorker& w : workers) total.add(w.counts());
  std::printf("[ summary  ] pool soak: %d threads + 1 compacting, %llu ops (%llu stores, %llu reads,"
              " %llu overwrites, %llu frees, %llu handed over, %llu freed by another thread),"
              " %lu compactions freed %lu pages, %lu mismatches\n",
              kThreads, static_cast<unsigned long long>(total.ops),
              static_cast<unsigned long long>(total.stores), static_cast<unsigned long long>(total.reads),
              static_cast<unsigned long long>(total.overwrites), static_cast<unsigned long long>(total.frees),
              static_cast<unsigned long long>(total.handed),
              static_cast<unsigned long long>(total.cross_thread_frees), compactor.calls(),
              compactor.freed(), bad.count());
  ::testing::Test::RecordProperty("ops", std::to_string(total.ops));
  ::testing::Test::RecordProperty("threads", kThreads);
  ::testing::Test::RecordProperty("mismatches", std::to_string(bad.count()));
  EXPECT_EQ(bad.count(), 0u) << bad.first();
  EXPECT_EQ(total.failed, 0u) << "stores failed";
  EXPECT_GT(total.cross_thread_frees, 0u);
  EXPECT_EQ(total.stores, total.frees + total.cross_thread_frees) << "every object freed once";
  EXPECT_TRUE(check_stats_consistent(pool, 0));
  EXPECT_TRUE(compact_and_check_empty(pool));
  zs_destroy_pool(pool);
}

}  // namespace
