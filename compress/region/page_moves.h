// The page transitions: the only writers of a page's kind, mark, slot, pins and heat, of its
// mapped bit, and of what follows them: the resident, probation and pinned counts, and the
// budget's pages in use. Each takes the page's lock as the proof that its caller holds it
// (PageLock); the copy's fields are the copy store's (copy_store.h). The kernel calls that change what is
// mapped stay with the callers, which make them under the same lock; each transition says
// whether it comes before or after its call.
//
//   empty, stored, probation --map--> resident, clean     (a fault, a range call's install)
//   clean --dirty--> resident                              (a write to a clean page)
//   resident, clean --park--> probation                    (the evictor moved it to a slot)
//   clean --drop_clean--> stored                           (its memory dropped; its copy valid)
//   probation --retire--> stored                           (its copy made, or still valid)
//   anything unpinned --forget--> empty                    (discarded, or gone)
#pragma once

#include <cstdint>

#include "budget.h"
#include "copy_store.h"
#include "counters.h"
#include "page_table.h"
#include "probation.h"

namespace zsm::region {

class PageMoves {
 public:
  PageMoves(CopyStore& copies, Probation& probation, Budget& budget, Counters& counters)
      : copies_(copies), probation_(probation), budget_(budget), counters_(counters) {}

  // Mapped as k (resident or clean), the caller having taken its page of budget. Called before
  // the kernel call that wakes the faulting thread: what it reads next counts its own page.
  // A page back from probation or its copy is one step hotter; retire() and forget() cool it.
  void map(PageLock& l, Kind k, bool referenced);
  // A stored page map()ped ahead of the kernel's call (fault-around) that the call did not
  // install: stored again, with the write-back hand's mark it had, its budget given back.
  void unmap_untaken(PageLock& l, bool write_back_mark);
  // A page map()ped from its probation slot, once the kernel copied its bytes from there: the
  // slot is stale, dropped later with others (the evictor's drain), or now when their list is
  // full.
  void leave_slot(uint32_t slot);
  // A mapped page made writable: its copy freed (with may_allocate false, in a signal handler,
  // see CopyStore::free), its mark set if asked.
  void dirty(PageLock& l, bool may_allocate, bool mark);
  // CLOCK's mark (for a stored page, the write-back hand's).
  void set_mark(PageLock& l, bool on);

  // A mapped page, out of the region by the kernel's call: moved into its probation slot (its
  // budget kept), or dropped with its copy valid (its budget given back; `stamp`: it left by
  // the evictor's choice, for the refault window, probation.h).
  void park(PageLock& l, uint32_t slot);
  void drop_clean(PageLock& l, bool stamp);
  // A probation page whose copy was made now (`compressed`, copy_store.h) or is still valid:
  // stored, its budget given back. Its slot is then released by the caller (release_slots).
  void retire(PageLock& l, bool compressed, bool stamp);
  // An unpinned page's contents dropped: empty, its copy freed. A mapped page's memory was
  // dropped by the caller (or by the program, against the contract); a probation page's
  // slot is dropped here.
  void forget(PageLock& l, bool may_allocate);

  // Slots whose pages left them (retired) or whose bytes were copied back (stale), ascending:
  // their memory dropped, runs of neighbours in one call, then free. A stale slot still held
  // its page of the budget: given back with it.
  void release_slots(const uint32_t* slots, uint32_t n, bool stale);

  // Pins: a pinned page stays mapped and writable. pin() on a mapped, writable page.
  void pin(PageLock& l);
  void unpin(PageLock& l);
  // One pin more (+1) or less (-1) for a page nobody holds, without its lock (PageTable's
  // add_pin_unlocked): the count before, or -1 where the caller must take the lock. The pinned
  // count moves before the page says so: a fork() between the two gives no child a pin its
  // count lacks (it may count one more).
  int pin_unlocked(PageTable& t, uint32_t p, int delta);

 private:
  void unmap(PageLock& l);
  void set_kind(PageState& s, Kind k);

  CopyStore& copies_;
  Probation& probation_;
  Budget& budget_;
  Counters& counters_;
};

}  // namespace zsm::region
