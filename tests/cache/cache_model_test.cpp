// The cache with a backing file against a reference model, under concurrency: threads run
// workloads (workload.h) that put, erase, get and overwrite a small key space (a few hot keys,
// many cold ones) in a cache whose memory holds part of it, the rest evicted to the file and
// promoted back on reads, with idle writeback now and then. Writes of one key are serialised by
// the test (a per-key lock), so each key has a history of numbered versions; gets take no lock.
// A get may miss, and may return any version current during the call, but never one older than
// the last write that completed before it began (an erased key coming back, a stale value), nor
// one of another key; a put may find no room only rarely, and the pool's own bookkeeping must
// stop growing.
//
// ZSM_CACHE_MODEL_OPS sets the number of operations (default 400,000; a quarter of that
// under sanitizers): docs/testing.md gives the long run.
#include <zsm/cache.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "bytes.h"
#include "workload.h"

namespace {

using zsm_test::Bytes;
using zsm_test::Check;
using zsm_test::Rng;
using zsm_test::Workload;

constexpr int kThreads = 4;
constexpr uint64_t kKeys = 2048, kHotKeys = 16;

uint64_t operations() {
  if (const char* env = std::getenv("ZSM_CACHE_MODEL_OPS")) return std::strtoull(env, nullptr, 10);
#ifdef ZSM_TEST_SANITIZED
  return 100000;
#else
  return 400000;
#endif
}

// The value of version `version` of key `key`: a 16-byte header naming both, then bytes that
// follow from them: compressible text, incompressible bytes (stored raw, so staged for the
// file at once) or a repeated word (same-filled), of sizes from 16 B to 4 KiB.
Bytes value_of(uint64_t key, uint64_t version) {
  const uint64_t h = zsm_test::mix64(key * 1000003 + version);
  const size_t size = 16 + h % 4080;
  Bytes v(size);
  switch (h >> 60 & 3) {
    case 0:  // incompressible
      zsm_test::fill_pattern(v.data(), size, h);
      break;
    case 1:  // one word repeated, after the header
      for (size_t i = 16; i < size; i++) v[i] = static_cast<std::byte>(h >> (i % 8 * 8));
      break;
    default:  // text
      for (size_t i = 16; i < size; i++)
        v[i] = static_cast<std::byte>("the quick brown fox "[(i + h) % 20]);
  }
  std::memcpy(v.data(), &key, 8);
  std::memcpy(v.data() + 8, &version, 8);
  return v;
}

struct KeyHistory {
  std::mutex writer;            // serialises the puts and erases of the key
  uint64_t last = 0;            // the last version written (under `writer`)
  std::atomic<uint64_t> started{0};  // the version being or last written
  std::atomic<uint64_t> done{0};     // the last version whose write has returned
};

struct Violations {
  std::atomic<uint64_t> foreign{0}, wrong_bytes{0}, stale{0}, future{0};
  std::atomic<uint64_t> gets{0}, found{0};
};

std::string key_name(uint64_t k) { return "key:" + std::to_string(k); }

std::atomic<uint64_t> failed_puts{0};

// One thread's view of the shared cache and key histories: its workload's target.
struct ModelThread {
  zsm::Cache& c;
  std::vector<KeyHistory>& keys;
  Violations& v;

  // Half the draws among the hot keys, half over the whole key space.
  static uint64_t draw_key(Rng& rng) {
    const uint64_t r = rng();
    return r % 2 ? r / 2 % kHotKeys : r / 2 % kKeys;
  }

  Check get(Rng& rng) {
    const uint64_t k = draw_key(rng);
    KeyHistory& h = keys[k];
    const uint64_t lo = h.done.load(std::memory_order_acquire);
    std::optional<Bytes> got = c.get(key_name(k));
    const uint64_t hi = h.started.load(std::memory_order_acquire);
    v.gets++;
    if (!got) return ::testing::AssertionSuccess();
    v.found++;
    uint64_t key = 0, version = 0;
    if (got->size() < 16) return violation(v.wrong_bytes, k, "a value shorter than its header");
    std::memcpy(&key, got->data(), 8);
    std::memcpy(&version, got->data() + 8, 8);
    if (key != k) return violation(v.foreign, k, "the value of key " + std::to_string(key));
    if (version < lo) return violation(v.stale, k, "a version older than the last write");
    if (version > hi) return violation(v.future, k, "a version not yet written");
    if (*got != value_of(k, version)) return violation(v.wrong_bytes, k, "wrong bytes");
    return ::testing::AssertionSuccess();
  }
  Check put(Rng& rng) { return write(draw_key(rng), false); }
  Check erase(Rng& rng) { return write(draw_key(rng), true); }
  Check writeback_idle(Rng&) {
    c.mark_idle();
    c.writeback_idle();
    return ::testing::AssertionSuccess();
  }

