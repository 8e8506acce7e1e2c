// The probation stage's ring (probation.h).
#include "probation.h"

#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cerrno>

#include "uffd.h"

namespace zsm::region {

Probation::~Probation() {
  if (base_ != 0) unmap(reinterpret_cast<void*>(base_), bytes());
  if (slot_page_ != nullptr) unmap(slot_page_, 3 * size_t{capacity_} * sizeof(uint32_t));
}

int Probation::init(uint32_t capacity, std::string* why) {
  capacity_ = capacity;
  void* area = map_unlocked(bytes());
  void* table = map_unlocked(3 * size_t{capacity} * sizeof(uint32_t));  // slot_page_, stale_, filled_ms_
  if (area == nullptr || table == nullptr) {
    *why = "mmap of the probation stage failed";
    return -errno;
  }
  base_ = reinterpret_cast<uintptr_t>(area);
  slot_page_ = static_cast<uint32_t*>(table);
  stale_ = slot_page_ + capacity;
  filled_ms_ = stale_ + capacity;
  return 0;
}

uint32_t Probation::now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return static_cast<uint32_t>(static_cast<uint64_t>(t.tv_sec) * 1000 + static_cast<uint64_t>(t.tv_nsec) / 1'000'000);
}

void Probation::set_target(uint32_t pages) {
  target_.store(std::min(pages, capacity_ / 2), std::memory_order_relaxed);
}

uint32_t Probation::reserve(uint32_t n, uint32_t* first) {
  SpinGuard g(lock_);
  advance_tail();
  uint64_t free = capacity_ - (head_ - tail_);
  auto at = static_cast<uint32_t>(head_ % capacity_);
  auto got = static_cast<uint32_t>(std::min<uint64_t>({n, free, capacity_ - at}));
  for (uint32_t i = 0; i < got; ++i) slot_page_[at + i] = kReserved;
  head_ += got;
  *first = at;
  return got;
}

uint32_t Probation::free_slots() {
  SpinGuard g(lock_);
  advance_tail();
  return static_cast<uint32_t>(capacity_ - (head_ - tail_));
}

void Probation::fill(uint32_t slot, uint32_t page) {
  const uint32_t now = fill_times_ ? now_ms() : 0;
  SpinGuard g(lock_);
  slot_page_[slot] = page;
  if (fill_times_) filled_ms_[slot] = now;
  bump(counters_.probation);
}

void Probation::give_up(uint32_t slot) {
  SpinGuard g(lock_);
  slot_page_[slot] = kHole;
  advance_tail();
}

size_t Probation::oldest(size_t n, Entry* out) {
  SpinGuard g(lock_);
  advance_tail();
  size_t found = 0;
  for (uint64_t i = tail_; i < head_ && found < n; ++i) {
    auto s = static_cast<uint32_t>(i % capacity_);
    uint32_t p = slot_page_[s];
    if (p != kHole && p != kReserved && p != kStale) out[found++] = {s, p, fill_times_ ? filled_ms_[s] : 0};
  }
  return found;
}

void Probation::vacate(uint32_t slot) {
  SpinGuard g(lock_);
  if (slot_page_[slot] != kStale) drop(counters_.probation);
  slot_page_[slot] = kHole;
  advance_tail();
}

bool Probation::vacate_stale(uint32_t slot) {
  SpinGuard g(lock_);
  if (stale_count_ == capacity_) return false;
  slot_page_[slot] = kStale;
  stale_[stale_count_++] = slot;
  drop(counters_.probation);
  return true;
}

size_t Probation::take_stale(uint32_t* out, size_t n) {
  SpinGuard g(lock_);
  size_t k = std::min<size_t>(n, stale_count_);
  for (size_t i = 0; i < k; ++i) out[i] = stale_[--stale_count_];
  return k;
}

bool Probation::only_holes_between(uint32_t a, uint32_t b) {
  SpinGuard g(lock_);
  if (ring_position(b) < ring_position(a)) return false;  // [a, b] holds the ring's free slots
  for (uint32_t s = a + 1; s < b; ++s) {
    if (slot_page_[s] != kHole && slot_page_[s] != kStale) return false;
  }
  return true;
}

uint32_t Probation::ring_position(uint32_t slot) const {
  return static_cast<uint32_t>((slot + capacity_ - tail_ % capacity_) % capacity_);
}

void Probation::advance_tail() {
  while (tail_ < head_ && slot_page_[tail_ % capacity_] == kHole) ++tail_;
}

// Stamps fit the slot field's 31 bits, and wrap: a page stamped 2^31 departures ago may read
// as recent, which costs it one spared turn of the hand.
constexpr uint32_t kStampMask = 0x7fffffffu;

void Probation::stamp_departure(PageState* s) {
  uint32_t n = (departures_.fetch_add(1, std::memory_order_relaxed) + 1) & kStampMask;
  s->slot = n == 0 ? 1 : n;
}

bool Probation::left_recently(const PageState& s) const {
  if (s.slot == 0) return false;
  uint32_t now = departures_.load(std::memory_order_relaxed) & kStampMask;
  return ((now - s.slot) & kStampMask) < window_.load(std::memory_order_relaxed);
}

}  // namespace zsm::region
