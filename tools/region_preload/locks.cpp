// Futex words in region memory, in the pinning modes (preload.h). glibc's locks change their
// word in user mode (a fault there is served like any other) and then, when they must wait,
// call futex(FUTEX_WAIT), where the kernel reads the word itself: if the page was evicted in
// between, the call fails with EFAULT, and glibc stops the process ("The futex facility
// returned an unexpected error code"). So each call that may wait first tries what cannot wait
// (a lock that is free costs one more check, and no pin), then pins the page(s) of what it
// waits on for the call: a mutex, a condition variable and its mutex, a read-write lock, a
// semaphore, a barrier, C11's mtx_t and cnd_t, a joined thread's descriptor (its tid word,
// which the kernel clears at the thread's exit), the word of a futex system call made through
// syscall() (C++20's atomic wait). Waking (unlock, post, signal, broadcast) reads no word of a
// private futex in the kernel, and needs nothing. (A process-shared or priority-inheritance
// lock lives in shared memory, never in the region.)
#include "preload.h"

#include <linux/futex.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstdarg>

namespace zsm_preload {
namespace {

// A word's page pinned for a call (a page in use: one compare-and-swap). A single page may be
// pinned past the half of the budget other pins stop at, up to all of it but one page
// (zsm_region_pin); only there is the word touched and the call made unpinned: a wait for room
// could last as long as other threads wait on their locks.
void pin_or_touch(const Layout& l, Pin* pin, const void* p, size_t len) {
  if (!overlaps_region(l, p, len)) return;
  if (pin->take(l, p, len) != 0) touch_for_write(l, const_cast<void*>(p), len);
}

// call() with [a, a + an) and [b, b + bn) pinned where they are region memory.
template <typename Call>
auto with_pinned(const void* a, size_t an, const void* b, size_t bn, Call call) -> decltype(call()) {
  const Layout* l = pinning();
  if (l == nullptr || (!overlaps_region(*l, a, an) && (b == nullptr || !overlaps_region(*l, b, bn)))) return call();
  Pin pa, pb;
  pin_or_touch(*l, &pa, a, an);
  if (b != nullptr) pin_or_touch(*l, &pb, b, bn);
  return call();
}

// A lock taken without waiting where it can be (`try_first` gives `busy` when it would wait),
// else waited for with its word pinned.
template <typename Obj, typename Try, typename Wait>
int lock_pinned(Obj* obj, int busy, Try try_first, Wait wait) {
  const Layout* l = pinning();
  if (l == nullptr || !overlaps_region(*l, obj, sizeof *obj)) return wait();
  int rc = try_first();
  if (rc != busy) return rc;
  return with_pinned(obj, sizeof *obj, nullptr, 0, wait);
}

// sem_trywait's answer as a lock's (0, or EAGAIN when it would wait), errno as it was.
int sem_try(sem_t* s) {
  int saved = errno;
  int rc = next.sem_trywait(s) == 0 ? 0 : errno;
  errno = saved;
  return rc;
}

// The futex operations whose word(s) the kernel reads (or writes) while the caller may wait.
bool futex_reads_word(int op) {
  switch (op & FUTEX_CMD_MASK) {
    case FUTEX_WAIT: case FUTEX_WAIT_BITSET: case FUTEX_LOCK_PI: case FUTEX_LOCK_PI2: case FUTEX_TRYLOCK_PI:
    case FUTEX_WAIT_REQUEUE_PI: case FUTEX_CMP_REQUEUE: case FUTEX_CMP_REQUEUE_PI: case FUTEX_WAKE_OP:
    case FUTEX_UNLOCK_PI:
      return true;
    default:
      return false;
  }
}
bool futex_has_second_word(int op) {
  switch (op & FUTEX_CMD_MASK) {
    case FUTEX_WAIT_REQUEUE_PI: case FUTEX_CMP_REQUEUE: case FUTEX_CMP_REQUEUE_PI: case FUTEX_WAKE_OP: return true;
    default: return false;
  }
}

}  // namespace
}  // namespace zsm_preload

using zsm_preload::lock_pinned;
using zsm_preload::next;
using zsm_preload::with_pinned;

#define EXPORT __attribute__((visibility("default")))

extern "C" {

EXPORT int pthread_mutex_lock(pthread_mutex_t* m) {
  return lock_pinned(m, EBUSY, [&] { return next.pthread_mutex_trylock(m); }, [&] { return next.pthread_mutex_lock(m); });
}
EXPORT int pthread_mutex_timedlock(pthread_mutex_t* m, const struct timespec* t) {
  return lock_pinned(m, EBUSY, [&] { return next.pthread_mutex_trylock(m); },
                     [&] { return next.pthread_mutex_timedlock(m, t); });
}
EXPORT int pthread_mutex_clocklock(pthread_mutex_t* m, clockid_t c, const struct timespec* t) {
  return lock_pinned(m, EBUSY, [&] { return next.pthread_mutex_trylock(m); },
                     [&] { return next.pthread_mutex_clocklock(m, c, t); });
}

EXPORT int pthread_cond_wait(pthread_cond_t* c, pthread_mutex_t* m) {
  return with_pinned(c, sizeof *c, m, sizeof *m, [&] { return next.pthread_cond_wait(c, m); });
}
EXPORT int pthread_cond_timedwait(pthread_cond_t* c, pthread_mutex_t* m, const struct timespec* t) {
  return with_pinned(c, sizeof *c, m, sizeof *m, [&] { return next.pthread_cond_timedwait(c, m, t); });
}
EXPORT int pthread_cond_clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock, const struct timespec* t) {
  return with_pinned(c, sizeof *c, m, sizeof *m, [&] { return next.pthread_cond_clockwait(c, m, clock, t); });
}

