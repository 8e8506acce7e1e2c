// The evictor: the region's kswapd. One thread, woken when a fault takes the budget below its
// low watermark, works until the high one (budget.h): a CLOCK hand walks the mapped pages'
// bits (a page's mark is set by a minor fault from probation, or a write to a clean page),
// moves unmarked victims out of the region into probation slots, and retires the oldest
// probation pages: compressed into the pool, or only dropped when their copy is still valid.
// A clean victim (installed by a read, its copy valid) skips probation: it is only dropped,
// a span of them in one call. Faults never compress and never wait for it unless they reach
// the hard limit.
//
// Taking a page out of the region is UFFDIO_MOVE where the kernel has it (6.8): one call
// moves a run of pages, atomically with any thread writing them (a write before the move goes
// with the page; one after faults and finds it in its slot), and the kernel refuses a page
// pinned for I/O (O_DIRECT, io_uring's fixed buffers) with EBUSY: such a page stays mapped,
// and its I/O completes into it. EBUSY also means a page shared with a child of fork(); the
// evictor then writes one of the page's own words back to itself (an atomic add of 0), which
// gives the region a page of its own, and moves that; a clean page is only dropped. Without
// UFFDIO_MOVE a victim is write-protected, copied into its slot and dropped: a write that
// comes meanwhile waits for the page's lock and refaults; I/O that pinned the page before the
// protection writes into a page the region no longer maps (region.h: pin such buffers).
//
// With a backing file, the evictor also sends pool copies to the file (a second hand, passing
// over each stored page once, so the copies stored longest go first) when the pool nears its
// budget, and when a store finds it full. It holds page locks by try-lock only.
//
// The evictor's thread is also the region's keeper (descriptors.h): it starts on a
// descriptor table of its own, and any other thread the region has is started from it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "fault_server.h"
#include "region_thread.h"

namespace zsm::region {

class Evictor {
 public:
  Evictor(const RegionParts& parts, uintptr_t base, uint32_t npages);
  ~Evictor();
  Evictor(const Evictor&) = delete;
  Evictor& operator=(const Evictor&) = delete;

  // Starts the thread; on it, `keeper_start(tid)` runs first, and tid() is not 0 once it has.
  void start(std::function<void(pid_t)> keeper_start);
  void stop();
  pid_t tid() const { return tid_.load(); }

  // The range calls' evictions, made by the caller with p's lock held, inside the gate:
  // a mapped page compressed (or dropped) now; false when it cannot be taken (pinned for I/O,
  // the pool full). A page in probation retired now. `work`: work_bytes() of the caller's.
  static size_t work_bytes(const CopyStore& copies);
  bool evict_now(PageLock& l, std::byte* work);
  bool retire_now(PageLock& l, std::byte* work);
  // The caller waits until the evictor would sleep (used short of its wake point, within
  // the budget), or the evictor is stalled.
  void wait_until_within_budget();
  // Whether the evictor sleeps with nothing owed: what the statistics say stands still then,
  // until the program touches memory or changes the budget.
  bool idle() const;
  // Run before each batch (the budget that counts everything retunes itself there), and as
  // retired pages fill the pool (every kRoomEvery pages: the budget that counts the pool
  // shrinks with it, before the faults waiting for room are woken).
  void set_before_batch(std::function<void()> f) { before_batch_ = std::move(f); }
  void set_pool_grew(std::function<void()> f) { pool_grew_ = std::move(f); }
  // Aging: a resident page left untouched for `cold_age_ms` is compressed whatever the budget
  // (0: off, pages leave only past the budget). Set before start().
  void set_cold_age(uint32_t cold_age_ms);
  // The cold age steered toward this share of wall time spent in promotions (faults that
  // decompress), in parts per million; 0: the cold age stays as set. Set after set_cold_age().
  void set_stall_target(uint32_t ppm);
  // `report` runs on the evictor's thread every `every_ms` (0: never), outside every lock: it
  // may read the statistics, and must not touch the region's memory. Set before start().
  void set_report(uint32_t every_ms, std::function<void()> report) {
    report_every_ms_ = every_ms;
    last_report_ms_ = Probation::now_ms();
    report_ = std::move(report);
  }
  // In a child of fork(): the parent's thread is not here; its handle is forgotten.
  void forget_in_child();
  // The region's range, which it unlocks when it finds it mlock()ed.
  void set_range(uintptr_t base, size_t size) {
    unlock_base_ = base;
    unlock_size_ = size;
  }

