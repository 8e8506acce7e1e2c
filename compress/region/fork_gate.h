// The fork gate: what changes the region (a fault being served, a range call, an evictor's
// batch) runs inside it, and fork() closes it in its prepare handler, so that the child's copy
// of the region is taken between changes: no page lock held, no page half moved, the pool and
// the file's space map at rest. Waiting for room (the budget) happens outside it.
#pragma once

#include <atomic>
#include <cstdint>

#include "futex.h"

namespace zsm::region {

class ForkGate {
 public:
  void enter() {
    for (;;) {
      active_.fetch_add(1, std::memory_order_seq_cst);
      if (closed_.load(std::memory_order_seq_cst) == 0) return;
      leave();
      while (closed_.load(std::memory_order_seq_cst) != 0) futex_wait(&closed_, 1);
    }
  }
  void leave() {
    if (active_.fetch_sub(1, std::memory_order_seq_cst) == 1 && closed_.load(std::memory_order_seq_cst) != 0) {
      futex_wake_all(&active_);
    }
  }
  bool closing() const { return closed_.load(std::memory_order_relaxed) != 0; }
  // Waits until no one is inside; new entries wait for open().
  void close() {
    closed_.store(1, std::memory_order_seq_cst);
    for (uint32_t a; (a = active_.load(std::memory_order_seq_cst)) != 0;) futex_wait(&active_, a, 1'000'000);
  }
  void open() {
    closed_.store(0, std::memory_order_seq_cst);
    futex_wake_all(&closed_);
  }

 private:
  std::atomic<uint32_t> active_{0};
  std::atomic<uint32_t> closed_{0};
};

// Inside the gate for a scope.
class InsideGate {
 public:
  explicit InsideGate(ForkGate& g) : g_(g) { g_.enter(); }
  ~InsideGate() { g_.leave(); }
  InsideGate(const InsideGate&) = delete;
  InsideGate& operator=(const InsideGate&) = delete;

 private:
  ForkGate& g_;
};

}  // namespace zsm::region
