// The two locks of the pool (lock order and roles: see the top of pool.cpp).
//
// Mutex: a futex lock (0 free, 1 held, 2 held with waiters), as the kernel's class spinlock
// but yielding, then sleeping, when the wait is long, which a userspace program on few cores
// needs. Uncontended it
// costs one compare-and-swap to take and one atomic decrement to drop. is_contended() lets
// compaction give way to stores and frees, as the kernel's rwlock_is_contended() does.
//
// ZspageLock: the kernel's zspage_lock without its spinlock: a count of readers (>= 0) or
// -1 while one writer holds it. Readers (object reads and writes) never wait for each other;
// the writer (compaction) only ever trylocks, so it never waits for readers either.
#pragma once

#include <atomic>
#include <climits>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "compiler.h"

namespace zsm {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Waiting in a retry loop: spin a while, then yield the CPU, so that a waiter does not burn
// its time slice while the thread it waits for is off the CPU.
class Backoff {
 public:
  void pause() {
    if (spins_ < kSpins) {
      spins_++;
      cpu_relax();
    } else {
      sched_yield();
    }
  }

 private:
  static constexpr int kSpins = 128;
  int spins_ = 0;
};

class ZSM_CAPABILITY("mutex") Mutex {
 public:
  void lock() ZSM_ACQUIRE() {
    int expected = kFree;
    if (ZSM_LIKELY(state_.compare_exchange_strong(expected, kHeld, std::memory_order_acquire,
                                                  std::memory_order_relaxed)))
      return;
    lock_contended();
  }

  bool try_lock() ZSM_TRY_ACQUIRE(true) {
    int expected = kFree;
    return state_.compare_exchange_strong(expected, kHeld, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  void unlock() ZSM_RELEASE() {
    if (ZSM_UNLIKELY(state_.fetch_sub(1, std::memory_order_release) != kHeld)) {
      state_.store(kFree, std::memory_order_release);
      futex(FUTEX_WAKE_PRIVATE, 1);
    }
  }

  // Someone is waiting for this lock (a hint: it may be stale at once).
  [[nodiscard]] bool is_contended() const {
    return state_.load(std::memory_order_relaxed) == kContended;
  }

 private:
  static constexpr int kFree = 0, kHeld = 1, kContended = 2;
  static constexpr int kSpinRounds = 128, kYieldRounds = 64;

  // Spins, then yields, and sleeps in the kernel only when the holder is slow to let go.
  // Yielding before sleeping matters: a futex wake-up makes the scheduler move the woken
  // thread next to its waker, and two threads that store into one pool then end up sharing a
  // CPU for good.
  void lock_contended() {
    for (int round = 0; round < kSpinRounds + kYieldRounds; round++) {
      int expected = kFree;
      if (state_.load(std::memory_order_relaxed) == kFree &&
          state_.compare_exchange_weak(expected, kHeld, std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return;
      if (round < kSpinRounds)
        cpu_relax();
      else
        sched_yield();
    }
    while (state_.exchange(kContended, std::memory_order_acquire) != kFree)
      futex(FUTEX_WAIT_PRIVATE, kContended);
  }

  void futex(int op, int val) {
    syscall(SYS_futex, reinterpret_cast<int*>(&state_), op, val, nullptr, nullptr, 0);
  }

  std::atomic<int> state_{kFree};
};
static_assert(sizeof(std::atomic<int>) == sizeof(int));

// Holds a Mutex for one scope.
class ZSM_SCOPED_CAPABILITY MutexGuard {
 public:
  explicit MutexGuard(Mutex& m) ZSM_ACQUIRE(m) : m_(m) { m_.lock(); }
  ~MutexGuard() ZSM_RELEASE() { m_.unlock(); }
  MutexGuard(const MutexGuard&) = delete;
  MutexGuard& operator=(const MutexGuard&) = delete;

 private:
  Mutex& m_;
};

class ZspageLock {
 public:
  // Fails only while a writer holds the lock.
  bool try_read() {
    int c = count_.load(std::memory_order_relaxed);
    while (c >= 0) {
      if (count_.compare_exchange_weak(c, c + 1, std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return true;
    }
    return false;
  }
  void read_unlock() { count_.fetch_sub(1, std::memory_order_release); }

  // Succeeds only when nobody reads.
  bool try_write() {
    int expected = 0;
    return count_.compare_exchange_strong(expected, -1, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }
  void write_unlock() { count_.store(0, std::memory_order_release); }

 private:
  std::atomic<int> count_{0};
};

}  // namespace zsm
