// The cache's core (internal): every operation of zsm::Cache, noexcept, its errors as
// std::error_code values of CacheError (category "zsm.cache"). zsm::Cache (cache.cpp) wraps it
// and throws; the C API (c_cache.cpp) and the RocksDB adapter call it and map the codes.
//
// Parts. The core composes an Index (index.h: the index shards and their entries, entry.h) and
// a RecordStore (record_store.h: the pool, the codecs, the records), and calls each through
// its public functions only; neither part knows the other. What is the core's own: the
// options, the Counters, the backing file, and the policies that join the two parts: the
// operations (core.cpp), room (room.cpp) and writeback (writeback.cpp). Every entry in the
// index names a record in the store: an entry's record is freed only under the shard's write
// lock, in the same hold that takes the entry out (drop()) or gives it another record (a put
// replacing a value, recompress()). A put's record is stored before its entry goes in.
//
// Room (room.cpp). bytes_held() = pool pages + pool bookkeeping + index slots + the backing
// file's index and buffers. The pool's page limit is the capacity, so its pages never exceed
// it; a put makes room for its record and its index slot before it inserts, so that a put that
// cannot fit fails before the entry is visible. Eviction is CLOCK over one shard at a time.
//
// Density. Every call that frees a record (erase, a put replacing a value, an eviction)
// checks afterwards whether the pool's holes have grown by kCompactAfterZspages zspages since
// the last compaction, and compacts if so (compact_if_worth()); a get that drops a corrupt
// value does not (compaction moves objects through links the corruption may have hit). Holes
// only grow when a record is freed, so after any mix of puts, erases and evictions the pool
// holds at most what the last compaction could not free (about one partly filled zspage a
// class) plus that margin.
//
// The backing file (writeback.cpp): evicted entries, raw ones, and idle ones on
// writeback_idle() go to it as they are in the pool; a get that misses in memory reads it.
// Generations keep the promise that a get returns the value last put or nothing. Every record
// staged gets a generation no other record of the file has had, kept in the file's index. Put
// and erase drop the key's record from the file under the key's shard lock. A promotion (a
// record read from the file going back into memory) and a release (an entry freed from memory
// because its record was written) happen under that lock too, and only when the file still
// holds the generation that was read or written: so neither can bring back an erased key,
// put an older value over a newer one, or free an entry other than the one written (a release
// frees only an entry marked kReleasePending whose key has the record's full hash: while the
// file holds that generation, the key was neither put nor erased since it was staged).
//
// Locks. A shard's std::shared_mutex (IndexShard::lock()): get, contains and for_each_key
// read; put, erase and eviction write. No call holds two shard locks: a put stores its
// objects before it takes its shard's lock, and makes room (eviction, compaction) while it
// holds none, one shard at a time. The pool has its own locks (record_store.h).
//
// Allocation. The core's own heap use (the index, per-thread buffers, the backing file's
// lists) is the only thing that can throw inside it; each such place catches std::bad_alloc
// and returns CacheError::no_memory. Depends on zsm's public C API, the codecs, the two parts
// and backing_file.h.
#pragma once

#include <zsm/cache.hpp>

#include "backing_file.h"
#include "entry.h"
#include "index.h"
#include "record_store.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace zsm::detail {

constexpr size_t kLargestValue = size_t{1} << 20;  // CacheOptions::max_value_size's bound
constexpr unsigned kAnyClass = UINT32_MAX;  // evict_one(): no class preferred
// evict_one() looks at up to this many slots from the hand for an entry of the class it prefers.
constexpr unsigned kClassScan = 64;
// The pool is compacted once its holes have grown by this many zspages since the last
// compaction (see "Density" above); in a 32 MiB pool, two 32 KiB zspages are 0.2 %.
constexpr size_t kCompactAfterZspages = 2;

// zram's mm_stat line of `s` (Cache::mm_stat()) and bd_stat line of `f` (Cache::bd_stat()).
std::string mm_stat_line(const CacheStats& s);
std::string bd_stat_line(const BackingFileStats& f);

// A get's CLOCK marks on the entry it read (room.cpp); callers hold the shard's lock, for
// reading at least.
void note_read(Entry& s) noexcept;

// The core's statistics (CacheStats' counters), read without a lock. account() keeps the
// first six the sums over the entries in the index.
struct Counters {
  std::atomic<uint64_t> orig{0}, compr{0}, record_bytes{0}, same{0}, huge{0}, entries{0};
  std::atomic<uint64_t> huge_since{0}, hits{0}, misses{0}, evictions{0}, recompressed{0},
      mem_used_max{0}, written_back{0};

