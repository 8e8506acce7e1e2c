// The cache's record store (internal): the zsm pool the records live in, the codecs, and what
// turns a value into a record and back. It knows an entry (entry.h) only as the handle, kind
// and sizes of a record, never where the index keeps it.
//
// A record is the pool object [key][stored bytes], where the stored bytes are the compressed
// value, the raw value, or the 8-byte word of a same-filled value. A record longer than a page
// is a chain: objects of exactly one page, each ending with the handle of the next, then one
// object that holds the rest (at most a page). A page-sized object takes a page of its own
// (the huge class), so a chain wastes only its links and its last piece's class rounding.
// Every object goes to the pool from store_record() (through zs_store()): the allocation tags
// name that function.
//
// Locks: none of its own. The pool has its own locks (no pool-wide one on store, free or
// read), so records may be stored, read and freed from any thread at once; a record must not
// be freed while another thread reads it, which the caller's shard lock guards.
//
// Allocation: the per-thread buffers (scratch()) and the codecs' contexts; where the heap is
// short a call returns its "no memory" value (said at each), and freeing never fails.
// Depends on zsm's public C API, the codecs and entry.h.
#pragma once

#include <zsm/codec.hpp>
#include <zsm/zsmalloc.h>

#include "entry.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <system_error>

namespace zsm::detail {

// The bytes of a chain's link: the handle that ends each of its page-sized pieces.
constexpr size_t kTailLink = sizeof(unsigned long);

// The per-thread buffers of the cache (scratch()).
enum class Scratch {
  record,         // a record being encoded: [key][stored bytes]
  written_value,  // [key][value], the value written by a put's ValueWriter
  object_copy,    // a copy of an object that spans pages (zs_obj_read_begin's local copy)
  joined_chain,   // a chained record put back together
};
// The calling thread's buffer `which`, `size` bytes long; a null data() when the heap is short.
std::span<std::byte> scratch(Scratch which, size_t size) noexcept;

// A record store's codecs: the one puts encode with and, when recompression is on, the one
// recompressed() uses (null otherwise).
struct Codecs {
  // Made in that order; throws as Codec::create() does.
  Codecs(const CodecOptions& codec_options, const std::optional<CodecOptions>& recompress_codec);
  std::unique_ptr<Codec> codec, recodec;
};

class RecordStore {
 public:
  // The page size a pool of `config` has.
  static size_t page_size_of(const zs_pool_config& config) noexcept {
    return config.page_size != 0 ? config.page_size : 4096;
  }

  // A store with these codecs on a new pool of `config`, named "zsm-cache". Throws
  // std::system_error: CacheError::no_memory when the pool cannot be made for want of memory,
  // CacheError::bad_options when zs_create_pool_ex() refuses the configuration.
  RecordStore(Codecs codecs, const zs_pool_config& config);
  // Destroys the pool, with every record still in it.
  ~RecordStore();
  RecordStore(const RecordStore&) = delete;
  RecordStore& operator=(const RecordStore&) = delete;

  [[nodiscard]] zs_pool* pool() const noexcept { return pool_; }
  [[nodiscard]] size_t page_size() const noexcept { return page_size_; }
  // The largest zspage: the most one store can add to the pool.
  [[nodiscard]] size_t zspage_bytes() const noexcept { return zspage_bytes_; }
  [[nodiscard]] size_t pool_pages() const noexcept { return zs_get_total_pages(pool_); }
  [[nodiscard]] size_t pool_bytes() const noexcept { return pool_pages() * page_size_; }
  [[nodiscard]] bool can_recompress() const noexcept { return recodec_ != nullptr; }

  // The pool bytes a record of this size takes: its pieces' slots (a page for those in the
  // huge class), bookkeeping aside.
  [[nodiscard]] size_t footprint(size_t record_size) const;
  // The pool's size class of a record: the class a store of it needs a slot in.
  [[nodiscard]] unsigned class_of_record(size_t record_size) const;

