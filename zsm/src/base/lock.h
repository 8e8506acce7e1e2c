// The two locks of the pool (lock order and roles: see the top of pool/object_api.cpp).
//
// Mutex: the kernel's class spinlock, made fit for userspace: waiters spin briefly, then
// yield the CPU between attempts, since the holder may be preempted. Uncontended it costs one
// compare-and-swap to take and a plain store to drop, the cheapest a lock can be; the store/
// free pair takes two. is_contended() lets compaction give way to stores and frees, as the
// kernel's rwlock_is_contended() does.
//
// ZspageLock: the kernel's zspage_lock without its spinlock: a count of readers (>= 0) or
// -1 while one writer holds it. Readers (object reads and writes) never wait for each other;
// the writer (compaction) only ever trylocks, so it never waits for readers either.
#pragma once

#include <sched.h>

#include <atomic>

#include "base/compiler.h"

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
  void lock() ZSM_ACQUIRE() ZSM_NO_THREAD_SAFETY_ANALYSIS {
    if (ZSM_LIKELY(try_lock())) return;
    lock_contended();
  }

  bool try_lock() ZSM_TRY_ACQUIRE(true) {
    int expected = 0;
    return held_.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                         std::memory_order_relaxed);
  }

  // A plain store: no waiter sleeps in the kernel, so there is nobody to wake.
  void unlock() ZSM_RELEASE() { held_.store(0, std::memory_order_release); }

  // Someone is waiting for this lock (a hint: it may be stale at once).
  [[nodiscard]] bool is_contended() const {
    return waiters_.load(std::memory_order_relaxed) != 0;
  }
  // After fork(), in the child, whose only thread is the caller: waiters that were threads
  // of the parent are gone.
  void forget_waiters() { waiters_.store(0, std::memory_order_relaxed); }
  // try_lock() that spins up to `spins` pauses while the lock is held, for a caller with
  // somewhere else to go when it stays busy (a store moves to another shard).
  bool try_lock_spinning(int spins) ZSM_TRY_ACQUIRE(true) {
    for (int i = 0; i < spins; i++) {
      cpu_relax();
      if (held_.load(std::memory_order_relaxed) == 0 && try_lock()) return true;
    }
    return false;
  }

  // lock() after a failed try_lock(), for callers that count their waits: spins while the
  // holder is likely running, then yields the CPU between attempts. Never sleeps in the
  // kernel, which is what lets unlock() be a plain store.
  void lock_contended() ZSM_ACQUIRE() ZSM_NO_THREAD_SAFETY_ANALYSIS {
    waiters_.fetch_add(1, std::memory_order_relaxed);
    Backoff backoff;
    for (;;) {
      if (held_.load(std::memory_order_relaxed) == 0 && try_lock()) break;
      backoff.pause();
    }
    waiters_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  std::atomic<int> held_{0};
  std::atomic<int> waiters_{0};
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
  // read_unlock() that refuses, and returns false, when no reader holds the lock (hardened
  // pools: the count must never reach -1, which would read as a writer holding it).
  bool read_unlock_checked() {
    int c = count_.load(std::memory_order_relaxed);
    while (c > 0) {
      if (count_.compare_exchange_weak(c, c - 1, std::memory_order_release,
                                       std::memory_order_relaxed))
        return true;
    }
    return false;
  }

  // Succeeds only when nobody reads.
  bool try_write() {
    int expected = 0;
    return count_.compare_exchange_strong(expected, -1, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }
  void write_unlock() { count_.store(0, std::memory_order_release); }

  // Readers holding the lock, or -1 while the writer does (a snapshot, for the checks).
  [[nodiscard]] int count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int> count_{0};
};

}  // namespace zsm
