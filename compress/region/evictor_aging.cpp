// Aging (evictor.h): how long each resident page has gone untouched, reads included, with no
// accessed bit to read in userspace. Every tick, the evictor retires the probation pages that
// sat there for the cold age untouched (compressed, or dropped with their copies valid), then
// moves a slice of the resident pages out, in CLOCK's order: a dirty page into probation, a
// clean one dropped. A touch brings a page back by a fault that marks it, so the hand's next
// pass spares it; a page left alone for the cold age is retired. This is the kernel's accessed-
// bit scan (kstaled, MGLRU's aging) done by unmapping, so every page the scan finds hot costs
// a fault: the slice is sized each tick so that the hand's own CPU time and the time faults
// spent bringing its pages back from probation since the last tick stay within kCpuShare of
// one CPU. Compressing the cold pages is not the hand's cost but the saving's, paid once a
// page (as kswapd's is, apart from kstaled's scan), and promotions are the steering's: were
// they charged to the hand, it would slow to a few MiB a second while it finds cold data.
//
// The cold age itself may be steered (set_stall_target), as TMO's Senpai steers a container's
// memory limit by its pressure stall: the share of wall time faults spent decompressing pages
// (promotions) is read every steering period; past the target the age doubles (pages stay
// resident longer, fewer come back from the pool), under half of it the age shrinks by a
// fifth (more pages are compressed). Backing off fast and probing slowly keeps the stall near
// or under the target; the age stays between min(start, 1 s) and max(start, an hour).
#include "evictor.h"

#include <time.h>

#include <algorithm>

namespace zsm::region {
namespace {

constexpr double kCpuShare = 0.01;
constexpr uint32_t kLeastSlice = 16, kMostSlice = 16384;
constexpr double kSmoothing = 0.75;  // the weight of the ticks before, in the cost a page
constexpr uint32_t kLeastSteeredAgeMs = 1000, kMostSteeredAgeMs = 3'600'000;
constexpr uint32_t kSteerEveryMs = 4000;  // or a quarter of the cold age, if shorter

uint64_t thread_cpu_ns() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(t.tv_nsec);
}

}  // namespace

// A tick is a 16th of the cold age, from 50 ms to 1 s: a page's idle age is known to a tick.
void Evictor::set_cold_age(uint32_t cold_age_ms) {
  aging_on_ = cold_age_ms != 0;
  set_age(cold_age_ms);
  aging_.last_tick_ms = Probation::now_ms();
}

// The age and its tick (the steering changes them on the evictor's thread; whether aging is
// on, which other threads read, stays as set before the start).
void Evictor::set_age(uint32_t cold_age_ms) {
  aging_.cold_age_ms = cold_age_ms;
  aging_.tick_ms = std::clamp<uint32_t>(cold_age_ms / 16, 50, 1000);
  parts_.counters.cold_age_ms.store(cold_age_ms, std::memory_order_relaxed);
}

void Evictor::set_stall_target(uint32_t ppm) {
  aging_.stall_target_ppm = ppm;
  aging_.least_age_ms = std::min(aging_.cold_age_ms, kLeastSteeredAgeMs);
  aging_.most_age_ms = std::max(aging_.cold_age_ms, kMostSteeredAgeMs);
  aging_.last_steer_ms = Probation::now_ms();
}

bool Evictor::aging_due() const {
  return aging() && Probation::now_ms() - aging_.last_tick_ms >= aging_.tick_ms;
}

// Until aging's next tick or the next report, whichever comes first; 0 (no timeout) with
// neither.
long Evictor::ns_to_next_timer() const {
  const uint32_t now = Probation::now_ms();
  long ms = 0;
  auto sooner = [&](uint32_t since, uint32_t every) {
    const long left = since >= every ? 1 : static_cast<long>(every - since);
    ms = ms == 0 ? left : std::min(ms, left);
  };
  if (aging()) sooner(now - aging_.last_tick_ms, aging_.tick_ms);
  if (report_every_ms_ != 0) sooner(now - last_report_ms_, report_every_ms_);
  return ms * 1'000'000;
}

void Evictor::report_if_due() {
  const uint32_t now = Probation::now_ms();
  if (report_every_ms_ == 0 || now - last_report_ms_ < report_every_ms_) return;
  last_report_ms_ = now;
  report_();
}

