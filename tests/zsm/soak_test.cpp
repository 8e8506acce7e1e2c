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
// Cache soak. Four threads put, get and erase on one zsm::Cache whose capacity is far below the
// data, so puts evict. A value carries its key and version in its first 8 bytes and its other
// bytes follow from them, so a get either misses or returns exactly some version put under that
// key (and not a newer one than has been put). The cache's hit and miss counters must match the
// threads' own counts; evictions must happen.
//
// Zero mismatches is the only pass. Length: ZSM_SOAK_OPS in the environment sets the operations
// of each test; otherwise millions in an optimised build, an eighth of that under sanitizers
// (ZSM_TEST_SANITIZED, set by CMake when ZSM_SANITIZE is). Each test prints a summary line.
// A watchdog (watchdog.h) aborts the run when a thread stops making progress (a hang).
#include <zsm/cache.hpp>

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

#include "test_support.h"
#include "watchdog.h"

namespace {

using namespace zsm_test;

constexpr int kThreads = 4;

// Operations per soak test: ZSM_SOAK_OPS, else `full`, or an eighth of it under sanitizers
// (which slow these loops down 9x (ASan + UBSan, Debug) to 18x (TSan)).
uint64_t soak_ops(uint64_t full) {
  if (const char* env = std::getenv("ZSM_SOAK_OPS")) return std::strtoull(env, nullptr, 10);
#ifdef ZSM_TEST_SANITIZED
  return full / 8;
#else
  return full;
#endif
}

// Mismatches seen by any thread, and the first one's description.
class Mismatches {
 public:
  void record(const std::string& what) {
    if (count_++ == 0) {
      std::lock_guard<std::mutex> guard(mu_);
      first_ = what;
    }
  }
  unsigned long count() const { return count_.load(); }
  std::string first() const {
    std::lock_guard<std::mutex> guard(mu_);
    return first_;
  }

 private:
  std::atomic<unsigned long> count_{0};
  mutable std::mutex mu_;
  std::string first_;
};

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

// ---- the cache soak --------------------------------------------------------------------------

using Bytes = std::vector<std::byte>;

// The value of `key` at `version`: 8 bytes naming both (the whole value, repeated, when it is
// same-filled), then bytes that follow from them, compressible or not; up to a page long.
Bytes versioned_value(uint32_t key, uint32_t version) {
  const uint64_t name = (uint64_t{key} << 32) | version;
  const uint64_t seed = mix64(name);
  const size_t n = seed % 4 == 3 ? 4096 : 8 * (1 + (seed >> 8) % 512);
  Bytes v(n);
  switch (seed % 4) {
    case 0:  // compressible: a 40-byte motif repeated
      fill_pattern(v.data(), std::min<size_t>(n, 48), seed);
      for (size_t i = 48; i < n; ++i) v[i] = v[8 + (i - 8) % 40];
      break;
    case 2:  // same-filled: the name, repeated
      break;
    default:  // incompressible, a whole page for case 3
      fill_pattern(v.data(), n, seed);
  }
  for (size_t i = 0; i < n; i += 8) {
    std::memcpy(v.data() + i, &name, 8);
    if (seed % 4 != 2) break;
  }
  return v;
}

// Whether `got` is exactly a version of `key` no newer than `latest`.
bool consistent_value(uint32_t key, std::span<const std::byte> got, uint32_t latest) {
  uint64_t name = 0;
  if (got.size() < 8) return false;
  std::memcpy(&name, got.data(), 8);
  const auto version = static_cast<uint32_t>(name);
  if (name >> 32 != key || version == 0 || version > latest) return false;
  const Bytes want = versioned_value(key, version);
  return want.size() == got.size() && std::memcmp(want.data(), got.data(), got.size()) == 0;
}

std::string soak_key(uint32_t key) { return "soak/" + std::to_string(key); }

struct CacheCounts {
  uint64_t ops = 0, puts = 0, gets = 0, hits = 0, misses = 0, erases = 0, errors = 0;
  void add(const CacheCounts& o) {
    ops += o.ops, puts += o.puts, gets += o.gets, hits += o.hits, misses += o.misses;
    erases += o.erases, errors += o.errors;
  }
};

class CacheWorker {
 public:
  static constexpr uint32_t kKeys = 4096;

  CacheWorker(zsm::Cache& cache, std::vector<std::atomic<uint32_t>>& versions, int id, Mismatches& bad)
      : cache_(cache), versions_(versions), id_(id), rng_(9000 + id), bad_(bad) {}

