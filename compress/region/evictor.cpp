// The evictor (evictor.h).
#include "evictor.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ZSM_REGION_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define ZSM_REGION_TSAN 1
#endif
#ifdef ZSM_REGION_TSAN
extern "C" void __tsan_ignore_thread_begin(void);
extern "C" void __tsan_ignore_thread_end(void);
#endif

namespace zsm::region {
namespace {

// Victims taken and probation pages retired per batch: fewer ioctls, and a batch never
// overshoots the high watermark by much.
constexpr uint32_t kBatch = 64;
// The most pages one UFFDIO_MOVE of victims spans, holes included.
constexpr uint32_t kMaxSpan = 256;
// Pool copies a write-back batch sends to the file, before the pool is compacted.
constexpr uint32_t kWritebackBatch = 64;
// Retiring wakes the faults waiting for room after this many pages (retire_oldest).
constexpr uint32_t kRoomEvery = 2;

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Hidden from ThreadSanitizer: the program's threads write these pages, and the kernel orders
// those writes with the region's reads (the write protection, or the page changing place).
void copy_page_ordered_by_kernel(std::byte* out, const std::byte* page) {
#ifdef ZSM_REGION_TSAN
  __tsan_ignore_thread_begin();
#endif
  std::memcpy(out, page, kPageSize);
#ifdef ZSM_REGION_TSAN
  __tsan_ignore_thread_end();
#endif
}

// Writes the page's first word back to itself, atomically (an add of 0): the kernel gives
// the region a page of its own in place of one shared with a child of fork(), and nothing a
// program thread writes meanwhile is lost. Only called on a writable, mapped page whose lock
// is held, so it cannot fault on the region.
void unshare_by_writing(uintptr_t addr) {
#ifdef ZSM_REGION_TSAN
  __tsan_ignore_thread_begin();
#endif
  __atomic_fetch_add(reinterpret_cast<uint64_t*>(addr), 0, __ATOMIC_RELAXED);
#ifdef ZSM_REGION_TSAN
  __tsan_ignore_thread_end();
#endif
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
    if (before_batch_) before_batch_();
    if (!parts_.budget.below_low_watermark() && !pool_near_budget()) {
      parts_.budget.set_stalled(false);
      asleep_.store(true, std::memory_order_release);
      parts_.evictor_wake.wait(seen);
      asleep_.store(false, std::memory_order_relaxed);
      continue;
    }
    while (work_needed() && !stopping_.load(std::memory_order_relaxed)) {
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

// Asleep, and nothing that would wake it: a fault since it fell asleep would have.
bool Evictor::idle() const {
  return asleep_.load(std::memory_order_acquire) && !parts_.budget.below_low_watermark() && !pool_near_budget();
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
    uint32_t pages[kBatch];
    PageState states[kBatch];
    uint32_t n = pick_victims(std::min(kBatch, need + refill), need, pages, states);
    progress |= take_out(n, pages, states) > 0;
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
// would only be dropped). A marked page loses its mark and is passed over. At most two turns
// of the hand.
uint32_t Evictor::pick_victims(uint32_t n, uint32_t most_clean, uint32_t* pages, PageState* states) {
  uint32_t found = 0, clean = 0;
  int wraps = 0;
  uint64_t t0 = now_ns();
  while (found < n && clean < most_clean && wraps < 2) {
    uint32_t p = hand_ < npages_ ? parts_.pages.next_mapped(hand_, npages_ - hand_) : kNoPage;
    if (p == kNoPage) {  // a whole turn: its scanning time is published
      uint64_t t = now_ns();
      parts_.counters.sweep_ns.store(sweep_ns_ + (t - t0), std::memory_order_relaxed);
      sweep_ns_ = 0;
      t0 = t;
      hand_ = 0;
      ++wraps;
      continue;
    }
    hand_ = p + 1;
    PageState s;
    if (!parts_.pages.try_lock(p, &s)) continue;
    if (!s.mapped() || s.pins > 0) {
      parts_.pages.unlock(p, s);
      continue;
    }
    if (s.referenced) {
      s.referenced = false;
      parts_.pages.unlock(p, s);
      continue;
    }
    pages[found] = p;
    states[found] = s;
    ++found;
    clean += s.kind == Kind::clean;
  }
  sweep_ns_ += now_ns() - t0;
  return found;
}

// Locks the pages [a, b), each unmapped, so that no fault maps one while a span moves over
// it; appends them to holes_. False (none of them kept) when one is mapped or busy.
bool Evictor::lock_holes(uint32_t a, uint32_t b) {
  size_t before = holes_.size();
  for (uint32_t p = a; p < b; ++p) {
    PageState s;
    bool locked = parts_.pages.try_lock(p, &s);
    if (locked && !s.mapped()) {
      holes_.push_back({p, s});
      continue;
    }
    if (locked) parts_.pages.unlock(p, s);  // mapped, not a victim: the span ends here
    for (size_t i = before; i < holes_.size(); ++i) parts_.pages.unlock(holes_[i].page, holes_[i].state);
    holes_.resize(before);
    return false;
  }
  return true;
}

// Takes the locked victims (ascending, but for a wrap of the hand) out of the region, and
// unlocks them. Victims of one kind (clean or not) whose pages between are all unmapped form
// a span: clean ones are dropped, the others move in one UFFDIO_MOVE passing over the holes
// (one call, where the kernel flushes the TLB once for each run of neighbouring pages in it).
// How many left the region.
uint32_t Evictor::take_out(uint32_t n, const uint32_t* pages, PageState* states) {
  uint32_t i = 0;
  while (i < n) {
    holes_.clear();
    const bool clean = states[i].kind == Kind::clean;
    uint32_t j = i + 1;
    while (j < n && (states[j].kind == Kind::clean) == clean && pages[j] > pages[j - 1] &&
           pages[j] - pages[i] < kMaxSpan && lock_holes(pages[j - 1] + 1, pages[j])) {
      ++j;
    }
    if (clean) {
      drop_clean_span(pages + i, states + i, j - i);
      for (const Hole& h : holes_) parts_.pages.unlock(h.page, h.state);
      i = j;
      continue;
    }
    uint32_t span = pages[j - 1] - pages[i] + 1;
    uint32_t first_slot = 0;
    uint32_t got = parts_.probation.reserve(span, &first_slot);
    if (got < span) {  // the ring's end, or full: this victim alone
      for (uint32_t k = 0; k < got; ++k) parts_.probation.give_up(first_slot + k);
      for (const Hole& h : holes_) parts_.pages.unlock(h.page, h.state);
      holes_.clear();
      j = i + 1;
      span = 1;
      if (parts_.probation.reserve(1, &first_slot) == 0 &&
          (retire_oldest(kBatch, work_.data()) == 0 || parts_.probation.reserve(1, &first_slot) == 0)) {
        break;  // the ring is full of pages the pool cannot take now
      }
    }
    move_span(pages + i, states + i, j - i, first_slot, span);
    for (const Hole& h : holes_) parts_.pages.unlock(h.page, h.state);
    i = j;
  }
  uint32_t out = 0;
  for (uint32_t k = 0; k < n; ++k) {
    if (k < i && !states[k].mapped()) ++out;
    parts_.pages.unlock(pages[k], states[k]);
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
void Evictor::drop_clean_span(const uint32_t* pages, PageState* states, uint32_t n) {
  const uint32_t span = pages[n - 1] - pages[0] + 1;
  const bool whole = drop_pages(addr(pages[0]), size_t{span} * kPageSize) == 0;
  for (uint32_t k = 0; k < n; ++k) {
    Out out = whole ? Out::dropped_clean : drop_clean_page(pages[k]);
    after_out(pages[k], &states[k], kNoSlot, out);
    if (out == Out::dropped_clean) parts_.probation.stamp_departure(&states[k]);
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
void Evictor::move_span(const uint32_t* pages, PageState* states, uint32_t n, uint32_t first_slot, uint32_t span) {
  const uint32_t base = pages[0];
  size_t done_bytes = 0;
  int rc = -EBUSY;
  if (parts_.calls.can_move()) {
    rc = parts_.calls.move(parts_.probation.slot_addr(first_slot), addr(base), span * kPageSize, true,
                           &done_bytes, true);
  }
  auto done = static_cast<uint32_t>(done_bytes / kPageSize);
  uint32_t k = 0;
  for (uint32_t d = 0; d < span; ++d) {
    bool victim = k < n && pages[k] == base + d;
    if (!victim) {
      parts_.probation.give_up(first_slot + d);
      continue;
    }
    Out o = d < done ? Out::moved
                     : parts_.calls.can_move() ? move_out(pages[k], &states[k], first_slot + d)
                                               : copy_out(pages[k], &states[k], first_slot + d);
    after_out(pages[k], &states[k], first_slot + d, o);
    ++k;
  }
  (void)rc;  // what it stopped at was handled page by page above
}

// One page out by UFFDIO_MOVE, with what the kernel may refuse handled.
Evictor::Out Evictor::move_out(uint32_t p, PageState* s, uint32_t slot) {
  bool unlocked = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    int rc = move_page(p, slot);
    if (rc == 0) return Out::moved;
    if (rc == -EBUSY) return handle_busy(p, s, slot);
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
Evictor::Out Evictor::handle_busy(uint32_t p, PageState* s, uint32_t slot) {
  if (s->kind == Kind::clean) {
    check(drop_pages(addr(p), kPageSize), "madvise(MADV_DONTNEED)");
    return Out::dropped_clean;
  }
  unshare_by_writing(addr(p));
  int rc = move_page(p, slot);
  if (rc == 0) return Out::moved;
  if (rc != -EBUSY) check(rc, "UFFDIO_MOVE (eviction, after unsharing)");
  bump(parts_.counters.io_pinned);
  s->referenced = true;  // pinned for I/O: passed over for a turn of the hand
  return Out::kept;
}

// Without UFFDIO_MOVE: write-protect, copy into the slot, drop. A write meanwhile waits for
// the page's lock, then refaults and finds the page in its slot.
Evictor::Out Evictor::copy_out(uint32_t p, PageState* s, uint32_t slot) {
  if (s->kind == Kind::resident) check(parts_.calls.write_protect(addr(p), kPageSize, true), "UFFDIO_WRITEPROTECT");
  copy_page_ordered_by_kernel(parts_.probation.slot_bytes(slot), reinterpret_cast<std::byte*>(addr(p)));
  int rc = drop_pages(addr(p), kPageSize);
  if (rc == -EINVAL) {  // mlock()ed
    unlock_ranges();
    rc = drop_pages(addr(p), kPageSize);
  }
  check(rc, "madvise(MADV_DONTNEED)");
  return Out::moved;
}

// The victim's new state once it is out (or not).
void Evictor::after_out(uint32_t p, PageState* s, uint32_t slot, Out out) {
  if (out == Out::kept) {
    if (slot != kNoSlot) parts_.probation.give_up(slot);
    return;
  }
  parts_.pages.set_mapped(p, false);
  drop(parts_.counters.resident);
  if (out == Out::moved) {
    s->kind = Kind::probation;
    s->slot = slot;
    parts_.probation.fill(slot, p);
    return;
  }
  if (slot != kNoSlot) parts_.probation.give_up(slot);
  parts_.budget.give(1);
  if (out == Out::dropped_clean) {
    s->kind = Kind::stored;
    s->slot = 0;
    s->referenced = true;
    bump(parts_.counters.clean_evictions);
  } else {  // gone: it reads as zeros
    parts_.copies.free(s, &parts_.pages.copy_word(p), true);
    s->kind = Kind::empty;
  }
}

// Retires up to n of the oldest probation pages, then drops their slots' memory, runs of
// neighbouring slots in one call (x86 flushes a run of 33 pages or more as a whole TLB, a
// shorter one page by page). Each retired page's budget is given back at once, and faults
// waiting for room are woken every kRoomEvery pages: a fault past the hard limit waits for a
// few pages' compression, not a batch's; resident memory may exceed the budget meanwhile by
// the call's slots, kBatch pages at most, until they are dropped at its end.
uint32_t Evictor::retire_oldest(uint32_t n, std::byte* work) {
  Probation::Entry oldest[kBatch];
  size_t k = parts_.probation.oldest(std::min(n, kBatch), oldest);
  uint32_t slots[kBatch];
  uint32_t retired = 0;
  for (size_t i = 0; i < k; ++i) {
    PageState s;
    uint32_t p = oldest[i].page;
    if (!parts_.pages.try_lock(p, &s)) continue;  // a fault is taking it back
    if (s.kind != Kind::probation || s.slot != oldest[i].slot) {  // it left its slot meanwhile
      parts_.pages.unlock(p, s);
      continue;
    }
    bool ok = retire_page(p, &s, work);
    if (ok) parts_.probation.stamp_departure(&s);
    parts_.pages.unlock(p, s);
    if (!ok) break;  // the pool is full
    slots[retired++] = oldest[i].slot;
    parts_.budget.give(1);
    if (retired % kRoomEvery != 0) continue;
    if (pool_grew_) pool_grew_();
    parts_.budget.room_made();
  }
  release_slots(slots, retired, false);
  return retired;
}

// The slots faults copied their pages back from: dropped, many in one call. Whether any.
bool Evictor::drain_stale() {
  uint32_t slots[4 * kBatch];
  size_t n = parts_.probation.take_stale(slots, std::size(slots));
  std::sort(slots, slots + n);
  release_slots(slots, static_cast<uint32_t>(n), true);
  return n > 0;
}

// The slots of retired pages, or stale ones (ascending): their memory dropped, then free, and
// their budget given back unless the caller gave it.
void Evictor::release_slots(const uint32_t* slots, uint32_t n, bool give_budget) {
  for (uint32_t i = 0; i < n;) {
    uint32_t j = i + 1;
    while (j < n && slots[j] > slots[j - 1] && parts_.probation.only_holes_between(slots[j - 1], slots[j])) ++j;
    uint32_t len = slots[j - 1] - slots[i] + 1;
    check(drop_pages(parts_.probation.slot_addr(slots[i]), size_t{len} * kPageSize), "madvise(MADV_DONTNEED) of slots");
    for (uint32_t k = i; k < j; ++k) {
      parts_.probation.vacate(slots[k]);
      if (give_budget) parts_.budget.give(1);
    }
    i = j;
  }
}

// p's copy made from its slot (or kept, when it is still valid): p is stored. Its slot is the
// caller's to release.
bool Evictor::retire_page(uint32_t p, PageState* s, std::byte* work) {
  bool clean = s->has_copy();
  if (!clean && !store_or_write_back(p, s, work)) return false;
  s->kind = Kind::stored;
  s->slot = 0;
  s->referenced = true;  // the write-back hand passes over it once
  bump(clean ? parts_.counters.clean_evictions : parts_.counters.evictions);
  return true;
}

// Within the pool's budget, making room in it by writing copies to the file; what the file
// cannot take (no file, or full) the pool holds past its budget: a page never stays
// decompressed for want of room (docs/region.md, the backing file). False only when the pool
// has no memory left.
// A write-back pass may send nothing and still make room for the next (the second hand's
// first pass only clears the marks of pages stored since its last): the file is given four.
bool Evictor::store_or_write_back(uint32_t p, PageState* s, std::byte* work) {
  uint64_t& word = parts_.pages.copy_word(p);
  CopyStore::Compressed c = parts_.copies.compress(parts_.probation.slot_bytes(s->slot), work);
  for (int tries = 0; parts_.copies.has_file() && tries < 4; ++tries) {
    if (parts_.copies.put(c, s, &word, false)) return true;
    if (parts_.copies.file_full()) break;
    write_back_batch(work);
  }
  return parts_.copies.put(c, s, &word, true);  // what the file cannot take, the pool holds
}

bool Evictor::evict_now(uint32_t p, PageState* s, std::byte* work) {
  uint32_t slot;
  if (parts_.probation.reserve(1, &slot) == 0 &&
      (retire_oldest(1, work) == 0 || parts_.probation.reserve(1, &slot) == 0)) {
    return false;
  }
  Out o = parts_.calls.can_move() ? move_out(p, s, slot) : copy_out(p, s, slot);
  after_out(p, s, slot, o);
  if (o != Out::moved) return o != Out::kept;
  return retire_now(p, s, work);  // false: the pool is full, and the page waits in probation
}

bool Evictor::retire_now(uint32_t p, PageState* s, std::byte* work) {
  uint32_t slot = s->slot;
  if (!retire_page(p, s, work)) return false;
  release_slots(&slot, 1, true);
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
    PageState s;
    if (!parts_.pages.try_lock(p, &s)) continue;
    bool ok = true;
    if (s.kind == Kind::stored && in_a_pool(s.copy)) {
      if (s.referenced) {
        s.referenced = false;
      } else if ((ok = parts_.copies.move_to_file(&s, &parts_.pages.copy_word(p), buf))) {
        ++written;
      }
    }
    parts_.pages.unlock(p, s);
    if (!ok) break;  // the file is full
  }
  if (written == 0) return false;
  parts_.copies.end_writeback_batch();
  return true;
}

// The program mlock()ed the region (mlockall(MCL_CURRENT) after creation): its ranges are
// unlocked again, so that pages can leave them (region.h).
void Evictor::unlock_ranges() {
  if (unlock_size_ != 0) unlock(reinterpret_cast<void*>(unlock_base_), unlock_size_);
  unlock(reinterpret_cast<void*>(parts_.probation.base()), parts_.probation.bytes());
}

}  // namespace zsm::region
