// The cache's backing file on its own (compress/cache/backing_file.h): records read back as
// staged, from the batch in memory and from the file; the ring reuses its space oldest first
// and never grows the file past its capacity; and every fault the file can have (a failed,
// short or ENOSPC write, a file truncated or overwritten under it, a full file system) makes
// misses, counted by cause, and never a wrong value or an exception.
#include "backing_file.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <fcntl.h>
#include <filesystem>
#include <string>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "bytes.h"

namespace {

using zsm::BackingFileOptions;
using zsm::detail::BackingFile;
using zsm::detail::BackingFilePtr;
using zsm::detail::FileRecordInfo;
using zsm_test::Bytes;

constexpr size_t kBatch = size_t{128} << 10;
constexpr size_t kIndexLimit = size_t{64} << 20;  // more than any test here needs

// A path of this test's own; a file left there by an earlier run is removed first (the file
// refuses a path that exists).
std::string scratch_path(const std::string& name) {
  std::filesystem::path p = std::filesystem::current_path() / ("backing_file_test." + name);
  std::filesystem::remove(p);
  return p.string();
}

BackingFilePtr open_file(const BackingFileOptions& o, size_t index_limit = kIndexLimit,
                         BackingFile::Released released = {}) {
  return BackingFile::open(o, index_limit, std::move(released));
}

BackingFileOptions options_for(const std::string& name, size_t batches) {
  BackingFileOptions o;
  o.path = scratch_path(name);
  o.batch_bytes = kBatch;
  o.capacity_bytes = batches * kBatch;
  return o;
}

std::string key_of(uint64_t n) { return "key-" + std::to_string(n); }
uint64_t hash_of(uint64_t n) { return zsm_test::mix64(n); }

Bytes stored_of(uint64_t n) {
  Bytes b(200 + zsm_test::mix64(n) % 3000);
  zsm_test::fill_pattern(b.data(), b.size(), n);
  return b;
}

zsm::detail::Staged stage_record(BackingFile& f, uint64_t n) {
  Bytes b = stored_of(n);
  return f.stage(hash_of(n), key_of(n), {2, static_cast<uint32_t>(b.size() * 2), 0}, b);
}

bool stage(BackingFile& f, uint64_t n) { return stage_record(f, n) == zsm::detail::Staged::taken; }

// stage(), waiting for the writer when its queue is full.
void stage_all(BackingFile& f, uint64_t from, uint64_t to) {
  for (uint64_t n = from; n < to; n++)
    while (!stage(f, n)) f.flush();
}

// What a read of record n gives: "hit" with the right bytes, "miss", or "WRONG".
std::string read_back(BackingFile& f, uint64_t n) {
  Bytes got;
  std::optional<FileRecordInfo> info = f.read(hash_of(n), key_of(n), got);
  if (!info) return "miss";
  Bytes want = stored_of(n);
  return got == want && info->kind == 2 && info->value_size == want.size() * 2 ? "hit" : "WRONG";
}

// Fails (or shortens) the n-th write and those after it when `sticky`.
class FaultyIo : public zsm::BackingFileIo {
 public:
  enum class Fault { fail, short_write, no_space };
  FaultyIo(unsigned nth, Fault fault, bool sticky = false)
      : nth_(nth), fault_(fault), sticky_(sticky) {}
  ssize_t pwrite(int fd, const void* buf, size_t count, off_t offset) override {
    const unsigned n = ++writes_;
    if (n != nth_ && !(sticky_ && n > nth_)) return BackingFileIo::pwrite(fd, buf, count, offset);
    switch (fault_) {
      case Fault::fail: errno = EIO; return -1;
      case Fault::no_space: errno = ENOSPC; return -1;
      case Fault::short_write: return BackingFileIo::pwrite(fd, buf, count / 2, offset);
    }
    return -1;
  }
  unsigned writes() const { return writes_; }

