// The index (cache_core.h): one open-addressing table per shard, linear probing, backward-shift
// deletion (no tombstones, probe sequences stay short), grown at 7/8 full and never shrunk
// (a shard at the boundary would grow and shrink in turn). Every function here runs under the
// shard's lock: read for find(), write for the rest; account() only touches atomics.
#include "cache_core.h"

#include <new>
#include <utility>

namespace zsm::detail {

Entry* CacheCore::find(IndexShard& sh, uint64_t h, std::string_view key,
                      std::error_code& ec) const noexcept {
  if (sh.slots.empty()) return nullptr;
  size_t mask = sh.slots.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    Entry& s = sh.slots[i];
    if (s.handle == 0) return nullptr;
    if (s.hash != static_cast<uint32_t>(h)) continue;
    std::optional<bool> same = key_matches(s, key);
    if (!same) {
      ec = make_error_code(CacheError::no_memory);
      return nullptr;
    }
    if (*same) return &s;
  }
}

// Linear probing with backward-shift deletion stays quick up to 7/8 full; growing later keeps
// the index near 30 bytes an entry.
size_t CacheCore::index_growth(const IndexShard& sh) const noexcept {
  if ((sh.used + 1) * 8 <= sh.slots.size() * 7) return 0;
  return (sh.slots.empty() ? kFirstSlots : sh.slots.size()) * sizeof(Entry);
}

bool CacheCore::reserve_slot(IndexShard& sh) noexcept {
  if (index_growth(sh) == 0) return true;
  return resize(sh, sh.slots.empty() ? kFirstSlots : sh.slots.size() * 2);
}

bool CacheCore::resize(IndexShard& sh, size_t nr_slots) noexcept {
  std::vector<Entry> bigger;
  try {
    bigger.resize(nr_slots);
  } catch (const std::bad_alloc&) {
    return false;
  }
  std::vector<Entry> old = std::exchange(sh.slots, std::move(bigger));
  index_bytes_ += sh.slots.size() * sizeof(Entry);
  index_bytes_ -= old.size() * sizeof(Entry);
  size_t mask = sh.slots.size() - 1;
  for (const Entry& s : old) {
    if (s.handle == 0) continue;
    size_t i = s.hash & mask;
    while (sh.slots[i].handle != 0) i = (i + 1) & mask;
    sh.slots[i] = s;
  }
  sh.hand = 0;
  return true;
}

Entry* CacheCore::insert(IndexShard& sh, const Entry& s) noexcept {
  size_t mask = sh.slots.size() - 1;
  size_t i = s.hash & mask;
  while (sh.slots[i].handle != 0) i = (i + 1) & mask;
  sh.slots[i] = s;
  sh.used++;
  return &sh.slots[i];
}

void CacheCore::remove_at(IndexShard& sh, size_t i) noexcept {
  size_t mask = sh.slots.size() - 1;
  for (size_t j = (i + 1) & mask; sh.slots[j].handle != 0; j = (j + 1) & mask) {
    size_t home = sh.slots[j].hash & mask;
    // Move j back into the hole at i when its home does not lie in (i, j].
    if (((j - home) & mask) >= ((j - i) & mask)) {
      sh.slots[i] = sh.slots[j];
      i = j;
    }
  }
  sh.slots[i] = Entry{};
  sh.used--;
}

void CacheCore::account(const Entry& s, int sign) noexcept {
  auto add = [sign](std::atomic<uint64_t>& counter, uint64_t v) {
    if (sign > 0)
      counter += v;
    else
      counter -= v;
  };
  add(orig_, s.value_size);
  add(compr_, s.kind == kSame ? 0 : s.stored_size);
  add(record_bytes_, s.record_size());
  add(entries_, 1);
  if (s.kind == kSame) add(same_, 1);
  if (s.kind == kRaw) add(huge_, 1);
}

void CacheCore::drop(IndexShard& sh, Entry* s) noexcept {
  account(*s, -1);
  free_record(*s);
  remove_at(sh, static_cast<size_t>(s - sh.slots.data()));
}

std::error_code CacheCore::erase_entry(std::string_view key) noexcept {
  uint64_t h = hash_key(key);
  IndexShard& sh = shard_of(h);
  std::unique_lock guard(sh.lock);
  const bool on_file = file_ && file_->contains(h);
  if (on_file) file_->erase(h);
  std::error_code ec;
  Entry* s = find(sh, h, key, ec);
  if (ec) return ec;
  if (s == nullptr) return on_file ? std::error_code{} : make_error_code(CacheError::not_found);
  drop(sh, s);
  return {};
}

}  // namespace zsm::detail
