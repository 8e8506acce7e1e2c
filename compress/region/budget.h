// The region's budget of decompressed pages, and its watermarks (kswapd's shape).
//
// `used` counts the pages that hold decompressed bytes: mapped in the region, or in the
// probation stage; a fault takes its pages before it installs them (try_take), the evictor
// gives them back as it compresses or drops them. With B the budget:
//   - the evictor wakes when used reaches B - headroom/2 (the low watermark),
//   - and works until used <= B - headroom (the high watermark), off every fault's path;
//   - a fault installs while used stays <= B + slack (the hard limit), else it waits for the
//     evictor. slack is what faults may run ahead of the evictor: at most B/64 (at least 16
//     pages and a fault-around). When the evictor can free nothing (every page pinned, the
//     pool full with no file to go to), it says so (stalled) and faults go on past the limit,
//     counted in over_budget, as the handler threads of a kernel without reclaim would.
// So resident + probation <= B + slack whenever the evictor can evict at all, plus the slots
// being retired (their pages are given back as each is compressed, their memory dropped at
// the end of the call: the evictor's batch, 64 pages at most, and one page for each range
// call evicting meanwhile; evictor.cpp).
//
// ZSM_REGION_BUDGET_ALL: a total in bytes bounds everything the region costs, and B follows
// what the pool and the bookkeeping leave of it (retune: before each evictor batch, as the
// pool grows, and at set_budget). A new B is applied with what follows from it outside the
// budget (probation's size, the refault window: `follow`), one caller at a time.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>

#include "counters.h"
#include "futex.h"

namespace zsm::region {

class Budget {
 public:
  explicit Budget(Counters& counters) : counters_(counters) {}

  // B in pages, and a fault's most pages at once (fault-around).
  void configure(uint32_t pages, uint32_t fault_around) {
    uint32_t headroom = std::clamp<uint32_t>(pages / 32, 4, 4096);
    headroom = std::min(headroom, pages / 4);
    uint32_t slack = std::clamp<uint32_t>(pages / 64, 16, 4096) + fault_around;
    headroom_.store(headroom, std::memory_order_relaxed);
    slack_.store(slack, std::memory_order_relaxed);
    limit_.store(pages, std::memory_order_release);
  }
  uint32_t limit() const { return limit_.load(std::memory_order_acquire); }

  // B, and what follows from it (`follow`, set once before the first), applied one caller at a
  // time; fault_around as configure() takes it.
  void set_follow(uint32_t fault_around, std::function<void(uint32_t)> follow) {
    fault_around_ = fault_around;
    follow_ = std::move(follow);
  }
  void apply(uint32_t pages) {
    SpinGuard one_at_a_time(apply_lock_);
    configure(pages, fault_around_);
    follow_(pages);
  }

  // ZSM_REGION_BUDGET_ALL from now on, with `bytes` the total.
  void count_everything(uint64_t bytes) {
    everything_ = true;
    set_total(bytes);
  }
  bool counts_everything() const { return everything_; }
  // With everything counted, B as the pool and the bookkeeping (`others` bytes) leave it,
  // applied where it changed; else nothing.
  void retune(uint64_t others) {
    if (!everything_) return;
    uint32_t pages = pages_left_by(others);
    if (pages != limit()) apply(pages);
  }
  // set_budget's: a new total (everything counted) or a new B.
  void set(uint32_t pages, uint64_t others) {
    if (!everything_) return apply(pages);
    set_total(uint64_t{pages} * 4096);
    retune(others);
  }
  // fork(): no child inherits the lock held (fork.cpp).
  void lock_for_fork() { apply_lock_.lock(); }
  void unlock_after_fork() { apply_lock_.unlock(); }

  // With everything counted, B is what the pool and the bookkeeping (`others` bytes) leave of
  // the total, less what the pool may grow by while the evictor brings the pages down from its
  // wake point to its stopping point (the headroom, total/32: each page it takes out adds its
  // copy to the pool, a page at most, before the next retune), and at least an eighth of it.
  void set_total(uint64_t bytes) { total_.store(bytes, std::memory_order_relaxed); }
  uint64_t total() const { return total_.load(std::memory_order_relaxed); }
  uint32_t pages_left_by(uint64_t others) const {
    uint64_t total = this->total(), floor = total / 8;
    uint64_t taken = others + total / 32;
    uint64_t left = total > taken + floor ? total - taken : floor;
    return static_cast<uint32_t>(std::max<uint64_t>(left / 4096, 16));
  }
  uint32_t slack() const { return slack_.load(std::memory_order_relaxed); }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }

  // Takes n pages if they fit under the hard limit (or the evictor is stalled).
  bool try_take(uint32_t n) {
    uint64_t most = uint64_t{limit()} + slack();
    uint64_t now = used_.fetch_add(n, std::memory_order_relaxed) + n;
    if (now <= most) {
      if (now * 4096 > counters_.peak_used.load(std::memory_order_relaxed)) raise_to(counters_.peak_used, now * 4096);
      return true;
    }
    if (stalled_.load(std::memory_order_relaxed)) {
      bump(counters_.over_budget, n);
      return true;
    }
    used_.fetch_sub(n, std::memory_order_relaxed);
    return false;
  }
  void give(uint32_t n) { used_.fetch_sub(n, std::memory_order_relaxed); }

  // The low watermark: whether the evictor should be running.
  bool below_low_watermark() const {
    return used() + headroom_.load(std::memory_order_relaxed) / 2 >= limit();
  }
  // The high watermark: what the evictor works down to.
  uint64_t high_watermark() const {
    return limit() - std::min(limit(), headroom_.load(std::memory_order_relaxed));
  }

  // A fault that found no room sleeps until the evictor made some (or 1 ms passed).
  uint32_t room_seq() const { return room_.seq(); }
  void wait_for_room(uint32_t seen) {
    bump(counters_.budget_waits);
    room_.wait(seen, 1'000'000);
  }
  void room_made() { room_.notify(); }

  void set_stalled(bool s) {
    stalled_.store(s, std::memory_order_relaxed);
    if (s) room_.notify();
  }
  bool stalled() const { return stalled_.load(std::memory_order_relaxed); }

 private:
  Counters& counters_;
  std::atomic<uint64_t> used_{0};
  std::atomic<uint32_t> limit_{0}, headroom_{0}, slack_{0};
  std::atomic<uint64_t> total_{0};
  std::atomic<bool> stalled_{false};
  Event room_;
  SpinLock apply_lock_;
  uint32_t fault_around_ = 0;
  std::function<void(uint32_t)> follow_ = [](uint32_t) {};
  bool everything_ = false;  // set before the region's threads start
};

}  // namespace zsm::region