  // Encodes `value` for `s` (kind, stored_size set) into the record it returns ([key][stored
  // bytes]), in this thread's record buffer; `written`, when not empty, is [key][value]
  // already and is returned for a raw value. A null data() when the heap is short.
  std::span<std::byte> encode(std::string_view key, std::span<const std::byte> value,
                              std::span<std::byte> written, Entry& s) const noexcept;
  // Decodes a record's value into out (value_size bytes): CodecError::corrupt when it does not
  // decompress, another error when the codec could not run (no memory for its context).
  std::error_code decode(const Entry& s, std::span<const std::byte> record,
                         std::span<std::byte> out) const noexcept;
  // The entry's record with its value compressed by the recompression codec, when that moves
  // it to a smaller class: the new record, in this thread's record buffer, for the caller to
  // store (as kRecompressed). Empty when it does not, or the old record does not decode;
  // no_memory in `ec` when the heap is short. Only with can_recompress().
  std::span<std::byte> recompressed(const Entry& s, std::error_code& ec) const noexcept;

  // Stores a record; returns the head handle, or 0 when the pool has no room. A chained
  // record's bytes are changed during the call and restored before it returns.
  unsigned long store_record(std::span<std::byte> record) noexcept;
  void free_record(const Entry& s) noexcept;
  // Copies a record out of the pool into `out` (record_size() bytes); false when the heap is
  // short.
  bool read_record(const Entry& s, std::span<std::byte> out) const noexcept;
  // Calls fn(record bytes) with the record readable in one piece: straight from the pool when
  // it lies in one page, else from a copy; returns what fn returns, or `if_no_memory` when
  // the copy finds no heap.
  template <typename Fn, typename R>
  R with_record(const Entry& s, R if_no_memory, Fn fn) const noexcept;
  // Calls fn(key) with the record's key readable in place; false, fn not called, when the
  // heap is short. What fn throws comes out of it (the object closed).
  template <typename Fn>
  bool with_key(const Entry& s, Fn&& fn) const;
  // Whether the record starts with `key`; nothing when the heap is short.
  std::optional<bool> key_matches(const Entry& s, std::string_view key) const noexcept;

 private:
  // An object of the pool open for reading, closed when this goes.
  struct ReadGuard {
    zs_pool* pool;
    unsigned long handle;
    size_t size;
    void* mem;
    ~ReadGuard() { zs_obj_read_end(pool, handle, size, mem); }
  };

  [[nodiscard]] bool split(size_t record_size) const { return record_size > page_size_; }
  [[nodiscard]] size_t head_payload() const { return page_size_ - kTailLink; }
  // The page-sized pieces before the last one of a split record.
  [[nodiscard]] size_t heads_of(size_t record_size) const {
    return (record_size - page_size_ + head_payload() - 1) / head_payload();
  }
  // Frees the chain of pieces from `handle` that holds the last `size` bytes of a record.
  void free_chain(unsigned long handle, size_t size) noexcept;

  std::unique_ptr<Codec> codec_, recodec_;
  zs_pool* pool_ = nullptr;
  size_t page_size_ = 0;
  size_t huge_class_size_ = 0;
  size_t zspage_bytes_ = 0;
};

template <typename Fn, typename R>
R RecordStore::with_record(const Entry& s, R if_no_memory, Fn fn) const noexcept {
  const size_t size = s.record_size();
  if (split(size)) {
    std::span<std::byte> whole = scratch(Scratch::joined_chain, size);
    if (whole.data() == nullptr || !read_record(s, whole)) return if_no_memory;
    return fn(std::span<const std::byte>(whole.data(), size));
  }
  std::span<std::byte> copy = scratch(Scratch::object_copy, size);
  if (copy.data() == nullptr) return if_no_memory;
  ReadGuard read{pool_, s.handle, size, zs_obj_read_begin(pool_, s.handle, size, copy.data())};
  return fn(std::span<const std::byte>(static_cast<const std::byte*>(read.mem), size));
}

template <typename Fn>
bool RecordStore::with_key(const Entry& s, Fn&& fn) const {
  std::byte* copy = scratch(Scratch::object_copy, s.key_size).data();
  if (copy == nullptr) return false;
  ReadGuard read{pool_, s.handle, s.key_size, zs_obj_read_begin(pool_, s.handle, s.key_size, copy)};
  fn(std::string_view(static_cast<const char*>(read.mem), s.key_size));
  return true;
}

}  // namespace zsm::detail
