// Signals and threads, for the SIGBUS mode's handler (preload.h's pinning modes for stacks).
//
// - The kernel kills a thread that blocks a fault's SIGBUS: SIGBUS stays unblocked in every
//   thread, however a mask is set (sigprocmask, pthread_sigmask, sigsetmask, sigblock,
//   sighold, sigsuspend's, ppoll's and epoll_pwait's, sigaction's sa_mask, and
//   syscall(SYS_rt_sigprocmask)).
// - The region's handler stays first: however the program installs a SIGBUS disposition
//   (sigaction, signal, sysv_signal and __sysv_signal, bsd_signal, ssignal, sigset, sigignore,
//   syscall(SYS_rt_sigaction)) it becomes the one the region's handler passes other SIGBUSes to
//   (zsm_region_sigbus_action), and a query reads that one.
// - Stacks: the kernel delivers SIGBUS by pushing a frame onto the faulting thread's stack, and
//   where that stack is region memory that is not there (evicted, or never touched) it cannot,
//   and kills the process. So every thread the program starts gets a signal stack of 64 KiB
//   outside the region (the region's handler runs SA_ONSTACK), made at its start and unmapped
//   at its end. A stack the program gives a thread (pthread_attr_setstack, a malloc'd block of
//   coroutines or green threads) that is region memory is pinned while the thread lives, in
//   every mode (the kernel writes the thread's id there and pushes its other signals' frames,
//   and fork()'s child reads its descriptor there before the child's region is served); in the
//   pinning modes a signal stack the program sets in region memory is pinned while it is set,
//   or not set (ENOMEM) where no pin can be had.
#include "preload.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

namespace zsm_preload {
namespace {

constexpr size_t kSignalStack = 64 << 10;

bool self_serving() {
  const Layout* l = on();
  return l != nullptr && l->self_serve;
}

// --- The signal stack of each thread (the SIGBUS mode). ------------------------------------

pthread_key_t stack_key;
pthread_once_t stack_key_once = PTHREAD_ONCE_INIT;

void free_signal_stack(void* stack) {
  stack_t off{};
  off.ss_flags = SS_DISABLE;
  next.sigaltstack(&off, nullptr);
  syscall(SYS_munmap, stack, kSignalStack);
}

void make_stack_key() { pthread_key_create(&stack_key, free_signal_stack); }

// A stack outside the region (mapped by system call, not by the interposed mmap), unless the
// thread has one already.
void give_signal_stack() {
  stack_t now{};
  if (next.sigaltstack(nullptr, &now) == 0 && (now.ss_flags & SS_DISABLE) == 0) return;
  void* stack = reinterpret_cast<void*>(syscall(SYS_mmap, nullptr, kSignalStack, PROT_READ | PROT_WRITE,
                                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0));
  if (stack == MAP_FAILED) return;
  stack_t ss{};
  ss.ss_sp = stack;
  ss.ss_size = kSignalStack;
  if (next.sigaltstack(&ss, nullptr) != 0) {
    syscall(SYS_munmap, stack, kSignalStack);
    return;
  }
  pthread_once(&stack_key_once, make_stack_key);
  pthread_setspecific(stack_key, stack);
}

// A signal stack the program set in region memory, pinned while it is set (per thread): the
// kernel writes a signal's frame there in kernel mode, where no fault is served.
thread_local Pin program_signal_stack;

// sigaltstack in a pinning mode: a new stack in region memory is pinned before it is set, and
// where no pin can be had the call fails (ENOMEM) and changes nothing.
int set_signal_stack(const Layout& l, const stack_t* ss, stack_t* old) {
  Pin pin;
  if ((ss->ss_flags & SS_DISABLE) == 0 && overlaps_region(l, ss->ss_sp, ss->ss_size) &&
      pin.take(l, ss->ss_sp, ss->ss_size) != 0) {
    errno = ENOMEM;
    return -1;
  }
  int rc = next.sigaltstack(ss, old);
  if (rc == 0) program_signal_stack = std::move(pin);
  return rc;
}

// --- A thread's start. ------------------------------------------------------------------------

struct Start {
  void* (*fn)(void*);
  void* arg;
  Pin stack;  // the stack the program gave it, where that is region memory
};

void* start_thread(void* p) {
  auto* start = static_cast<Start*>(p);
  Pin stack(std::move(start->stack));  // released when the thread ends: return, pthread_exit, cancel
  void* (*fn)(void*) = start->fn;
  void* arg = start->arg;
  if (self_serving()) give_signal_stack();
  {
    InLibrary guard;
    start->~Start();
    next.free(start);
  }
  return fn(arg);
}

// Where attr gives the thread a stack that is region memory: that stack.
bool region_stack(const Layout& l, const pthread_attr_t* attr, void** addr, size_t* size) {
  return attr != nullptr && pthread_attr_getstack(attr, addr, size) == 0 && *addr != nullptr &&
         overlaps_region(l, *addr, *size);
}

// kernel's struct for rt_sigaction (x86-64 and arm64 alike)
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  uint64_t mask;
};

// signal()'s semantics, as glibc's: BSD (restarting, the signal blocked in its handler);
// sysv_signal's: one-shot, not blocked. Both through sigaction, so a SIGBUS handler chains.
sighandler_t set_handler(int sig, sighandler_t handler, int flags) {
  struct sigaction act {}, old {};
  act.sa_handler = handler;
  act.sa_flags = flags;
  sigemptyset(&act.sa_mask);
  if ((flags & SA_NODEFER) == 0) sigaddset(&act.sa_mask, sig);
  return sigaction(sig, &act, &old) == 0 ? old.sa_handler : SIG_ERR;
}

}  // namespace

