// The cache's core (internal): every operation of zsm::Cache, noexcept, its errors as
// std::error_code values of CacheError (category "zsm.cache"). zsm::Cache (cache.cpp) wraps it
// and throws; the C API (c_cache.cpp) and the RocksDB adapter call it and map the codes.
//
// Index (index.cpp). Index shards, each an open-addressing table with linear probing and
// backward-shift deletion; the top bits of a key's 64-bit hash pick the index shard, the low
// bits the table slot. An Entry (24 B) holds the record's handle and sizes, 32 more bits of
// the hash, and the CLOCK bit.
//
// Records (records.cpp). The pool object of an entry is [key][stored bytes], where the stored
// bytes are the compressed value, the raw value, or the 8-byte word of a same-filled value. A
// record longer than a page is a chain: objects of exactly one page, each ending with the
// handle of the next, then one object that holds the rest (at most a page). A page-sized
// object takes a page of its own (the huge class), so a chain wastes only its links and its
// last piece's class rounding.
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
// Locks. A shard's std::shared_mutex: get, contains and for_each_key read; put, erase and
// eviction write. No call holds two shard locks: a put stores its objects before it takes its
// shard's lock, and makes room (eviction, compaction) while it holds none, one shard at a
// time. The pool has its own locks (no pool-wide one on store, free or read).
//
// Allocation. The core's own heap use (the index, per-thread buffers, the backing file's
// lists) is the only thing that can throw inside it; each such place catches std::bad_alloc
// and returns CacheError::no_memory. Depends on zsm's public C API, the codecs and
// backing_file.h.
#pragma once

#include <zsm/cache.hpp>

#include "backing_file.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

namespace zsm::detail {

enum Kind : uint8_t { kCompressed, kRecompressed, kRaw, kSame };
constexpr uint8_t kReferenced = 1;       // CLOCK: used since the hand last passed
constexpr uint8_t kRecompressTried = 2;  // recompress() has looked at it
constexpr uint8_t kIdle = 4;             // not read or written since mark_idle()
constexpr uint8_t kOnFile = 8;           // promoted from the backing file, which still has it
constexpr uint8_t kReleasePending = 16;  // staged to be freed from memory once on file
constexpr uint8_t kReferencedAgain = 32; // CLOCK: used again, while kReferenced was set
constexpr size_t kTailLink = sizeof(unsigned long);
constexpr size_t kLargestValue = size_t{1} << 20;  // CacheOptions::max_value_size's bound
constexpr unsigned kAnyClass = UINT32_MAX;  // evict_one(): no class preferred
// evict_one() looks at up to this many slots from the hand for an entry of the class it prefers.
constexpr unsigned kClassScan = 64;
// The pool is compacted once its holes have grown by this many zspages since the last
// compaction (see "Density" above); in a 32 MiB pool, two 32 KiB zspages are 0.2 %.
constexpr size_t kCompactAfterZspages = 2;
// The index of an empty shard, in slots, when its first entry comes.
constexpr size_t kFirstSlots = 16;

struct Entry {
  unsigned long handle = 0;  // 0: an empty slot
  uint32_t hash = 0;         // bits 0..31 of the key's hash (bits above pick the shard)
  uint32_t value_size = 0;
  uint32_t stored_size = 0;  // bytes after the key
  uint16_t key_size = 0;
  uint8_t kind = 0;
  uint8_t flags = 0;         // set by readers too: through std::atomic_ref

  [[nodiscard]] size_t record_size() const { return size_t{key_size} + stored_size; }
};
static_assert(sizeof(Entry) == 24, "the index costs 24 bytes an entry");

struct IndexShard {
  mutable std::shared_mutex lock;
  std::vector<Entry> slots;  // a power of two long, or empty
  size_t used = 0;
  size_t hand = 0;          // CLOCK hand
};

// The per-thread buffers of the core (scratch()).
enum class Scratch {
  record,         // a record being encoded: [key][stored bytes]
  written_value,  // [key][value], the value written by a put's ValueWriter
  object_copy,    // a copy of an object that spans pages (zs_obj_read_begin's local copy)
  joined_chain,   // a chained record put back together
};
// The calling thread's buffer `which`, `size` bytes long; a null data() when the heap is short.
std::span<std::byte> scratch(Scratch which, size_t size) noexcept;

uint64_t hash_key(std::string_view key) noexcept;

// zram's mm_stat line of `s` (Cache::mm_stat()) and bd_stat line of `f` (Cache::bd_stat()).
std::string mm_stat_line(const CacheStats& s);

// A get's CLOCK marks on the entry it read (room.cpp); callers hold the shard's lock, for
// reading at least.
void note_read(Entry& s) noexcept;
std::string bd_stat_line(const BackingFileStats& f);

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
  [[nodiscard]] zs_pool* pool() const noexcept { return pool_; }
  [[nodiscard]] const CacheOptions& options() const noexcept { return options_; }

 private:
  IndexShard& shard_of(uint64_t h) const {
    return shards_[shard_shift_ == 64 ? 0 : h >> shard_shift_];
  }
  size_t pool_bytes() const noexcept { return zs_get_total_pages(pool_) * page_size_; }
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