  // Adds (sign > 0) or takes off (sign < 0) an entry going into or out of the index.
  void account(const Entry& s, int sign) noexcept;
};

// Writes a put's value into the span it is given (exactly the size put() was given), e.g.
// serialising an object there; a non-empty error_code stops the put, which returns it.
// Called once, before the put takes any lock; it must not throw. A reference to a callable:
// it must outlive the call.
class ValueWriter {
 public:
  template <typename F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, ValueWriter>)
  ValueWriter(F& f) noexcept  // NOLINT: implicit, as a function reference
      : object_(&f), call_([](void* o, std::span<std::byte> out) noexcept {
          return (*static_cast<F*>(o))(out);
        }) {
    static_assert(std::is_nothrow_invocable_r_v<std::error_code, F&, std::span<std::byte>>,
                  "a ValueWriter is called from noexcept code: the callable must be noexcept");
  }
  std::error_code operator()(std::span<std::byte> out) const noexcept { return call_(object_, out); }

 private:
  void* object_;
  std::error_code (*call_)(void*, std::span<std::byte>) noexcept;
};

class CacheCore {
 public:
  // A core for `options` (checked; max_value_size 0 becomes the page size). Throws as
  // zsm::Cache's constructor does (see cache.hpp): zsm::Cache is made through this.
  explicit CacheCore(CacheOptions options);
  // The same without exceptions: the core, or nullptr with the error in `ec` and the
  // exception's message (naming a bad option) in `why`.
  static std::unique_ptr<CacheCore> create(CacheOptions options, std::error_code& ec,
                                           std::string& why) noexcept;
  // The core without opening its backing file (resized() gives it one).
  CacheCore(CacheOptions options, bool open_file);
  ~CacheCore();
  CacheCore(const CacheCore&) = delete;
  CacheCore& operator=(const CacheCore&) = delete;

  // The operations of zsm::Cache, with its semantics; the error is what Cache throws, and
  // not_found where Cache returns nothing or false.
  std::error_code put(std::string_view key, std::span<const std::byte> value) noexcept;
  // put() of a value of `value_size` bytes that `write` writes into the record buffer, so that
  // a caller serialising a value copies it once: into the buffer that goes to the pool.
  std::error_code put(std::string_view key, size_t value_size, ValueWriter write) noexcept;
  std::error_code get(std::string_view key, std::span<std::byte> out, size_t& size) noexcept;
  std::error_code erase(std::string_view key) noexcept;
  // The size of the key's value in memory (not_found when memory has no entry for it; the
  // backing file is not read). Counts no hit or miss.
  std::error_code value_size(std::string_view key, size_t& size) const noexcept;
  std::error_code contains(std::string_view key, bool& found) const noexcept;
  // Not noexcept: what fn throws comes out of it (the shard's lock released).
  void for_each_key(const std::function<void(std::string_view)>& fn) const;
  void clear() noexcept;
  std::error_code recompress(size_t max_entries, size_t& moved) noexcept;
  void mark_idle() noexcept;
  std::error_code writeback_idle(size_t& staged) noexcept;
  void flush_backing_file() noexcept;
  // Puts every entry held in memory into `to` (which evicts by its CLOCK what does not fit);
  // an entry `to` refuses, or that does not decode, is left out. What the backing file holds is
  // not moved. `to` must be a different core.
  void move_entries_to(CacheCore& to) noexcept;
  // A core with `from`'s options but capacity_bytes = `capacity`, holding `from`'s backing
  // file (the same file, with what it holds) and as many of `from`'s entries as fit; `from`
  // is left without a file. No other call on `from` may run meanwhile. nullptr, with the error
  // in `ec` and `why`, when the options are refused: `from` is unchanged then.
  static std::unique_ptr<CacheCore> resized(CacheCore& from, size_t capacity,
                                            std::error_code& ec, std::string& why) noexcept;
  [[nodiscard]] CacheStats stats() const noexcept;
  [[nodiscard]] zs_pool* pool() const noexcept { return records_.pool(); }
  [[nodiscard]] const CacheOptions& options() const noexcept { return options_; }

 private:
  // The options checked, then the parts made from them: the codecs first, so that their
  // errors come before those of the options and of the pool.
  CacheCore(Codecs codecs, CacheOptions&& options, bool open_file);