 private:
  std::atomic<unsigned> writes_{0};
  unsigned nth_;
  Fault fault_;
  bool sticky_;
};

TEST(BackingFile, RecordsReadBackFromTheBatchAndFromTheFile) {
  BackingFilePtr file = open_file(options_for("roundtrip", 64));
  BackingFile& f = *file;
  stage_all(f, 0, 400);
  for (uint64_t n = 0; n < 400; n++) ASSERT_EQ(read_back(f, n), "hit") << n;
  f.flush();
  for (uint64_t n = 0; n < 400; n++) ASSERT_EQ(read_back(f, n), "hit") << n;
  zsm::BackingFileStats s = f.stats();
  EXPECT_EQ(s.entries_on_file, 400u);
  EXPECT_GT(s.bytes_written, s.bytes_on_file);
  EXPECT_GT(s.bytes_read, 0u);
  EXPECT_EQ(s.misses, 0u);
  // 1 + 3 batches, an index of 1024 slots, a log grown to 512 items.
  EXPECT_EQ(s.memory_bytes, 4 * kBatch + 1024 * 24 + 512 * 16);
  // A key that is not on file, and a key whose hash is on file with other bytes: misses.
  Bytes got;
  EXPECT_FALSE(f.read(hash_of(1000), key_of(1000), got));
  EXPECT_FALSE(f.read(hash_of(1), key_of(2), got));
}

// A flush writes the partial batch and keeps filling the same segment: many small flushes
// take no more of the file than the records need (rounded to 4 KiB each), and evict nothing.
TEST(BackingFile, FlushesKeepTheirSegment) {
  BackingFilePtr file = open_file(options_for("flushes", 16));
  BackingFile& f = *file;
  for (uint64_t n = 0; n < 400; n++) {
    ASSERT_TRUE(stage(f, n));
    if (n % 8 == 7) f.flush();
  }
  f.flush();
  zsm::BackingFileStats s = f.stats();
  EXPECT_EQ(s.evicted, 0u);
  EXPECT_EQ(s.entries_on_file, 400u);
  EXPECT_LE(s.bytes_written, s.bytes_on_file + 50 * 4096);  // one partial block per flush
  for (uint64_t n = 0; n < 400; n++) ASSERT_EQ(read_back(f, n), "hit") << n;
}

TEST(BackingFile, EraseForgetsAndALaterStageReplaces) {
  BackingFilePtr file = open_file(options_for("erase", 4));
  BackingFile& f = *file;
  ASSERT_TRUE(stage(f, 1));
  ASSERT_TRUE(stage(f, 2));
  f.erase(hash_of(1));
  EXPECT_EQ(read_back(f, 1), "miss");
  EXPECT_EQ(read_back(f, 2), "hit");
  Bytes other = stored_of(7);
  ASSERT_EQ(f.stage(hash_of(2), key_of(2), {2, static_cast<uint32_t>(other.size() * 2), 0}, other),
            zsm::detail::Staged::taken);
  Bytes got;
  ASSERT_TRUE(f.read(hash_of(2), key_of(2), got));
  EXPECT_EQ(got, other);
  EXPECT_EQ(f.stats().entries_on_file, 1u);
}

// The ring: four segments, twenty segments' worth of records. The file stays within its
// capacity, the newest records read back, the oldest are gone (first in, first out).
TEST(BackingFile, TheRingReusesItsSpaceOldestFirst) {
  BackingFileOptions o = options_for("ring", 4);
  BackingFilePtr file = open_file(o);
  BackingFile& f = *file;
  uint64_t staged = 0;
  for (uint64_t n = 0; f.stats().bytes_written < 20 * kBatch; n++) {
    if (stage(f, n)) staged = n;
    else f.flush();  // the writer was a batch behind: let it catch up
  }
  f.flush();
  struct stat st {};
  ASSERT_EQ(::stat(o.path.c_str(), &st), 0);
  EXPECT_LE(static_cast<uint64_t>(st.st_size), o.capacity_bytes);
  zsm::BackingFileStats s = f.stats();
  EXPECT_LE(s.bytes_on_file, o.capacity_bytes);
  EXPECT_GT(s.evicted, 0u);
  EXPECT_EQ(read_back(f, 0), "miss");
  EXPECT_EQ(read_back(f, staged), "hit");
  for (uint64_t n = 0; n <= staged; n++) ASSERT_NE(read_back(f, n), "WRONG") << n;
}

void expect_fault_drops_one_batch(FaultyIo::Fault fault, const char* name) {
  auto io = std::make_shared<FaultyIo>(2, fault);
  BackingFileOptions o = options_for(name, 16);
  o.io = io;
  BackingFilePtr file = open_file(o);
  BackingFile& f = *file;
  uint64_t n = 0;
  while (io->writes() < 4) {
    if (!stage(f, n)) f.flush();
    else n++;
  }
  f.flush();
  zsm::BackingFileStats s = f.stats();
  EXPECT_EQ(s.write_errors, 1u);
  size_t hits = 0, misses = 0;
  for (uint64_t i = 0; i < n; i++) {
    std::string r = read_back(f, i);
    ASSERT_NE(r, "WRONG") << i;
    (r == "hit" ? hits : misses)++;
  }
  EXPECT_GT(hits, 0u);
  EXPECT_GT(misses, 0u);  // the second batch's records
  EXPECT_EQ(f.stats().entries_on_file, hits);
}

TEST(BackingFile, AFailedWriteDropsThatBatchOnly) {
  expect_fault_drops_one_batch(FaultyIo::Fault::fail, "write-fails");
}
TEST(BackingFile, AShortWriteDropsThatBatchOnly) {
  expect_fault_drops_one_batch(FaultyIo::Fault::short_write, "write-short");
}
TEST(BackingFile, ENOSPCDropsThatBatchOnly) {
  expect_fault_drops_one_batch(FaultyIo::Fault::no_space, "write-enospc");
}

TEST(BackingFile, AFileTruncatedUnderItGivesMisses) {
  BackingFileOptions o = options_for("truncated", 16);
  BackingFilePtr file = open_file(o);
  BackingFile& f = *file;
  stage_all(f, 0, 300);
  f.flush();
  ASSERT_EQ(::truncate(o.path.c_str(), static_cast<off_t>(kBatch / 2)), 0);
  size_t hits = 0;
  for (uint64_t n = 0; n < 300; n++) {
    std::string r = read_back(f, n);
    ASSERT_NE(r, "WRONG") << n;
    hits += r == "hit";
  }
  zsm::BackingFileStats s = f.stats();
  EXPECT_GT(s.read_errors, 0u);
  EXPECT_EQ(s.misses, s.read_errors + s.corrupt);
  EXPECT_LT(hits, 300u);
  EXPECT_EQ(s.entries_on_file, hits);  // misses are dropped from the index
}

TEST(BackingFile, ABitFlippedOnFileIsCaughtByTheChecksum) {
  BackingFileOptions o = options_for("flipped", 16);
  BackingFilePtr file = open_file(o);
  BackingFile& f = *file;
  stage_all(f, 0, 300);  // several segments: the first is on file only, no longer in memory
  f.flush();
  int fd = ::open(o.path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  for (off_t at = 100; at < 40000; at += 997) {  // one byte in many records
    unsigned char c = 0;
    ASSERT_EQ(::pread(fd, &c, 1, at), 1);
    c ^= 0x10;
    ASSERT_EQ(::pwrite(fd, &c, 1, at), 1);
  }
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
  for (uint64_t n = 0; n < 300; n++) ASSERT_NE(read_back(f, n), "WRONG") << n;
  EXPECT_GT(f.stats().corrupt, 0u);
}

TEST(BackingFile, TheWriteLimitRefusesRecordsPastIt) {
  BackingFileOptions o = options_for("limit", 16);
  o.write_limit_bytes = 3 * kBatch;
  o.write_limit_period = std::chrono::hours(1);
  BackingFilePtr file = open_file(o);
  BackingFile& f = *file;
  uint64_t past_limit = 0;
  for (uint64_t n = 0; n < 2000; n++) {
    zsm::detail::Staged r = stage_record(f, n);
    if (r == zsm::detail::Staged::queue_full) f.flush();
    past_limit += r == zsm::detail::Staged::write_limit;
  }
  f.flush();
  EXPECT_GT(past_limit, 0u);
  EXPECT_LE(f.stats().bytes_written, o.write_limit_bytes);
}

// The generation the file gave the key's record.
uint64_t generation_of(BackingFile& f, uint64_t n) {
  Bytes got;
  std::optional<FileRecordInfo> info = f.read(hash_of(n), key_of(n), got);
  return info ? info->generation : 0;
}

TEST(BackingFile, RecordsStagedForReleaseAreReportedOnceOnFile) {
  std::vector<std::pair<uint64_t, uint64_t>> released;
  std::mutex m;
  auto io = std::make_shared<FaultyIo>(1, FaultyIo::Fault::fail);
  BackingFileOptions o = options_for("release", 4);
  o.io = io;
  BackingFilePtr file = open_file(o, kIndexLimit, [&](uint64_t h, uint64_t generation) {
    std::lock_guard g(m);
    released.emplace_back(h, generation);
  });
  BackingFile& f = *file;
  Bytes b = stored_of(1);
  ASSERT_EQ(f.stage(hash_of(1), key_of(1), {2, 0, 0}, b, true), zsm::detail::Staged::taken);
  f.flush();  // the first write fails: nothing released, the record dropped
  EXPECT_TRUE(released.empty());
  EXPECT_EQ(read_back(f, 1), "miss");
  ASSERT_EQ(f.stage(hash_of(2), key_of(2), {2, 0, 0}, b, true), zsm::detail::Staged::taken);
  const uint64_t second = generation_of(f, 2);
  f.flush();
  f.flush();  // nothing more to write: nothing reported twice
  std::lock_guard g(m);
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0], std::make_pair(hash_of(2), second));
}

