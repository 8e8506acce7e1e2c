// What fork() gives a child of each page, as madvise(2) asks it of ordinary memory
// (zsm_region_advise): MADV_WIPEONFORK (the child reads zeros there) and MADV_DONTFORK (the
// child has nothing there: a touch is SIGSEGV), undone by MADV_KEEPONFORK and MADV_DOFORK. A
// child keeps the wipe flags; a DONTFORK range is *absent* in it (made inaccessible) until the
// program resets it (zsm_region_reset: unmapped and mapped again). Kept as the pages where the
// flags change, a few entries for the few ranges programs advise. Not thread-safe: the range
// calls hold the fork gate and the caller's lock around every call.
#pragma once

#include <cstdint>
#include <map>

namespace zsm::region {

class ForkAdvice {
 public:
  static constexpr uint8_t kWipe = 1;      // MADV_WIPEONFORK
  static constexpr uint8_t kDontFork = 2;  // MADV_DONTFORK
  static constexpr uint8_t kAbsent = 4;    // a DONTFORK range, in the child

  // Sets (on) or clears the `mask` flags of pages [first, end).
  void set(uint32_t first, uint32_t end, uint8_t mask, bool on) {
    if (first >= end) return;
    const uint8_t after = at(end);
    steps_[first] = at(first);
    steps_[end] = after;
    for (auto it = steps_.find(first); it != steps_.end() && it->first < end; ++it) {
      it->second = on ? (it->second | mask) : (it->second & ~mask);
    }
    coalesce();
  }
  // The flags of page p.
  uint8_t at(uint32_t p) const {
    auto it = steps_.upper_bound(p);
    return it == steps_.begin() ? 0 : std::prev(it)->second;
  }
  // f(first, end, flags) for each run of pages whose flags are not 0, in order.
  template <typename F>
  void each(F f) const {
    for (auto it = steps_.begin(); it != steps_.end(); ++it) {
      auto next = std::next(it);
      if (it->second != 0 && next != steps_.end()) f(it->first, next->first, it->second);
    }
  }
  bool empty() const { return steps_.empty(); }

 private:
  void coalesce() {
    uint8_t before = 0;
    for (auto it = steps_.begin(); it != steps_.end();) {
      if (it->second == before) {
        it = steps_.erase(it);
      } else {
        before = it->second;
        ++it;
      }
    }
  }

  std::map<uint32_t, uint8_t> steps_;  // from this page on (to the next entry), these flags
};

}  // namespace zsm::region
