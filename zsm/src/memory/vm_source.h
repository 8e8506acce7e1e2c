// The default page source: reserved virtual ranges ("reservations"), handed out page by page.
//
// Each reservation is one PROT_NONE mapping of the reservation unit (16 GiB by default), made
// read-write in steps of kCommitStep as pages are first needed, so the process keeps about two
// mappings per reservation however many pages it uses. When the newest reservation is used up
// the source maps another, until the reservations reach the source's limit in all (kMaxLimit
// by default); then alloc_page() fails with ENOMEM. Where the OS refuses a reservation
// (ulimit -v, strict overcommit) the source asks for halves of it, down to kMinReserve.
//
// Pages are handed out one at a time (alloc_page(), the zs_page_source callbacks) or as runs
// of up to kMaxRun adjacent pages (alloc_run(), which a pool on this source uses for each
// zspage, so that a zspage's pages are contiguous: zspage/zspage.h). Freed runs go on a
// LIFO "resident" stack of their length and are reused first, while their memory is still
// backed and warm; past `retain` pages in all the oldest half of each length's stack is given
// back to the OS with madvise(DONTNEED) in address-sorted runs and moves to that length's
// "released" stack, reused next. New pages are taken only when both stacks of the length are
// empty. A run is never split or merged, except that a single page may be taken from a longer
// free run when nothing else is left (the rest goes back as a shorter run), and that the tail
// of a reservation too short for a run is handed out as single pages; a run that cannot be
// had fails without errno, and the pool then takes single pages. The stacks hold runs of
// every reservation alike: nothing needs to know which reservation a page came from. They
// never allocate on free: each stack's capacity grows with the runs of its length handed
// out.
//
// Thread-safe (one mutex); the pool calls it only on its slow paths. Depends on POSIX only.
#pragma once

#include <zsm/zsmalloc.h>

#include <cstddef>
#include <vector>

#include "base/compiler.h"
#include "base/lock.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

class VmSource {
 public:
  static constexpr size_t kDefaultReserve = size_t{16} << 30;
  // The largest reservation: a bigger unit would gain nothing and could take most of the
  // address space in one mapping.
  static constexpr size_t kMaxReserve = size_t{1} << 40;
  // 128 TiB, the user address space of x86-64 and arm64 with 48-bit addresses. Page addresses
  // are kept whole in zspage metadata (zspage/obj.h encodes only the metadata's address), so no
  // encoding limits them; one pool cannot use this much anyway: its 2^30 handle cells hold at
  // most 2^30 objects of at most a page each (64 TiB at 64 KiB pages).
  static constexpr size_t kMaxLimit = ZS_VM_SOURCE_MAX_BYTES;
  static constexpr size_t kDefaultRetain = 256;
  // The longest run alloc_run() hands out (the pool's longest zspage chain).
  static constexpr size_t kMaxRun = 16;

  // nullptr with errno set on failure: EINVAL for a page size that is not a power of two of
  // at least 4096 or a limit below one page, ENOMEM when not even the first reservation can
  // be made. reserve 0 = kDefaultReserve, capped at kMaxReserve and rounded up to whole
  // pages; limit 0 = kMaxLimit, capped there and rounded down to whole pages; retain as given.
  static VmSource* create(size_t page_size, size_t reserve, size_t limit, size_t retain);
  ~VmSource();
  VmSource(const VmSource&) = delete;
  VmSource& operator=(const VmSource&) = delete;

  void* alloc_page() ZSM_EXCLUDES(lock_);
  void free_page(void* page) ZSM_EXCLUDES(lock_);
  // `n` adjacent pages (1 <= n <= kMaxRun), the first aligned to the page size; nullptr when
  // no run of n is free and none can be made (errno untouched: the caller takes pages one at
  // a time instead). A run goes back whole, with free_run() and the same n.
  void* alloc_run(size_t n) ZSM_EXCLUDES(lock_);
  void free_run(void* first, size_t n) ZSM_EXCLUDES(lock_);

  [[nodiscard]] size_t pages_in_use() ZSM_EXCLUDES(lock_);
  [[nodiscard]] size_t pages_resident() ZSM_EXCLUDES(lock_);

  // Adapters for struct zs_page_source.
  static void* alloc_page_cb(void* self) { return static_cast<VmSource*>(self)->alloc_page(); }
  static void free_page_cb(void* self, void* page) {
    static_cast<VmSource*>(self)->free_page(page);
  }

 private:
  struct Reservation {
    char* map;        // the mapping, as mmap returned it
    size_t map_len;
    char* base;       // page-aligned start of the usable range
    size_t size;      // usable bytes from base, whole pages
  };

  VmSource(size_t page_size, size_t reserve, size_t limit, size_t retain)
      : page_size_(page_size), reserve_(reserve), limit_(limit), retain_(retain) {}
  // Free runs of one length: still backed, and given back to the OS. Room for every run of
  // the length ever handed out is kept in both (`handed_out`), so that a free never allocates.
  struct RunStacks {
    std::vector<char*> resident;
    std::vector<char*> released;
    size_t handed_out = 0;
  };

  char* take_run(size_t n) ZSM_REQUIRES(lock_);
  char* new_run(size_t n) ZSM_REQUIRES(lock_);
  char* page_of_longer_run() ZSM_REQUIRES(lock_);
  bool room_for_runs(size_t n, size_t more) ZSM_REQUIRES(lock_);
  bool make_room(size_t bytes) ZSM_REQUIRES(lock_);
  bool reserve_more() ZSM_REQUIRES(lock_);
  bool map_reservation(size_t bytes) ZSM_REQUIRES(lock_);
  bool commit_more() ZSM_REQUIRES(lock_);
  bool hand_out_tail() ZSM_REQUIRES(lock_);
  void release_oldest() ZSM_REQUIRES(lock_);

  Mutex lock_;
  const size_t page_size_;
  const size_t reserve_;     // bytes per reservation, whole pages
  const size_t limit_;       // bytes of all reservations together, whole pages
  const size_t retain_;
  std::vector<Reservation> reservations_ ZSM_GUARDED_BY(lock_);  // new pages from the last
  size_t reserved_ ZSM_GUARDED_BY(lock_) = 0;     // bytes of all reservations
  size_t committed_ ZSM_GUARDED_BY(lock_) = 0;    // bytes of the last made read-write
  size_t bump_ ZSM_GUARDED_BY(lock_) = 0;         // bytes of the last ever handed out
  size_t bumped_pages_ ZSM_GUARDED_BY(lock_) = 0;     // ever handed out, of all reservations
  size_t in_use_ ZSM_GUARDED_BY(lock_) = 0;
  size_t resident_pages_ ZSM_GUARDED_BY(lock_) = 0;   // in the resident stacks
  size_t released_pages_ ZSM_GUARDED_BY(lock_) = 0;   // in the released stacks
  RunStacks runs_[kMaxRun + 1] ZSM_GUARDED_BY(lock_);  // by length; [0] unused
};

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