  void run(uint64_t ops, Watchdog& dog) {
    Bytes out(4096);
    for (uint64_t op = 0; op < ops; ++op, dog.beat(id_)) {
      const auto key = static_cast<uint32_t>(rng_() % kKeys);
      const unsigned r = rng_() % 100;
      try {
        if (r < 40)
          put(key);
        else if (r < 65)
          get_copy(key);
        else if (r < 90)
          get_into(key, out);
        else
          erase(key);
      } catch (const std::system_error& e) {
        ++counts_.errors;
        bad_.record("thread " + std::to_string(id_) + ": " + e.what());
      }
    }
    counts_.ops = ops;
    dog.retire(id_);
  }

  const CacheCounts& counts() const { return counts_; }

 private:
  void put(uint32_t key) {
    const uint32_t version = ++versions_[key];
    cache_.put(soak_key(key), versioned_value(key, version));
    ++counts_.puts;
  }
  void get_copy(uint32_t key) {
    std::optional<Bytes> got = cache_.get(soak_key(key));
    if (got) check(key, *got);
    count_get(got.has_value());
  }
  void get_into(uint32_t key, Bytes& out) {
    std::optional<size_t> n = cache_.get(soak_key(key), out);
    if (n) check(key, std::span<const std::byte>(out.data(), *n));
    count_get(n.has_value());
  }
  void erase(uint32_t key) {
    cache_.erase(soak_key(key));
    ++counts_.erases;
  }
  void check(uint32_t key, std::span<const std::byte> got) {
    if (!consistent_value(key, got, versions_[key].load()))
      bad_.record("thread " + std::to_string(id_) + ": " + soak_key(key) + " returned " +
                  std::to_string(got.size()) + " bytes that are no version of it");
  }
  void count_get(bool hit) {
    ++counts_.gets;
    ++(hit ? counts_.hits : counts_.misses);
  }

  zsm::Cache& cache_;
  std::vector<std::atomic<uint32_t>>& versions_;
  int id_;
  std::mt19937_64 rng_;
  Mismatches& bad_;
  CacheCounts counts_;
};

TEST(Soak, CacheThreadsWithEvictions) {
  zsm::CacheOptions options;
  options.capacity_bytes = size_t{4} << 20;  // about half of what the key space holds
  options.pool.nr_shards = 4;
  zsm::Cache cache(options);
  std::vector<std::atomic<uint32_t>> versions(CacheWorker::kKeys);
  const uint64_t ops_per_thread = soak_ops(2'000'000) / kThreads;
  Mismatches bad;
  std::vector<CacheWorker> workers;
  for (int i = 0; i < kThreads; ++i) workers.emplace_back(cache, versions, i, bad);
  Watchdog dog("cache soak", kThreads);
  std::vector<std::thread> threads;
  for (CacheWorker& w : workers)
    threads.emplace_back([&w, &dog, ops_per_thread] { w.run(ops_per_thread, dog); });
  for (std::thread& t : threads) t.join();

  CacheCounts total;
  for (const CacheWorker& w : workers) total.add(w.counts());
  const zsm::CacheStats s = cache.stats();
  std::printf("[ summary  ] cache soak: %d threads, %llu ops (%llu puts, %llu gets: %llu hits,"
              " %llu misses; %llu erases), %llu evictions, %lu mismatches\n",
              kThreads, static_cast<unsigned long long>(total.ops),
              static_cast<unsigned long long>(total.puts), static_cast<unsigned long long>(total.gets),
              static_cast<unsigned long long>(total.hits), static_cast<unsigned long long>(total.misses),
              static_cast<unsigned long long>(total.erases), static_cast<unsigned long long>(s.evictions),
              bad.count());
  ::testing::Test::RecordProperty("ops", std::to_string(total.ops));
  ::testing::Test::RecordProperty("threads", kThreads);
  ::testing::Test::RecordProperty("evictions", std::to_string(s.evictions));
  ::testing::Test::RecordProperty("mismatches", std::to_string(bad.count()));
  EXPECT_EQ(bad.count(), 0u) << bad.first();
  EXPECT_GT(s.evictions, 0u);
  EXPECT_GT(total.hits, 0u);
  EXPECT_EQ(s.hits, total.hits);
  EXPECT_EQ(s.misses, total.misses);
  EXPECT_LE(s.bytes_held, options.capacity_bytes);
  cache.clear();
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(zs_get_total_pages(cache.pool()), 0u);
}

}  // namespace