// A record replaced or erased before its batch is written is not reported: the entry it was
// written for is gone, and another one may hold its key. Every record has a generation of
// its own.
TEST(BackingFile, AReleaseIsReportedOnlyForTheGenerationStillOnFile) {
  std::vector<uint64_t> released;
  BackingFilePtr file = open_file(options_for("release-generation", 4), kIndexLimit,
                                  [&](uint64_t, uint64_t generation) { released.push_back(generation); });
  BackingFile& f = *file;
  Bytes b = stored_of(1);
  ASSERT_EQ(f.stage(hash_of(1), key_of(1), {2, 0, 0}, b, true), zsm::detail::Staged::taken);
  const uint64_t old_one = generation_of(f, 1);
  ASSERT_EQ(f.stage(hash_of(1), key_of(1), {2, 0, 0}, b, true), zsm::detail::Staged::taken);
  const uint64_t newer = generation_of(f, 1);
  ASSERT_EQ(f.stage(hash_of(2), key_of(2), {2, 0, 0}, b, true), zsm::detail::Staged::taken);
  EXPECT_NE(old_one, newer);
  EXPECT_NE(generation_of(f, 2), newer);
  f.erase(hash_of(2));
  f.flush();
  EXPECT_EQ(released, std::vector<uint64_t>{newer});
  EXPECT_TRUE(f.holds(hash_of(1), newer));
  EXPECT_FALSE(f.holds(hash_of(1), old_one));
}