void init_signal_stack() { give_signal_stack(); }

// `set` without SIGBUS, into `copy`, when it blocks SIGBUS in the SIGBUS mode. (The region's
// own calls and threads block what they block: they never touch region memory.)
const sigset_t* without_sigbus(int how, const sigset_t* set, sigset_t* copy) {
  if (set == nullptr || how == SIG_UNBLOCK || !self_serving() || use_next() || sigismember(set, SIGBUS) != 1) {
    return set;
  }
  *copy = *set;
  sigdelset(copy, SIGBUS);
  return copy;
}

bool signal_syscall(long number, const long* a, long* result) {
  if (!self_serving() || use_next()) return false;
  // The kernel's sets are 8 bytes; any other size is the kernel's EINVAL to give.
  if (number == SYS_rt_sigprocmask && a[1] != 0 && a[3] == sizeof(uint64_t)) {
    const auto* given = reinterpret_cast<const uint64_t*>(a[1]);
    sigset_t in, copy;
    sigemptyset(&in);
    const Layout* l = on();
    if (l != nullptr && overlaps_region(*l, given, sizeof *given)) {
      std::memcpy(&in, given, sizeof *given);  // a fault here is served
    } else if (!read_safely(given, reinterpret_cast<uint64_t*>(&in))) {
      return false;  // the kernel's EFAULT
    }
    const sigset_t* set = without_sigbus(static_cast<int>(a[0]), &in, &copy);
    *result = next.syscall(SYS_rt_sigprocmask, a[0], reinterpret_cast<long>(set), a[2], a[3], 0, 0);
    return true;
  }
  if (number != SYS_rt_sigaction || a[0] != SIGBUS || a[3] != sizeof(uint64_t)) return false;
  const auto* act = reinterpret_cast<const KernelSigaction*>(a[1]);
  auto* old = reinterpret_cast<KernelSigaction*>(a[2]);
  struct sigaction want {}, was {};
  if (act != nullptr) {
    want.sa_handler = act->handler;
    want.sa_flags = static_cast<int>(act->flags);
    std::memcpy(&want.sa_mask, &act->mask, sizeof act->mask);
  }
  if (int rc = zsm_region_sigbus_action(act != nullptr ? &want : nullptr, &was); rc != 0) {
    errno = -rc;
    *result = -1;
    return true;
  }
  if (old != nullptr) {
    old->handler = was.sa_handler;
    old->flags = static_cast<unsigned long>(was.sa_flags);
    old->restorer = nullptr;
    std::memcpy(&old->mask, &was.sa_mask, sizeof old->mask);
  }
  *result = 0;
  return true;
}

}  // namespace zsm_preload

