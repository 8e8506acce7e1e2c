// zsm::Region: the C++ face of zsm/region.h (whose top comment is the contract). RAII: the
// destructor destroys the region; moves transfer it. Errors are std::system_error in the
// generic category with the C call's errno; a failed construction's what() carries
// zsm_region_last_error()'s line. Region::Pin keeps a range pinned for its own lifetime.
#pragma once

#include <cerrno>
#include <cstddef>
#include <string>
#include <system_error>
#include <utility>

#include <zsm/region.h>

namespace zsm {

class Region {
 public:
  explicit Region(size_t size, const zsm_region_options& options = {})
      : region_(zsm_region_create(size, &options)) {
    if (region_ == nullptr) {
      throw std::system_error(errno, std::generic_category(),
                              std::string("zsm_region_create: ") + zsm_region_last_error());
    }
  }
  ~Region() { zsm_region_destroy(region_); }
  Region(Region&& other) noexcept : region_(std::exchange(other.region_, nullptr)) {}
  Region& operator=(Region&& other) noexcept {
    if (this != &other) {
      zsm_region_destroy(region_);
      region_ = std::exchange(other.region_, nullptr);
    }
    return *this;
  }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  [[nodiscard]] std::byte* data() const noexcept {
    return static_cast<std::byte*>(zsm_region_base(region_));
  }
  [[nodiscard]] size_t size() const noexcept { return zsm_region_size(region_); }
  [[nodiscard]] zsm_region* get() const noexcept { return region_; }

  [[nodiscard]] struct zsm_region_stats stats() const {
    struct zsm_region_stats s {};
    check(zsm_region_stats(region_, &s), "zsm_region_stats");
    return s;
  }
  void prefetch(void* addr, size_t len) { check(zsm_region_prefetch(region_, addr, len), "prefetch"); }
  void evict(void* addr, size_t len) { check(zsm_region_evict(region_, addr, len), "evict"); }
  void discard(void* addr, size_t len) { check(zsm_region_discard(region_, addr, len), "discard"); }
  void set_budget(size_t bytes) { check(zsm_region_set_budget(region_, bytes), "set_budget"); }

  // A pinned range, unpinned when the Pin goes.
  class Pin {
   public:
    Pin(Region& region, void* addr, size_t len) : region_(region.region_), addr_(addr), len_(len) {
      check(zsm_region_pin(region_, addr, len), "pin");
    }
    ~Pin() { zsm_region_unpin(region_, addr_, len_); }
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;

   private:
    zsm_region* region_;
    void* addr_;
    size_t len_;
  };

 private:
  static void check(int rc, const char* what) {
    if (rc < 0) throw std::system_error(-rc, std::generic_category(), std::string("zsm region ") + what);
  }
  zsm_region* region_;
};

}  // namespace zsm