// The index and the log within their limit: past it the oldest records are dropped, the file
// keeps taking new ones, and clear() gives the memory back.
TEST(BackingFile, TheIndexStaysWithinItsLimitDroppingTheOldestFirst) {
  BackingFileOptions o = options_for("index-limit", 64);
  const size_t limit = 20 * 1024;  // 512 slots and 512 log items: 448 records at most
  BackingFilePtr file = open_file(o, limit);
  BackingFile& f = *file;
  stage_all(f, 0, 3000);
  f.flush();
  zsm::BackingFileStats s = f.stats();
  const size_t buffers = (1 + o.write_queue_batches) * o.batch_bytes;
  EXPECT_LE(s.memory_bytes, buffers + limit);
  EXPECT_LE(s.entries_on_file, 448u);
  EXPECT_GE(s.entries_on_file, 400u);
  EXPECT_EQ(s.evicted_for_index + s.entries_on_file, 3000u);
  EXPECT_EQ(read_back(f, 0), "miss");
  EXPECT_EQ(read_back(f, 2999), "hit");
  f.clear();
  EXPECT_LT(f.stats().memory_bytes, buffers + 512 * 24 + 1);
  EXPECT_TRUE(stage(f, 5000));
  EXPECT_EQ(read_back(f, 5000), "hit");
}