using zsm_preload::next;
using zsm_preload::self_serving;
using zsm_preload::set_handler;
using zsm_preload::without_sigbus;

#define EXPORT __attribute__((visibility("default")))

extern "C" {

// --- Masks. -----------------------------------------------------------------------------------

EXPORT int sigprocmask(int how, const sigset_t* set, sigset_t* old) {
  sigset_t copy;
  return next.sigprocmask(how, without_sigbus(how, set, &copy), old);
}

EXPORT int pthread_sigmask(int how, const sigset_t* set, sigset_t* old) {
  sigset_t copy;
  return next.pthread_sigmask(how, without_sigbus(how, set, &copy), old);
}

// BSD's masks, obsolete (deprecated in glibc's header) but still linked by old programs.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
EXPORT int sigsetmask(int mask) {
  sigset_t set, old;
  sigemptyset(&set);
  for (int sig = 1; sig < 32; ++sig) {
    if (mask & (1 << (sig - 1))) sigaddset(&set, sig);
  }
  if (sigprocmask(SIG_SETMASK, &set, &old) != 0) return -1;
  int was = 0;
  for (int sig = 1; sig < 32; ++sig) was |= sigismember(&old, sig) == 1 ? 1 << (sig - 1) : 0;
  return was;
}

EXPORT int sigblock(int mask) {
  sigset_t now;
  if (sigprocmask(SIG_BLOCK, nullptr, &now) != 0) return -1;
  int was = 0;
  for (int sig = 1; sig < 32; ++sig) was |= sigismember(&now, sig) == 1 ? 1 << (sig - 1) : 0;
  return sigsetmask(was | mask) == -1 ? -1 : was;
}
#pragma GCC diagnostic pop

EXPORT int sighold(int sig) {
  if (sig == SIGBUS && self_serving()) return 0;  // held in name only: the kernel would kill for it
  sigset_t one;
  sigemptyset(&one);
  if (sigaddset(&one, sig) != 0) return -1;
  return sigprocmask(SIG_BLOCK, &one, nullptr);
}

EXPORT int sigsuspend(const sigset_t* mask) {
  sigset_t copy;
  return next.sigsuspend(without_sigbus(SIG_SETMASK, mask, &copy));
}

// --- Dispositions. ------------------------------------------------------------------------------

EXPORT int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  if (!self_serving() || zsm_preload::use_next()) return next.sigaction(sig, act, old);
  if (sig == SIGBUS) {
    struct sigaction copy {};
    if (act != nullptr) {
      copy = *act;
      sigdelset(&copy.sa_mask, SIGBUS);
    }
    zsm_preload::InLibrary guard;
    int rc = zsm_region_sigbus_action(act != nullptr ? &copy : nullptr, old);
    if (rc != 0) errno = -rc;
    return rc == 0 ? 0 : -1;
  }
  if (act == nullptr) return next.sigaction(sig, act, old);
  struct sigaction copy = *act;
  sigdelset(&copy.sa_mask, SIGBUS);
  return next.sigaction(sig, &copy, old);
}

EXPORT __attribute__((alias("sigaction"))) int __sigaction(int, const struct sigaction*, struct sigaction*) noexcept;

// glibc's signal() family sets dispositions through its own sigaction, past the one above: in
// the SIGBUS mode a SIGBUS disposition is kept by the region (as sigaction() does); everything
// else is glibc's own call, siginterrupt()'s choices included.
bool keeps_sigbus(int sig) { return sig == SIGBUS && self_serving() && !zsm_preload::use_next(); }

