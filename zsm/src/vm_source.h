// The default page source: one reserved virtual range per source, handed out page by page.
//
// The range is reserved PROT_NONE once and made read-write in steps of kCommitStep as pages
// are first needed, so the process keeps two mappings however many pages it uses. Freed pages
// go on a LIFO "resident" stack and are reused first, while their memory is still backed and
// warm; past `retain` pages the oldest half is given back to the OS with madvise(DONTNEED) in
// address-sorted runs and the pages move to the "released" stack, reused next. The stacks
// never allocate on free: their capacity grows with the committed part of the range.
//
// Thread-safe (one mutex); the pool calls it only on its slow paths. Depends on POSIX only.
#pragma once

#include <cstddef>
#include <vector>

#include "compiler.h"
#include "lock.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

class VmSource {
 public:
  static constexpr size_t kDefaultReserve = size_t{16} << 30;
  static constexpr size_t kMaxReserve = size_t{1} << 40;
  static constexpr size_t kDefaultRetain = 256;

  // nullptr with errno set on failure. reserve 0 = kDefaultReserve, capped at kMaxReserve;
  // retain as given.
  static VmSource* create(size_t page_size, size_t reserve, size_t retain);
  ~VmSource();
  VmSource(const VmSource&) = delete;
  VmSource& operator=(const VmSource&) = delete;

  void* alloc_page() ZSM_EXCLUDES(lock_);
  void free_page(void* page) ZSM_EXCLUDES(lock_);

  [[nodiscard]] size_t pages_in_use() ZSM_EXCLUDES(lock_);
  [[nodiscard]] size_t pages_resident() ZSM_EXCLUDES(lock_);

  // Adapters for struct zs_page_source.
  static void* alloc_page_cb(void* self) { return static_cast<VmSource*>(self)->alloc_page(); }
  static void free_page_cb(void* self, void* page) {
    static_cast<VmSource*>(self)->free_page(page);
  }

 private:
  VmSource(char* map, size_t map_len, char* base, size_t size, size_t page_size, size_t retain);
  bool commit_more() ZSM_REQUIRES(lock_);
  void release_oldest() ZSM_REQUIRES(lock_);

  Mutex lock_;
  char* const map_;          // the mapping, as mmap returned it
  const size_t map_len_;
  char* const base_;         // page-aligned start of the usable range
  const size_t size_;        // usable bytes from base_
  const size_t page_size_;
  const size_t retain_;
  size_t committed_ ZSM_GUARDED_BY(lock_) = 0;   // bytes made read-write from base_
  size_t bump_ ZSM_GUARDED_BY(lock_) = 0;        // bytes ever handed out from base_
  size_t in_use_ ZSM_GUARDED_BY(lock_) = 0;
  std::vector<char*> resident_ ZSM_GUARDED_BY(lock_);   // freed, memory still backed
  std::vector<char*> released_ ZSM_GUARDED_BY(lock_);   // freed and given back to the OS
};

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