  size_t bytes_held() const noexcept;
  std::error_code check_put(std::string_view key, size_t value_size) const noexcept;
  // The rest of a put, once the value is in memory: `written` is [key][value] when a
  // ValueWriter wrote it, else empty.
  std::error_code put_value(std::string_view key, std::span<const std::byte> value,
                            std::span<std::byte> written) noexcept;
  std::error_code peek(std::string_view key, std::optional<size_t>& in_memory,
                       bool& on_file) const noexcept;
  std::error_code get_locked(IndexShard& sh, uint64_t h, std::string_view key,
                             std::span<std::byte> out, size_t& size) noexcept;
  // The entry of `key` in `sh` (its shard's lock held): nullptr when absent; no_memory in
  // `ec` when a key could not be read.
  Entry* find(IndexShard& sh, uint64_t h, std::string_view key, std::error_code& ec) const noexcept;
  // Takes the entry out of the index and its record out of the pool (shard write lock held).
  void drop(IndexShard& sh, Entry* s) noexcept;
  // Drops the key's entry, in memory and on file; not_found when it had none.
  std::error_code erase_entry(std::string_view key) noexcept;

  // --- room (room.cpp) ---------------------------------------------------------------
  bool evict_one(unsigned long keep, unsigned prefer_class) noexcept;
  // What one eviction attempt did: evicted an entry, found none, or found the file's writer
  // behind (with may_wait: the entry is kept, for the caller to wait and try again).
  enum class Evicted { one, none, writer_busy };
  Evicted evict_one_now(unsigned long keep, unsigned prefer_class, bool may_wait) noexcept;
  Entry* clock_hand(IndexShard& sh, unsigned long keep) noexcept;
  Entry* of_class_near_hand(IndexShard& sh, Entry* at_hand, unsigned long keep,
                            unsigned cls) const noexcept;
  size_t holes() const noexcept;
  bool worth_compacting() const noexcept;
  unsigned long compact() noexcept;
  void compact_if_worth() noexcept;
  // What free_some() did: nothing, evicted an entry, or compacted the pool below its floor.
  enum class Room { none, evicted, compacted };
  Room free_some(size_t floor, unsigned long keep = 0, unsigned prefer_class = kAnyClass) noexcept;
  bool make_room(size_t limit, unsigned long keep = 0) noexcept;
  unsigned long store_making_room(std::span<std::byte> record) noexcept;
  void note_mem_used() noexcept;

  // --- the backing file (writeback.cpp) ----------------------------------------------
  // The most the file's index and log may take: half of what the capacity leaves after its
  // buffers.
  size_t file_index_limit() const noexcept;
  BackingFile::Released release_callback() noexcept;
  // Stages the entry's record for the file (shard lock held), unless the file holds it already
  // (`was_on_file`, when given, says so); with `release`, the entry is marked to be freed
  // from memory once its record is on file (release_written()).
  Staged write_back(Entry& s, bool release, bool* was_on_file = nullptr) noexcept;
  void release_written(uint64_t hash, uint64_t generation) noexcept;
  // A get that missed in memory: the value from the file into `out`, put back into the pool
  // with promote_on_read. not_found when the file does not have it.
  std::error_code get_from_file(std::string_view key, uint64_t h, std::span<std::byte> out,
                                size_t& size) noexcept;
  void promote(std::string_view key, uint64_t h, const FileRecordInfo& info,
               std::span<const std::byte> stored) noexcept;
  size_t writeback_idle_shard(IndexShard& sh, bool& queue_full) noexcept;
  Staged stage_noexcept(uint64_t h, std::string_view key, const Entry& s,
                        std::span<const std::byte> stored, bool release) noexcept;
  // Whether the file holds this entry's record: promoted, and not changed since (a put would
  // have made a new entry), so that evicting it costs no write.
  bool on_file(uint64_t h, const Entry& s) const noexcept;
  // Whether the entry's key has the full hash `h` (its record read from the pool).
  bool has_hash(const Entry& s, uint64_t h) const noexcept;

  CacheOptions options_;
  RecordStore records_;
  mutable Index index_;  // const calls lock its shards and read their entries
  Counters counters_;
  std::mutex compact_lock_;  // zs_compact() returns 0 while another runs: callers take turns
  std::atomic<size_t> holes_left_{0};  // holes() after the last compaction
  std::atomic<size_t> next_victim_{0};  // the shard evict_one() starts from
  BackingFilePtr file_;  // with CacheOptions::backing_file
};

}  // namespace zsm::detail
