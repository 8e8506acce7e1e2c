// Serving a fault (fault_server.h).
#include "fault_server.h"

#include <algorithm>
#include <cstring>

namespace zsm::region {
namespace {

constexpr uint32_t kMaxFaultAround = 64;  // zsm_region_options.fault_around_pages' most
alignas(4096) const std::byte kZeros[kPageSize] = {};

size_t entry_of(uint64_t thread) { return (thread * 0x9E3779B97F4A7C15ull) >> 58; }  // 64 entries

}  // namespace

uint32_t Streams::window(uint64_t thread, uint32_t p, uint32_t most) {
  const Entry& e = entries_[entry_of(thread)];
  if (e.thread.load(std::memory_order_relaxed) != thread || e.next.load(std::memory_order_relaxed) != p) {
    return 1;
  }
  return std::min(e.window.load(std::memory_order_relaxed) * 2, most);
}

void Streams::note(uint64_t thread, uint32_t p, uint32_t n, uint32_t window) {
  Entry& e = entries_[entry_of(thread)];
  e.thread.store(thread, std::memory_order_relaxed);
  e.next.store(p + n, std::memory_order_relaxed);
  e.window.store(window, std::memory_order_relaxed);
}

void FaultServer::serve(const Fault& f, ServeBuffers& b, bool in_signal) {
  for (;;) {
    uint32_t seen = parts_.budget.room_seq();
    {
      InsideGate inside(parts_.gate, f.tid);
      if (serve_once(f, b, in_signal)) break;
    }
    parts_.evictor_wake.notify();
    parts_.budget.wait_for_room(seen);
  }
  poke_evictor();
}

bool FaultServer::serve_once(const Fault& f, ServeBuffers& b, bool in_signal) {
  const uint32_t p = f.page;
  PageState s = parts_.pages.lock(p);
  if (s.mapped()) {
    serve_mapped(f, &s, in_signal);
  } else if (f.write_protect) {  // evicted since the fault was raised: the writer refaults
    bump(parts_.counters.wp_faults);
    check(parts_.calls.wake(addr(p), kPageSize), "UFFDIO_WAKE");
  } else if (!parts_.budget.try_take(1)) {
    parts_.pages.unlock(p, s);
    return false;
  } else if (s.kind == Kind::probation) {
    install_from_probation(p, &s, f.write, !in_signal);
  } else if (s.kind == Kind::empty) {
    install_zero(p, &s, f.write);
  } else {
    uint32_t window = f.write ? 1 : streams_.window(f.thread, p, std::min(fault_around_, kMaxFaultAround));
    window = std::min(window, parts_.budget.limit() / 4 + 1);
    uint32_t n = 1;
    if (window > 1) {
      n = install_run(f, &s, b, window);
    } else {
      install_copy(p, &s, f.write, b, !in_signal);
    }
    streams_.note(f.thread, p, n, window);
  }
  parts_.pages.unlock(p, s);
  return true;
}

// A fault on a page the state says is mapped.
void FaultServer::serve_mapped(const Fault& f, PageState* s, bool in_signal) {
  const uint32_t p = f.page;
  if (s->kind == Kind::clean && (f.write_protect || self_serve_)) {  // a write to a clean page
    bump(parts_.counters.wp_faults);
    make_writable(p, s, !in_signal);
    return;
  }
  if (f.write_protect) {  // un-protected meanwhile
    check(parts_.calls.wake(addr(p), kPageSize), "UFFDIO_WAKE");
    return;
  }
  // Installed meanwhile by another thread's fault (a page is there), or dropped by the
  // program behind the region's back: then it reads as zeros, as a dropped page does.
  int rc = parts_.calls.zeropage(addr(p), kPageSize);
  if (rc == -EEXIST) {
    check(parts_.calls.wake(addr(p), kPageSize), "UFFDIO_WAKE");
    return;
  }
  check(rc, "UFFDIO_ZEROPAGE");
  parts_.copies.free(s, &parts_.pages.copy_word(p), !in_signal);
  s->kind = Kind::resident;
}

// The page's state once it is mapped; the caller counted it resident.
void FaultServer::mapped_now(uint32_t p, PageState* s, Kind k, bool referenced) {
  s->kind = k;
  s->referenced = referenced;
  parts_.pages.set_mapped(p, true);
}

// Counters are bumped, and a write's copy freed, before the call that wakes the faulting
// thread, so that what it reads next includes its own fault (a probation slot's count only
// drops after: its bytes are the copy's source).
void FaultServer::install_zero(uint32_t p, PageState* s, bool write) {
  bump(parts_.counters.faults);
  bump(parts_.counters.zero_faults);
  bump(parts_.counters.resident);
  int rc = write ? parts_.calls.copy(addr(p), kZeros, kPageSize, false, nullptr)
                 : parts_.calls.zeropage(addr(p), kPageSize);
  check(rc, "installing a zero page");
  // Resident, not clean: a write to the shared zero page is copied by the kernel unseen.
  mapped_now(p, s, Kind::resident, parts_.probation.target() == 0);
}

// A minor fault: the page is copied back from its slot, clean when its copy is still valid
// and this is a read. Copied, not moved: moving it out of the slot would flush the slot's
// entry from every CPU's TLB (an interrupt of each CPU running the program, some 10 us on a
// VM) on the fault's path; the evictor drops stale slots later, many in one call.
void FaultServer::install_from_probation(uint32_t p, PageState* s, bool write, bool may_allocate) {
  const uint32_t slot = s->slot;
  const bool clean = s->has_copy() && !write;
  bump(parts_.counters.faults);
  bump(parts_.counters.probation_faults);
  bump(parts_.counters.resident);
  if (!clean) parts_.copies.free(s, &parts_.pages.copy_word(p), may_allocate);
  check(parts_.calls.copy(addr(p), parts_.probation.slot_bytes(slot), kPageSize, clean, nullptr),
        "UFFDIO_COPY (probation)");
  if (!parts_.probation.vacate_stale(slot)) {  // no room to defer it: dropped now
    check(drop_pages(parts_.probation.slot_addr(slot), kPageSize), "madvise(MADV_DONTNEED) of a slot");
    parts_.probation.vacate(slot);
    parts_.budget.give(1);
  }
  mapped_now(p, s, clean ? Kind::clean : Kind::resident, true);
}

// Whether a page faulted in from its copy comes back marked: always without probation (CLOCK
// then spares every page once); with it, when the page left memory recently (probation.h).
bool FaultServer::marked_on_refault(const PageState& s) const {
  return parts_.probation.target() == 0 || parts_.probation.left_recently(s);
}

// A major fault: from the copy, writable (the copy freed) or write-protected and clean.
void FaultServer::install_copy(uint32_t p, PageState* s, bool write, ServeBuffers& b, bool may_allocate) {
  parts_.copies.load(p, *s, parts_.pages.copy_word(p), b.pages, b.file_buf);
  bump(parts_.counters.faults);
  bump(parts_.counters.refaults);
  bump(parts_.counters.resident);
  if (write) parts_.copies.free(s, &parts_.pages.copy_word(p), may_allocate);
  check(parts_.calls.copy(addr(p), b.pages, kPageSize, !write, nullptr), "UFFDIO_COPY");
  mapped_now(p, s, write ? Kind::resident : Kind::clean, marked_on_refault(*s));
}

// Locks the stored, unpinned pages [p, p + n) that are free now, stopping at the first that is
// not; their states into states[]. How many.
uint32_t FaultServer::lock_stored_run(uint32_t p, uint32_t most, PageState* states) {
  uint32_t n = 0;
  for (; n < most && p + n < parts_.pages.pages(); ++n) {
    PageState hint = parts_.pages.peek(p + n);
    if (hint.kind != Kind::stored || hint.pins != 0) break;
    if (!parts_.pages.try_lock(p + n, &states[n])) break;
    if (states[n].kind != Kind::stored || states[n].pins != 0) {
      parts_.pages.unlock(p + n, states[n]);
      break;
    }
  }
  return n;
}

// Fault-around: the faulting page and the stored pages after it, clean, in one UFFDIO_COPY.
// The faulting page's budget is taken; the others' is taken here, as far as there is room.
// Only the faulting page may come back marked (a refault): the others were not touched.
uint32_t FaultServer::install_run(const Fault& f, PageState* s, ServeBuffers& b, uint32_t window) {
  const uint32_t p = f.page;
  PageState more[kMaxFaultAround];
  uint32_t extra = lock_stored_run(p + 1, window - 1, more);
  while (extra > 0 && !parts_.budget.try_take(extra)) {
    --extra;
    parts_.pages.unlock(p + 1 + extra, more[extra]);
  }
  parts_.copies.load(p, *s, parts_.pages.copy_word(p), b.pages, b.file_buf);
  for (uint32_t i = 0; i < extra; ++i) {
    parts_.copies.load(p + 1 + i, more[i], parts_.pages.copy_word(p + 1 + i), b.pages + (i + 1) * kPageSize,
                       b.file_buf);
  }
  size_t copied = 0;
  bump(parts_.counters.faults);
  bump(parts_.counters.refaults);
  bump(parts_.counters.fault_around, extra);
  bump(parts_.counters.resident, 1 + extra);
  int rc = parts_.calls.copy(addr(p), b.pages, (1 + extra) * kPageSize, true, &copied);
  if (rc != -EEXIST) check(rc, "UFFDIO_COPY (fault-around)");
  auto installed = static_cast<uint32_t>(copied / kPageSize);
  check(installed == 0 ? -EEXIST : 0, "UFFDIO_COPY (fault-around) of the faulting page");
  drop(parts_.counters.fault_around, extra + 1 - installed);
  drop(parts_.counters.resident, extra + 1 - installed);
  mapped_now(p, s, Kind::clean, marked_on_refault(*s));
  for (uint32_t i = 0; i < extra; ++i) {
    if (i + 1 < installed) {
      mapped_now(p + 1 + i, &more[i], Kind::clean, false);
    } else {
      parts_.budget.give(1);
    }
    parts_.pages.unlock(p + 1 + i, more[i]);
  }
  return installed;
}

void FaultServer::install(uint32_t p, PageState* s, bool writable, ServeBuffers& b) {
  if (s->mapped()) {
    if (writable && s->kind == Kind::clean) make_writable(p, s, true);
    return;
  }
  switch (s->kind) {
    case Kind::empty: return install_zero(p, s, writable);
    case Kind::probation: return install_from_probation(p, s, writable, true);
    default: return install_copy(p, s, writable, b, true);
  }
}

void FaultServer::make_writable(uint32_t p, PageState* s, bool may_allocate) {
  parts_.copies.free(s, &parts_.pages.copy_word(p), may_allocate);
  check(parts_.calls.write_protect(addr(p), kPageSize, false), "UFFDIO_WRITEPROTECT (off)");
  s->kind = Kind::resident;
  s->referenced = true;
}

void FaultServer::poke_evictor() {
  if (parts_.budget.below_low_watermark()) parts_.evictor_wake.notify();
}

}  // namespace zsm::region
