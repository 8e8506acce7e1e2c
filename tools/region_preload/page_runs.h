// PageRuns: the allocator inside the preload library's region. It hands out runs of whole
// pages of one address range, first fit, and takes them back, merging free neighbours. It
// never calls malloc (it runs inside malloc): its two tables live in anonymous mappings of
// their own, reserved for the worst case and touched only as far as they are used:
// - the free runs, sorted by first page, never adjacent (a release merges them);
// - per page, the length in pages of the allocation that starts there (0 elsewhere).
// Not thread-safe: the caller holds its lock around every call. Depends on libc only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zsm_preload {

class PageRuns {
 public:
  // A page run: `pages` pages from page index `first` of the range.
  struct Run {
    size_t first;
    size_t pages;
  };

  PageRuns() = default;
  PageRuns(const PageRuns&) = delete;
  PageRuns& operator=(const PageRuns&) = delete;
  ~PageRuns();

  // Manage [base, base + pages * page_size), all free. False (errno set) if the tables cannot
  // be mapped or the arguments are bad (base not aligned, page_size not a power of two).
  bool init(void* base, size_t pages, size_t page_size);

  // `pages` pages whose first address is a multiple of align_pages pages; nullptr if no free
  // run fits (or pages is 0).
  void* allocate(size_t pages, size_t align_pages);

  // The allocation starting at `p`: its length in pages, or 0 if p starts none.
  size_t pages_of(const void* p) const;

  // Free the allocation starting at `p`; its run, to be discarded. {0, 0} if p starts none.
  Run release(void* p);

  // Grow the allocation at `p` to `pages` in place, if the pages after it are free.
  bool grow(void* p, size_t pages);

  // Shrink the allocation at `p` to `pages` (at least 1); the freed tail, to be discarded.
  Run shrink(void* p, size_t pages);

  // Whether every page of [p, p + pages pages) is in an allocation (a mapping, to the
  // program): the kernel's ENOMEM otherwise. p page aligned, inside the range.
  bool mapped(const void* p, size_t pages) const;

  // Makes the pages of [p, p + pages pages) one allocation starting at p, as mmap(MAP_FIXED)
  // maps there: what was allocated there is first freed as unmap() frees it. False (nothing
  // changed) outside the range.
  bool take_at(void* p, size_t pages);

  // Frees the allocated pages of [p, p + pages pages), as munmap() frees part of a mapping:
  // what is left of an allocation on either side stays allocated; pages not allocated are
  // left as they are. p must be page aligned and inside the range.
  void unmap(const void* p, size_t pages);

  bool contains(const void* p) const {
    auto a = reinterpret_cast<uintptr_t>(p);
    return a >= base_ && a < base_ + pages_ * page_size_;
  }
  void* address(size_t page) const { return reinterpret_cast<void*>(base_ + page * page_size_); }
  size_t free_pages() const;
  size_t free_runs() const { return runs_; }

 private:
  size_t page_index(const void* p) const {
    return (reinterpret_cast<uintptr_t>(p) - base_) / page_size_;
  }
  bool starts_allocation(const void* p) const;
  void insert_free(Run run);  // merges with its neighbours
  void erase_run(size_t at);
  void insert_run(size_t at, Run run);

  uintptr_t base_ = 0;
  size_t pages_ = 0;
  size_t page_size_ = 0;
  Run* free_ = nullptr;      // sorted, capacity_ entries
  size_t runs_ = 0;
  size_t capacity_ = 0;
  uint32_t* length_at_ = nullptr;  // per page
};

}  // namespace zsm_preload
