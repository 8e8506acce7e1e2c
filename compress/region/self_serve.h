// The SIGBUS mode (ZSM_REGION_SELF_SERVE): with UFFD_FEATURE_SIGBUS the kernel queues no
// fault on the region's userfaultfd; the faulting thread gets SIGBUS instead, and the handler
// installed here serves the fault in that thread (fault_server.h), then returns, and the
// access is made again. No other thread is woken, so a fault costs what it does, not a
// wake-up on another CPU. zram's swap-in runs in the faulting thread too.
//
// The handler is installed once, for the process, when the first such region is made; it
// runs with every signal blocked. A SIGBUS at an address no region holds goes to the
// disposition it replaced. The regions are a fixed table of atomic pointers, read without a
// lock. The handler allocates nothing and compresses nothing (a signal may have interrupted
// malloc): it takes a set of buffers made at creation, decompresses (lz4 needs no state;
// zstd's per-thread context is why the mode refuses zstd) and installs.
//
// The kernel cannot deliver a synchronous SIGBUS to a thread that blocks it: it kills the
// process. A region in this mode is refused (EINVAL, with the reason) to a thread that blocks
// SIGBUS, and the preload library keeps it unblocked in every thread (tools/region_preload/).
#pragma once

#include <signal.h>

#include <atomic>
#include <cstddef>
#include <string>

#include "fault_server.h"

namespace zsm::region {

class Region;

// Sets of buffers for faults served in signal handlers: as many as threads may fault at once
// before one waits for another's set.
class SignalBuffers {
 public:
  ~SignalBuffers();
  // n sets of `pages` pages each (and a page for file reads). False (errno) if not mapped.
  bool init(size_t n, size_t pages);
  size_t acquire();
  void release(size_t i) { taken_[i].store(false, std::memory_order_release); }
  // In a child of fork(): no other thread is there to hold a set.
  void reset_in_child() {
    for (auto& t : taken_) t.store(false, std::memory_order_relaxed);
  }
  ServeBuffers& at(size_t i) { return sets_[i]; }

 private:
  static constexpr size_t kMaxSets = 64;
  std::atomic<bool> taken_[kMaxSets] = {};
  ServeBuffers sets_[kMaxSets];
  size_t n_ = 0;
  std::byte* memory_ = nullptr;
  size_t bytes_ = 0;
};

// Installs the handler (once) and lists r; false with *why and errno (EMFILE: 64 such regions
// exist) otherwise.
bool register_self_serving(Region* r, std::string* why);
// After this, no handler can reach r.
void unregister_self_serving(Region* r);
// In a child of fork(): only the forking thread is there, and it runs no handler; the count of
// handlers running copied from the parent (its other threads' faults) is forgotten.
void forget_handlers_in_child();
// Whether the calling thread blocks SIGBUS (such a thread cannot be served).
bool sigbus_blocked_here();
// zsm_region_sigbus_action(): the disposition SIGBUSes that are not a region's go to.
int chain_sigbus(const struct sigaction* act, struct sigaction* old);

}  // namespace zsm::region
