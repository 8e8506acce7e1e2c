// The page table (page_table.h): the state word's layout and its lock.
//
//   bit 0 locked, bit 1 someone waits (futex), bits 2-4 kind, bit 5 referenced, bits 6-8 copy
//   kind, bits 9-19 pins, bits 20-32 comp_len, bits 33-63 probation slot.
//
// Lock and waiters live in the low 32 bits, which the futex watches; a holder changes the
// other fields only at unlock, in one compare-and-swap that keeps nothing but what it writes.
#include "page_table.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cerrno>

#include "futex.h"
#include "uffd.h"

namespace zsm::region {
namespace {

constexpr uint64_t kLocked = 1;
constexpr uint64_t kWaiters = 2;

uint64_t pack(const PageState& s) {
  return uint64_t{static_cast<uint32_t>(s.kind)} << 2 | uint64_t{s.referenced} << 5 |
         uint64_t{static_cast<uint32_t>(s.copy)} << 6 | uint64_t{s.pins} << 9 |
         uint64_t{s.comp_len} << 20 | uint64_t{s.slot} << 33;
}

PageState unpack(uint64_t w) {
  PageState s;
  s.kind = static_cast<Kind>(w >> 2 & 7);
  s.referenced = (w >> 5 & 1) != 0;
  s.copy = static_cast<CopyKind>(w >> 6 & 7);
  s.pins = static_cast<uint16_t>(w >> 9 & kMaxPins);
  s.comp_len = static_cast<uint16_t>(w >> 20 & 0x1fff);
  s.slot = static_cast<uint32_t>(w >> 33);
  return s;
}

// The futex word: the state word's low half (little-endian: its first four bytes).
const std::atomic<uint32_t>* low_half(const std::atomic<uint64_t>* w) {
  static_assert(std::endian::native == std::endian::little);
  static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(std::atomic<uint32_t>) == 4);
  return reinterpret_cast<const std::atomic<uint32_t>*>(w);
}

void* map_zeros(size_t bytes) { return map_unlocked(bytes); }

size_t mapped_words(uint32_t pages) { return (size_t{pages} + 63) / 64; }
size_t used_words(uint32_t pages) { return (size_t{pages} / PageTable::kChunkPages + 64) / 64; }

size_t table_bytes(uint32_t pages) {
  return size_t{pages} * 17 + (mapped_words(pages) + used_words(pages)) * 8;
}

}  // namespace

PageTable::~PageTable() {
  if (states_ != nullptr) unmap(states_, bytes_);
}

size_t PageTable::bookkeeping_bytes(uint32_t pages) { return table_bytes(pages); }

bool PageTable::allocate(uint32_t pages) {
  bytes_ = table_bytes(pages);
  auto* base = static_cast<std::byte*>(map_zeros(bytes_));
  if (base == nullptr) return false;
  pages_ = pages;
  states_ = reinterpret_cast<std::atomic<uint64_t>*>(base);
  copies_ = reinterpret_cast<uint64_t*>(base + size_t{pages} * 8);
  mapped_ = reinterpret_cast<std::atomic<uint64_t>*>(base + size_t{pages} * 16);
  used_ = mapped_ + mapped_words(pages);
  heat_ = reinterpret_cast<uint8_t*>(used_ + used_words(pages));
  return true;
}

PageState PageTable::lock(uint32_t p) {
  std::atomic<uint64_t>& w = states_[p];
  uint64_t old = w.load(std::memory_order_relaxed);
  for (int spin = 0;; ++spin) {
    if ((old & kLocked) == 0) {
      if (w.compare_exchange_weak(old, old | kLocked, std::memory_order_acquire)) return unpack(old);
      continue;
    }
    if (spin < 32) {
      old = w.load(std::memory_order_relaxed);
      continue;
    }
    if ((old & kWaiters) == 0 && !w.compare_exchange_weak(old, old | kWaiters, std::memory_order_relaxed)) {
      continue;
    }
    futex_wait(low_half(&w), static_cast<uint32_t>(old | kWaiters));
    old = w.load(std::memory_order_relaxed);
  }
}

