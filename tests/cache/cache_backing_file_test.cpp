// zsm::Cache with a backing file (CacheOptions::backing_file): what memory evicts is served
// from the file, raw entries leave memory once on file, idle writeback writes what was not
// used since mark_idle(), memory stays within the capacity, and no fault of the file loses
// an entry still in memory or returns a wrong value. The file alone: backing_file_test.cpp.
#include <zsm/cache.h>
#include <zsm/cache.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "bytes.h"

namespace {

using zsm_test::Bytes;

// A path of this test's own; a file an earlier run left there is removed first (the cache
// refuses a path that exists).
std::string scratch_path(const std::string& name) {
  std::filesystem::path p = std::filesystem::current_path() / ("cache_backing_file_test." + name);
  std::filesystem::remove(p);
  return p.string();
}

// A 4 KiB value that lz4 takes to about a third: words from a small vocabulary, by seed.
Bytes page_of(uint64_t n) {
  static const char* words[] = {"zsmalloc ", "zspage ", "class ", "handle ", "object ",
                                "compact ", "free ", "page "};
  Bytes b(4096);
  uint64_t x = zsm_test::mix64(n);
  for (size_t i = 0; i < b.size();) {
    x = zsm_test::mix64(x);
    const char* w = (x & 3) == 0 ? nullptr : words[x % 8];
    std::string piece = w ? std::string(w) : std::to_string(x % 100000) + " ";
    for (char c : piece)
      if (i < b.size()) b[i++] = static_cast<std::byte>(c);
  }
  return b;
}

Bytes random_page(uint64_t n) {
  Bytes b(4096);
  zsm_test::fill_pattern(b.data(), b.size(), n);
  return b;
}

std::string key_of(uint64_t n) { return "page-" + std::to_string(n); }

zsm::CacheOptions options_with_file(const std::string& name, size_t memory, size_t file) {
  zsm::CacheOptions o;
  o.capacity_bytes = memory;
  zsm::BackingFileOptions f;
  f.path = scratch_path(name);
  f.capacity_bytes = file;
  f.batch_bytes = size_t{128} << 10;
  f.write_queue_batches = 1;  // 256 KiB of buffers: a quarter of 1 MiB
  o.backing_file = f;
  return o;
}

struct Reads {
  size_t hits = 0, misses = 0, wrong = 0;
};

Reads read_all(zsm::Cache& c, uint64_t n, Bytes (*value_of)(uint64_t) = page_of) {
  Reads r;
  for (uint64_t i = 0; i < n; i++) {
    std::optional<Bytes> got = c.get(key_of(i));
    if (!got) r.misses++;
    else if (*got == value_of(i)) r.hits++;
    else r.wrong++;
  }
  return r;
}

// Puts keys 0..n-1, waiting for the file's writer every 32 puts so that it is never a queue
// behind (a put does not wait for it: what it cannot take is evicted as without a file, and on
// a loaded machine that would make which keys reach the file a matter of timing).
void put_all(zsm::Cache& c, uint64_t n, Bytes (*value_of)(uint64_t) = page_of) {
  for (uint64_t i = 0; i < n; i++) {
    c.put(key_of(i), value_of(i));
    if (i % 32 == 31) c.flush_backing_file();
  }
}

TEST(CacheBackingFile, WhatMemoryEvictsIsServedFromTheFile) {
  constexpr uint64_t kPages = 3000;  // about 4 MiB compressed into 1 MiB of memory
  zsm::CacheOptions memory_only;
  memory_only.capacity_bytes = 1 << 20;
  zsm::Cache alone(memory_only);
  put_all(alone, kPages);
  Reads without = read_all(alone, kPages);

  zsm::Cache c(options_with_file("evicted", 1 << 20, 16 << 20));
  put_all(c, kPages);
  c.flush_backing_file();
  Reads with = read_all(c, kPages);
  EXPECT_EQ(with.wrong, 0u);
  EXPECT_EQ(without.wrong, 0u);
  zsm::CacheStats s = c.stats();
  EXPECT_GT(s.backing_file.hits, 0u);
  EXPECT_GT(s.written_back, 0u);
  EXPECT_LT(with.misses, without.misses / 4) << "with " << with.misses << ", memory alone "
                                             << without.misses;
  EXPECT_LE(s.bytes_held, memory_only.capacity_bytes);  // the tier's index and buffers too
  EXPECT_GT(s.backing_file.memory_bytes, 0u);
  EXPECT_EQ(s.backing_file.misses, 0u);
}

TEST(CacheBackingFile, AHitOnFileGoesBackIntoMemoryUnlessAskedNotTo) {
  for (bool promote : {true, false}) {
    zsm::CacheOptions o = options_with_file(promote ? "promote" : "keep", 1 << 20, 16 << 20);
    o.backing_file->promote_on_read = promote;
    zsm::Cache c(o);
    put_all(c, 2000);
    c.flush_backing_file();
    ASSERT_FALSE(c.stats().backing_file.entries_on_file == 0);
    // Key 0 was evicted long ago: on file.
    ASSERT_EQ(c.get(key_of(0)), page_of(0));
    const uint64_t file_hits = c.stats().backing_file.hits;
    ASSERT_EQ(c.get(key_of(0)), page_of(0));
    EXPECT_EQ(c.stats().backing_file.hits, promote ? file_hits : file_hits + 1) << promote;
    EXPECT_EQ(c.stats().backing_file.promoted, promote ? 1u : 0u);
  }
}

TEST(CacheBackingFile, RawEntriesLeaveMemoryOnceOnFile) {
  zsm::Cache c(options_with_file("huge", 4 << 20, 16 << 20));
  put_all(c, 200, random_page);
  c.flush_backing_file();
  zsm::CacheStats s = c.stats();
  EXPECT_EQ(s.huge_pages_since, 200u);
  EXPECT_EQ(s.entries, 0u);  // all 200 went to the file and left the pool
  EXPECT_EQ(s.written_back, 200u);
  EXPECT_EQ(s.backing_file.entries_on_file, 200u);
  Reads r = read_all(c, 200, random_page);
  EXPECT_EQ(r.hits, 200u);
  EXPECT_EQ(r.wrong, 0u);
}

TEST(CacheBackingFile, IdleWritebackWritesWhatWasNotUsedSinceMarkIdle) {
  zsm::Cache c(options_with_file("idle", 8 << 20, 16 << 20));
  put_all(c, 100);
  c.mark_idle();
  for (uint64_t i = 0; i < 10; i++) ASSERT_TRUE(c.get(key_of(i)));
  c.put(key_of(100), page_of(100));  // new since the mark: not idle
  EXPECT_EQ(c.writeback_idle(), 90u);
  zsm::CacheStats s = c.stats();
  EXPECT_EQ(s.entries, 11u);
  EXPECT_EQ(s.backing_file.entries_on_file, 90u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(c.writeback_idle(), 0u);  // the marks are gone with them
  Reads r = read_all(c, 101);
  EXPECT_EQ(r.hits, 101u);
  EXPECT_NE(c.bd_stat(), "");
}

TEST(CacheBackingFile, PutAndEraseForgetWhatIsOnFile) {
  zsm::Cache c(options_with_file("replace", 1 << 20, 16 << 20));
  put_all(c, 2000);
  c.flush_backing_file();
  ASSERT_TRUE(c.contains(key_of(0)));
  c.put(key_of(0), page_of(5000));  // a new value: the one on file must not come back
  c.erase(key_of(0));
  EXPECT_FALSE(c.get(key_of(0)));
  EXPECT_TRUE(c.erase(key_of(1)));  // on file only
  EXPECT_FALSE(c.contains(key_of(1)));
  EXPECT_FALSE(c.get(key_of(1)));
  c.clear();
  EXPECT_EQ(c.stats().backing_file.entries_on_file, 0u);
  EXPECT_FALSE(c.get(key_of(2)));
}

// Every write fails: the cache is the cache without a file, and every value is right.
TEST(CacheBackingFile, AFileThatNeverWritesLosesNothingInMemory) {
  struct Failing : zsm::BackingFileIo {
    ssize_t pwrite(int, const void*, size_t, off_t) override {
      errno = EIO;
      return -1;
    }
  };
  zsm::CacheOptions o = options_with_file("failing", 1 << 20, 16 << 20);
  o.backing_file->io = std::make_shared<Failing>();
  zsm::Cache c(o);
  put_all(c, 3000);
  c.flush_backing_file();
  Reads r = read_all(c, 3000);
  EXPECT_EQ(r.wrong, 0u);
  EXPECT_GT(r.hits, 0u);
  put_all(c, 50, random_page);  // raw: they stay in memory, the file failing
  c.flush_backing_file();
  Reads raw = read_all(c, 50, random_page);
  EXPECT_EQ(raw.wrong, 0u);
  EXPECT_GT(raw.hits, 0u);
  zsm::CacheStats s = c.stats();
  EXPECT_GT(s.backing_file.write_errors, 0u);
  EXPECT_EQ(s.backing_file.entries_on_file, 0u);
}

TEST(CacheBackingFile, AFileTruncatedUnderTheCacheGivesMissesNotWrongValues) {
  zsm::CacheOptions o = options_with_file("truncated", 1 << 20, 16 << 20);
  zsm::Cache c(o);
  put_all(c, 3000);
  c.flush_backing_file();
  ASSERT_EQ(::truncate(o.backing_file->path.c_str(), 100000), 0);
  Reads r = read_all(c, 3000);
  EXPECT_EQ(r.wrong, 0u);
  zsm::CacheStats s = c.stats();
  EXPECT_GT(s.backing_file.read_errors, 0u);
  EXPECT_GT(r.misses, 0u);
  EXPECT_GT(r.hits, 0u);
}

TEST(CacheBackingFile, TheFileIsDiscardedAtClose) {
  zsm::CacheOptions o = options_with_file("restart", 1 << 20, 16 << 20);
  {
    zsm::Cache c(o);
    put_all(c, 2000);
    c.flush_backing_file();
    EXPECT_TRUE(std::filesystem::exists(o.backing_file->path));
  }
  EXPECT_FALSE(std::filesystem::exists(o.backing_file->path));
  zsm::Cache again(o);
  EXPECT_FALSE(again.get(key_of(0)));
  EXPECT_EQ(again.stats().backing_file.entries_on_file, 0u);
}

TEST(CacheBackingFile, BadFileOptionsAreErrorsThatNameThem) {
  auto expect_bad = [](const zsm::CacheOptions& o, const char* named) {
    try {
      zsm::Cache c(o);
      FAIL() << named;
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code(), zsm::CacheError::bad_options);
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  };
  expect_bad(options_with_file("bad", 1 << 20, 100), "capacity_bytes");
  zsm::CacheOptions o = options_with_file("bad", 1 << 20, 16 << 20);
  o.backing_file->batch_bytes = 1 << 20;
  expect_bad(o, "a quarter of capacity_bytes");
  o = options_with_file("bad", 1 << 20, 16 << 20);
  o.backing_file->path = "/nonexistent-dir/backing";
  try {
    zsm::Cache c(o);
    FAIL();
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
  }
}

// Threads putting and getting over a working set four times memory, the writer writing and
// the ring coming round: every value read is right.
TEST(CacheBackingFile, ConcurrentPutsAndGetsNeverReturnAWrongValue) {
  zsm::Cache c(options_with_file("threads", 1 << 20, 8 << 20));
  std::atomic<size_t> wrong{0}, file_reads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; t++)
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int op = 0; op < 4000; op++) {
        uint64_t n = rng() % 2500;
        if (rng() % 3 == 0) {
          c.put(key_of(n), page_of(n));
        } else if (std::optional<Bytes> got = c.get(key_of(n))) {
          wrong += *got != page_of(n);
          file_reads++;
        }
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(c.stats().backing_file.hits, 0u);
}

TEST(CacheBackingFile, TheCApiTakesABackingFile) {
  const std::string path = scratch_path("c-api");
  zsm_cache_config cfg{};
  cfg.capacity_bytes = 4 << 20;
  cfg.backing_file = path.c_str();
  cfg.backing_file_capacity = 16 << 20;
  int err = 1;
  zsm_cache* c = zsm_cache_create(&cfg, &err);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(err, 0);
  for (uint64_t i = 0; i < 6000; i++) {
    Bytes v = page_of(i);
    std::string k = key_of(i);
    ASSERT_EQ(zsm_cache_put(c, k.data(), k.size(), v.data(), v.size()), 0);
    if (i % 32 == 31) zsm_cache_flush_backing_file(c);
  }
  Bytes out(4096);
  std::string k0 = key_of(0);
  ASSERT_EQ(zsm_cache_get(c, k0.data(), k0.size(), out.data(), out.size()), 4096);
  EXPECT_EQ(out, page_of(0));
  zsm_cache_mark_idle(c);
  EXPECT_GT(zsm_cache_writeback_idle(c), 0);
  struct zsm_cache_stats st {};
  zsm_cache_stats(c, &st);
  EXPECT_GT(st.bd_bytes_written, 0u);
  EXPECT_GT(st.bd_bytes_on_file, 0u);
  EXPECT_GE(st.file_hits, 1u);
  zsm_cache_destroy(c);
  cfg.backing_file = "/nonexistent-dir/x";
  EXPECT_EQ(zsm_cache_create(&cfg, &err), nullptr);
  EXPECT_EQ(err, -ENOENT);
  EXPECT_EQ(zsm_cache_writeback_idle(nullptr), -EINVAL);
}

}  // namespace
