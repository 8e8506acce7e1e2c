// zsm::Cache: an in-process key -> value cache whose values live compressed in a zsm pool,
// with the features zram learned it needs.
//
// - A value is compressed with the configured codec. If the compressed record would land in
//   the pool's huge class anyway it is stored raw (zram's huge pages); a value that is one
//   8-byte word repeated is stored as that word (zram's same-filled pages).
// - Keys live in the pool with their values: an entry's index slot is 24 bytes.
// - The capacity counts everything the cache holds: pool pages, the pool's bookkeeping and the
//   index. It holds at the end of every call: a put that needs room evicts (CLOCK: a get only
//   sets a bit, so readers never reorder anything) and compacts the pool when enough of it is
//   free space inside zspages.
// - Sharded: each shard has a reader/writer lock; get takes only its shard's read lock.
// - recompress() re-encodes stored values with a stronger codec and keeps the result only
//   when it moves the value to a smaller size class (zram's recompress).
// Errors are std::system_error with a CacheError code; a failed call changes nothing else.
#pragma once

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

enum class CacheError {
  value_too_large = 1,  // above CacheOptions::max_value_size
  key_too_large,        // above CacheOptions::max_key_size, or empty
  no_memory,            // the value cannot be stored even after evicting everything else
  corrupt,              // a stored value failed to decompress (the entry is dropped)
  buffer_too_small,     // get(key, out): out is smaller than the value
  bad_options,          // CacheOptions out of range
};
const std::error_category& cache_category() noexcept;
std::error_code make_error_code(CacheError e) noexcept;

struct CacheOptions {
  size_t capacity_bytes = size_t{64} << 20;  // everything the cache holds, never exceeded
  CodecOptions codec;                        // lz4 by default
  std::optional<CodecOptions> recompress_codec;
  size_t max_value_size = 0;                 // 0 = the pool's page size (also the largest allowed)
  size_t max_key_size = 256;                 // at most half a page
  unsigned shards = 16;                      // a power of two
  zs_pool_config pool = {};                  // page size, chain size, page source, lock shards
};

// Counters in the spirit of zram's mm_stat, plus the cache's own.
struct CacheStats {
  uint64_t orig_data_size = 0;    // bytes of the values stored
  uint64_t compr_data_size = 0;   // bytes they take once compressed (raw values: their size)
  uint64_t mem_used_total = 0;    // pool pages, in bytes
  uint64_t mem_limit = 0;         // the capacity
  uint64_t mem_used_max = 0;      // the most mem_used_total has been
  uint64_t same_pages = 0;        // entries stored as a repeated word
  uint64_t pages_compacted = 0;   // pages freed by compaction, cumulative
  uint64_t huge_pages = 0;        // entries stored raw
  uint64_t huge_pages_since = 0;  // entries ever stored raw
  uint64_t entries = 0;
  uint64_t bytes_held = 0;        // pool pages + pool bookkeeping + index: what the capacity bounds
  uint64_t hits = 0, misses = 0, evictions = 0;
  uint64_t recompressed = 0;      // values moved to a smaller class by recompress()
};

class Cache {
 public:
  // Throws std::system_error(CacheError::bad_options) or a codec error for bad options.
  explicit Cache(CacheOptions options = {});
  ~Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  // Stores `value` under `key`, replacing any value there.
  void put(std::string_view key, std::span<const std::byte> value);
  // The value, or nothing when the key is absent.
  std::optional<std::vector<std::byte>> get(std::string_view key);
  // Copies the value into `out` and returns its size, or nothing when the key is absent.
  // Throws buffer_too_small (changing nothing) when out cannot hold it.
  std::optional<size_t> get(std::string_view key, std::span<std::byte> out);
  bool erase(std::string_view key);
  [[nodiscard]] bool contains(std::string_view key) const;
  // Calls fn for every key; the cache must not be changed from inside fn.
  void for_each_key(const std::function<void(std::string_view)>& fn) const;
  void clear();

  // Re-encodes up to `max_entries` values (compressed or raw) not yet tried with the
  // recompress codec, keeping a result only where it moves the value to a smaller size class,
  // then compacts the pool; returns how many moved. 0 when no recompress codec is configured.
  size_t recompress(size_t max_entries = SIZE_MAX);

  [[nodiscard]] CacheStats stats() const;
  // zram's mm_stat line: orig_data_size compr_data_size mem_used_total mem_limit
  // mem_used_max same_pages pages_compacted huge_pages huge_pages_since.
  [[nodiscard]] std::string mm_stat() const;
  [[nodiscard]] zs_pool* pool() const noexcept;
  [[nodiscard]] const CacheOptions& options() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zsm

template <>
struct std::is_error_code_enum<zsm::CacheError> : std::true_type {};
