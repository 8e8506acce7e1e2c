// zsm::Cache: an in-process key -> value cache whose values live compressed in a zsm pool,
// with the features zram learned it needs.
//
// - A value is compressed with the configured codec. If the compressed record would take as
//   many pool bytes as the raw one (for a record within a page: it lands in the pool's huge
//   class anyway), or compression does not make the value smaller, it is stored raw (zram's
//   huge pages); a value that is one 8-byte word repeated is stored as that word (zram's
//   same-filled pages). Values above a page (up to 1 MiB) are chains of pool objects.
// - Keys live in the pool with their values: an entry's index slot is 24 bytes.
// - The capacity counts everything the cache holds: pool pages, the pool's bookkeeping and the
//   index (CacheStats::bytes_held). The pool's pages never pass it; a put that needs room
//   evicts (CLOCK with two marks: a get only sets a bit, a second get a second one, so readers
//   never reorder anything and an entry read twice outlasts one read once), and fails when
//   it still does not fit. Every put and erase compacts the pool once the free space inside
//   its zspages has grown by two zspages since the last compaction, so the pool stays dense
//   under any mix of puts, erases and evictions.
//   See CacheOptions::capacity_bytes for when bytes_held can stay above it.
// - Sharded: each shard has a reader/writer lock; get takes only its shard's read lock.
// - recompress() re-encodes stored values with a stronger codec and keeps the result only
//   when it moves the value to a smaller size class (zram's recompress).
// - A backing file, when configured (CacheOptions::backing_file, zsm/backing_file.hpp), keeps
//   what memory evicts, compressed as it was in the pool (zram's writeback); a get that
//   misses in memory reads it back. What it holds is never counted as memory (mm_stat), only
//   its index and buffers are (bytes_held); bd_stat() and CacheStats::backing_file count it.
// Every method may be called from any thread at once, except the destructor; no call holds
// two shard locks. Errors are std::system_error with a CacheError code (the constructor also
// throws CodecError ones); a short heap is CacheError::no_memory, except std::bad_alloc from
// the constructor and from the calls that return a new vector or string. A failed call changes
// nothing, except where its comment says otherwise: a put that fails with no_memory may have
// evicted entries, and a get that finds a corrupt value drops it.
#pragma once

#include <zsm/backing_file.hpp>
#include <zsm/codec.hpp>
#include <zsm/zsmalloc.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace zsm {

namespace detail {
class CacheCore;  // the noexcept core that Cache wraps (compress/cache/cache_core.h)
}  // namespace detail

// Errors of the cache (category "zsm.cache").
enum class CacheError {
  value_too_large = 1,  // above CacheOptions::max_value_size
  key_too_large,        // above CacheOptions::max_key_size, or empty
  no_memory,            // the value cannot be stored even after evicting everything else;
                        // from the constructor: the pool could not be created (ENOMEM)
  corrupt,              // a stored value failed to decompress (the entry is dropped)
  buffer_too_small,     // get(key, out): out is smaller than the value
  bad_options,          // CacheOptions out of range, or a pool configuration zsm refuses
  not_found,            // no entry for the key: what the C API and the core report where
                        // Cache returns nothing or false (Cache never throws it)
};
// The category of CacheError codes, named "zsm.cache"; one object for the whole process.
const std::error_category& cache_category() noexcept;
// The std::error_code of `e` in cache_category(); makes CacheError compare equal to it.
std::error_code make_error_code(CacheError e) noexcept;

