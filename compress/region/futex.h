// The region's waiting primitives, on futex(2) alone: a thread in a SIGBUS handler may wait on
// them (a futex is a syscall, nothing in libc's locks is involved), and so may the region's
// own threads. futex_wait() returns on a wake, a changed word or a signal; every caller loops
// on its own condition. SpinLock is a small lock for short critical sections that signal
// handlers take too (never re-entered on one thread: the region's code blocks signals, or
// runs in a handler, while it holds one).
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace zsm::region {

// Sleeps while *word == expected (or until `timeout_ns` passed, when not 0).
inline void futex_wait(const std::atomic<uint32_t>* word, uint32_t expected, long timeout_ns = 0) {
  timespec t{timeout_ns / 1'000'000'000, timeout_ns % 1'000'000'000};
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected,
          timeout_ns != 0 ? &t : nullptr, nullptr, 0);
}

inline void futex_wake_all(const std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

// A spin-then-sleep lock on one 32-bit word: 0 free, 1 held, 2 held with sleepers.
class SpinLock {
 public:
  void lock() {
    for (int spin = 0; spin < 64; ++spin) {
      uint32_t free = 0;
      if (word_.compare_exchange_weak(free, 1, std::memory_order_acquire)) return;
    }
    while (word_.exchange(2, std::memory_order_acquire) != 0) futex_wait(&word_, 2);
  }
  void unlock() {
    if (word_.exchange(0, std::memory_order_release) == 2) futex_wake_all(&word_);
  }

 private:
  std::atomic<uint32_t> word_{0};
};

class SpinGuard {
 public:
  explicit SpinGuard(SpinLock& l) : l_(l) { l_.lock(); }
  ~SpinGuard() { l_.unlock(); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  SpinLock& l_;
};

// A wake-up channel: waiters sleep until the sequence moves on. notify() costs a syscall only
// when someone sleeps.
class Event {
 public:
  uint32_t seq() const { return seq_.load(std::memory_order_acquire); }
  // Sleeps until notify() after `seen` was read (or timeout_ns, when not 0).
  void wait(uint32_t seen, long timeout_ns = 0) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    if (seq_.load(std::memory_order_seq_cst) == seen) futex_wait(&seq_, seen, timeout_ns);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  void notify() {
    seq_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) != 0) futex_wake_all(&seq_);
  }

 private:
  std::atomic<uint32_t> seq_{0};
  std::atomic<uint32_t> sleepers_{0};
};

}  // namespace zsm::region