EXPORT int pthread_rwlock_rdlock(pthread_rwlock_t* r) {
  return lock_pinned(r, EBUSY, [&] { return next.pthread_rwlock_tryrdlock(r); }, [&] { return next.pthread_rwlock_rdlock(r); });
}
EXPORT int pthread_rwlock_wrlock(pthread_rwlock_t* r) {
  return lock_pinned(r, EBUSY, [&] { return next.pthread_rwlock_trywrlock(r); }, [&] { return next.pthread_rwlock_wrlock(r); });
}
EXPORT int pthread_rwlock_timedrdlock(pthread_rwlock_t* r, const struct timespec* t) {
  return lock_pinned(r, EBUSY, [&] { return next.pthread_rwlock_tryrdlock(r); },
                     [&] { return next.pthread_rwlock_timedrdlock(r, t); });
}
EXPORT int pthread_rwlock_timedwrlock(pthread_rwlock_t* r, const struct timespec* t) {
  return lock_pinned(r, EBUSY, [&] { return next.pthread_rwlock_trywrlock(r); },
                     [&] { return next.pthread_rwlock_timedwrlock(r, t); });
}
EXPORT int pthread_rwlock_clockrdlock(pthread_rwlock_t* r, clockid_t c, const struct timespec* t) {
  return lock_pinned(r, EBUSY, [&] { return next.pthread_rwlock_tryrdlock(r); },
                     [&] { return next.pthread_rwlock_clockrdlock(r, c, t); });
}
EXPORT int pthread_rwlock_clockwrlock(pthread_rwlock_t* r, clockid_t c, const struct timespec* t) {
  return lock_pinned(r, EBUSY, [&] { return next.pthread_rwlock_trywrlock(r); },
                     [&] { return next.pthread_rwlock_clockwrlock(r, c, t); });
}

EXPORT int pthread_barrier_wait(pthread_barrier_t* b) {
  return with_pinned(b, sizeof *b, nullptr, 0, [&] { return next.pthread_barrier_wait(b); });
}

// The joined thread's descriptor (glibc's struct pthread, where pthread_t points) holds the tid
// word the kernel clears at its exit: a page of it pinned, where it is region memory (a stack
// the program gave the thread).
EXPORT int pthread_join(pthread_t t, void** result) {
  return with_pinned(reinterpret_cast<const void*>(t), 4096, nullptr, 0, [&] { return next.pthread_join(t, result); });
}

EXPORT int sem_wait(sem_t* s) {
  return lock_pinned(s, EAGAIN, [&] { return zsm_preload::sem_try(s); }, [&] { return next.sem_wait(s); });
}
EXPORT int sem_timedwait(sem_t* s, const struct timespec* t) {
  return lock_pinned(s, EAGAIN, [&] { return zsm_preload::sem_try(s); }, [&] { return next.sem_timedwait(s, t); });
}
EXPORT int sem_clockwait(sem_t* s, clockid_t c, const struct timespec* t) {
  return lock_pinned(s, EAGAIN, [&] { return zsm_preload::sem_try(s); }, [&] { return next.sem_clockwait(s, c, t); });
}

EXPORT int mtx_lock(mtx_t* m) {
  return lock_pinned(m, thrd_busy, [&] { return next.mtx_trylock(m); }, [&] { return next.mtx_lock(m); });
}
EXPORT int mtx_timedlock(mtx_t* __restrict m, const struct timespec* __restrict t) {
  return lock_pinned(m, thrd_busy, [&] { return next.mtx_trylock(m); }, [&] { return next.mtx_timedlock(m, t); });
}
EXPORT int cnd_wait(cnd_t* c, mtx_t* m) {
  return with_pinned(c, sizeof *c, m, sizeof *m, [&] { return next.cnd_wait(c, m); });
}
EXPORT int cnd_timedwait(cnd_t* __restrict c, mtx_t* __restrict m, const struct timespec* __restrict t) {
  return with_pinned(c, sizeof *c, m, sizeof *m, [&] { return next.cnd_timedwait(c, m, t); });
}

// syscall(): futex's words pinned while it may wait; rt_sigaction and rt_sigprocmask kept
// from undoing the SIGBUS mode (signals.cpp); anything else as it is.
EXPORT long syscall(long number, ...) {
  va_list args;
  va_start(args, number);
  long a[6];
  for (long& v : a) v = va_arg(args, long);
  va_end(args);
  long rc = 0;
  if (zsm_preload::signal_syscall(number, a, &rc)) return rc;
  const zsm_preload::Layout* l = zsm_preload::pinning();
  if (number == SYS_futex && l != nullptr && zsm_preload::futex_reads_word(static_cast<int>(a[1]))) {
    const void* second =
        zsm_preload::futex_has_second_word(static_cast<int>(a[1])) ? reinterpret_cast<const void*>(a[4]) : nullptr;
    return with_pinned(reinterpret_cast<const void*>(a[0]), sizeof(uint32_t), second, sizeof(uint32_t),
                       [&] { return next.syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]); });
  }
  return next.syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

}  // extern "C"
