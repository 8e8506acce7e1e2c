// A cold tier for zsm::Cache: a backing file that entries go to instead of being lost, as
// zram's writeback to a backing device. Off unless CacheOptions::backing_file is set.
//
// What goes to the file: entries CLOCK evicts, entries that did not compress (zram's "huge":
// written back at once and then freed from the pool) and, on Cache::writeback_idle(), entries
// idle since Cache::mark_idle(). They are written as they are in the pool (compressed, never
// decompressed on the way), in batches, by a thread of the cache's own; a put never waits
// for the disk. A get that misses in memory reads the file, checks the record (its key, its
// sizes, a 64-bit XXH3 checksum) and decompresses it; with promote_on_read the entry goes back
// into the pool.
//
// Space. The file is a ring of batch_bytes segments: batches are written in turn, and when
// the ring comes round, the oldest segment's records are dropped (first in, first out) to
// make room. So the file never grows past its capacity and its space is reused in large,
// aligned writes.
//
// Not in the page cache. The file is opened with O_DIRECT where the file system takes it,
// so what is on file costs no memory; where it does not (tmpfs, for one), it is opened
// buffered and each write is synced and each written or read range dropped from the page
// cache (POSIX_FADV_DONTNEED). BackingFileStats::direct_io says which.
//
// Failures make misses, never wrong values: a failed or short write drops that batch's
// records; a short read, a read error, a record whose key, sizes or checksum do not match (a
// file truncated or overwritten under the cache) is a miss, counted by cause, and the entry
// is dropped from the file's index. Nothing in memory is lost by a fault of the file.
//
// A cache: the file is truncated when the cache opens it and removed when it closes.
// Nothing on it survives a restart.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <sys/types.h>

namespace zsm {

// The file's reads and writes, for tests that inject faults. The default does ::pwrite and
// ::pread. Calls come from the cache's writer thread (pwrite) and from get() on any thread
// (pread), concurrently.
class BackingFileIo {
 public:
  virtual ~BackingFileIo() = default;
  virtual ssize_t pwrite(int fd, const void* buf, size_t count, off_t offset);
  virtual ssize_t pread(int fd, void* buf, size_t count, off_t offset);
};

struct BackingFileOptions {
  std::string path;                          // created or truncated; removed at close
  uint64_t capacity_bytes = uint64_t{256} << 20;  // at least two batches
  // zram's writeback_limit: at most this many bytes written per write_limit_period; 0 = no
  // limit. Entries that would pass it are evicted as without a file.
  uint64_t write_limit_bytes = 0;
  std::chrono::milliseconds write_limit_period{1000};
  size_t batch_bytes = size_t{256} << 10;    // one write; a multiple of 4096, 128 KiB .. 16 MiB
  // Full batches that may wait for the writer (1 .. 64); past them, entries are evicted as
  // without a file. The tier's buffers are (1 + write_queue_batches) x batch_bytes.
  unsigned write_queue_batches = 3;
  bool promote_on_read = true;               // a hit on file puts the entry back into the pool
  bool write_huge = true;                    // entries stored raw go to the file at once
  std::shared_ptr<BackingFileIo> io;         // null: the default
};

// zram's bd_stat, in bytes, and the causes of misses on file.
struct BackingFileStats {
  uint64_t bytes_on_file = 0;   // records the file holds now (their bytes)
  uint64_t bytes_read = 0;      // read from the file (whole aligned reads)
  uint64_t bytes_written = 0;   // written to the file (whole batches)
  uint64_t entries_on_file = 0;
  uint64_t hits = 0;            // gets served from the file
  uint64_t misses = 0;          // gets that found the key on file but could not use it (below)
  uint64_t read_errors = 0;     // short reads and read errors
  uint64_t corrupt = 0;         // key, sizes or checksum did not match
  uint64_t write_errors = 0;    // batches that failed to write (their records dropped)
  uint64_t dropped_busy = 0;    // records not taken: the writer's queue was full
  uint64_t dropped_limit = 0;   // records not taken: the write limit
  uint64_t evicted = 0;         // records dropped to reuse their space
  uint64_t promoted = 0;        // hits put back into the pool
  uint64_t memory_bytes = 0;    // the tier's index and buffers (counted in bytes_held)
  bool direct_io = false;       // O_DIRECT (else buffered, dropped from the page cache)
};

}  // namespace zsm
