// The evictor (evictor.h): its thread, its batches, CLOCK's choice of victims, and the range
// calls' evictions. Taking victims out of the region is evictor_take_out.cpp; retiring
// probation pages into the pool, and writing the pool back to the file, evictor_retire.cpp.
#include "evictor.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace zsm::region {
namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

size_t Evictor::work_bytes(const CopyStore& copies) { return copies.work_bytes() + kPageSize; }

Evictor::Evictor(const RegionParts& parts, uintptr_t base, uint32_t npages)
    : parts_(parts), base_(base), npages_(npages), work_(work_bytes(parts.copies)) {
  holes_.reserve(kMaxSpan);
}

Evictor::~Evictor() { stop(); }

void Evictor::start(std::function<void(pid_t)> keeper_start) {
  stopping_.store(false);
  if (!thread_.start([this, keeper_start = std::move(keeper_start)] { main(keeper_start); })) {
    check(-errno, "starting the evictor thread");
  }
}

void Evictor::stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true);
  parts_.evictor_wake.notify();
  thread_.join();
  tid_.store(0);
  asleep_.store(false);
}

void Evictor::forget_in_child() {
  aging_.last_tick_ms = last_report_ms_ = Probation::now_ms();  // the child's first tick a tick after it began
  thread_.forget();
  tid_.store(0);
  stopping_.store(false);
  asleep_.store(false);
}

void Evictor::main(std::function<void(pid_t)> keeper_start) {
  mark_region_thread();
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);  // no program handler runs here, holding page locks
  auto tid = static_cast<pid_t>(syscall(SYS_gettid));
  // Before any page's lock (copy_store.h), and before keeper_start's first allocation: a
  // program's own malloc may madvise() its region memory from inside that allocation, and the
  // region's call for it must find the contexts made (it cannot allocate there again).
  parts_.copies.prepare_thread();
  keeper_start(tid);
  tid_.store(tid);
  // kswapd's rhythm: asleep until a fault finds the budget past the low watermark (or
  // someone asks), then batches until the high watermark, then asleep again.
  while (!stopping_.load(std::memory_order_relaxed)) {
    uint32_t seen = parts_.evictor_wake.seq();
    report_if_due();
    if (before_batch_) before_batch_();
    if (!parts_.budget.below_low_watermark() && !pool_near_budget()) {
      parts_.budget.set_stalled(false);
      if (aging_due()) {
        age_tick();
        continue;
      }
      asleep_.store(true, std::memory_order_release);
      parts_.evictor_wake.wait(seen, ns_to_next_timer());
      asleep_.store(false, std::memory_order_relaxed);
      continue;
    }
    while (work_needed() && !stopping_.load(std::memory_order_relaxed)) {
      report_if_due();
      if (before_batch_) before_batch_();
      Batch batch;
      {
        InsideGate inside(parts_.gate);
        bump(parts_.counters.evictor_runs);
        batch = run_batch();
      }
      parts_.budget.room_made();
      parts_.budget.set_stalled(batch == Batch::stuck);  // faults go on past the limit meanwhile
      if (batch != Batch::progress) {
        parts_.evictor_wake.wait(parts_.evictor_wake.seq(), 10'000'000);
        break;
      }
    }
  }
}

// Asleep, and nothing that would wake it: a fault since it fell asleep would have. Aging
// wakes it every tick: never idle then.
bool Evictor::idle() const {
  return !aging() && asleep_.load(std::memory_order_acquire) && !parts_.budget.below_low_watermark() && !pool_near_budget();
}

// Whether there is anything to do: pages past the high watermark, or the pool near its budget.
bool Evictor::work_needed() const {
  return parts_.budget.used() > parts_.budget.high_watermark() || pool_near_budget();
}

