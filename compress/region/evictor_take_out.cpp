// Taking the evictor's victims out of the region (evictor.h): spans of them moved into
// probation slots in one UFFDIO_MOVE, or dropped when clean, and what the kernel may refuse.
#include "evictor.h"

#include <cstring>

#include "kernel_ordered.h"

namespace zsm::region {
namespace {

// The program's threads wrote the page; the kernel orders those writes with this read (the
// write protection, or the page changing place).
void copy_page_ordered_by_kernel(std::byte* out, const std::byte* page) {
  ordered_by_kernel([&] { std::memcpy(out, page, kPageSize); });
}

// Writes the page's first word back to itself, atomically (an add of 0): the kernel gives
// the region a page of its own in place of one shared with a child of fork(), and nothing a
// program thread writes meanwhile is lost. Only called on a writable, mapped page whose lock
// is held, so it cannot fault on the region.
void unshare_by_writing(uintptr_t addr) {
  ordered_by_kernel([&] { __atomic_fetch_add(reinterpret_cast<uint64_t*>(addr), 0, __ATOMIC_RELAXED); });
}

}  // namespace

// Locks the pages [a, b), each unmapped, so that no fault maps one while a span moves over
// it; appends them to holes_. False (none of them kept) when one is mapped or busy.
bool Evictor::lock_holes(uint32_t a, uint32_t b) {
  size_t before = holes_.size();
  for (uint32_t p = a; p < b; ++p) {
    PageLock l = PageLock::try_lock(parts_.pages, p);
    if (!l || l.state().mapped()) {  // busy, or mapped and not a victim: the span ends here
      holes_.resize(before);
      return false;
    }
    holes_.push_back(std::move(l));
  }
  return true;
}

// Takes the locked victims (ascending, but for a wrap of the hand) out of the region, and
// unlocks them. Victims of one kind (clean or not) whose pages between are all unmapped form
// a span: clean ones are dropped, the others move in one UFFDIO_MOVE passing over the holes
// (one call, where the kernel flushes the TLB once for each run of neighbouring pages in it).
// How many left the region.
uint32_t Evictor::take_out(uint32_t n, PageLock* victims) {
  auto page = [victims](uint32_t k) { return victims[k].page(); };
  uint32_t i = 0;
  while (i < n) {
    holes_.clear();
    const bool clean = victims[i].state().kind == Kind::clean;
    uint32_t j = i + 1;
    while (j < n && (victims[j].state().kind == Kind::clean) == clean && page(j) > page(j - 1) &&
           page(j) - page(i) < kMaxSpan && lock_holes(page(j - 1) + 1, page(j))) {
      ++j;
    }
    if (clean) {
      drop_clean_span(victims + i, j - i);
      i = j;
      continue;
    }
    uint32_t span = page(j - 1) - page(i) + 1;
    uint32_t first_slot = 0;
    uint32_t got = parts_.probation.reserve(span, &first_slot);
    if (got < span) {  // the ring's end, or full: this victim alone
      for (uint32_t k = 0; k < got; ++k) parts_.probation.give_up(first_slot + k);
      holes_.clear();
      j = i + 1;
      span = 1;
      if (parts_.probation.reserve(1, &first_slot) == 0 &&
          (retire_oldest(kBatch, work_.data()) == 0 || parts_.probation.reserve(1, &first_slot) == 0)) {
        break;  // the ring is full of pages the pool cannot take now
      }
    }
    move_span(victims + i, j - i, first_slot, span);
    i = j;
  }
  holes_.clear();
  uint32_t out = 0;
  for (uint32_t k = 0; k < n; ++k) {
    if (k < i && !victims[k].state().mapped()) ++out;
    victims[k].release();
  }
  return out;
}

// Clean victims (write-protected, their copies valid) are dropped, not moved into probation:
// one MADV_DONTNEED over the span (its holes locked and unmapped) flushes the TLB once, where
// UFFDIO_MOVE flushes once for each run of neighbouring pages (Linux 6.18 batches only those),
// and a moved page's slot must be dropped again when it retires. On the AMD EPYC VM a
// scattered clean victim cost 16-30 us inside UFFDIO_MOVE (a flush each, under the
// hypervisor); dropped, 3-5 us of the evictor's whole time a page (docs/region.md, "Clean
// pages"). A write to one meanwhile waits for its lock
// and refaults. A span the kernel refuses as a whole (the program unmapped or locked part of
// it, against the contract: the call drops what comes before and fails) is dropped again a
// page at a time: a victim no longer mapped is gone, as a move would have found it; one the
// kernel will not drop stays.
void Evictor::drop_clean_span(PageLock* victims, uint32_t n) {
  const uint32_t span = victims[n - 1].page() - victims[0].page() + 1;
  const bool whole = drop_pages(addr(victims[0].page()), size_t{span} * kPageSize) == 0;
  for (uint32_t k = 0; k < n; ++k) {
    Out out = whole ? Out::dropped_clean : drop_clean_page(victims[k].page());
    after_out(victims[k], kNoSlot, out, true);
  }
}

Evictor::Out Evictor::drop_clean_page(uint32_t p) {
  int rc = drop_pages(addr(p), kPageSize);
  if (rc == -ENOMEM) return Out::gone;  // unmapped by the program
  if (rc == -EINVAL) return Out::kept;  // a mapping of the program's own there
  check(rc, "madvise(MADV_DONTNEED) of a clean victim");
  return Out::dropped_clean;
}

// The victims pages[0..n) within [pages[0], pages[0] + span), to slots from first_slot on (a
// page at offset d to first_slot + d). Where the kernel stops at a page (EBUSY), that page and
// the victims after it are handled one at a time.
void Evictor::move_span(PageLock* victims, uint32_t n, uint32_t first_slot, uint32_t span) {
  const uint32_t base = victims[0].page();
  size_t done_bytes = 0;
  int rc = -EBUSY;
  if (parts_.calls.can_move()) {
    rc = parts_.calls.move(parts_.probation.slot_addr(first_slot), addr(base), span * kPageSize, true,
                           &done_bytes, true);
  }
  auto done = static_cast<uint32_t>(done_bytes / kPageSize);
  uint32_t k = 0;
  for (uint32_t d = 0; d < span; ++d) {
    bool victim = k < n && victims[k].page() == base + d;
    if (!victim) {
      parts_.probation.give_up(first_slot + d);
      continue;
    }
    Out o = d < done ? Out::moved
                     : parts_.calls.can_move() ? move_out(victims[k], first_slot + d)
                                               : copy_out(victims[k], first_slot + d);
    after_out(victims[k], first_slot + d, o, false);
    ++k;
  }
  (void)rc;  // what it stopped at was handled page by page above
}

// One page out by UFFDIO_MOVE, with what the kernel may refuse handled.
Evictor::Out Evictor::move_out(PageLock& l, uint32_t slot) {
  const uint32_t p = l.page();
  bool unlocked = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    int rc = move_page(p, slot);
    if (rc == 0) return Out::moved;
    if (rc == -EBUSY) return handle_busy(l, slot);
    if (rc == -ENOENT) return Out::gone;  // dropped by the program behind the region's back
    if (rc == -EEXIST) {                  // the slot was populated (mlockall): empty it first
      check(drop_pages(parts_.probation.slot_addr(slot), kPageSize), "madvise(MADV_DONTNEED) of a slot");
      continue;
    }
    if (rc == -EINVAL && !unlocked) {  // mlock()ed: the region's ranges must not be locked
      unlock_ranges();
      unlocked = true;
      continue;
    }
    if (rc == -EINVAL) return Out::kept;  // mprotect()ed by the program: it stays mapped
    check(rc, "UFFDIO_MOVE (eviction)");
  }
  return Out::kept;
}

