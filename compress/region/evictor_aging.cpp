// Aging (evictor.h): how long each resident page has gone untouched, reads included, with no
// accessed bit to read in userspace. Every tick, the evictor retires the probation pages that
// sat there for the cold age untouched (compressed, or dropped with their copies valid), then
// moves a slice of the resident pages out, in CLOCK's order: a dirty page into probation, a
// clean one dropped. A touch brings a page back by a fault that marks it, so the hand's next
// pass spares it; a page left alone for the cold age is retired. This is the kernel's accessed-
// bit scan (kstaled, MGLRU's aging) done by unmapping, so every page the scan finds hot costs
// a fault: the slice is sized each tick so that the tick's own CPU time and the time faults
// spent bringing pages back since the last tick stay within kCpuShare of one CPU.
#include "evictor.h"

#include <time.h>

#include <algorithm>

namespace zsm::region {
namespace {

constexpr double kCpuShare = 0.01;
constexpr uint32_t kLeastSlice = 16, kMostSlice = 16384;
constexpr double kSmoothing = 0.75;  // the weight of the ticks before, in the cost a page

uint64_t thread_cpu_ns() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(t.tv_nsec);
}

}  // namespace

// A tick is a 16th of the cold age, from 50 ms to 1 s: a page's idle age is known to a tick.
void Evictor::set_cold_age(uint32_t cold_age_ms) {
  aging_.cold_age_ms = cold_age_ms;
  aging_.tick_ms = std::clamp<uint32_t>(cold_age_ms / 16, 50, 1000);
  aging_.last_tick_ms = Probation::now_ms();
}

bool Evictor::aging_due() const {
  return aging() && Probation::now_ms() - aging_.last_tick_ms >= aging_.tick_ms;
}

// 0 (no timeout) without aging.
long Evictor::ns_to_next_tick() const {
  if (!aging()) return 0;
  uint32_t since = Probation::now_ms() - aging_.last_tick_ms;
  return since >= aging_.tick_ms ? 1 : static_cast<long>(aging_.tick_ms - since) * 1'000'000;
}

// Each step runs inside the fork gate on its own (a batch of retires, a batch of pages moved
// out): a fork() or a stop waits for one batch, not a tick.
void Evictor::age_tick() {
  const uint64_t cpu_start = thread_cpu_ns();
  aging_.last_tick_ms = Probation::now_ms();
  bump(parts_.counters.cold_evictions, retire_cold());
  const uint32_t out = age_slice();
  bump(parts_.counters.aged, out);
  learn_slice_cost(thread_cpu_ns() - cpu_start, out);
}

// The probation pages in for the cold age, oldest first; at most kMostSlice a tick.
uint32_t Evictor::retire_cold() {
  uint32_t cold = 0;
  while (cold < kMostSlice && !stopping_.load(std::memory_order_relaxed)) {
    uint32_t retired;
    {
      InsideGate inside(parts_.gate);
      retired = retire_oldest(kBatch, work_.data(), aging_.cold_age_ms);
    }
    if (retired == 0) break;
    cold += retired;
  }
  return cold;
}

// A slice of the mapped pages moved out in CLOCK's order, the hand passing each page at most
// once a tick (a page it spares is not taken in the same tick). No more than probation's ring
// has room for, a quarter of it left to the budget's evictions: a page parked for the cold age
// holds the ring's tail where it is. How many left the region.
uint32_t Evictor::age_slice() {
  {
    InsideGate inside(parts_.gate);
    drain_stale();
  }
  const uint32_t room = parts_.probation.free_slots(), kept = parts_.probation.capacity() / 4;
  const uint32_t most = std::min(aging_.slice, room > kept ? room - kept : 0);
  const uint64_t wraps_before = wraps_;
  uint32_t out = 0;
  while (out < most && wraps_ == wraps_before && !stopping_.load(std::memory_order_relaxed)) {
    const uint32_t want = std::min(kBatch, most - out);
    uint32_t picked, moved;
    {
      InsideGate inside(parts_.gate);
      PageLock victims[kBatch];
      picked = pick_victims(want, want, victims, 1);
      moved = take_out(picked, victims);
    }
    out += moved;
    if (picked < want || moved == 0) break;  // the rest of the turn had no more, or none would leave
  }
  return out;
}

// What a page moved out costs (the tick's CPU time and the faults' stall since the last),
// smoothed over the last few ticks, for a slice's faults land in the ticks after it. The next
// slice is what the CPU share pays for at that cost; it grows at most twofold, and only after
// a slice that found its pages.
void Evictor::learn_slice_cost(uint64_t cpu_ns, uint32_t out) {
  const uint64_t stall = get(parts_.counters.stall_ns);
  aging_.spent = aging_.spent * kSmoothing + static_cast<double>(cpu_ns + (stall - aging_.last_stall_ns));
  aging_.moved = aging_.moved * kSmoothing + out;
  aging_.last_stall_ns = stall;
  const double per_page = aging_.moved > 0 && aging_.spent > 0 ? aging_.spent / aging_.moved : 0;
  const double most = out >= aging_.slice ? 2.0 * aging_.slice : aging_.slice;
  const double fits = per_page > 0 ? kCpuShare * aging_.tick_ms * 1e6 / per_page : most;
  aging_.slice = static_cast<uint32_t>(std::clamp<double>(fits, kLeastSlice, std::min(most, double{kMostSlice})));
}

}  // namespace zsm::region