bool PageTable::try_lock(uint32_t p, PageState* out) {
  std::atomic<uint64_t>& w = states_[p];
  uint64_t old = w.load(std::memory_order_relaxed);
  while ((old & kLocked) == 0) {
    if (w.compare_exchange_weak(old, old | kLocked, std::memory_order_acquire)) {
      *out = unpack(old);
      return true;
    }
  }
  return false;
}

void PageTable::unlock(uint32_t p, const PageState& s) {
  if (s.kind != Kind::empty) mark_used(p);
  std::atomic<uint64_t>& w = states_[p];
  uint64_t old = w.exchange(pack(s), std::memory_order_release);
  if (old & kWaiters) futex_wake_all(low_half(&w));
}

PageState PageTable::peek(uint32_t p) const { return unpack(states_[p].load(std::memory_order_relaxed)); }

int PageTable::add_pin_unlocked(uint32_t p, int delta) {
  std::atomic<uint64_t>& w = states_[p];
  uint64_t old = w.load(std::memory_order_relaxed);
  for (;;) {
    if ((old & (kLocked | kWaiters)) != 0) return -1;
    PageState s = unpack(old);
    if (delta > 0 ? s.kind != Kind::resident || s.pins == kMaxPins : s.pins == 0) return -1;
    PageState next = s;
    next.pins = static_cast<uint16_t>(s.pins + delta);
    if (w.compare_exchange_weak(old, pack(next), std::memory_order_acq_rel)) return s.pins;
  }
}

void PageTable::set_mapped(uint32_t p, bool on) {
  uint64_t bit = uint64_t{1} << (p % 64);
  if (on) {
    mapped_[p / 64].fetch_or(bit, std::memory_order_relaxed);
  } else {
    mapped_[p / 64].fetch_and(~bit, std::memory_order_relaxed);
  }
}

bool PageTable::is_mapped(uint32_t p) const {
  return (mapped_[p / 64].load(std::memory_order_relaxed) >> (p % 64) & 1) != 0;
}

void PageTable::mark_used(uint32_t p) {
  uint64_t chunk = p / kChunkPages, bit = uint64_t{1} << (chunk % 64);
  std::atomic<uint64_t>& w = used_[chunk / 64];
  if ((w.load(std::memory_order_relaxed) & bit) == 0) w.fetch_or(bit, std::memory_order_relaxed);
}

bool PageTable::chunk_used(uint32_t p) const {
  uint64_t chunk = p / kChunkPages;
  return (used_[chunk / 64].load(std::memory_order_relaxed) >> (chunk % 64) & 1) != 0;
}

uint32_t PageTable::next_used(uint32_t from) const {
  if (from >= pages_) return kNoPage;
  uint64_t chunks = (uint64_t{pages_} + kChunkPages - 1) / kChunkPages;
  for (uint64_t c = from / kChunkPages; c < chunks;) {
    uint64_t word = used_[c / 64].load(std::memory_order_relaxed) >> (c % 64);
    if (word != 0) {
      c += static_cast<uint64_t>(std::countr_zero(word));
      if (c >= chunks) break;
      return static_cast<uint32_t>(std::max<uint64_t>(c * kChunkPages, from));
    }
    c = (c / 64 + 1) * 64;
  }
  return kNoPage;
}

uint32_t PageTable::next_mapped(uint32_t from, uint32_t limit) const {
  uint64_t end = std::min<uint64_t>(uint64_t{from} + limit, pages_);
  for (uint64_t p = from; p < end;) {
    p = next_used(static_cast<uint32_t>(p));  // chunks never used: their bits are not even read
    if (p >= end) return kNoPage;
    uint64_t word = mapped_[p / 64].load(std::memory_order_relaxed) >> (p % 64);
    if (word != 0) {
      uint64_t found = p + static_cast<uint64_t>(std::countr_zero(word));
      return found < end ? static_cast<uint32_t>(found) : kNoPage;
    }
    p = (p / 64 + 1) * 64;
  }
  return kNoPage;
}

}  // namespace zsm::region
