// The index (index.h): growing a shard's table, inserting, and removing with backward-shift
// deletion. Every function here runs under the shard's lock, held by the caller: for writing,
// except growth().
#include "index.h"

#include <functional>
#include <new>
#include <utility>

namespace zsm::detail {

uint64_t hash_key(std::string_view key) noexcept { return std::hash<std::string_view>{}(key); }

Index::Index(unsigned shards) {
  while ((1u << (64 - shard_shift_)) < shards) shard_shift_--;
  for (unsigned i = 0; i < shards; i++) shards_.emplace_back(bytes_);
}

size_t IndexShard::growth() const noexcept {
  if ((used_ + 1) * 8 <= slots_.size() * 7) return 0;
  return (slots_.empty() ? kFirstSlots : slots_.size()) * sizeof(Entry);
}

bool IndexShard::reserve_slot() noexcept {
  if (growth() == 0) return true;
  return resize(slots_.empty() ? kFirstSlots : slots_.size() * 2);
}

bool IndexShard::resize(size_t nr_slots) noexcept {
  std::vector<Entry> bigger;
  try {
    bigger.resize(nr_slots);
  } catch (const std::bad_alloc&) {
    return false;
  }
  std::vector<Entry> old = std::exchange(slots_, std::move(bigger));
  index_bytes_ += slots_.size() * sizeof(Entry);
  index_bytes_ -= old.size() * sizeof(Entry);
  for (const Entry& s : old) {
    if (s.handle == 0) continue;
    size_t i = s.hash & mask();
    while (slots_[i].handle != 0) i = (i + 1) & mask();
    slots_[i] = s;
  }
  hand_ = 0;
  return true;
}

Entry* IndexShard::insert(const Entry& s) noexcept {
  size_t i = s.hash & mask();
  while (slots_[i].handle != 0) i = (i + 1) & mask();
  slots_[i] = s;
  used_++;
  return &slots_[i];
}

void IndexShard::remove(Entry* s) noexcept { remove_at(static_cast<size_t>(s - slots_.data())); }

void IndexShard::remove_at(size_t i) noexcept {
  for (size_t j = (i + 1) & mask(); slots_[j].handle != 0; j = (j + 1) & mask()) {
    size_t home = slots_[j].hash & mask();
    // Move j back into the hole at i when its home does not lie in (i, j].
    if (((j - home) & mask()) >= ((j - i) & mask())) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i] = Entry{};
  used_--;
}

void IndexShard::clear() noexcept {
  index_bytes_ -= slots_.size() * sizeof(Entry);
  slots_ = {};
  used_ = 0;
  hand_ = 0;
}

}  // namespace zsm::detail
