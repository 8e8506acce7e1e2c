// The SIGBUS mode's handler and its table of regions (self_serve.h).
#include "self_serve.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <array>
#include <cerrno>
#include <mutex>

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
std::atomic<bool> handler_installed{false};

// Whether the access that faulted was a write, where the signal context says (x86-64: the
// page-fault error code's write bit); elsewhere a read, and a write to a clean page is told
// by the page's state (fault_server.cpp).
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

// The region holding the faulting address, or null. Only a fault (BUS_ADRERR) can be a
// region's: a memory error (BUS_MCEERR_*) or a sent SIGBUS is not.
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
  if (sigaction(SIGBUS, &sa, &replaced) != 0) {
    install_errno = errno;
  } else {
    handler_installed.store(true);
  }
}

}  // namespace

SignalBuffers::~SignalBuffers() {
  if (memory_ != nullptr) unmap(memory_, bytes_);
}

bool SignalBuffers::init(size_t n, size_t pages) {
  n_ = std::min(n, kMaxSets);
  size_t set_bytes = (pages + 1) * kPageSize;
  bytes_ = n_ * set_bytes;
  memory_ = static_cast<std::byte*>(map_unlocked(bytes_));
  if (memory_ == nullptr) return false;
  for (size_t i = 0; i < n_; ++i) {
    sets_[i].pages = memory_ + i * set_bytes;
    sets_[i].file_buf = sets_[i].pages + pages * kPageSize;
  }
  return true;
}

size_t SignalBuffers::acquire() {
  for (;;) {
    for (size_t i = 0; i < n_; ++i) {
      bool free = false;
      if (!taken_[i].load(std::memory_order_relaxed) &&
          taken_[i].compare_exchange_strong(free, true, std::memory_order_acquire)) {
        return i;
      }
    }
    sched_yield();  // more threads faulting at once than sets: one finishes within microseconds
  }
}

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

// Handlers of other regions are waited for too, which costs a destroy at most their faults' time.
void unregister_self_serving(Region* r) {
  for (auto& slot : regions) {
    Region* mine = r;
    if (slot.compare_exchange_strong(mine, nullptr, std::memory_order_seq_cst)) break;
  }
  while (handlers_running.load(std::memory_order_seq_cst) != 0) sched_yield();
}

void forget_handlers_in_child() { handlers_running.store(0, std::memory_order_seq_cst); }

int chain_sigbus(const struct sigaction* act, struct sigaction* old) {
  if (!handler_installed.load()) return -EINVAL;
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &saved);  // no SIGBUS reads `replaced` half written
  if (old != nullptr) *old = replaced;
  if (act != nullptr) replaced = *act;
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  return 0;
}

bool sigbus_blocked_here() {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, SIGBUS) == 1;
}

}  // namespace zsm::region
