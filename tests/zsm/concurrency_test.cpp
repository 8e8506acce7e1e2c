// tests/zsm/concurrency_test.cpp: one pool, many threads. Workers run workloads (workload.h) that
// store / read / overwrite / free their own objects (every read verified) while another thread
// compacts in a loop; handles cross threads through a queue (stored by one thread, read and
// freed by another); readers hit shared objects while compaction moves them. Zero mismatches,
// and the pool ends empty. Each test runs on every pool configuration of pool_configs.h
// (default, no thread cache, hardened, one lock per class, scattered pages).
#include "pool_configs.h"
#include "test_support.h"
#include "workload.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <latch>
#include <mutex>
#include <random>
#include <thread>

namespace {

using namespace zsm_test;

// An object whose content is regenerable: `len` bytes of the pattern for `seed`.
struct Obj {
  unsigned long h;
  uint64_t seed;
  size_t len;
};

size_t draw_size(std::mt19937_64& rng) {
  return (rng() % 10 < 8) ? 100 + rng() % 2901 : 1 + rng() % 4096;
}

// Stores `o.len` bytes of the pattern for `o.seed`; o.h is the handle, 0 on failure.
bool store(zs_pool* pool, Obj& o, std::vector<uint8_t>& scratch) {
  scratch.resize(o.len);
  fill_pattern(scratch.data(), o.len, o.seed);
  o.h = zs_store(pool, scratch.data(), o.len);
  return o.h != 0;
}

// Reads objects back from any thread: counts the mismatches instead of asserting, and keeps
// the first one's message for the test to report.
class Checker {
 public:
  explicit Checker(zs_pool* pool) : pool_(pool) {}

  bool verify(const Obj& o, std::vector<uint8_t>& scratch) {
    scratch.resize(o.len);
    fill_pattern(scratch.data(), o.len, o.seed);
    auto r = check_object(pool_, o.h, scratch.data(), o.len);
    if (!r) {
      if (bad_++ == 0) {
        std::lock_guard<std::mutex> g(mu_);
        first_error_ = r.message();
      }
      return false;
    }
    return true;
  }

  unsigned long bad() const { return bad_.load(); }
  std::string first_error() {
    std::lock_guard<std::mutex> g(mu_);
    return first_error_;
  }

 private:
  zs_pool* pool_;
  std::atomic<unsigned long> bad_{0};
  std::mutex mu_;
  std::string first_error_;
};

// Each test runs on every pool configuration of pool_configs.h, on the pool `p`, which must
// end with statistics that add up and no page left after a compaction.
class Concurrency : public ::testing::TestWithParam<PoolConfig> {
 protected:
  void SetUp() override { ASSERT_NE(p, nullptr); }

  void TearDown() override {
    if (p == nullptr) return;
    EXPECT_TRUE(check_stats_consistent(p, 0));
    EXPECT_TRUE(compact_and_check_empty(p));
  }

  PoolPtr pool_{create_pool(GetParam(), "concurrency")};
  zs_pool* const p = pool_.get();
};

TEST_P(Concurrency, OwnObjectsWithConcurrentCompaction) {
  constexpr int kThreads = 4;
  constexpr unsigned kOpsPerThread = 50000;
  Mismatches bad;
  std::latch start(kThreads);
  Compactor compactor(p);

  auto worker = [&](int id) {
    PoolTarget mine(p, 4096, hardened(GetParam()));
    Workload<PoolTarget> mix(mine, 1000 + id);
    mix.op("store", 35, &PoolTarget::store, Needs::room)
        .op("read", 30, &PoolTarget::read, Needs::a_live_object)
        .op("overwrite", 15, &PoolTarget::overwrite, Needs::a_live_object)
        .op("free", 20, &PoolTarget::free, Needs::a_live_object)
        .at_most(600);
    start.arrive_and_wait();
    if (Check c = mix.run(kOpsPerThread); !c) bad.record(c.message());
    if (Check c = mine.free_all(); !c) bad.record(c.message());
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i);
  for (auto& t : threads) t.join();
  compactor.stop();
  std::cout << "[          ] " << compactor.calls() << " concurrent compactions freed "
            << compactor.freed() << " pages\n";
  EXPECT_EQ(bad.count(), 0u) << bad.first();
  struct zs_pool_stats s{};
  zs_pool_stats(p, &s);
  EXPECT_EQ(s.pages_compacted, compactor.freed());
}

// Producers store and hand handles over a queue; consumers read, verify and free them.
TEST_P(Concurrency, CrossThreadFreeThroughQueue) {
  constexpr int kProducers = 2, kConsumers = 2;
  constexpr unsigned kPerProducer = 20000;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Obj> queue;
  int producers_left = kProducers;
  std::atomic<unsigned long> consumed{0}, failed_allocs{0};
  Checker check(p);
  Compactor compactor(p);

  auto producer = [&](int id) {
    std::mt19937_64 rng(77 + id);
    std::vector<uint8_t> buf;
    for (unsigned i = 0; i < kPerProducer; ++i) {
      Obj o{0, rng(), draw_size(rng)};
      if (!store(p, o, buf)) {
        ++failed_allocs;
        continue;
      }
      {
        std::unique_lock<std::mutex> lk(mu);
        // Bound the backlog so memory stays small.
        cv.wait(lk, [&] { return queue.size() < 2000; });
        queue.push_back(o);
      }
      cv.notify_all();
    }
    {
      std::lock_guard<std::mutex> lk(mu);
      --producers_left;
    }
    cv.notify_all();
  };
  auto consumer = [&] {
    std::vector<uint8_t> scratch;
    for (;;) {
      Obj o;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return !queue.empty() || producers_left == 0; });
        if (queue.empty()) return;
        o = queue.front();
        queue.pop_front();
      }
      cv.notify_all();
      check.verify(o, scratch);
      zs_free(p, o.h);
      ++consumed;
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kProducers; ++i) threads.emplace_back(producer, i);
  for (int i = 0; i < kConsumers; ++i) threads.emplace_back(consumer);
  for (auto& t : threads) t.join();
  compactor.stop();
  EXPECT_EQ(check.bad(), 0u) << check.first_error();
  EXPECT_EQ(failed_allocs.load(), 0u);
  EXPECT_EQ(consumed.load(), kProducers * kPerProducer);
}