// UFFDIO_MOVE of page p into a slot: 0 or -errno. The kernel's batched UFFDIO_MOVE (seen on
// Linux 6.18.44) can move a page and still fail with EEXIST: when a page's move is retried
// inside the kernel (EAGAIN: its folio's lock was contended), the retry's success leaves the
// error set, the same page is tried once more, and the kernel finds its own page at the
// destination. So an EEXIST with p no longer mapped is p moved (the slot must not be emptied:
// its bytes are p's); a slot that mlockall() populated leaves p mapped.
int Evictor::move_page(uint32_t p, uint32_t slot) {
  int rc = parts_.calls.move(parts_.probation.slot_addr(slot), addr(p), kPageSize, true, nullptr);
  if (rc == -EEXIST && !page_present(addr(p))) return 0;
  return rc;
}

// EBUSY: pinned for I/O, or shared with a child of fork(). A clean page's copy is its
// contents: it is only dropped. A dirty one is made the region's own, and moved.
Evictor::Out Evictor::handle_busy(PageLock& l, uint32_t slot) {
  const uint32_t p = l.page();
  if (l.state().kind == Kind::clean) {
    check(drop_pages(addr(p), kPageSize), "madvise(MADV_DONTNEED)");
    return Out::dropped_clean;
  }
  unshare_by_writing(addr(p));
  int rc = move_page(p, slot);
  if (rc == 0) return Out::moved;
  if (rc != -EBUSY) check(rc, "UFFDIO_MOVE (eviction, after unsharing)");
  bump(parts_.counters.io_pinned);
  moves_.set_mark(l, true);  // pinned for I/O: passed over for a turn of the hand
  return Out::kept;
}

// Without UFFDIO_MOVE: write-protect, copy into the slot, drop. A write meanwhile waits for
// the page's lock, then refaults and finds the page in its slot.
Evictor::Out Evictor::copy_out(PageLock& l, uint32_t slot) {
  const uint32_t p = l.page();
  if (l.state().kind == Kind::resident) check(parts_.calls.write_protect(addr(p), kPageSize, true), "UFFDIO_WRITEPROTECT");
  copy_page_ordered_by_kernel(parts_.probation.slot_bytes(slot), reinterpret_cast<std::byte*>(addr(p)));
  int rc = drop_pages(addr(p), kPageSize);
  if (rc == -EINVAL) {  // mlock()ed
    unlock_ranges();
    rc = drop_pages(addr(p), kPageSize);
  }
  check(rc, "madvise(MADV_DONTNEED)");
  return Out::moved;
}

// The victim's new state once it is out (or not); `stamp`: a clean one dropped by the
// evictor's choice counts for the refault window (probation.h).
void Evictor::after_out(PageLock& l, uint32_t slot, Out out, bool stamp) {
  if (out == Out::moved) return moves_.park(l, slot);
  if (slot != kNoSlot) parts_.probation.give_up(slot);
  if (out == Out::dropped_clean) moves_.drop_clean(l, stamp);
  if (out == Out::gone) moves_.forget(l, true);  // it reads as zeros
}

// The program mlock()ed the region (mlockall(MCL_CURRENT) after creation): its ranges are
// unlocked again, so that pages can leave them (region.h).
void Evictor::unlock_ranges() {
  if (unlock_size_ != 0) unlock(reinterpret_cast<void*>(unlock_base_), unlock_size_);
  unlock(reinterpret_cast<void*>(parts_.probation.base()), parts_.probation.bytes());
}

}  // namespace zsm::region
