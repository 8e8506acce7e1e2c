// Retiring the evictor's probation pages (evictor.h): the oldest compressed into the pool (or
// only dropped, their copies still valid), their slots dropped in runs; and the write-back
// hand, which sends the pool's longest-stored copies to the backing file.
#include "evictor.h"

#include <algorithm>

namespace zsm::region {

// Retires up to n of the oldest probation pages, then drops their slots' memory, runs of
// neighbouring slots in one call (x86 flushes a run of 33 pages or more as a whole TLB, a
// shorter one page by page). Each retired page's budget is given back at once, and faults
// waiting for room are woken every kRoomEvery pages: a fault past the hard limit waits for a
// few pages' compression, not a batch's; resident memory may exceed the budget meanwhile by
// the call's slots, kBatch pages at most, until they are dropped at its end. With
// `in_for_ms`, only pages in probation at least that long (aging's cold ones): of those, an
// incompressible page goes back into the region while the budget has room (keep_resident).
// How many left probation: retired, or kept (only with `in_for_ms`).
uint32_t Evictor::retire_oldest(uint32_t n, std::byte* work, uint32_t in_for_ms) {
  Probation::Entry oldest[kBatch];
  size_t k = parts_.probation.oldest(std::min(n, kBatch), oldest);
  if (in_for_ms != 0) {
    const uint32_t now = Probation::now_ms();
    k = static_cast<size_t>(std::find_if(oldest, oldest + k, [&](const Probation::Entry& e) {
                              return now - e.filled_ms < in_for_ms;
                            }) -
                            oldest);
  }
  uint32_t slots[kBatch];
  uint32_t retired = 0, kept = 0;
  for (size_t i = 0; i < k; ++i) {
    PageLock l = PageLock::try_lock(parts_.pages, oldest[i].page);
    if (!l) continue;  // a fault is taking it back
    if (l.state().kind != Kind::probation || l.state().slot != oldest[i].slot) continue;  // it left its slot
    const Retired done = retire_page(l, true, work, in_for_ms != 0);
    if (done == Retired::pool_full) break;
    if (done == Retired::kept) {  // back in the region, its slot left
      ++kept;
      continue;
    }
    l.release();
    slots[retired++] = oldest[i].slot;
    if (retired % kRoomEvery != 0) continue;
    if (pool_grew_) pool_grew_();
    parts_.budget.room_made();
  }
  moves_.release_slots(slots, retired, false);
  return retired + kept;
}

// The slots faults copied their pages back from: dropped, many in one call. Whether any.
bool Evictor::drain_stale() {
  uint32_t slots[4 * kBatch];
  size_t n = parts_.probation.take_stale(slots, std::size(slots));
  std::sort(slots, slots + n);
  moves_.release_slots(slots, static_cast<uint32_t>(n), true);
  return n > 0;
}

// The page's copy made from its slot (or kept, when it is still valid): it is stored, its
// budget given back, and its slot is the caller's to release. A `cold` page (aging's, not the
// budget's) that does not compress below kKeepAbove goes back into the region instead.
Evictor::Retired Evictor::retire_page(PageLock& l, bool stamp, std::byte* work, bool cold) {
  const bool compress = !l.state().has_copy();
  if (compress) {
    CopyStore::Compressed c = parts_.copies.compress(parts_.probation.slot_bytes(l.state().slot), work);
    if (cold && incompressible(c) && keep_resident(l)) return Retired::kept;
    if (!store_or_write_back(c, l, work)) return Retired::pool_full;
  }
  moves_.retire(l, compress, stamp);
  return Retired::stored;
}

// g-swap stores nothing that compresses to more than about 73 % of a page: it would save
// little and cost a decompression at every touch.
bool Evictor::incompressible(const CopyStore::Compressed& c) {
  return c.copy == CopyKind::whole || (c.copy == CopyKind::pool && c.length > kKeepAbove);
}

// A probation page copied back into the region, as a fault from probation does, with its mark
// set (the hand's next pass spares it), when the budget has a page for it below its high
// watermark. Its slot is left (stale, dropped by the next drain, age_slice's first step).
bool Evictor::keep_resident(PageLock& l) {
  // Below the high watermark only: the slack past it is the faults', and past it the page is
  // stored as any other.
  if (parts_.budget.used() + 1 > parts_.budget.high_watermark() || !parts_.budget.try_take(1)) return false;
  const uint32_t slot = l.state().slot;
  moves_.map(l, Kind::resident, true);
  check(parts_.calls.copy(addr(l.page()), parts_.probation.slot_bytes(slot), kPageSize, false, nullptr),
        "UFFDIO_COPY (an incompressible page kept)");
  moves_.leave_slot(slot);
  bump(parts_.counters.kept_incompressible);
  return true;
}

// Within the pool's budget, making room in it by writing copies to the file; what the file
// cannot take (no file, or full) the pool holds past its budget: a page never stays
// decompressed for want of room (docs/region.md, the backing file). False only when the pool
// has no memory left.
// A write-back pass may send nothing and still make room for the next (the second hand's
// first pass only clears the marks of pages stored since its last): the file is given four.
bool Evictor::store_or_write_back(const CopyStore::Compressed& c, PageLock& l, std::byte* work) {
  for (int tries = 0; parts_.copies.has_file() && tries < 4; ++tries) {
    if (parts_.copies.put(c, l, false)) return true;
    if (parts_.copies.file_full()) break;
    write_back_batch(work);
  }
  return parts_.copies.put(c, l, true);  // what the file cannot take, the pool holds
}

// A full file takes nothing until a copy on it is freed: the pool then holds the overflow, and
// there is no write-back to wake for.
bool Evictor::pool_near_budget() const {
  uint64_t budget = parts_.copies.pool_budget_bytes();
  if (budget == 0 || !parts_.copies.has_file()) return false;
  return parts_.copies.pool_bytes() + budget / 16 > budget && !parts_.copies.file_full();
}

// Sends a batch of the pool's copies to the backing file, then compacts the pool. The second
// hand passes over a stored page once before it takes it (a page stored since its last turn
// waits for the next). Whether any went.
bool Evictor::write_back_batch(std::byte* work) {
  if (!parts_.copies.has_file() || parts_.copies.file_full() || get(parts_.counters.compr_bytes) == 0) return false;
  SpinGuard one_at_a_time(writeback_lock_);  // the evictor, or a range call's eviction
  uint32_t written = 0;
  std::byte* buf = work + parts_.copies.work_bytes();
  for (uint64_t steps = 0; steps < 2 * uint64_t{npages_} && written < kWritebackBatch; ++steps) {
    uint32_t p = parts_.pages.next_used(writeback_hand_);  // over chunks never used, at once
    if (p == kNoPage && (p = parts_.pages.next_used(0)) == kNoPage) break;
    writeback_hand_ = p + 1 == npages_ ? 0 : p + 1;
    PageState hint = parts_.pages.peek(p);
    if (hint.kind != Kind::stored || !in_a_pool(hint.copy)) continue;
    PageLock l = PageLock::try_lock(parts_.pages, p);
    if (!l || l.state().kind != Kind::stored || !in_a_pool(l.state().copy)) continue;
    if (l.state().referenced) {
      moves_.set_mark(l, false);
    } else if (parts_.copies.move_to_file(l, buf)) {
      ++written;
    } else {
      break;  // the file is full
    }
  }
  if (written == 0) return false;
  parts_.copies.end_writeback_batch();
  return true;
}

}  // namespace zsm::region
