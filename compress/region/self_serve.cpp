// The SIGBUS mode (ZSM_REGION_SELF_SERVE): with UFFD_FEATURE_SIGBUS the kernel queues no
// fault on the region's userfaultfd; the faulting thread gets SIGBUS instead, and the
// handler installed here serves the fault in that thread, under the region's lock, then
// returns, and the access is made again. No other thread is woken, so a fault costs what it
// does, not a cross-CPU wake-up (faults.cpp). zram's swap-in runs in the faulting thread too.
//
// The handler is installed once, for the process, when the first such region is made; it
// runs with every signal blocked. A SIGBUS at an address no region holds goes to the
// disposition it replaced: a handler is called, and the default (or an ignored SIGBUS, which
// the kernel would not ignore for a fault) is restored so that the access, made again,
// stops the process as it would have without the region. The regions are a fixed table of
// atomic pointers, read by the handler without a lock.
//
// The handler allocates nothing and compresses nothing: a signal may have interrupted malloc
// or anything else. It installs the page (decompressing with lz4, which needs no state; zstd's
// per-thread context is why the mode refuses zstd) and leaves eviction to the region's evictor
// thread, which it wakes through an eventfd (write(2) is async-signal-safe). Resident pages
// may pass the budget meanwhile, by at most self_serve_slack() pages; past that a fault waits
// for the evictor (serve_own_fault).
#include <array>
#include <atomic>
#include <cerrno>
#include <mutex>

#include <sched.h>
#include <signal.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "region_core.h"

namespace zsm::region {
namespace {

constexpr size_t kMaxSelfServing = 64;
std::array<std::atomic<Region*>, kMaxSelfServing> regions{};
// Handlers between their first look at `regions` and their return: a region being destroyed
// waits for none to be left before it is freed.
std::atomic<int> handlers_running{0};
struct sigaction replaced {};
std::once_flag installed;
int install_errno = 0;

// Whether the access that faulted was a write, where the signal context says (x86-64: the
// page-fault error code's write bit); elsewhere a read, and a write faults again, on the
// write protection of the page installed clean.
bool was_write(const void* context) {
#if defined(__x86_64__)
  const auto* uc = static_cast<const ucontext_t*>(context);
  return (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
  (void)context;
  return false;
#endif
}

// A SIGBUS no region holds, to the disposition it would have met without the region. The
// default (or an ignored SIGBUS, which the kernel does not ignore for a fault) is restored: a
// fault is made again and stops the process; a sent SIGBUS is sent again, and stops it, or is
// dropped if it was ignored.
void pass_on(int sig, siginfo_t* info, void* context) {
  const bool sent = info->si_code <= 0;  // kill(), raise(), sigqueue(): no fault to make again
  if (replaced.sa_handler == SIG_DFL || replaced.sa_handler == SIG_IGN) {
    bool ignored = replaced.sa_handler == SIG_IGN;
    signal(sig, SIG_DFL);
    if (sent && !ignored) raise(sig);  // pending until the handler returns, then fatal
    return;
  }
  if (replaced.sa_flags & SA_SIGINFO) {
    replaced.sa_sigaction(sig, info, context);
  } else {
    replaced.sa_handler(sig);
  }
}

// The region holding `a`, or null. Only a fault (BUS_ADRERR) can be a region's: a memory error
// (BUS_MCEERR_*) or a sent SIGBUS is not.
Region* region_of(const siginfo_t* info) {
  if (info->si_code != BUS_ADRERR) return nullptr;
  auto a = reinterpret_cast<uintptr_t>(info->si_addr);
  for (auto& slot : regions) {
    Region* r = slot.load(std::memory_order_acquire);
    if (r != nullptr && r->contains(a)) return r;
  }
  return nullptr;
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  int saved_errno = errno;
  handlers_running.fetch_add(1, std::memory_order_seq_cst);
  Region* r = region_of(info);
  if (r != nullptr) r->serve_own_fault(reinterpret_cast<uintptr_t>(info->si_addr), was_write(context));
  handlers_running.fetch_sub(1, std::memory_order_seq_cst);
  errno = saved_errno;
  if (r == nullptr) pass_on(sig, info, context);
}

void install_handler() {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigfillset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, &replaced) != 0) install_errno = errno;
}

}  // namespace

bool register_self_serving(Region* r, std::string* why) {
  std::call_once(installed, install_handler);
  if (install_errno != 0) {
    *why = "sigaction(SIGBUS) failed";
    errno = install_errno;
    return false;
  }
  for (auto& slot : regions) {
    Region* none = nullptr;
    if (slot.compare_exchange_strong(none, r, std::memory_order_acq_rel)) return true;
  }
  *why = "64 regions in the SIGBUS mode exist already";
  errno = EMFILE;
  return false;
}

// After this, no handler can reach r: one that found it has returned (handlers of other
// regions are waited for too, which costs a destroy at most their faults' time).
void unregister_self_serving(Region* r) {
  for (auto& slot : regions) {
    Region* mine = r;
    if (slot.compare_exchange_strong(mine, nullptr, std::memory_order_seq_cst)) break;
  }
  while (handlers_running.load(std::memory_order_seq_cst) != 0) sched_yield();
}

void block_signals(sigset_t* saved) {  // saved may be null
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, saved);
}

void restore_signals(const sigset_t* saved) { pthread_sigmask(SIG_SETMASK, saved, nullptr); }

// The fault at `a`, served once the pages it may install (with fault-around) fit within the
// budget and the slack: until then the evictor is woken and the lock left to it for 20 us at
// a time. When the evictor cannot get under the budget (every page pinned, the pool full),
// faults are served past it, as the handler threads would.
void Region::serve_own_fault(uintptr_t a, bool write) {
  auto p = static_cast<uint32_t>((a - base_) / kPageSize);
  for (;;) {
    {
      std::lock_guard lock(mutex_);  // signals are blocked already: the handler's mask
      uint64_t most = uint64_t{mapped_budget()} + self_serve_slack();
      if (eviction_stalled_ || counters_.resident.load(std::memory_order_relaxed) + fault_around_ <= most) {
        serving_signal_ = true;
        if (!mapped(p)) {
          serve_missing(p, write);
        } else if (kind(p) == Kind::clean) {
          serve_write_protect(p);
        }  // resident: another thread's fault installed it meanwhile
        serving_signal_ = false;
        return;
      }
      wake_evictor();
    }
    timespec pause{0, 20'000};
    nanosleep(&pause, nullptr);
  }
}

// From the SIGBUS handler: wakes the evictor when `pages` more would pass the budget.
void Region::defer_eviction(uint32_t pages) {
  if (counters_.resident.load(std::memory_order_relaxed) + pages > mapped_budget()) wake_evictor();
}

void Region::wake_evictor() {
  uint64_t one = 1;
  ssize_t n = ::write(evict_fd_, &one, sizeof one);
  (void)n;  // a full eventfd counter is a wake-up already pending
}

void Region::evictor_main() {
  for (;;) {
    uint64_t wakes;
    ssize_t n = ::read(evict_fd_, &wakes, sizeof wakes);
    if (stopping_.load(std::memory_order_relaxed)) return;
    if (n != sizeof wakes) continue;  // EINTR
    Locked lock(*this);
    make_room(0);
    eviction_stalled_ = counters_.resident.load(std::memory_order_relaxed) > mapped_budget();
  }
}

}  // namespace zsm::region