 private:
  enum class Out { moved, dropped_clean, gone, kept };
  // What a batch did: freed or moved something; had nothing to free (the faults since its
  // wake-up left the budget short of its high watermark); or had pages to free and could free
  // none (every victim pinned, the pool full with no file to go to): only then do faults go on
  // past the hard limit.
  enum class Batch { progress, nothing_needed, stuck };
  static constexpr uint32_t kNoSlot = UINT32_MAX;  // a victim dropped without a slot
  // Victims taken and probation pages retired per batch: fewer ioctls, and a batch never
  // overshoots the high watermark by much.
  static constexpr uint32_t kBatch = 64;
  // The most pages one UFFDIO_MOVE of victims spans, holes included.
  static constexpr uint32_t kMaxSpan = 256;
  // Pool copies a write-back batch sends to the file, before the pool is compacted.
  static constexpr uint32_t kWritebackBatch = 64;
  // Retiring wakes the faults waiting for room after this many pages (retire_oldest).
  static constexpr uint32_t kRoomEvery = 2;
  // Aging keeps resident a page that compresses to more than this (incompressible()).
  static constexpr size_t kKeepAbove = kPageSize * 73 / 100;

  void main(std::function<void(pid_t)> keeper_start);
  Batch run_batch();
  bool work_needed() const;
  uint32_t pick_victims(uint32_t n, uint32_t most_clean, PageLock* victims, int most_wraps = 2);
  uint32_t take_out(uint32_t n, PageLock* victims);
  void drop_clean_span(PageLock* victims, uint32_t n);
  Out drop_clean_page(uint32_t p);
  bool lock_holes(uint32_t a, uint32_t b);
  void move_span(PageLock* victims, uint32_t n, uint32_t first_slot, uint32_t span);
  Out move_out(PageLock& l, uint32_t slot);
  int move_page(uint32_t p, uint32_t slot);
  Out copy_out(PageLock& l, uint32_t slot);
  Out handle_busy(PageLock& l, uint32_t slot);
  void after_out(PageLock& l, uint32_t slot, Out out, bool stamp);
  uint32_t retire_oldest(uint32_t n, std::byte* work, uint32_t in_for_ms = 0);
  // Aging (evictor_aging.cpp).
  bool aging_due() const;
  long ns_to_next_timer() const;
  void report_if_due();
  void age_tick();
  uint32_t retire_cold();
  uint32_t age_slice();
  void learn_slice_cost(uint64_t cpu_ns, uint32_t out);
  void steer_cold_age();
  void sum_saved_bytes(uint32_t elapsed_ms);
  enum class Retired { stored, kept, pool_full };
  Retired retire_page(PageLock& l, bool stamp, std::byte* work, bool cold = false);
  static bool incompressible(const CopyStore::Compressed& c);
  bool keep_resident(PageLock& l);
  bool drain_stale();
  bool store_or_write_back(const CopyStore::Compressed& c, PageLock& l, std::byte* work);
  bool write_back_batch(std::byte* work);
  bool pool_near_budget() const;
  void unlock_ranges();
  uintptr_t addr(uint32_t p) const { return base_ + uintptr_t{p} * kPageSize; }

  RegionParts parts_;
  PageMoves moves_{parts_.copies, parts_.probation, parts_.budget, parts_.counters};
  uintptr_t base_;
  uint32_t npages_;
  uint32_t hand_ = 0;            // CLOCK's hand over the mapped bits
  uint64_t wraps_ = 0;           // its wraps to the region's start
  uint32_t writeback_hand_ = 0;  // the write-back hand over the stored pages
  uint64_t sweep_ns_ = 0;  // the hand's scanning time since its turn began
  std::vector<std::byte> work_;  // the evictor thread's: work_bytes()
  SpinLock writeback_lock_;      // the write-back hand's
  std::vector<PageLock> holes_;  // the unmapped pages a span of victims moves over, locked
  RegionThread thread_;
  std::atomic<pid_t> tid_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> asleep_{false};  // in its wait for work, every batch done
  bool aging() const { return aging_on_; }
  void set_age(uint32_t cold_age_ms);
  bool aging_on_ = false;  // set before the start: other threads read it (idle())
  struct Aging {
    uint32_t cold_age_ms = 0;  // 0: off
    uint32_t tick_ms = 0;      // the period of age_tick()
    uint32_t last_tick_ms = 0;
    uint32_t slice = 64;       // pages moved out per tick: what the CPU share pays for
    int64_t last_stall_ns = 0;  // faults from probation's stall, to the last tick
    double spent = 0, moved = 0;  // time and pages moved out, smoothed over ticks
    uint64_t last_turn_ns = 0;  // when the hand last began a turn
    // The steering (steer_cold_age): its target, the age's floor, its last step.
    uint32_t stall_target_ppm = 0;
    uint32_t least_age_ms = 0, most_age_ms = 0;
    uint32_t last_steer_ms = 0;
    uint64_t last_promotion_ns = 0;
  } aging_;
  uintptr_t unlock_base_ = 0;
  size_t unlock_size_ = 0;
  std::function<void()> before_batch_, pool_grew_, report_;
  uint32_t report_every_ms_ = 0, last_report_ms_ = 0;
};

}  // namespace zsm::region
