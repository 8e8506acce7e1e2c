// The page transitions (page_moves.h).
#include "page_moves.h"

#include <algorithm>

#include "page_calls.h"

namespace zsm::region {

// Every change of a page's kind, so that the clean count follows it.
void PageMoves::set_kind(PageState& s, Kind k) {
  if (s.kind == Kind::clean) drop(counters_.clean);
  if (k == Kind::clean) bump(counters_.clean);
  s.kind = k;
}

void PageMoves::map(PageLock& l, Kind k, bool referenced) {
  PageState& s = l.state_to_change();
  if (s.kind == Kind::probation || s.kind == Kind::stored) {  // back after the hand took it out
    l.set_heat(std::min<uint8_t>(l.heat() + 1, kMostHeat));
  }
  bump(counters_.resident);
  set_kind(s, k);
  s.referenced = referenced;
  l.set_mapped(true);
}

void PageMoves::unmap_untaken(PageLock& l, bool write_back_mark) {
  unmap(l);
  PageState& s = l.state_to_change();
  set_kind(s, Kind::stored);
  s.referenced = write_back_mark;
  budget_.give(1);
}

void PageMoves::leave_slot(uint32_t slot) {
  if (!probation_.vacate_stale(slot)) release_slots(&slot, 1, true);
}

void PageMoves::dirty(PageLock& l, bool may_allocate, bool mark) {
  copies_.free(l, may_allocate);
  PageState& s = l.state_to_change();
  set_kind(s, Kind::resident);
  if (mark) s.referenced = true;
}

void PageMoves::set_mark(PageLock& l, bool on) { l.state_to_change().referenced = on; }

void PageMoves::unmap(PageLock& l) {
  l.set_mapped(false);
  drop(counters_.resident);
}

void PageMoves::park(PageLock& l, uint32_t slot) {
  unmap(l);
  PageState& s = l.state_to_change();
  set_kind(s, Kind::probation);
  s.slot = slot;
  probation_.fill(slot, l.page());
}

void PageMoves::drop_clean(PageLock& l, bool stamp) {
  unmap(l);
  budget_.give(1);
  PageState& s = l.state_to_change();
  set_kind(s, Kind::stored);
  s.slot = 0;
  s.referenced = true;  // the write-back hand passes over it once
  if (stamp) probation_.stamp_departure(&s);
  bump(counters_.clean_evictions);
}

void PageMoves::retire(PageLock& l, bool compressed, bool stamp) {
  PageState& s = l.state_to_change();
  set_kind(s, Kind::stored);
  s.slot = 0;
  s.referenced = true;
  l.set_heat(0);  // it stayed out: cold
  if (stamp) probation_.stamp_departure(&s);
  bump(compressed ? counters_.evictions : counters_.clean_evictions);
  budget_.give(1);
}

void PageMoves::forget(PageLock& l, bool may_allocate) {
  const PageState& s = l.state();
  if (s.mapped()) {
    unmap(l);
    budget_.give(1);
  } else if (s.kind == Kind::probation) {
    uint32_t slot = s.slot;
    release_slots(&slot, 1, false);
    budget_.give(1);
  }
  copies_.free(l, may_allocate);
  PageState& c = l.state_to_change();
  set_kind(c, Kind::empty);
  c.referenced = false;
  l.set_heat(0);
}

void PageMoves::release_slots(const uint32_t* slots, uint32_t n, bool stale) {
  for (uint32_t i = 0; i < n;) {
    uint32_t j = i + 1;
    while (j < n && slots[j] > slots[j - 1] && probation_.only_holes_between(slots[j - 1], slots[j])) ++j;
    uint32_t len = slots[j - 1] - slots[i] + 1;
    check(drop_pages(probation_.slot_addr(slots[i]), size_t{len} * kPageSize), "madvise(MADV_DONTNEED) of slots");
    for (uint32_t k = i; k < j; ++k) {
      probation_.vacate(slots[k]);
      if (stale) budget_.give(1);
    }
    i = j;
  }
}

void PageMoves::pin(PageLock& l) {
  if (l.state_to_change().pins++ == 0) bump(counters_.pinned);
}

void PageMoves::unpin(PageLock& l) {
  PageState& s = l.state_to_change();
  if (s.pins > 0 && --s.pins == 0) drop(counters_.pinned);
}

int PageMoves::pin_unlocked(PageTable& t, uint32_t p, int delta) {
  if (delta > 0) bump(counters_.pinned);
  int before = t.add_pin_unlocked(p, delta);
  if (delta > 0 && before != 0) drop(counters_.pinned);
  if (delta < 0 && before == 1) drop(counters_.pinned);
  return before;
}

}  // namespace zsm::region