// Shared, read-only objects are read by several threads while the main thread keeps
// fragmenting their zspages (fillers stored between them, then mostly freed) and compacting,
// so the shared objects are moved again and again under the readers.
TEST_P(Concurrency, SharedReadersWhileCompactionMovesObjects) {
  std::vector<Obj> shared;
  std::vector<uint8_t> buf;
  std::mt19937_64 rng(5);
  std::vector<unsigned long> fillers;
  // Interleave shared objects with fillers so every zspage mixes both.
  for (unsigned i = 0; i < 4000; ++i) {
    Obj o{0, rng(), 200 + rng() % 1800};
    ASSERT_TRUE(store(p, o, buf));
    if (i % 4 == 0)
      shared.push_back(o);
    else
      fillers.push_back(o.h);
  }

  std::atomic<bool> stop{false};
  std::atomic<unsigned long> reads{0};
  Checker check(p);
  auto reader = [&](int id) {
    std::mt19937_64 r(900 + id);
    std::vector<uint8_t> scratch;
    // At least a minimum number of reads, then on until the fragmenting rounds are done.
    for (unsigned i = 0; i < 5000 || !stop; ++i) {
      const Obj& o = shared[r() % shared.size()];
      check.verify(o, scratch);
      ++reads;
    }
  };
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) readers.emplace_back(reader, i);

  unsigned long compacted = 0;
  std::vector<uint8_t> fill_bytes(4096, 0x5a);
  for (int round = 0; round < 40; ++round) {
    // Free most fillers: zspages holding shared objects turn sparse.
    std::shuffle(fillers.begin(), fillers.end(), rng);
    size_t keep = fillers.size() / 10;
    for (size_t i = keep; i < fillers.size(); ++i) zs_free(p, fillers[i]);
    fillers.resize(keep);
    compacted += zs_compact(p);  // moves shared objects while they are being read
    // Refill the holes.
    for (unsigned i = 0; i < 2500; ++i) {
      unsigned long h = zs_store(p, fill_bytes.data(), 200 + rng() % 1800);
      ASSERT_NE(h, 0u);
      fillers.push_back(h);
    }
  }
  stop = true;
  for (auto& t : readers) t.join();
  std::cout << "[          ] " << reads.load() << " shared reads during 40 rounds; compaction freed "
            << compacted << " pages\n";
  EXPECT_EQ(check.bad(), 0u) << check.first_error();
  EXPECT_GT(compacted, 0u);
  for (unsigned long h : fillers) zs_free(p, h);
  for (const Obj& o : shared) {
    std::vector<uint8_t> scratch;
    EXPECT_TRUE(check.verify(o, scratch));
    zs_free(p, o.h);
  }
}

// Many threads allocating and freeing in one class at once (class lock contention, zspages
// created and emptied concurrently), with compaction.
TEST_P(Concurrency, SameClassChurn) {
  Mismatches bad;
  Compactor compactor(p);
  auto worker = [&](int id) {
    PoolTarget mine(p);
    mine.sizes = sizes_of({776});  // class 784: 5-page zspages, objects spanning pages
    Workload<PoolTarget> mix(mine, id);
    mix.op("store", 2, &PoolTarget::store, Needs::room)
        .op("free", 1, &PoolTarget::free, Needs::a_live_object)
        .at_most(200);
    if (Check c = mix.run(15000); !c) bad.record(c.message());
    if (Check c = mine.free_all(); !c) bad.record(c.message());
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back(worker, i);
  for (auto& t : threads) t.join();
  compactor.stop();
  EXPECT_EQ(bad.count(), 0u) << bad.first();
}

INSTANTIATE_TEST_SUITE_P(Pools, Concurrency, ::testing::ValuesIn(kPoolConfigs), config_name);

}  // namespace
