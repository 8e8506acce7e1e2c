// Serving a fault (fault_server.h).
#include "fault_server.h"

#include <time.h>

#include <algorithm>
#include <cstring>

namespace zsm::region {
namespace {

constexpr uint32_t kMaxFaultAround = 64;  // zsm_region_options.fault_around_pages' most
alignas(4096) const std::byte kZeros[kPageSize] = {};

size_t entry_of(uint64_t thread) { return (thread * 0x9E3779B97F4A7C15ull) >> 58; }  // 64 entries

uint64_t monotonic_ns() {  // async-signal-safe (a SIGBUS handler serves faults too)
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(t.tv_nsec);
}

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

// A fault that brings a page back (from probation or its copy) counts its time, waits for
// room included, as the program's stall (a first touch, which the kernel would serve too,
// does not).
void FaultServer::serve(const Fault& f, ServeBuffers& b, bool in_signal) {
  const uint64_t start = monotonic_ns();
  BroughtBack brought_back = BroughtBack::no;
  for (;;) {
    uint32_t seen = parts_.budget.room_seq();
    {
      InsideGate inside(parts_.gate, f.tid);
      if (serve_once(f, b, in_signal, &brought_back)) break;
    }
    parts_.evictor_wake.notify();
    parts_.budget.wait_for_room(seen);
  }
  if (brought_back != BroughtBack::no) {
    const uint64_t stall = monotonic_ns() - start;
    bump(parts_.counters.stall_ns, stall);
    if (brought_back == BroughtBack::decompressed) bump(parts_.counters.promotion_stall_ns, stall);
  }
  poke_evictor();
}

bool FaultServer::serve_once(const Fault& f, ServeBuffers& b, bool in_signal, BroughtBack* brought_back) {
  const uint32_t p = f.page;
  PageLock l(parts_.pages, p);
  const Kind kind = l.state().kind;
  if (l.state().mapped()) {
    serve_mapped(f, l, in_signal);
  } else if (f.write_protect) {  // evicted since the fault was raised: the writer refaults
    bump(parts_.counters.wp_faults);
    check(parts_.calls.wake(addr(p), kPageSize), "UFFDIO_WAKE");
  } else if (!parts_.budget.try_take(1)) {
    return false;
  } else if (kind == Kind::probation) {
    *brought_back = BroughtBack::from_probation;
    install_from_probation(l, f.write, !in_signal);
  } else if (kind == Kind::empty) {
    install_zero(l, f.write);
  } else {
    *brought_back = BroughtBack::decompressed;
    uint32_t window = f.write ? 1 : streams_.window(f.thread, p, std::min(fault_around_, kMaxFaultAround));
    window = std::min(window, parts_.budget.limit() / 4 + 1);
    uint32_t n = 1;
    if (window > 1) {
      n = install_run(f, l, b, window);
    } else {
      install_copy(l, f.write, b, !in_signal);
    }
    streams_.note(f.thread, p, n, window);
  }
  return true;
}

// A fault on a page the state says is mapped.
void FaultServer::serve_mapped(const Fault& f, PageLock& l, bool in_signal) {
  const uint32_t p = f.page;
  if (l.state().kind == Kind::clean && (f.write_protect || self_serve_)) {  // a write to a clean page
    bump(parts_.counters.wp_faults);
    make_writable(l, !in_signal);
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
  moves_.dirty(l, !in_signal, false);
}

// Each install counts its fault and maps the page in the table before the kernel call that
// wakes the faulting thread, so that what the thread reads next includes its own fault; the
// page's lock keeps everyone else from it meanwhile.
void FaultServer::install_zero(PageLock& l, bool write) {
  bump(parts_.counters.faults);
  bump(parts_.counters.zero_faults);
  // Resident, not clean: a write to the shared zero page is copied by the kernel unseen.
  moves_.map(l, Kind::resident, parts_.probation.target() == 0);
  const uintptr_t a = addr(l.page());
  int rc = write ? parts_.calls.copy(a, kZeros, kPageSize, false, nullptr) : parts_.calls.zeropage(a, kPageSize);
  check(rc, "installing a zero page");
}

// A minor fault: the page is copied back from its slot, clean when its copy is still valid
// and this is a read. Copied, not moved: moving it out of the slot would flush the slot's
// entry from every CPU's TLB (an interrupt of each CPU running the program, some 10 us on a
// VM) on the fault's path; the evictor drops stale slots later, many in one call.
void FaultServer::install_from_probation(PageLock& l, bool write, bool may_allocate) {
  const uint32_t slot = l.state().slot;
  const bool clean = l.state().has_copy() && !write;
  bump(parts_.counters.faults);
  bump(parts_.counters.probation_faults);
  if (!clean) parts_.copies.free(l, may_allocate);
  moves_.map(l, clean ? Kind::clean : Kind::resident, true);
  check(parts_.calls.copy(addr(l.page()), parts_.probation.slot_bytes(slot), kPageSize, clean, nullptr),
        "UFFDIO_COPY (probation)");
  moves_.leave_slot(slot);
}

// Whether a page faulted in from its copy comes back marked: always without probation (CLOCK
// then spares every page once); with it, when the page left memory recently (probation.h).
bool FaultServer::marked_on_refault(const PageState& s) const {
  return parts_.probation.target() == 0 || parts_.probation.left_recently(s);
}

// A major fault: from the copy, writable (the copy freed) or write-protected and clean.
void FaultServer::install_copy(PageLock& l, bool write, ServeBuffers& b, bool may_allocate) {
  parts_.copies.load(l, b.pages, b.file_buf);
  bump(parts_.counters.faults);
  bump(parts_.counters.refaults);
  const bool marked = marked_on_refault(l.state());
  if (write) parts_.copies.free(l, may_allocate);
  moves_.map(l, write ? Kind::resident : Kind::clean, marked);
  check(parts_.calls.copy(addr(l.page()), b.pages, kPageSize, !write, nullptr), "UFFDIO_COPY");
}

// Locks the stored, unpinned pages [p, p + n) that are free now, stopping at the first that is
// not, into out[]. How many.
uint32_t FaultServer::lock_stored_run(uint32_t p, uint32_t most, PageLock* out) {
  uint32_t n = 0;
  for (; n < most && p + n < parts_.pages.pages(); ++n) {
    PageState hint = parts_.pages.peek(p + n);
    if (hint.kind != Kind::stored || hint.pins != 0) break;
    out[n] = PageLock::try_lock(parts_.pages, p + n);
    if (!out[n]) break;
    if (out[n].state().kind != Kind::stored || out[n].state().pins != 0) {
      out[n].release();
      break;
    }
  }
  return n;
}

// Fault-around: the faulting page and the stored pages after it, clean, in one UFFDIO_COPY.
// The faulting page's budget is taken; the others' is taken here, as far as there is room.
// Only the faulting page may come back marked (a refault): the others were not touched.
uint32_t FaultServer::install_run(const Fault& f, PageLock& l, ServeBuffers& b, uint32_t window) {
  const uint32_t p = f.page;
  PageLock more[kMaxFaultAround];
  uint32_t extra = lock_stored_run(p + 1, window - 1, more);
  while (extra > 0 && !parts_.budget.try_take(extra)) more[--extra].release();
  parts_.copies.load(l, b.pages, b.file_buf);
  uint64_t write_back_marks = 0;  // the stored pages' marks, should the kernel not install them
  for (uint32_t i = 0; i < extra; ++i) {
    parts_.copies.load(more[i], b.pages + (i + 1) * kPageSize, b.file_buf);
    write_back_marks |= uint64_t{more[i].state().referenced} << i;
  }
  bump(parts_.counters.faults);
  bump(parts_.counters.refaults);
  bump(parts_.counters.fault_around, extra);
  moves_.map(l, Kind::clean, marked_on_refault(l.state()));
  for (uint32_t i = 0; i < extra; ++i) moves_.map(more[i], Kind::clean, false);
  size_t copied = 0;
  int rc = parts_.calls.copy(addr(p), b.pages, (1 + extra) * kPageSize, true, &copied);
  if (rc != -EEXIST) check(rc, "UFFDIO_COPY (fault-around)");
  auto installed = static_cast<uint32_t>(copied / kPageSize);
  check(installed == 0 ? -EEXIST : 0, "UFFDIO_COPY (fault-around) of the faulting page");
  drop(parts_.counters.fault_around, extra + 1 - installed);
  for (uint32_t i = installed - 1; i < extra; ++i) moves_.unmap_untaken(more[i], (write_back_marks >> i & 1) != 0);
  return installed;
}

void FaultServer::install(PageLock& l, bool writable, ServeBuffers& b) {
  if (l.state().mapped()) {
    if (writable && l.state().kind == Kind::clean) make_writable(l, true);
    return;
  }
  switch (l.state().kind) {
    case Kind::empty: return install_zero(l, writable);
    case Kind::probation: return install_from_probation(l, writable, true);
    default: return install_copy(l, writable, b, true);
  }
}

void FaultServer::make_writable(PageLock& l, bool may_allocate) {
  moves_.dirty(l, may_allocate, true);
  check(parts_.calls.write_protect(addr(l.page()), kPageSize, false), "UFFDIO_WRITEPROTECT (off)");
}

void FaultServer::poke_evictor() {
  if (parts_.budget.below_low_watermark()) parts_.evictor_wake.notify();
}

}  // namespace zsm::region
