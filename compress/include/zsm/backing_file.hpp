// A cold tier for zsm::Cache: a backing file that entries go to instead of being lost, as
// zram's writeback to a backing device. Off unless CacheOptions::backing_file is set.
//
// What goes to the file: entries CLOCK evicts, entries that did not compress (zram's "huge":
// written back at once and then freed from the pool) and, on Cache::writeback_idle(), entries
// idle since Cache::mark_idle(). They are written as they are in the pool (compressed, never
// decompressed on the way), in batches, by a thread of the cache's own. A get that misses in
// memory reads the file, checks the record and decompresses it; with promote_on_read the entry
// goes back into the pool.
//
// The path is the user's. The cache only ever uses a file it created itself:
// - `path` an existing directory: an unnamed file is made in it (O_TMPFILE; on a file system
//   without it, a file with a random name, removed at once), so nothing is left behind, not
//   even after a crash;
// - any other `path` must not exist: the file is created there (O_CREAT | O_EXCL, so never
//   through a symlink), mode 0600, and removed at close only if the path still names that
//   file (its device and inode are checked first). An existing file, a symlink, a hard link's
//   other name, a device node or a FIFO is refused (std::system_error, EEXIST, naming the
//   path) and left exactly as it was.
// The cache holds an exclusive flock() on the file for its whole life. Nothing on it survives
// a restart: a cache, not a store.
//
// Records cannot be mistaken. Each carries the cache's identity (64 random bits chosen when
// the file is opened), the key, the key's hash, its generation (a number no other put of any
// key in this cache gets: put and promotion compare it), its sizes and an XXH3-64 checksum. A
// get returns what the file holds only if all of them match what the index expects; a record
// promoted back into memory only if the key was neither put nor erased since it was read.
//
// Space and memory. The file is a ring of batch_bytes segments, written in turn; when the ring
// comes round, the oldest segment's records are dropped (first in, first out), so the file
// never grows past capacity_bytes. The tier's memory (its buffers, its index of 24 bytes a
// record and its list of records in the order written, 16 bytes a record) counts in the
// cache's bytes_held. The index and list take at most half of what the capacity leaves after
// the buffers: past that, the oldest records are dropped first, so a cache of tiny values
// keeps its memory for entries.
//
// Backpressure. A put that must evict while the writer's queue is full waits for the writer,
// up to max_write_wait, rather than drop an entry the file has room for; past it the entry is
// dropped (dropped_busy). The write limit (zram's writeback_limit) drops what passes it.
//
// Not in the page cache. The file uses O_DIRECT where the file system takes it, so what is on
// file costs no memory; where it does not (tmpfs before 6.6), it is written buffered and each
// written or read range synced and dropped from the page cache (POSIX_FADV_DONTNEED).
// BackingFileStats::direct_io says which.
//
// Failures make misses, never wrong values: a failed or short write drops that batch's
// records; a short read, a read error, a record whose identity, key, sizes, generation or
// checksum do not match (a file truncated or overwritten under the cache) is a miss, counted
// by cause, and the record is dropped from the index. Nothing in memory is lost by a fault of
// the file.
//
// fork(): a child's copy of the cache has its tier detached. It reads nothing from the
// parent's file, writes nothing to it, never removes it, and destroys its copy without
// touching the parent's writer thread (which the child does not have); it works as a cache
// without a file.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <sys/types.h>

namespace zsm {

// The file's reads and writes, for tests that inject faults or delays. The default does
// ::pwrite and ::pread. Calls come from the cache's writer thread and from flush() (pwrite)
// and from get() on any thread (pread), concurrently.
class BackingFileIo {
 public:
  virtual ~BackingFileIo() = default;
  virtual ssize_t pwrite(int fd, const void* buf, size_t count, off_t offset);
  virtual ssize_t pread(int fd, void* buf, size_t count, off_t offset);
};

struct BackingFileOptions {
  // A directory (an unnamed file in it) or a path that does not exist yet (created, removed
  // at close); see "The path" above.
  std::string path;
  uint64_t capacity_bytes = uint64_t{256} << 20;  // at least two batches; below 1 TiB
  // zram's writeback_limit: at most this many bytes written per write_limit_period; 0 = no
  // limit, else at least one batch. Entries that would pass it are evicted as without a file.
  uint64_t write_limit_bytes = 0;
  std::chrono::milliseconds write_limit_period{1000};  // 1 ms .. 366 days
  size_t batch_bytes = size_t{256} << 10;    // one write; a multiple of 4096, 128 KiB .. 16 MiB
  // Full batches that may wait for the writer (1 .. 64). The tier's buffers are
  // (1 + write_queue_batches) x batch_bytes.
  unsigned write_queue_batches = 3;
  // How long an eviction waits for the writer when the queue is full (0 .. 10 s; 0: never
  // waits, the entry is dropped at once).
  std::chrono::milliseconds max_write_wait{100};
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
  uint64_t corrupt = 0;         // identity, key, sizes, generation or checksum did not match
  uint64_t write_errors = 0;    // batches that failed to write (their records dropped)
  uint64_t dropped_busy = 0;    // records not taken: the writer's queue stayed full
  uint64_t dropped_limit = 0;   // records not taken: the write limit
  uint64_t evicted = 0;         // records dropped to reuse their space (the ring came round)
  uint64_t evicted_for_index = 0;  // records dropped to keep the index within its share
  uint64_t writer_waits = 0;    // evictions that waited for the writer (max_write_wait)
  uint64_t promoted = 0;        // hits put back into the pool
  uint64_t memory_bytes = 0;    // the tier's index, list and buffers (counted in bytes_held)
  bool direct_io = false;       // O_DIRECT (else buffered, dropped from the page cache)
  bool detached = false;        // a child of fork(): the tier is off (the counters are zero)
};

}  // namespace zsm
