// CLOCK over the mapped pages and the eviction of a batch (region_core.h). The ring frames_
// holds one slot per mapped page (it grows past the budget only while pins hold pages); the
// hand skips pinned pages and clears the mark of referenced ones. With no access bits in
// userspace, a mark is set only by what the handler sees: a minor fault from probation (or,
// with probation off, any fault that installs a page), a write to a clean page.
#include <algorithm>
#include <cerrno>

#include "region_core.h"

namespace zsm::region {
namespace {

// Victims are evicted in batches of up to this many pages (fewer ioctl round trips and fewer
// reads of the userfaultfd), and a 16th of the mapped budget at most (a batch larger than
// probation would push its oldest pages out at once); the shortfall if larger.
constexpr uint32_t kEvictBatch = 16;

}  // namespace

void Region::clock_insert(uint32_t p, bool referenced) {
  pages_[p].referenced = referenced ? 1 : 0;
  uint32_t slot;
  if (!free_frames_.empty()) {
    slot = free_frames_.back();
    free_frames_.pop_back();
  } else {
    slot = static_cast<uint32_t>(frames_.size());
    frames_.push_back(kNoPage);
  }
  frames_[slot] = p;
  frame_of_[p] = slot;
  counters_.resident.fetch_add(1, std::memory_order_relaxed);
}

void Region::clock_remove(uint32_t p) {
  uint32_t slot = frame_of_[p];
  frames_[slot] = kNoPage;
  free_frames_.push_back(slot);
  frame_of_[p] = kNoPage;
  counters_.resident.fetch_sub(1, std::memory_order_relaxed);
}

// The next page the hand finds unreferenced, unpinned and not already a victim; kNoPage if
// two turns find none.
uint32_t Region::clock_victim() {
  for (size_t steps = 0; steps < 2 * frames_.size(); ++steps) {
    uint32_t p = frames_[hand_];
    hand_ = (hand_ + 1) % frames_.size();
    if (p == kNoPage || pages_[p].pins > 0 || pages_[p].victim) continue;
    if (pages_[p].referenced) {
      pages_[p].referenced = 0;
      continue;
    }
    return p;
  }
  return kNoPage;
}

// Evicts until `pages` more fit in the mapped budget (less if pins hold the rest).
void Region::make_room(uint32_t pages) {
  uint64_t resident = counters_.resident.load(std::memory_order_relaxed);
  if (resident + pages <= mapped_budget()) return;
  uint64_t need = resident + pages - mapped_budget();
  uint64_t batch = std::clamp<uint64_t>(mapped_budget() / 16, 1, kEvictBatch);
  uint64_t target = std::min<uint64_t>(std::max(need, batch), resident);
  std::vector<uint32_t> victims;
  victims.reserve(target);
  while (victims.size() < target) {
    uint32_t p = clock_victim();
    if (p == kNoPage) break;
    pages_[p].victim = 1;
    victims.push_back(p);
  }
  evict_batch(victims, true);
}

// Write-protects a dirty victim and saves it: its bytes into *slot when one is given
// (kNoPage: none), else as its copy. False (left as it was) when the pool is full.
bool Region::protect_and_save(uint32_t p, uint32_t* slot) {
  bool clean = kind(p) == Kind::clean;  // protected already, its copy valid
  if (!clean) check(uffd_write_protect(uffd_, addr(p), kPageSize, true), "UFFDIO_WRITEPROTECT");
  if (*slot != kNoPage) {
    read_page(p, slot_bytes(*slot));
    return true;
  }
  if (clean) return true;
  read_page(p, evict_buf_.data());
  if (store_copy(p, evict_buf_.data())) return true;
  check(uffd_write_protect(uffd_, addr(p), kPageSize, false), "UFFDIO_WRITEPROTECT (off)");
  return false;
}

// A WP fault read since first_new_fault on a victim: its eviction is abandoned. The fault
// stays queued; serving it un-protects the page and wakes the writer.
void Region::abandon_written_victims(size_t first_new_fault, std::vector<uint32_t>& victims,
                                     std::vector<uint32_t>& slots) {
  for (size_t i = first_new_fault; i < pending_.size(); ++i) {
    const uffd_msg& m = pending_[i];
    if (!(m.arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP)) continue;
    uintptr_t a = m.arg.pagefault.address & ~uintptr_t{kPageSize - 1};
    auto it = std::find_if(victims.begin(), victims.end(), [&](uint32_t p) { return addr(p) == a; });
    if (it == victims.end()) continue;
    uint32_t p = *it;
    uint32_t& slot = slots[it - victims.begin()];
    pages_[p].victim = 0;
    pages_[p].referenced = 1;
    if (slot != kNoPage) {
      free_slots_.push_back(slot);
    } else if (kind(p) == Kind::resident) {
      free_copy(p);  // the copy made for this eviction
    }
    *it = kNoPage;
    counters_.abandoned.fetch_add(1, std::memory_order_relaxed);
  }
}

// Evicts the victims (marked victim): into probation when `to_probation` and it is on, else
// compressed.
void Region::evict_batch(std::vector<uint32_t>& victims, bool to_probation) {
  to_probation = to_probation && probation_size_ > 0;
  if (to_probation) reserve_slots(victims.size());
  std::vector<uint32_t> slots(victims.size(), kNoPage);
  for (size_t i = 0; i < victims.size(); ++i) {
    if (to_probation) slots[i] = take_slot();
    if (protect_and_save(victims[i], &slots[i])) continue;
    pages_[victims[i]].victim = 0;
    victims[i] = kNoPage;
  }
  size_t first_new = pending_.size();
  read_faults();
  abandon_written_victims(first_new, victims, slots);
  unmap_victims(victims, slots);
}

// Unmaps the victims left (kNoPage: given up; contiguous ones in one call): into probation
// when they have a slot, else stored.
void Region::unmap_victims(const std::vector<uint32_t>& victims, const std::vector<uint32_t>& slots) {
  std::vector<uint32_t> sorted;
  for (uint32_t p : victims) {
    if (p != kNoPage) sorted.push_back(p);
  }
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i + 1;
    while (j < sorted.size() && sorted[j] == sorted[j - 1] + 1) ++j;
    check(drop_pages(addr(sorted[i]), (j - i) * kPageSize), "madvise(MADV_DONTNEED)");
    i = j;
  }
  for (size_t i = 0; i < victims.size(); ++i) {
    uint32_t p = victims[i];
    if (p == kNoPage) continue;
    bool clean = kind(p) == Kind::clean;
    pages_[p].victim = 0;
    clock_remove(p);
    if (slots[i] != kNoPage) {
      probation_put(p, slots[i]);
      continue;
    }
    (clean ? counters_.clean_evictions : counters_.evictions).fetch_add(1, std::memory_order_relaxed);
    mark_stored(p);
  }
}

// Drops a mapped page's contents (discard): unmapped and empty.
void Region::drop_mapped(uint32_t p) {
  check(drop_pages(addr(p), kPageSize), "madvise(MADV_DONTNEED)");
  if (pages_[p].has_copy) free_copy(p);
  clock_remove(p);
  set_kind(p, Kind::empty);
}

}  // namespace zsm::region