// Readers and a stager at once, the writer writing and the ring coming round: every read is a
// hit with the right bytes or a miss.
TEST(BackingFile, ConcurrentReadsNeverSeeAWrongValue) {
  BackingFilePtr file = open_file(options_for("concurrent", 4));
  BackingFile& f = *file;
  std::atomic<uint64_t> staged{0};
  std::atomic<bool> done{false};
  std::atomic<size_t> wrong{0}, hits{0}, reads{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; t++)
    readers.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      while (!done) {
        uint64_t top = staged.load();
        if (top == 0) continue;
        std::string r = read_back(f, top - 1 - rng() % std::min<uint64_t>(top, 400));
        wrong += r == "WRONG";
        hits += r == "hit";
        reads++;
      }
    });
  // Until the readers have had their turn too (on a loaded machine they may start late).
  for (uint64_t n = 0; n < 200000 && (n < 6000 || reads < 4000 || hits == 0); n++) {
    while (!stage(f, n))  // the writer's queue is full: wait for it
      f.wait_for_writer(std::chrono::steady_clock::now() + std::chrono::seconds(1));
    staged = n + 1;
  }
  done = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(hits.load(), 0u);
}

TEST(BackingFile, BadOptionsAreRefusedByName) {
  BackingFileOptions o = options_for("bad", 4);
  o.batch_bytes = 5000;
  EXPECT_THROW(open_file(o), std::invalid_argument);
  o = options_for("bad", 1);
  try {
    BackingFilePtr file = open_file(o);
    FAIL() << "one batch of capacity taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("capacity_bytes"), std::string::npos) << e.what();
  }
  o = options_for("bad", 4);
  o.path = "/nonexistent-dir/file";
  EXPECT_THROW(open_file(o), std::system_error);
  o.path.clear();
  EXPECT_THROW(open_file(o), std::invalid_argument);
}

// What is on file is not in the page cache (O_DIRECT, or dropped after each write and read),
// where the file system has one: tmpfs keeps files in memory whatever is asked.
TEST(BackingFile, WhatIsOnFileIsNotInThePageCache) {
  BackingFileOptions o = options_for("pagecache", 16);
  struct statfs fs {};
  ASSERT_EQ(::statfs(std::filesystem::current_path().c_str(), &fs), 0);
  if (fs.f_type == 0x01021994) GTEST_SKIP() << "the build folder is on tmpfs";
  BackingFilePtr file = open_file(o);
  BackingFile& f = *file;
  stage_all(f, 0, 300);
  f.flush();
  for (uint64_t n = 0; n < 300; n++) ASSERT_EQ(read_back(f, n), "hit");
  struct stat st {};
  ASSERT_EQ(::stat(o.path.c_str(), &st), 0);
  int fd = ::open(o.path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const size_t length = static_cast<size_t>(st.st_size);
  void* map = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  std::vector<unsigned char> resident(length / 4096 + 1);
  ASSERT_EQ(::mincore(map, length, resident.data()), 0);
  size_t in_memory = 0;
  for (unsigned char r : resident) in_memory += r & 1;
  ::munmap(map, length);
  ::close(fd);
  EXPECT_EQ(in_memory, 0u) << "of " << length / 4096 << " pages; direct_io "
                           << f.stats().direct_io;
}

// A full file system (a 1 MiB tmpfs under a 4 MiB file): writes past it fail with ENOSPC,
// their records are misses, and nothing read back is wrong. Needs mount(2): skipped without.
TEST(BackingFile, AFullFileSystemGivesMissesNotWrongValues) {
  char dir[] = "/tmp/zsm-small-tmpfs-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  if (::mount("tmpfs", dir, "tmpfs", 0, "size=1m") != 0) {
    ::rmdir(dir);
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << ")";
  }
  {
    BackingFileOptions o = options_for("unused", 32);
    o.path = std::string(dir) + "/backing";
    BackingFilePtr file = open_file(o);
  BackingFile& f = *file;
    uint64_t n = 0;
    while (f.stats().write_errors == 0 && n < 20000) {
      if (!stage(f, n)) f.flush();
      else n++;
    }
    f.flush();
    EXPECT_GT(f.stats().write_errors, 0u);
    size_t hits = 0;
    for (uint64_t i = 0; i < n; i++) {
      std::string r = read_back(f, i);
      ASSERT_NE(r, "WRONG") << i;
      hits += r == "hit";
    }
    EXPECT_GT(hits, 0u);
  }
  ::umount(dir);
  ::rmdir(dir);
}

}  // namespace
