// The handler thread and the faults it serves (region_core.h). A MISSING fault installs the
// page: a never-written page as the zero page (a write fault: a zero page it may write), a
// stored one from its copy, write-protected and clean for a read (its copy stays valid) or
// writable for a write (the copy is freed); a read fault that follows the previous fault's
// page also installs the stored pages after it, in one UFFDIO_COPY (fault-around). A WP fault
// on a clean page frees its copy and un-protects it. A fault on a page in probation installs
// it from its slot (a minor fault: no decompression). A fault on a page mapped meanwhile (a
// second thread's fault on the same page, a fault raised before an eviction was abandoned)
// only wakes its thread.
//
// Handlers: a faulting thread sleeps in the kernel until its fault is served, and waking it
// from another CPU costs a cross-CPU wake-up of a CPU gone idle, 10-60 microseconds on a VM
// (the fault's own work is a few). So there is one handler thread pinned to each CPU the
// process may run on (at most kMaxHandlers), all sleeping in poll(2) on the userfaultfd and
// the stop eventfd. A fault wakes them all, and the one on the faulting thread's CPU, which
// has just gone idle, runs first: it serves the fault and wakes the faulting thread on its
// own CPU. Whichever handler holds the lock serves what is queued; the others find nothing.
//
// With ZSM_REGION_ONE_HANDLER, or a process allowed one CPU, one unpinned handler serves every
// fault and, after serving, polls the userfaultfd without sleeping for spin_us (the next
// fault of a program faulting pages one after another comes within microseconds), then
// sleeps. A pinned handler never spins: it would take faults from the handler on the
// faulting thread's CPU.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include "region_core.h"