// The cache's configuration, checked by the constructor (bad_options when out of range). The
// defaults: 64 MiB, lz4, no recompression, values up to a page, keys up to 256 bytes.
struct CacheOptions {
  // The bound on everything the cache holds (CacheStats::bytes_held); at least the pool's page
  // size. The pool's pages never pass it. A put that fails leaves behind any bookkeeping the
  // pool grew, so a capacity within a few KiB of a new cache's own bytes_held (tens of KiB)
  // can be passed, and then refuses puts.
  size_t capacity_bytes = size_t{64} << 20;
  CodecOptions codec;                        // lz4 by default
  // The codec of recompress(); std::nullopt (the default) turns recompress() off.
  std::optional<CodecOptions> recompress_codec;
  // The largest value: 0 = the pool's page size; at most 1 MiB. A record (key and stored
  // bytes) above a page is a chain of page-sized objects and one for the rest.
  size_t max_value_size = 0;
  size_t max_key_size = 256;                 // 1 .. half a page
  unsigned shards = 16;                      // index shards: a power of two, 1..1024
  // CLOCK: whether a put's entry starts as if read since the hand last passed (it then
  // survives one pass unread). false: a new entry is the first to go unless a get reads it,
  // which suits a victim cache, whose entries are what another cache let go of (RocksDB's
  // secondary tier sets it so).
  bool insert_referenced = true;
  // The pool: page size, chain size, page source, lock shards, flags. max_pages is ignored:
  // the cache sets it to capacity_bytes / page size. The pool is named "zsm-cache".
  zs_pool_config pool = {};
  // A backing file (zsm/backing_file.hpp): entries evicted from memory, and raw ones, go to
  // it instead of being lost, and a get reads them back. std::nullopt (the default): none.
  std::optional<BackingFileOptions> backing_file;
};

// Counters in the spirit of zram's mm_stat, plus the cache's own.
struct CacheStats {
  uint64_t orig_data_size = 0;    // bytes of the values stored
  uint64_t compr_data_size = 0;   // bytes they take once compressed (raw values: their size;
                                  // same-filled values: 0)
  uint64_t mem_used_total = 0;    // pool pages, in bytes
  uint64_t mem_limit = 0;         // the capacity
  uint64_t mem_used_max = 0;      // the most mem_used_total has been after a put, or is now
  uint64_t same_pages = 0;        // entries stored as a repeated word
  uint64_t pages_compacted = 0;   // pages freed by compaction, cumulative
  uint64_t huge_pages = 0;        // entries stored raw
  uint64_t huge_pages_since = 0;  // entries ever stored raw by put()
  uint64_t entries = 0;           // entries stored now
  uint64_t bytes_held = 0;        // pool pages + pool bookkeeping + index: what the capacity bounds
  uint64_t hits = 0, misses = 0;  // get() calls that found / did not find the key
  uint64_t evictions = 0;         // entries evicted to make room (not erased, not dropped)
  uint64_t recompressed = 0;      // values moved to a smaller class by recompress()
  uint64_t written_back = 0;      // entries moved from memory to the backing file (evicted,
                                  // raw, or idle on writeback_idle()); none without a file
  BackingFileStats backing_file;  // zeros without a backing file
};

// The cache (see the top of this header): a throwing facade over a noexcept core, whose
// error codes the C API (zsm/cache.h) and the RocksDB adapter use directly. Neither copyable
// nor movable.
class Cache {
 public:
  // Makes an empty cache and its pool. Throws std::system_error with CacheError::bad_options
  // for options out of range (see CacheOptions) or a pool configuration zs_create_pool_ex()
  // refuses, CacheError::no_memory when the pool cannot be created for want of memory, or
  // CodecError::bad_options for codec options Codec::create() refuses; with a backing file,
  // CacheError::bad_options (naming the option) for its options out of range, or a
  // std::generic_category() error (errno) when the file cannot be opened.
  explicit Cache(CacheOptions options = {});
  // Destroys every entry and the pool. Must not overlap any other call; pool() dies with it.
  ~Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  // Stores `value` under `key`, replacing any value there, then makes room (evicting other
  // entries, compacting) until the cache is within its capacity. Throws key_too_large (empty
  // or above max_key_size) or value_too_large (above max_value_size), changing nothing; or
  // no_memory when the value does not fit even after evicting every other entry: the key then
  // has no value (its previous one is gone) and other entries may have been evicted.
  void put(std::string_view key, std::span<const std::byte> value);
  // A copy of the value, or nothing when the key is absent (counted as a miss). Throws
  // corrupt, after dropping the entry, when the stored value does not decompress, and
  // no_memory, keeping the entry, when the codec has no memory for its context.
  std::optional<std::vector<std::byte>> get(std::string_view key);
  // Copies the value into the first bytes of `out` and returns its size, or nothing when the
  // key is absent (counted as a miss). Throws buffer_too_small (changing nothing) when out
  // cannot hold it, corrupt, after dropping the entry, when it does not decompress, or
  // no_memory, keeping the entry, when the codec has no memory for its context.
  // Takes only the key's shard's read lock (and its write lock to drop a corrupt entry).
  std::optional<size_t> get(std::string_view key, std::span<std::byte> out);
  // Removes the key's entry; true when there was one, false when the key is absent.
  bool erase(std::string_view key);
  // True when the key has an entry. Counts no hit or miss and does not mark the entry used.
  [[nodiscard]] bool contains(std::string_view key) const;
  // Calls fn for every key, shard by shard, each under its shard's read lock: keys put or
  // erased meanwhile in other shards may or may not be seen. The view is valid only during
  // the call (it may point into a per-thread buffer that every Cache on the thread reuses):
  // fn must not call this cache (a shard lock is held) nor any other Cache.
  void for_each_key(const std::function<void(std::string_view)>& fn) const;
  // Removes every entry, shard by shard, frees the index and compacts the pool. The counters
  // (hits, misses, evictions, huge_pages_since, mem_used_max, recompressed) are kept.
  void clear();

