// zsm: a thin C++20 layer over the C API in zsmalloc.h.
//
// zsm::Pool owns a zs_pool (RAII, move-only). zsm::Handle owns one object in a pool and frees
// it when destroyed (move-only, like std::unique_ptr). Reads and writes take std::span.
// Failures throw std::system_error in std::generic_category() carrying the errno the C call
// set (what() names the call). This header adds no state of its own: everything lives in the
// pool, and the thread-safety rules are zsmalloc.h's (any call from any thread on one pool).
// Lifetime: a Handle or ReadView holds a raw pointer to its zs_pool and must be gone (or the
// Handle release()d) before that pool is destroyed; moving a Pool keeps its zs_pool alive.
#pragma once

#include <zsm/zsmalloc.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <system_error>
#include <utility>

namespace zsm {

class Pool;

// Throws std::system_error(errno, std::generic_category(), what): the error of the C call
// that just failed. Never returns.
[[noreturn]] inline void throw_errno(const char* what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// One object in a pool, owned: the destructor frees it. Empty (value 0) after a move, a
// release() or default construction. Move-only. Distinct Handles may be used from different
// threads at once; one Handle is not synchronised, and a write() overlapping another read or
// write of the same object races on its bytes.
class Handle {
 public:
  // An empty handle.
  Handle() = default;
  // Takes ownership of the raw handle `value` (0 = empty), which `pool` must have returned.
  Handle(zs_pool* pool, unsigned long value) noexcept : pool_(pool), value_(value) {}
  // Takes other's object; other is left empty.
  Handle(Handle&& other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), value_(std::exchange(other.value_, 0)) {}
  // Frees this handle's object, then takes other's; other is left empty.
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      pool_ = std::exchange(other.pool_, nullptr);
      value_ = std::exchange(other.value_, 0);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  // Frees the object (zs_free()), if any.
  ~Handle() { reset(); }

  // Frees the object now (zs_free()) and leaves the handle empty; no-op when empty. No read
  // of the object (a ReadView) may still be in progress.
  void reset() noexcept {
    if (value_ != 0) zs_free(pool_, value_);
    value_ = 0;
  }
  // Gives up ownership and returns the raw handle (0 when empty); the handle is left empty
  // and the caller frees the object with zs_free().
  [[nodiscard]] unsigned long release() noexcept { return std::exchange(value_, 0); }
  // The raw handle, for the C API; 0 when empty. Ownership stays here.
  [[nodiscard]] unsigned long value() const noexcept { return value_; }
  // True when the handle owns an object.
  explicit operator bool() const noexcept { return value_ != 0; }

  // Bytes the object can hold (zs_obj_capacity()): its class size less the 8-byte header, a
  // page for a huge object; at least what it was allocated with. 0 when empty. Never throws.
  [[nodiscard]] std::size_t capacity() const { return zs_obj_capacity(pool_, value_); }

  // Overwrites the object's first data.size() bytes with `data` (zs_obj_write()). Throws
  // std::system_error(EINVAL), writing nothing, when the handle is empty or data is larger
  // than capacity(); empty data on a non-empty handle does nothing. A hardened pool aborts
  // when data is larger than the size the object was allocated with. Clears errno first.
  void write(std::span<const std::byte> data) {
    errno = 0;
    zs_obj_write(pool_, value_, data.data(), data.size());
    if (errno != 0) throw_errno("zs_obj_write");
  }

  // Copies the object's first out.size() bytes into `out` (zs_obj_read_begin()/_end()).
  // Throws std::system_error(EINVAL), copying nothing, when the handle is empty or out is
  // larger than capacity(). Bytes past what was written are unspecified; a hardened pool
  // aborts when out is larger than the size the object was allocated with.
  void read(std::span<std::byte> out) const {
    void* mem = zs_obj_read_begin(pool_, value_, out.size(), out.data());
    if (mem == nullptr) throw_errno("zs_obj_read_begin");
    if (mem != out.data()) std::memcpy(out.data(), mem, out.size());
    zs_obj_read_end(pool_, value_, out.size(), mem);
  }

 private:
  zs_pool* pool_ = nullptr;
  unsigned long value_ = 0;
};

// A zero-copy view of an object's first bytes: a read begun by zs_obj_read_begin() and ended
// by the destructor; the object cannot move while the view lives. Neither copyable nor
// movable. Lifetime: `scratch` (used when the bytes span two pages), the object (do not free
// it) and the pool must all outlive the view. A write to the object while the view lives
// races with whoever reads bytes().
class ReadView {
 public:
  // Begins reading the first scratch.size() bytes of `handle` in `pool`. Throws
  // std::system_error(EINVAL) for a NULL pool, handle 0, or a scratch larger than the
  // object's capacity (no read is then in progress); a hardened pool aborts when scratch is
  // larger than the size the object was allocated with.
  ReadView(zs_pool* pool, unsigned long handle, std::span<std::byte> scratch)
      : pool_(pool), handle_(handle), len_(scratch.size()) {
    mem_ = zs_obj_read_begin(pool, handle, len_, scratch.data());
    if (mem_ == nullptr) throw_errno("zs_obj_read_begin");
  }
  ReadView(const ReadView&) = delete;
  ReadView& operator=(const ReadView&) = delete;
  // Ends the read (zs_obj_read_end()): the object may move again.
  ~ReadView() { zs_obj_read_end(pool_, handle_, len_, mem_); }

  // The object's first size() bytes: straight in the pool, or in scratch. Valid while the
  // view lives; read-only.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
    return {static_cast<const std::byte*>(mem_), len_};
  }
  // Bytes viewed: the scratch's size.
  [[nodiscard]] std::size_t size() const noexcept { return len_; }

 private:
  zs_pool* pool_;
  unsigned long handle_;
  std::size_t len_;
  void* mem_;
};

// An owned pool (zs_create_pool_ex() .. zs_destroy_pool()). Move-only; a moved-from Pool
// holds no pool (get() is nullptr): allocate() and store() on it throw EINVAL and its queries
// return 0. Its methods may be called from any thread at once; destroying or moving a Pool
// must not overlap any other use of it.
class Pool {
 public:
  // Creates a pool named `name` from `config` (zero-filled = defaults), both copied, as
  // zs_create_pool_ex() does; a page source's ctx must outlive the pool. Throws
  // std::system_error with EINVAL for a bad configuration or ENOMEM when memory is short.
  explicit Pool(const std::string& name = "zsm", const zs_pool_config& config = {})
      : pool_(zs_create_pool_ex(name.c_str(), &config)) {
    if (pool_ == nullptr) throw_errno("zs_create_pool_ex");
  }
  // Takes other's pool; other is left empty. Handles into the pool stay valid.
  Pool(Pool&& other) noexcept : pool_(std::exchange(other.pool_, nullptr)) {}
  // Destroys this Pool's pool (as the destructor), then takes other's; other is left empty.
  Pool& operator=(Pool&& other) noexcept {
    if (this != &other) {
      zs_destroy_pool(pool_);
      pool_ = std::exchange(other.pool_, nullptr);
    }
    return *this;
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  // Destroys the pool and every object in it (zs_destroy_pool()). Every Handle and ReadView
  // into it must be gone or released before: a Handle destroyed later frees into freed memory.
  ~Pool() { zs_destroy_pool(pool_); }

  // The raw pool, for the C API; owned by this Pool (never destroy it). nullptr when moved from.
  [[nodiscard]] zs_pool* get() const noexcept { return pool_; }

  // Allocates `size` bytes, contents undefined. Allocation profiling counts the object under
  // `tag`: pass ZS_ALLOC_TAG_HERE() to name the caller's line, nullptr for "<untagged>".
  // Throws std::system_error with EINVAL (size 0, no pool), ENOSPC (size above one page) or
  // ENOMEM (no page, or the pool's max_pages reached).
  [[nodiscard]] Handle allocate(std::size_t size, zs_alloc_tag* tag = nullptr) {
    unsigned long h = zs_malloc_tagged(pool_, size, tag);
    if (h == 0) throw_errno("zs_malloc");
    return Handle(pool_, h);
  }
  // Allocates data.size() bytes and copies `data` into them, in one call (zs_store()); `tag`
  // as for allocate(). Throws as allocate() does; empty data is EINVAL.
  [[nodiscard]] Handle store(std::span<const std::byte> data, zs_alloc_tag* tag = nullptr) {
    unsigned long h = zs_store_tagged(pool_, data.data(), data.size(), tag);
    if (h == 0) throw_errno("zs_store");
    return Handle(pool_, h);
  }

  // zs_compact(): moves objects out of the sparsest zspages and returns the pages freed (0 at
  // once when another compaction of the pool is running). Every Handle stays valid.
  unsigned long compact() noexcept { return zs_compact(pool_); }
  // zs_drain_thread_caches(): takes back the slots threads' caches reserve.
  void drain_thread_caches() noexcept { zs_drain_thread_caches(pool_); }
  // zs_get_total_pages(): pages the pool holds.
  [[nodiscard]] unsigned long total_pages() const noexcept { return zs_get_total_pages(pool_); }
  // zs_huge_class_size(): objects of this many bytes or more take a page each.
  [[nodiscard]] std::size_t huge_class_size() const noexcept { return zs_huge_class_size(pool_); }
  // zs_pool_stats(): the pool's cumulative statistics (zero when moved from).
  [[nodiscard]] struct zs_pool_stats stats() const noexcept {
    struct zs_pool_stats s{};
    ::zs_pool_stats(pool_, &s);
    return s;
  }

 private:
  zs_pool* pool_;
};

}  // namespace zsm