EXPORT sighandler_t signal(int sig, sighandler_t handler) {
  return keeps_sigbus(sig) ? set_handler(sig, handler, SA_RESTART) : next.signal(sig, handler);
}

EXPORT __attribute__((alias("signal"))) sighandler_t bsd_signal(int, sighandler_t) noexcept;
EXPORT __attribute__((alias("signal"))) sighandler_t ssignal(int, sighandler_t) noexcept;

EXPORT sighandler_t __sysv_signal(int sig, sighandler_t handler) {
  return keeps_sigbus(sig) ? set_handler(sig, handler, SA_RESETHAND | SA_NODEFER) : next.__sysv_signal(sig, handler);
}

EXPORT __attribute__((alias("__sysv_signal"))) sighandler_t sysv_signal(int, sighandler_t) noexcept;

// System V's sigset for SIGBUS in the SIGBUS mode: SIG_HOLD leaves the disposition (and the
// signal unblocked: sighold above); a handler is installed. SIG_HOLD comes back if the signal
// was blocked, else the disposition before.
EXPORT sighandler_t sigset(int sig, sighandler_t handler) {
  if (!keeps_sigbus(sig)) return next.sigset(sig, handler);
  sigset_t one, old_mask;
  sigemptyset(&one);
  sigaddset(&one, sig);
  struct sigaction old {};
  if (handler == SIG_HOLD) {
    if (sigaction(sig, nullptr, &old) != 0 || sigprocmask(SIG_BLOCK, nullptr, &old_mask) != 0) return SIG_ERR;
    return sigismember(&old_mask, sig) == 1 ? SIG_HOLD : old.sa_handler;
  }
  sighandler_t was = set_handler(sig, handler, 0);
  if (was == SIG_ERR || sigprocmask(SIG_UNBLOCK, &one, &old_mask) != 0) return SIG_ERR;
  return sigismember(&old_mask, sig) == 1 ? SIG_HOLD : was;
}

EXPORT int sigignore(int sig) {
  if (!keeps_sigbus(sig)) return next.sigignore(sig);
  return set_handler(sig, SIG_IGN, 0) == SIG_ERR ? -1 : 0;
}

// --- Stacks and threads. --------------------------------------------------------------------

EXPORT int sigaltstack(const stack_t* ss, stack_t* old) {
  const zsm_preload::Layout* l = zsm_preload::pinning();
  if (ss == nullptr || l == nullptr) return next.sigaltstack(ss, old);
  return zsm_preload::set_signal_stack(*l, ss, old);
}

// Every mode pins the top of a stack the program gives a thread in region memory: fork()'s
// child reads every thread's descriptor there before the child's region is served.
constexpr size_t kThreadDescriptorPin = 64 << 10;

EXPORT int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*fn)(void*), void* arg) {
  const zsm_preload::Layout* l = zsm_preload::on();
  void* stack = nullptr;
  size_t size = 0;
  if (l == nullptr || zsm_preload::use_next() || (!l->self_serve && !zsm_preload::region_stack(*l, attr, &stack, &size))) {
    return next.pthread_create(thread, attr, fn, arg);
  }
  zsm_preload::Start* start;
  {
    zsm_preload::InLibrary guard;
    void* memory = next.malloc(sizeof(zsm_preload::Start));
    if (memory == nullptr) return EAGAIN;
    start = new (memory) zsm_preload::Start{fn, arg, {}};
  }
  int rc = 0;
  if (zsm_preload::region_stack(*l, attr, &stack, &size)) {
    size_t top = std::min(size, kThreadDescriptorPin);
    rc = start->stack.take(*l, static_cast<char*>(stack) + size - top, top) == 0 ? 0 : EAGAIN;
  }
  if (rc == 0) rc = next.pthread_create(thread, attr, zsm_preload::start_thread, start);
  if (rc != 0) {
    zsm_preload::InLibrary guard;
    start->~Start();
    next.free(start);
  }
  return rc;
}

}  // extern "C"