// One batch: victims out of the region (dirty ones into probation, refilling it to its size;
// clean ones dropped), the oldest in probation retired as far as the budget still needs, the
// pool's copies to the file when it nears its budget. Stuck only where it had pages to free
// and freed none: a batch the faults left nothing to do lets no fault past the hard limit.
Evictor::Batch Evictor::run_batch() {
  bool progress = drain_stale();
  if (pool_near_budget()) progress |= write_back_batch(work_.data());
  uint64_t used = parts_.budget.used();
  uint64_t high = parts_.budget.high_watermark();
  uint32_t count = parts_.probation.count(), size = parts_.probation.target();
  // A whole batch whenever past the high watermark (kswapd's SWAP_CLUSTER_MAX), but a 16th
  // of the budget at most: chasing each fault's page would run a batch (and a TLB flush) per
  // page, and a batch as large as a small budget would empty it.
  uint32_t batch = std::clamp<uint32_t>(parts_.budget.limit() / 16, 1, kBatch);
  uint32_t need = used > high ? batch : 0;
  uint32_t excess = count > size ? count - size : 0;  // the budget shrank under it
  if (need > 0) {
    uint32_t refill = size > count ? size - count : 0;
    PageLock victims[kBatch];
    uint32_t n = pick_victims(std::min(kBatch, need + refill), need, victims);
    progress |= take_out(n, victims) > 0;
  }
  // Clean victims gave their budget back as they were dropped: a batch retires only while
  // the budget is still past the high watermark.
  if (need > 0 && parts_.budget.used() <= high) need = 0;
  uint32_t retire = std::min(std::max(need, excess), kBatch);
  if (retire > 0) progress |= retire_oldest(retire, work_.data()) > 0;
  if (progress) return Batch::progress;
  return need > 0 || excess > 0 ? Batch::stuck : Batch::nothing_needed;
}

// Up to n victims, locked: mapped, unpinned, unmarked pages in CLOCK's order, stopping at the
// most_clean-th clean one (victims past the batch's need refill probation, and a clean victim
// would only be dropped). A marked page loses its mark and is passed over. The hand wraps at
// most `most_wraps` times: twice, for eviction (a second turn takes the pages the first
// spared); once, for aging (a page spared is not taken in the same tick), which also passes
// over a page on all but one turn in 2^heat (page_table.h): a page that keeps coming back is
// probed less and less often, so the hand's faults go to pages not yet known to be in use.
uint32_t Evictor::pick_victims(uint32_t n, uint32_t most_clean, PageLock* victims, int most_wraps) {
  const bool spare_hot = most_wraps == 1;
  uint32_t found = 0, clean = 0;
  int wraps = 0;
  uint64_t t0 = now_ns();
  while (found < n && clean < most_clean && wraps < most_wraps) {
    uint32_t p = hand_ < npages_ ? parts_.pages.next_mapped(hand_, npages_ - hand_) : kNoPage;
    if (p == kNoPage) {  // a whole turn: its scanning time is published, and its wall time
      uint64_t t = now_ns();
      parts_.counters.sweep_ns.store(sweep_ns_ + (t - t0), std::memory_order_relaxed);
      if (aging() && aging_.last_turn_ns != 0) {
        parts_.counters.aging_turn_ms.store((t - aging_.last_turn_ns) / 1'000'000, std::memory_order_relaxed);
      }
      aging_.last_turn_ns = t;
      sweep_ns_ = 0;
      t0 = t;
      hand_ = 0;
      ++wraps;
      ++wraps_;
      continue;
    }
    hand_ = p + 1;
    PageLock l = PageLock::try_lock(parts_.pages, p);
    if (!l || !l.state().mapped() || l.state().pins > 0) continue;
    if (l.state().referenced) {
      moves_.set_mark(l, false);
      continue;
    }
    if (spare_hot && ((wraps_ + p) & ((uint64_t{1} << l.heat()) - 1)) != 0) continue;
    clean += l.state().kind == Kind::clean;
    victims[found++] = std::move(l);
  }
  sweep_ns_ += now_ns() - t0;
  return found;
}

bool Evictor::evict_now(PageLock& l, std::byte* work) {
  uint32_t slot;
  if (parts_.probation.reserve(1, &slot) == 0 &&
      (retire_oldest(1, work) == 0 || parts_.probation.reserve(1, &slot) == 0)) {
    return false;
  }
  Out o = parts_.calls.can_move() ? move_out(l, slot) : copy_out(l, slot);
  after_out(l, slot, o, false);
  if (o != Out::moved) return o != Out::kept;
  return retire_now(l, work);  // false: the pool is full, and the page waits in probation
}

bool Evictor::retire_now(PageLock& l, std::byte* work) {
  uint32_t slot = l.state().slot;
  if (retire_page(l, false, work) == Retired::pool_full) return false;
  moves_.release_slots(&slot, 1, false);
  return true;
}

// The evictor's own wake condition, not its stopping point: between the two it sleeps, and a
// caller waiting for the stopping point would wait for nothing (100 s, once).
void Evictor::wait_until_within_budget() {
  for (int i = 0; i < 100000 && parts_.budget.below_low_watermark(); ++i) {
    uint32_t seen = parts_.budget.room_seq();
    if (parts_.budget.stalled()) return;
    parts_.evictor_wake.notify();
    parts_.budget.wait_for_room(seen);
  }
}

}  // namespace zsm::region
