// The fork gate: what changes the region (a fault being served, a range call, an evictor's
// batch) runs inside it, and fork() closes it in its prepare handler, so that the child's copy
// of the region is taken between changes: no page lock held, no page half moved, the pool and
// the file's space map at rest. Waiting for room (the budget) happens outside it.
//
// Between the region's prepare handler and the fork, the forking thread goes on alone: what
// it touches of the region then cannot be served (the pool's own fork handler, which runs after
// the region's, holds every lock of the pool, and the evictor waits at the gate). glibc's fork
// touches only its own state there (the preload library keeps what libc and the dynamic loader
// allocate out of the region); a program's prepare handler registered before the region
// (so run after the region's) that touches evicted region memory is told so, and the process
// stops, rather than waiting for ever on a gate its own thread closed (forker_touched).
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "futex.h"

namespace zsm::region {

class ForkGate {
 public:
  // `tid`: the thread the change is for (a fault's), or 0 for the calling thread's own.
  void enter(pid_t tid = 0) {
    for (;;) {
      active_.fetch_add(1, std::memory_order_seq_cst);
      if (closed_.load(std::memory_order_seq_cst) == 0) return;
      leave();
      if (for_forker(tid)) forker_touched();
      while (closed_.load(std::memory_order_seq_cst) != 0) futex_wait(&closed_, 1, 1'000'000);
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
    forker_.store(static_cast<pid_t>(syscall(SYS_gettid)), std::memory_order_seq_cst);
    closed_.store(1, std::memory_order_seq_cst);
    for (uint32_t a; (a = active_.load(std::memory_order_seq_cst)) != 0;) futex_wait(&active_, a, 1'000'000);
  }
  void open() {
    closed_.store(0, std::memory_order_seq_cst);
    forker_.store(0, std::memory_order_seq_cst);
    futex_wake_all(&closed_);
  }
  // In a child of fork(): no one else is there, inside or waiting.
  void reset_in_child() {
    active_.store(0, std::memory_order_relaxed);
    open();
  }

 private:
  bool for_forker(pid_t tid) const {
    pid_t forker = forker_.load(std::memory_order_seq_cst);
    return forker != 0 && (tid != 0 ? tid : static_cast<pid_t>(syscall(SYS_gettid))) == forker;
  }
  [[noreturn]] static void forker_touched();

  std::atomic<uint32_t> active_{0};
  std::atomic<uint32_t> closed_{0};
  std::atomic<pid_t> forker_{0};  // the thread that closed the gate
};

// Inside the gate for a scope.
class InsideGate {
 public:
  explicit InsideGate(ForkGate& g, pid_t tid = 0) : g_(g) { g_.enter(tid); }
  ~InsideGate() { g_.leave(); }
  InsideGate(const InsideGate&) = delete;
  InsideGate& operator=(const InsideGate&) = delete;

 private:
  ForkGate& g_;
};

}  // namespace zsm::region
