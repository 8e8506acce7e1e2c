// The probation stage: CLOCK's victims wait here, unmapped from the region but still whole, so
// that a touch soon after is a minor fault (no decompression) that also tells the policy the
// page is in use: with no accessed bit in userspace, this is how the region learns which
// mapped pages are used (tools/region/policy_sim.cpp measures it against exact LRU).
//
// It is a ring of page-sized slots in an anonymous mapping of its own (the *staging* area,
// registered with the region's userfaultfd so that UFFDIO_MOVE may move pages in and out of
// it): the evictor moves victims into slots at the head, and retires the oldest at the tail
// (compressed, or only dropped when their copy is still valid). A fault takes a page back out
// of its slot, leaving a hole that the tail passes over. A slot costs memory only while a page
// is in it.
//
// A clean victim skips the ring (evictor.h): it is only dropped. What a touch in probation
// would have said of it, a fault from its copy soon after says: each page that leaves memory
// by the evictor's hand (a clean victim dropped, a probation page retired) is stamped with
// the count of such departures, its own included, and a fault fewer than `refault window`
// departures later (the refault distance the kernel's workingset shadow entries measure)
// brings the page back marked. The stamp lives in the page's slot field, which only a
// probation page uses otherwise; 0 is no stamp (a page taken out otherwise: by a range call,
// or dropped while the kernel refused to move it).
//
// Who calls: the evictor reserves, fills, retires and releases slots, and stamps departures;
// a fault server vacates the slot of the page whose lock it holds, and reads stamps. The
// ring's indices take a spin lock, held for a few instructions (a SIGBUS handler may take it).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "counters.h"
#include "futex.h"
#include "page_table.h"

namespace zsm::region {

class Probation {
 public:
  struct Entry {
    uint32_t slot;
    uint32_t page;
    uint32_t filled_ms;  // when it came in (now_ms()), where keep_fill_times() was called; else 0
  };
  // A coarse monotonic clock in milliseconds, wrapping every 49 days: compare by difference.
  static uint32_t now_ms();

  explicit Probation(Counters& counters) : counters_(counters) {}
  ~Probation();
  Probation(const Probation&) = delete;
  Probation& operator=(const Probation&) = delete;

  // A ring of `capacity` slots; 0, or -errno with *why.
  int init(uint32_t capacity, std::string* why);
  uintptr_t base() const { return base_; }
  size_t bytes() const { return size_t{capacity_} * 4096; }
  uint32_t capacity() const { return capacity_; }
  // Slots neither in use nor reserved (the ring's tail passes over holes only).
  uint32_t free_slots();
  // Aging: each page's time in is kept (Entry::filled_ms); else that table is never touched.
  void keep_fill_times() { fill_times_ = true; }
  uintptr_t slot_addr(uint32_t s) const { return base_ + uintptr_t{s} * 4096; }
  std::byte* slot_bytes(uint32_t s) const { return reinterpret_cast<std::byte*>(slot_addr(s)); }

  // Pages held now, and how many the policy wants held (the rest of the budget is mapped).
  uint32_t count() const { return static_cast<uint32_t>(get(counters_.probation)); }
  uint32_t target() const { return target_.load(std::memory_order_relaxed); }
  void set_target(uint32_t pages);

  // The refault window, in departures; the evictor stamps a departing page (with its lock);
  // a fault (with the page's lock) asks whether its page left within the window.
  void set_refault_window(uint32_t departures) { window_.store(departures, std::memory_order_relaxed); }
  void stamp_departure(PageState* s);
  bool left_recently(const PageState& s) const;

  // Evictor: up to n consecutive slots at the head (fewer where the ring wraps or is full);
  // the first in *first. Each is then filled (a page moved in) or given up (a hole).
  uint32_t reserve(uint32_t n, uint32_t* first);
  void fill(uint32_t slot, uint32_t page);
  void give_up(uint32_t slot);
  // Evictor: up to n of the oldest pages held, oldest first.
  size_t oldest(size_t n, Entry* out);
  // The slot's page left it (the evictor retired it and dropped the slot's memory): the slot
  // is a hole.
  void vacate(uint32_t slot);
  // A fault copied the slot's page back into the region: the slot's memory is the evictor's to
  // drop (drain_stale), with others, in as few calls (and TLB flushes) as it can; false when
  // the list of such slots is full (the caller drops it itself).
  bool vacate_stale(uint32_t slot);
  // The evictor: takes the stale slots (up to n, in the ring's order); each is then dropped
  // and vacated.
  size_t take_stale(uint32_t* out, size_t n);
  // The stale slots not yet taken (each still holds its page of the budget).
  uint32_t stale_slots() {
    SpinGuard g(lock_);
    return stale_count_;
  }
  // Whether every slot strictly between a and b (a < b, both in use) is a hole, b not before a
  // in the ring's order (else [a, b] holds free slots, which the evictor or a range call may be
  // filling): the memory of [a, b] may then be dropped in one call once a's and b's are.
  bool only_holes_between(uint32_t a, uint32_t b);
  // A slot of this ring's, on its way to be dropped (stale) or holding a page.
  static constexpr uint32_t kStale = UINT32_MAX - 2;

 private:
  static constexpr uint32_t kHole = UINT32_MAX;
  static constexpr uint32_t kReserved = UINT32_MAX - 1;
  void advance_tail();  // with the lock
  uint32_t ring_position(uint32_t slot) const;  // from the tail, with the lock

  Counters& counters_;
  uintptr_t base_ = 0;
  uint32_t capacity_ = 0;
  std::atomic<uint32_t> target_{0};
  std::atomic<uint32_t> window_{0}, departures_{0};
  SpinLock lock_;
  uint64_t head_ = 0, tail_ = 0;  // slots [tail, head) are in use (a page, reserved, or a hole)
  uint32_t* slot_page_ = nullptr;  // per slot
  uint32_t* stale_ = nullptr;      // slots to drop, capacity_ of them at most
  uint32_t* filled_ms_ = nullptr;  // per slot: when its page came in (fill_times_)
  bool fill_times_ = false;
  uint32_t stale_count_ = 0;
};

}  // namespace zsm::region