namespace zsm::region {
namespace {

bool readable_now(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

// A spin-wait hint to the CPU (x86 pause, arm64 yield), nothing elsewhere.
void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

void Region::check(int rc, const char* what) const {
  if (rc == 0) return;
  // Only a bug, or the process's memory being torn down, gets here: the fault cannot be served.
  std::fprintf(stderr, "zsm region: %s failed: %s\n", what, std::strerror(-rc));
  std::abort();
}

// The CPUs the process may run on, at most kMaxHandlers of them.
std::vector<int> Region::handler_cpus() const {
  std::vector<int> cpus;
  cpu_set_t allowed;
  if (one_handler_ || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < kMaxHandlers; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  if (cpus.size() < 2) cpus.clear();
  return cpus;
}

void Region::start_handlers() {
  std::vector<int> cpus = handler_cpus();
  if (cpus.empty()) {
    handlers_.emplace_back([this] {
      block_signals(nullptr);
      handler_main(spin_us_ > 0);
    });
    return;
  }
  for (int cpu : cpus) {
    handlers_.emplace_back([this, cpu] {
      block_signals(nullptr);  // a signal handler here touching the region could not be served
      cpu_set_t only;
      CPU_ZERO(&only);
      CPU_SET(cpu, &only);
      sched_setaffinity(0, sizeof only, &only);  // if refused, it serves from where it runs
      handler_main(false);
    });
  }
}

void Region::handler_main(bool spin) {
  bool served = false;
  while (wait_for_faults(spin && served)) {
    std::lock_guard lock(mutex_);
    read_faults();
    served = !pending_.empty();
    serve_pending();
  }
}

// True when faults are waiting, false when the region is stopping.
bool Region::wait_for_faults(bool spin) {
  if (spin) {
    auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
    while (std::chrono::steady_clock::now() < until) {
      if (stopping_.load(std::memory_order_relaxed)) return false;
      if (readable_now(uffd_)) return true;
      cpu_relax();
    }
  }
  pollfd fds[2] = {{uffd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  while (poll(fds, 2, -1) < 0) {
    if (errno != EINTR) check(-errno, "poll on the userfaultfd");
  }
  return !stopping_.load(std::memory_order_relaxed);
}

// Appends every fault the userfaultfd holds now to pending_.
void Region::read_faults() {
  if (self_serve_) return;  // faults are SIGBUS, served by the thread that made them
  uffd_msg msgs[32];
  for (;;) {
    ssize_t n = read(uffd_, msgs, sizeof msgs);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      check(-errno, "read from the userfaultfd");
    }
    size_t count = static_cast<size_t>(n) / sizeof msgs[0];
    for (size_t i = 0; i < count; ++i) {
      if (msgs[i].event == UFFD_EVENT_PAGEFAULT) pending_.push_back(msgs[i]);
    }
    if (count < std::size(msgs)) return;
  }
}

void Region::serve_pending() {
  while (!pending_.empty()) {
    uffd_msg msg = pending_.front();
    pending_.pop_front();
    serve(msg);
  }
}

// Ends every locked section: faults read meanwhile are served before the lock goes.
void Region::finish_locked() {
  read_faults();
  serve_pending();
}

void Region::serve(const uffd_msg& msg) {
  uintptr_t a = msg.arg.pagefault.address & ~uintptr_t{kPageSize - 1};
  if (a < base_ || a >= base_ + size_) return;  // not ours: nothing registered there
  auto p = static_cast<uint32_t>((a - base_) / kPageSize);
  uint64_t flags = msg.arg.pagefault.flags;
  if (flags & UFFD_PAGEFAULT_FLAG_WP) {
    serve_write_protect(p);
  } else {
    serve_missing(p, (flags & UFFD_PAGEFAULT_FLAG_WRITE) != 0);
  }
}

void Region::serve_missing(uint32_t p, bool write) {
  if (mapped(p)) {
    check(uffd_wake(uffd_, addr(p), kPageSize), "UFFDIO_WAKE");
    return;
  }
  counters_.faults.fetch_add(1, std::memory_order_relaxed);
  bool sequential = last_fault_ != kNoPage && p == last_fault_ + 1;
  last_fault_ = p;
  if (kind(p) == Kind::empty) counters_.zero_faults.fetch_add(1, std::memory_order_relaxed);
  if (kind(p) == Kind::probation) counters_.probation_faults.fetch_add(1, std::memory_order_relaxed);
  if (kind(p) == Kind::stored) counters_.refaults.fetch_add(1, std::memory_order_relaxed);
  bool around = sequential && !write && kind(p) == Kind::stored;
  bring_in(p, write, around ? stored_run_after(p) : 0);
}

// Maps an unmapped page (and `ahead` stored pages after it), making room first.
void Region::bring_in(uint32_t p, bool writable, uint32_t ahead) {
  pages_[p].victim = 1;  // making room must not retire it from probation meanwhile
  if (serving_signal_) {
    defer_eviction(1 + ahead);
  } else {
    make_room(1 + ahead);
  }
  pages_[p].victim = 0;
  // A major fault is no evidence of reuse when probation will tell; without it, it is all.
  bool mark = probation_size_ == 0;
  switch (kind(p)) {
    case Kind::empty: return install_zero(p, writable);
    case Kind::probation: return install_from_probation(p, writable);
    case Kind::stored: return ahead > 0 ? install_run(p, 1 + ahead) : install_copy(p, writable, mark);
    default: return;
  }
}

// How many pages after p are stored, up to fault_around - 1 and a quarter of the budget.
uint32_t Region::stored_run_after(uint32_t p) const {
  uint32_t limit = std::min<uint32_t>(fault_around_ - 1, budget_pages_ / 4);
  uint32_t n = 0;
  while (n < limit && p + 1 + n < npages_ && kind(p + 1 + n) == Kind::stored &&
         pages_[p + 1 + n].pins == 0) {
    ++n;
  }
  return n;
}

void Region::serve_write_protect(uint32_t p) {
  counters_.wp_faults.fetch_add(1, std::memory_order_relaxed);
  if (!mapped(p)) {  // evicted since the fault was raised: the writer refaults and finds the copy
    check(uffd_wake(uffd_, addr(p), kPageSize), "UFFDIO_WAKE");
    return;
  }
  if (kind(p) == Kind::clean) pages_[p].referenced = 1;
  make_writable(p);
}

// A mapped page becomes resident and writable: its copy (if any) is freed, waiters woken.
void Region::make_writable(uint32_t p) {
  if (pages_[p].has_copy) free_copy(p);
  set_kind(p, Kind::resident);
  check(uffd_write_protect(uffd_, addr(p), kPageSize, false), "UFFDIO_WRITEPROTECT (off)");
}

void Region::install_zero(uint32_t p, bool write) {
  int rc = write ? uffd_copy(uffd_, addr(p), zeros_.data(), kPageSize, false, nullptr)
                 : uffd_zeropage(uffd_, addr(p), kPageSize);
  if (rc != -EEXIST) check(rc, "installing a zero page");
  // Resident, not clean: a write to the shared zero page is copied by the kernel unseen.
  after_install(p, Kind::resident, probation_size_ == 0);
}

// Installs p from its copy: writable (the copy freed) or write-protected and clean.
void Region::install_copy(uint32_t p, bool writable, bool referenced) {
  if (kind(p) != Kind::stored) return;
  load_copy(p, scratch_.data());
  int rc = uffd_copy(uffd_, addr(p), scratch_.data(), kPageSize, !writable, nullptr);
  if (rc == -EEXIST) {  // a page is there already: it is what the program sees
    check(uffd_wake(uffd_, addr(p), kPageSize), "UFFDIO_WAKE");
    writable = true;
  } else {
    check(rc, "UFFDIO_COPY");
  }
  if (writable) free_copy(p);
  after_install(p, writable ? Kind::resident : Kind::clean, referenced);
}

// Fault-around: installs the stored pages [first, first + count) in one UFFDIO_COPY, clean.
void Region::install_run(uint32_t first, uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) load_copy(first + i, scratch_.data() + i * kPageSize);
  size_t copied = 0;
  int rc = uffd_copy(uffd_, addr(first), scratch_.data(), count * kPageSize, true, &copied);
  if (rc != 0 && rc != -EEXIST) check(rc, "UFFDIO_COPY (fault-around)");
  auto installed = static_cast<uint32_t>(copied / kPageSize);
  for (uint32_t i = 0; i < installed; ++i) after_install(first + i, Kind::clean, i == 0 && probation_size_ == 0);
  counters_.fault_around.fetch_add(installed > 0 ? installed - 1 : 0, std::memory_order_relaxed);
  if (installed == 0) install_copy(first, false, probation_size_ == 0);  // the faulting page, alone
}

// A minor fault: p's bytes come from its probation slot; clean (write-protected) if its copy
// is still valid and this is a read, else writable. The touch marks it referenced.
void Region::install_from_probation(uint32_t p, bool writable) {
  writable = writable || !pages_[p].has_copy;
  int rc = uffd_copy(uffd_, addr(p), slot_bytes(frame_of_[p]), kPageSize, !writable, nullptr);
  if (rc == -EEXIST) {
    check(uffd_wake(uffd_, addr(p), kPageSize), "UFFDIO_WAKE");
    writable = true;
  } else {
    check(rc, "UFFDIO_COPY (probation)");
  }
  probation_release(p);
  if (writable && pages_[p].has_copy) free_copy(p);
  after_install(p, writable ? Kind::resident : Kind::clean, true);
}

void Region::after_install(uint32_t p, Kind k, bool referenced) {
  set_kind(p, k);
  clock_insert(p, referenced);
}

}  // namespace zsm::region
