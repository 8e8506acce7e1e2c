// tests/support/watchdog.h: a hang detector for the randomized, model and soak tests. Each watched
// thread beats its own slot as it completes operations; a watcher thread aborts the process,
// naming the test and the slot, when a slot that is still running has not beaten within the
// limit. A hang (a put that never returns, a lock never released) then fails in seconds with
// a message, instead of running into ctest's timeout, or forever outside ctest.
//
// The limit is per operation, not per test: a long soak passes as long as every thread keeps
// moving. It is 20 s, or 120 s in sanitized builds (ZSM_TEST_SANITIZED), which run 9-18x
// slower; no single operation of these tests takes a second even there.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace zsm_test {

class Watchdog {
 public:
#ifdef ZSM_TEST_SANITIZED
  static constexpr std::chrono::seconds kDefaultLimit{120};
#else
  static constexpr std::chrono::seconds kDefaultLimit{20};
#endif

  explicit Watchdog(std::string what, unsigned slots = 1,
                    std::chrono::seconds limit = kDefaultLimit)
      : what_(std::move(what)), limit_(limit), slots_(slots) {
    watcher_ = std::thread([this] { watch(); });
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog() {
    {
      std::lock_guard guard(lock_);
      stopping_ = true;
    }
    wake_.notify_one();
    watcher_.join();
  }

  // The thread of `slot` completed an operation.
  void beat(unsigned slot = 0) { slots_[slot].beats.fetch_add(1, std::memory_order_relaxed); }
  // The thread of `slot` is done: no longer watched.
  void retire(unsigned slot = 0) { slots_[slot].retired.store(true, std::memory_order_relaxed); }

 private:
  struct Slot {
    std::atomic<unsigned long> beats{0};
    std::atomic<bool> retired{false};
  };

  void watch() {
    using Clock = std::chrono::steady_clock;
    std::vector<unsigned long> seen(slots_.size(), 0);
    std::vector<Clock::time_point> since(slots_.size(), Clock::now());
    std::unique_lock guard(lock_);
    while (!wake_.wait_for(guard, std::chrono::milliseconds(200), [this] { return stopping_; })) {
      for (size_t i = 0; i < slots_.size(); i++) {
        unsigned long beats = slots_[i].beats.load(std::memory_order_relaxed);
        if (beats != seen[i] || slots_[i].retired.load(std::memory_order_relaxed)) {
          seen[i] = beats;
          since[i] = Clock::now();
        } else if (Clock::now() - since[i] > limit_) {
          std::fprintf(stderr, "watchdog: %s: thread %zu made no progress for %lld s after %lu "
                       "operations (a hang); aborting\n", what_.c_str(), i,
                       static_cast<long long>(limit_.count()), beats);
          std::fflush(stderr);
          std::abort();
        }
      }
    }
  }

  const std::string what_;
  const std::chrono::seconds limit_;
  std::vector<Slot> slots_;
  std::mutex lock_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread watcher_;
};

}  // namespace zsm_test