 private:
  static Check violation(std::atomic<uint64_t>& count, uint64_t k, const std::string& what) {
    count++;
    return ::testing::AssertionFailure() << key_name(k) << ": " << what;
  }

  // A put that finds no room fails and leaves the key without a value: for the model, an erase.
  Check write(uint64_t k, bool erase) {
    KeyHistory& h = keys[k];
    std::lock_guard g(h.writer);
    const uint64_t version = ++h.last;
    h.started.store(version, std::memory_order_release);
    Check result = ::testing::AssertionSuccess();
    if (erase) {
      c.erase(key_name(k));
    } else {
      try {
        c.put(key_name(k), value_of(k, version));
      } catch (const std::system_error& e) {
        if (e.code() != zsm::CacheError::no_memory)
          result = ::testing::AssertionFailure() << "put(" << key_name(k) << ") threw " << e.what();
        failed_puts++;
      }
    }
    h.done.store(version, std::memory_order_release);
    return result;
  }
};

TEST(CacheFileModel, ConcurrentPutsErasesAndGetsMatchTheModel) {
  const std::filesystem::path path = std::filesystem::current_path() / "cache_model_test.cold";
  std::filesystem::remove(path);
  zsm::CacheOptions o;
  o.capacity_bytes = 4 << 20;
  o.shards = 4;
  zsm::BackingFileOptions f;
  f.path = path.string();
  f.capacity_bytes = 8 << 20;  // the ring comes round often
  f.batch_bytes = size_t{128} << 10;
  f.write_queue_batches = 1;
  o.backing_file = f;
  zsm::Cache c(o);
  std::vector<KeyHistory> keys(kKeys);
  Violations v;
  zsm_test::Mismatches bad;
  const uint64_t per_thread = operations() / kThreads;
  std::atomic<size_t> bookkeeping_after_warm_up{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++)
    threads.emplace_back([&, t] {
      ModelThread me{c, keys, v};
      Workload<ModelThread> mix(me, t + 1);
      mix.op("get", 220, &ModelThread::get)
          .op("put", 132, &ModelThread::put)
          .op("erase", 44, &ModelThread::erase);
      if (t == 0) mix.op("writeback idle", 1, &ModelThread::writeback_idle);
      Check c1 = mix.run(per_thread / 4);
      if (t == 0) bookkeeping_after_warm_up = zs_pool_bookkeeping_bytes(c.pool());
      Check c2 = c1 ? mix.run(per_thread - per_thread / 4) : c1;
      if (!c2) bad.record(c2.message());
    });
  for (auto& t : threads) t.join();
  zsm::CacheStats s = c.stats();
  EXPECT_EQ(bad.count(), 0u) << bad.first();
  EXPECT_EQ(v.foreign.load(), 0u);
  EXPECT_EQ(v.stale.load(), 0u) << "values older than the last write (erased ones included)";
  EXPECT_EQ(v.future.load(), 0u);
  EXPECT_EQ(v.wrong_bytes.load(), 0u);
  // The run covered what it is for: gets served from the file, and promotions.
  EXPECT_GT(s.backing_file.hits, 0u);
  EXPECT_GT(s.backing_file.promoted, 0u);
  EXPECT_GT(v.found.load(), v.gets.load() / 4);
  EXPECT_LT(failed_puts.load(), per_thread * kThreads / 1000);
  // The pool's own records stop growing once the working set is reached: cells that
  // compaction moved between lock shards are reused, not carved again.
  const size_t bookkeeping = zs_pool_bookkeeping_bytes(c.pool());
  EXPECT_LE(bookkeeping, bookkeeping_after_warm_up + (64 << 10))
      << "the pool's bookkeeping grew from " << bookkeeping_after_warm_up << " to " << bookkeeping;
  std::printf("%llu operations: %llu gets, %llu found (%llu from the file, %llu promoted), "
              "%llu written back, %llu puts found no room\n",
              static_cast<unsigned long long>(per_thread * kThreads),
              static_cast<unsigned long long>(v.gets.load()),
              static_cast<unsigned long long>(v.found.load()),
              static_cast<unsigned long long>(s.backing_file.hits),
              static_cast<unsigned long long>(s.backing_file.promoted),
              static_cast<unsigned long long>(s.written_back),
              static_cast<unsigned long long>(failed_puts.load()));
}

}  // namespace