  // --- records (records.cpp) ---------------------------------------------------------
  bool split(size_t record_size) const { return record_size > page_size_; }
  size_t head_payload() const { return page_size_ - kTailLink; }
  // The page-sized pieces before the last one of a split record.
  size_t heads_of(size_t record_size) const {
    return (record_size - page_size_ + head_payload() - 1) / head_payload();
  }
  // The pool bytes a record of this size takes: its pieces' slots (a page for those in the
  // huge class), bookkeeping aside.
  size_t footprint(size_t record_size) const;
  // The pool's size class of a record: the class a store of it needs a slot in.
  unsigned class_of_record(size_t record_size) const;
  // Encodes `value` for `s` (kind, stored_size set) into the record it returns ([key][stored
  // bytes]); `written`, when not empty, is [key][value] already and is returned for a raw
  // value. A null data() when the heap is short.
  std::span<std::byte> encode(std::string_view key, std::span<const std::byte> value,
                              std::span<std::byte> written, Entry& s) const noexcept;
  // Stores a record; returns the head handle, or 0 when the pool has no room. A chained
  // record's bytes are changed during the call and restored before it returns.
  unsigned long store_record(std::span<std::byte> record) noexcept;
  void free_record(const Entry& s) noexcept;
  void free_chain(unsigned long handle, size_t size) noexcept;
  // Copies a record out of the pool into `out` (record_size() bytes); false when the heap is
  // short.
  bool read_record(const Entry& s, std::span<std::byte> out) const noexcept;
  // Calls fn(record bytes) with the record readable in one piece: straight from the pool when
  // it lies in one page, else from a copy; returns what fn returns, or `if_no_memory` when
  // the copy finds no heap.
  template <typename Fn, typename R>
  R with_record(const Entry& s, R if_no_memory, Fn fn) const noexcept;
  // Whether the slot's record starts with `key`; nothing when the heap is short.
  std::optional<bool> key_matches(const Entry& s, std::string_view key) const noexcept;
  // Decodes a record's value into out (value_size bytes): CodecError::corrupt when it does not
  // decompress, another error when the codec could not run (no memory for its context).
  std::error_code decode(const Entry& s, std::span<const std::byte> record,
                         std::span<std::byte> out) const noexcept;

  // --- index (index.cpp) -------------------------------------------------------------
  // The slot of `key`: nullptr when absent; no_memory in `ec` when a key could not be read.
  Entry* find(IndexShard& sh, uint64_t h, std::string_view key, std::error_code& ec) const noexcept;
  // Bytes the index of `sh` grows by when one more entry comes (0 while it has room).
  size_t index_growth(const IndexShard& sh) const noexcept;
  // Makes room in `sh` for one more entry (growing its table); false when the heap is short.
  bool reserve_slot(IndexShard& sh) noexcept;
  Entry* insert(IndexShard& sh, const Entry& s) noexcept;  // after reserve_slot()
  void remove_at(IndexShard& sh, size_t i) noexcept;
  bool resize(IndexShard& sh, size_t nr_slots) noexcept;
  void account(const Entry& s, int sign) noexcept;
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
  // Whether the slot's key has the full hash `h` (its record read from the pool).
  bool has_hash(const Entry& s, uint64_t h) const noexcept;

  CacheOptions options_;
  std::unique_ptr<Codec> codec_, recodec_;
  zs_pool* pool_ = nullptr;
  size_t page_size_ = 0;
  size_t huge_class_size_ = 0;
  size_t zspage_bytes_ = 0;  // the largest zspage: the most one store can add to the pool
  mutable std::vector<IndexShard> shards_;
  unsigned shard_shift_ = 0;  // 64 - log2(shards)

  std::mutex compact_lock_;  // zs_compact() returns 0 while another runs: callers take turns
  std::atomic<size_t> index_bytes_{0};
  std::atomic<size_t> holes_left_{0};  // holes() after the last compaction
  std::atomic<size_t> next_victim_{0};
  std::atomic<uint64_t> orig_{0}, compr_{0}, record_bytes_{0}, same_{0}, huge_{0},
      huge_since_{0}, entries_{0}, hits_{0}, misses_{0}, evictions_{0}, recompressed_{0},
      mem_used_max_{0}, written_back_{0};
  BackingFilePtr file_;  // with CacheOptions::backing_file
};

template <typename Fn, typename R>
R CacheCore::with_record(const Entry& s, R if_no_memory, Fn fn) const noexcept {
  const size_t size = s.record_size();
  if (split(size)) {
    std::span<std::byte> whole = scratch(Scratch::joined_chain, size);
    if (whole.data() == nullptr || !read_record(s, whole)) return if_no_memory;
    return fn(std::span<const std::byte>(whole.data(), size));
  }
  std::span<std::byte> copy = scratch(Scratch::object_copy, size);
  if (copy.data() == nullptr) return if_no_memory;
  struct ReadGuard {
    zs_pool* pool;
    unsigned long handle;
    size_t size;
    void* mem;
    ~ReadGuard() { zs_obj_read_end(pool, handle, size, mem); }
  } read{pool_, s.handle, size, zs_obj_read_begin(pool_, s.handle, size, copy.data())};
  return fn(std::span<const std::byte>(static_cast<const std::byte*>(read.mem), size));
}

}  // namespace zsm::detail
