// The probation stage (region_core.h): CLOCK's victims wait here unmapped, their bytes in a
// slot, so that a touch soon after is a minor fault that needs no decompression and marks the
// page as referenced: with no accessed bit, this is how the region learns which mapped pages
// are in use (tools/region/policy_sim.cpp measures the policy against exact LRU). Slots leave
// oldest first; a page whose copy is still valid (it was clean) is only dropped, any other is
// compressed from its slot. Called with the region's lock held.
#include <cstring>

#include "region_core.h"

namespace zsm::region {

// Sizes probation for the budget in effect; only with no page in it.
void Region::size_probation() {
  probation_size_ = probation_divisor_ == 0 ? 0 : budget_pages_ / probation_divisor_;
  probation_.assign(size_t{probation_size_} * kPageSize, std::byte{0});
  slot_stamp_.assign(probation_size_, 0);
  slot_page_.assign(probation_size_, kNoPage);
  free_slots_.clear();
  for (uint32_t s = probation_size_; s-- > 0;) free_slots_.push_back(s);
  probation_order_.clear();
}

// Retires the oldest pages until n slots are free (or probation is empty).
void Region::reserve_slots(size_t n) {
  while (free_slots_.size() < n && probation_retire_oldest()) {
  }
}

uint32_t Region::take_slot() {
  if (free_slots_.empty()) return kNoPage;
  uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  return slot;
}

// p, just unmapped, is in probation now; its bytes are in `slot`.
void Region::probation_put(uint32_t p, uint32_t slot) {
  set_kind(p, Kind::probation);
  frame_of_[p] = slot;
  slot_page_[slot] = p;
  slot_stamp_[slot] = ++next_stamp_;
  probation_order_.emplace_back(slot, next_stamp_);
  counters_.probation.fetch_add(1, std::memory_order_relaxed);
}

// Frees p's slot; p's kind is the caller's to set.
void Region::probation_release(uint32_t p) {
  uint32_t slot = frame_of_[p];
  slot_stamp_[slot] = 0;  // its entry in probation_order_ is stale now
  slot_page_[slot] = kNoPage;
  free_slots_.push_back(slot);
  frame_of_[p] = kNoPage;
  counters_.probation.fetch_sub(1, std::memory_order_relaxed);
}

// Retires the oldest page in probation; false when none could be.
bool Region::probation_retire_oldest() {
  while (!probation_order_.empty()) {
    auto [slot, stamp] = probation_order_.front();
    probation_order_.pop_front();
    if (slot_stamp_[slot] != stamp) continue;  // left probation since
    uint32_t p = slot_page_[slot];
    if (pages_[p].victim) {  // being faulted in: it leaves probation the other way
      probation_order_.emplace_back(slot, stamp);
      if (probation_order_.size() == 1) return false;
      continue;
    }
    if (probation_retire(p)) return true;
    probation_order_.emplace_front(slot, stamp);  // the pool is full: it stays
    return false;
  }
  return false;
}

// p leaves probation for the pool: compressed from its slot unless its copy is valid.
bool Region::probation_retire(uint32_t p) {
  bool clean = pages_[p].has_copy;
  if (!clean && !store_copy(p, slot_bytes(frame_of_[p]))) return false;
  (clean ? counters_.clean_evictions : counters_.evictions).fetch_add(1, std::memory_order_relaxed);
  probation_release(p);
  mark_stored(p);
  return true;
}

}  // namespace zsm::region