// Each step runs inside the fork gate on its own (a batch of retires, a batch of pages moved
// out): a fork() or a stop waits for one batch, not a tick.
void Evictor::age_tick() {
  const uint32_t now = Probation::now_ms();
  sum_saved_bytes(now - aging_.last_tick_ms);
  aging_.last_tick_ms = now;
  if (aging_.stall_target_ppm != 0) steer_cold_age();
  bump(parts_.counters.cold_evictions, retire_cold());
  const uint64_t cpu_start = thread_cpu_ns();
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
// once a tick (a page it spares is not taken in the same tick), and going no faster than a
// turn every quarter of the cold age (a page is then found cold within 1.25 ages; a faster
// hand would only bring hot pages back more often). No more than probation's ring has room
// for, a quarter of it left to the budget's evictions: a page parked for the cold age holds
// the ring's tail where it is. How many left the region.
uint32_t Evictor::age_slice() {
  {
    InsideGate inside(parts_.gate);
    drain_stale();
  }
  const uint32_t room = parts_.probation.free_slots(), kept = parts_.probation.capacity() / 4;
  const uint64_t pace = get(parts_.counters.resident) * aging_.tick_ms * 4 / aging_.cold_age_ms + kLeastSlice;
  const uint32_t most = static_cast<uint32_t>(std::min<uint64_t>({aging_.slice, room > kept ? room - kept : 0, pace}));
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

// What a page moved out costs (the slice's CPU time and the stall of faults from probation
// since the last tick), smoothed over the last few ticks, for a slice's faults land in the
// ticks after it. The next slice is what the CPU share pays for at that cost; it grows at most
// twofold, and only after a slice that found its pages.
void Evictor::learn_slice_cost(uint64_t cpu_ns, uint32_t out) {
  // The two counters are read apart, so their difference may step back a fault's worth.
  const int64_t stall = static_cast<int64_t>(get(parts_.counters.stall_ns) - get(parts_.counters.promotion_stall_ns));
  const int64_t new_stall = std::max<int64_t>(stall - aging_.last_stall_ns, 0);
  aging_.spent = aging_.spent * kSmoothing + static_cast<double>(cpu_ns + static_cast<uint64_t>(new_stall));
  aging_.moved = aging_.moved * kSmoothing + out;
  aging_.last_stall_ns = std::max(stall, aging_.last_stall_ns);
  const double per_page = aging_.moved > 0 && aging_.spent > 0 ? aging_.spent / aging_.moved : 0;
  const double most = out >= aging_.slice ? 2.0 * aging_.slice : aging_.slice;
  const double fits = per_page > 0 ? kCpuShare * aging_.tick_ms * 1e6 / per_page : most;
  aging_.slice = static_cast<uint32_t>(std::clamp<double>(fits, kLeastSlice, std::min(most, double{kMostSlice})));
}

// Every steering period: the promotions' share of wall time since the last, against the target.
void Evictor::steer_cold_age() {
  const uint32_t now = Probation::now_ms(), elapsed = now - aging_.last_steer_ms;
  if (elapsed < std::min(kSteerEveryMs, aging_.cold_age_ms / 4)) return;
  const uint64_t promotion = get(parts_.counters.promotion_stall_ns);
  const double share_ppm = static_cast<double>(promotion - aging_.last_promotion_ns) / elapsed;  // ns a ms
  aging_.last_steer_ms = now;
  aging_.last_promotion_ns = promotion;
  uint64_t age = aging_.cold_age_ms;
  if (share_ppm > aging_.stall_target_ppm) {
    age = std::min<uint64_t>(2 * age, aging_.most_age_ms);
  } else if (share_ppm < aging_.stall_target_ppm / 2.0) {
    age = std::max<uint64_t>(age * 4 / 5, aging_.least_age_ms);
  }
  set_age(static_cast<uint32_t>(age));
}

// What the pages held only as copies save (their bytes less the pool's; a clean page, mapped
// with its copy valid, is in memory twice), and all the pages' bytes, summed over the tick's
// time (in KiB: a day of 64 GiB fits).
void Evictor::sum_saved_bytes(uint32_t elapsed_ms) {
  const Counters& c = parts_.counters;
  const uint64_t copies_only = (get(c.stored) - std::min(get(c.stored), get(c.clean))) * kPageSize;
  const uint64_t pool = parts_.copies.pool_bytes();
  if (copies_only > pool) bump(parts_.counters.saved_kib_ms, (copies_only - pool) / 1024 * elapsed_ms);
  bump(parts_.counters.held_kib_ms, (copies_only + (get(c.resident) + get(c.probation)) * kPageSize) / 1024 * elapsed_ms);
}

}  // namespace zsm::region
