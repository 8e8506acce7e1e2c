// zsm: a thin C++20 layer over the C API in zsmalloc.h.
//
// zsm::Pool owns a zs_pool (RAII, move-only). zsm::Handle owns one object in a pool and frees
// it when destroyed (move-only, like std::unique_ptr). Reads and writes take std::span.
// Failures throw std::system_error carrying the errno the C call set. This header adds no
// state of its own: everything lives in the pool.
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

[[noreturn]] inline void throw_errno(const char* what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// One object in a pool. Empty (value 0) after a move or default construction.
class Handle {
 public:
  Handle() = default;
  Handle(zs_pool* pool, unsigned long value) noexcept : pool_(pool), value_(value) {}
  Handle(Handle&& other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), value_(std::exchange(other.value_, 0)) {}
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
  ~Handle() { reset(); }

  // Free the object now.
  void reset() noexcept {
    if (value_ != 0) zs_free(pool_, value_);
    value_ = 0;
  }
  // Give up ownership: the caller frees the raw handle with zs_free().
  [[nodiscard]] unsigned long release() noexcept { return std::exchange(value_, 0); }
  [[nodiscard]] unsigned long value() const noexcept { return value_; }
  explicit operator bool() const noexcept { return value_ != 0; }

  // Bytes the object can hold.
  [[nodiscard]] std::size_t capacity() const { return zs_obj_capacity(pool_, value_); }

  // Overwrite the object's first bytes with `data`.
  void write(std::span<const std::byte> data) {
    errno = 0;
    zs_obj_write(pool_, value_, data.data(), data.size());
    if (errno != 0) throw_errno("zs_obj_write");
  }

  // Copy the object's first out.size() bytes into `out`.
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

// A zero-copy view of an object's first bytes; the object stays put while the view lives.
// `scratch` must hold size() bytes: it is used when the bytes span two pages.
class ReadView {
 public:
  ReadView(zs_pool* pool, unsigned long handle, std::span<std::byte> scratch)
      : pool_(pool), handle_(handle), len_(scratch.size()) {
    mem_ = zs_obj_read_begin(pool, handle, len_, scratch.data());
    if (mem_ == nullptr) throw_errno("zs_obj_read_begin");
  }
  ReadView(const ReadView&) = delete;
  ReadView& operator=(const ReadView&) = delete;
  ~ReadView() { zs_obj_read_end(pool_, handle_, len_, mem_); }

  [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
    return {static_cast<const std::byte*>(mem_), len_};
  }
  [[nodiscard]] std::size_t size() const noexcept { return len_; }

 private:
  zs_pool* pool_;
  unsigned long handle_;
  std::size_t len_;
  void* mem_;
};

// An owned pool.
class Pool {
 public:
  explicit Pool(const std::string& name = "zsm", const zs_pool_config& config = {})
      : pool_(zs_create_pool_ex(name.c_str(), &config)) {
    if (pool_ == nullptr) throw_errno("zs_create_pool_ex");
  }
  Pool(Pool&& other) noexcept : pool_(std::exchange(other.pool_, nullptr)) {}
  Pool& operator=(Pool&& other) noexcept {
    if (this != &other) {
      zs_destroy_pool(pool_);
      pool_ = std::exchange(other.pool_, nullptr);
    }
    return *this;
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool() { zs_destroy_pool(pool_); }

  [[nodiscard]] zs_pool* get() const noexcept { return pool_; }

  // Allocate `size` bytes, contents undefined. Allocation profiling counts the object under
  // `tag`: pass ZS_ALLOC_TAG_HERE() to name the caller's line, nullptr for "<untagged>".
  [[nodiscard]] Handle allocate(std::size_t size, zs_alloc_tag* tag = nullptr) {
    unsigned long h = zs_malloc_tagged(pool_, size, tag);
    if (h == 0) throw_errno("zs_malloc");
    return Handle(pool_, h);
  }
  // Allocate and fill with `data`; `tag` as for allocate().
  [[nodiscard]] Handle store(std::span<const std::byte> data, zs_alloc_tag* tag = nullptr) {
    unsigned long h = zs_store_tagged(pool_, data.data(), data.size(), tag);
    if (h == 0) throw_errno("zs_store");
    return Handle(pool_, h);
  }

  unsigned long compact() noexcept { return zs_compact(pool_); }
  [[nodiscard]] unsigned long total_pages() const noexcept { return zs_get_total_pages(pool_); }
  [[nodiscard]] std::size_t huge_class_size() const noexcept { return zs_huge_class_size(pool_); }
  [[nodiscard]] struct zs_pool_stats stats() const noexcept {
    struct zs_pool_stats s{};
    ::zs_pool_stats(pool_, &s);
    return s;
  }

 private:
  zs_pool* pool_;
};

}  // namespace zsm