  // Re-encodes up to `max_entries` values (compressed or raw) not yet tried with the
  // recompress codec, keeping a result only where it moves the value to a smaller size class,
  // then compacts the pool (when any moved) and evicts while the cache is over its capacity;
  // returns how many moved. A value that does not decompress is skipped (not dropped); a
  // value is tried once, until put() replaces it. 0 when no recompress codec is configured.
  // Holds each shard's write lock while it works through that shard.
  size_t recompress(size_t max_entries = SIZE_MAX);

  // zram's idle writeback, in two steps. mark_idle() marks every entry idle and clears its
  // CLOCK reference bit (zram's `echo all > idle`); a get of an entry sets the bit again and
  // clears the mark, and a put makes a new, unmarked entry. writeback_idle() then writes to
  // the backing file every entry still marked, so unreferenced since mark_idle() (zram's
  // `echo idle > writeback`), frees it from memory once it is on file, and returns how many
  // it wrote. The age of "idle" is the time since mark_idle(). Without a backing file,
  // mark_idle() still marks and writeback_idle() returns 0. Entries past the write limit
  // stay in memory, marked.
  void mark_idle();
  size_t writeback_idle();
  // Waits until everything staged for the backing file is on it (a no-op without one).
  void flush_backing_file();

  // The counters, each read atomically but not all at one instant.
  [[nodiscard]] CacheStats stats() const;
  // zram's mm_stat line: orig_data_size compr_data_size mem_used_total mem_limit
  // mem_used_max same_pages pages_compacted huge_pages huge_pages_since: space-separated,
  // each right-aligned in at least 8 characters, without a newline.
  [[nodiscard]] std::string mm_stat() const;
  // The names of mm_stat()'s nine columns, space-separated, for a header line: a static
  // string, without a newline.
  static const char* mm_stat_columns() noexcept;
  // zram's bd_stat line: bd_count bd_reads bd_writes, in 4 KiB pages (the bytes on the
  // backing file now, read from it and written to it, rounded up), as mm_stat is laid out.
  [[nodiscard]] std::string bd_stat() const;
  // The cache's pool, for reading (zs_print_classes(), zsm::stats); owned by the cache and
  // valid until it is destroyed. Objects allocated in it count against the capacity, and
  // freeing the cache's objects corrupts the cache.
  [[nodiscard]] zs_pool* pool() const noexcept;
  // The options the cache was made with, max_value_size resolved (0 becomes the page size).
  [[nodiscard]] const CacheOptions& options() const noexcept;

 private:
  std::unique_ptr<detail::CacheCore> core_;
};

}  // namespace zsm

// CacheError converts to std::error_code implicitly (through make_error_code()).
template <>
struct std::is_error_code_enum<zsm::CacheError> : std::true_type {};
