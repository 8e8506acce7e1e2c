// The cache's index (internal): index shards, each an open-addressing table of entries
// (entry.h) with linear probing and backward-shift deletion, behind its own std::shared_mutex.
// The top bits of a key's 64-bit hash (hash_key()) pick the index shard, the low bits the
// slot. A table is a power of two long, or empty until its shard's first entry; it grows at
// 7/8 full (linear probing with backward-shift deletion stays quick up to there, and the
// index stays near 30 bytes an entry) and never shrinks (a shard at the boundary would grow
// and shrink in turn). No tombstones, so probe sequences stay short. Each shard keeps its
// CLOCK hand, which the cache's eviction turns (turn_hand()).
//
// Invariants: every entry lies in the probe sequence from its home slot (its hash masked to
// the table) with no empty slot before it; size() counts a shard's entries; Index::bytes() is
// the sum of every shard's table bytes, kept by the shards as their tables grow and clear.
// The index reads an entry's hash and whether its handle is 0 (an empty slot), nothing else:
// a caller may change an entry it was given, but not its hash nor its handle to 0.
//
// Locks: the index takes none. Callers hold the shard's lock(): for reading at least to find
// or walk its entries, for writing to insert, remove, grow, clear or turn the hand. bytes()
// may be read without it.
//
// It knows nothing of records or the pool: which entry is a key's is for the caller's
// predicate to say (find_if()). Depends on entry.h only.
#pragma once

#include "entry.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <shared_mutex>
#include <string_view>
#include <type_traits>
#include <vector>

namespace zsm::detail {

// The 64-bit hash of a key: its top bits pick the index shard, its low 32 go in the entry.
uint64_t hash_key(std::string_view key) noexcept;

// The table of an empty shard, in slots, when its first entry comes.
constexpr size_t kFirstSlots = 16;

// What a sweep() callback says of the entry it was given.
enum class Sweep {
  next,   // go on to the next slot
  again,  // the entry was removed: look at its slot again (the backward shift may fill it)
  stop,   // end the sweep
};

class IndexShard {
 public:
  // An empty shard, counting its table's bytes into `index_bytes` (its Index's bytes()).
  explicit IndexShard(std::atomic<size_t>& index_bytes) noexcept : index_bytes_(index_bytes) {}
  IndexShard(const IndexShard&) = delete;
  IndexShard& operator=(const IndexShard&) = delete;

  std::shared_mutex& lock() const noexcept { return lock_; }
  [[nodiscard]] size_t size() const noexcept { return used_; }
  [[nodiscard]] size_t table_slots() const noexcept { return slots_.size(); }

  // Bytes the table grows by when one more entry comes (0 while it has room).
  [[nodiscard]] size_t growth() const noexcept;
  // Makes room for one more entry (growing the table); false when the heap is short. A
  // growth moves every entry: pointers to entries taken before it are stale after.
  bool reserve_slot() noexcept;
  // Places `s` (handle not 0) in the first empty slot from its home; after reserve_slot().
  Entry* insert(const Entry& s) noexcept;
  // Removes the entry at `s`, one of this shard's, shifting back the entries after it.
  void remove(Entry* s) noexcept;
  // Leaves the shard empty and frees its table.
  void clear() noexcept;

  // The first entry of h's probe sequence that has h's low 32 bits and for which is_it(entry)
  // is true; nullptr when an empty slot comes first.
  template <typename Fn>
  Entry* find_if(uint64_t h, Fn is_it);
  // fn(entry) for every entry; when fn returns bool, false stops the walk.
  template <typename Fn>
  void for_each(Fn fn);
  // fn(entry) for every entry, slot by slot, where fn may remove the entry: it returns a Sweep.
  template <typename Fn>
  void sweep(Fn fn);
  // Turns the hand over at most `steps` slots, asking stop(entry) of each entry it passes: the
  // entry it stopped at, the hand left on it; nullptr when the steps run out or the shard is
  // empty.
  template <typename Fn>
  Entry* turn_hand(size_t steps, Fn stop);
  // The first entry for which is_it(entry) is true among the `n` slots from the hand (the
  // hand not moved); nullptr when none is.
  template <typename Fn>
  Entry* near_hand(size_t n, Fn is_it);

 private:
  [[nodiscard]] size_t mask() const noexcept { return slots_.size() - 1; }
  bool resize(size_t nr_slots) noexcept;
  void remove_at(size_t i) noexcept;

  mutable std::shared_mutex lock_;
  std::vector<Entry> slots_;  // a power of two long, or empty
  size_t used_ = 0;
  size_t hand_ = 0;  // the CLOCK hand: a slot
  std::atomic<size_t>& index_bytes_;
};

// The index shards of one cache and the bytes their tables take.
class Index {
 public:
  // `shards` empty shards: a power of two. Throws std::bad_alloc.
  explicit Index(unsigned shards);
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  IndexShard& shard_of(uint64_t h) noexcept {
    return shards_[shard_shift_ == 64 ? 0 : h >> shard_shift_];
  }
  IndexShard& shard(size_t i) noexcept { return shards_[i]; }
  [[nodiscard]] size_t nr_shards() const noexcept { return shards_.size(); }
  auto begin() noexcept { return shards_.begin(); }
  auto end() noexcept { return shards_.end(); }
  // The bytes of every shard's table.
  [[nodiscard]] size_t bytes() const noexcept { return bytes_.load(); }

 private:
  std::atomic<size_t> bytes_{0};  // before shards_, which count into it
  std::deque<IndexShard> shards_;  // not a vector: a shard, holding its lock, cannot move
  unsigned shard_shift_ = 64;      // 64 - log2(shards)
};

template <typename Fn>
Entry* IndexShard::find_if(uint64_t h, Fn is_it) {
  if (slots_.empty()) return nullptr;
  for (size_t i = h & mask();; i = (i + 1) & mask()) {
    Entry& s = slots_[i];
    if (s.handle == 0) return nullptr;
    if (s.hash == static_cast<uint32_t>(h) && is_it(s)) return &s;
  }
}

template <typename Fn>
void IndexShard::for_each(Fn fn) {
  for (Entry& s : slots_) {
    if (s.handle == 0) continue;
    if constexpr (std::is_same_v<std::invoke_result_t<Fn&, Entry&>, bool>) {
      if (!fn(s)) return;
    } else {
      fn(s);
    }
  }
}

template <typename Fn>
void IndexShard::sweep(Fn fn) {
  for (size_t i = 0; i < slots_.size();) {
    if (slots_[i].handle == 0) {
      i++;
      continue;
    }
    switch (fn(slots_[i])) {
      case Sweep::next: i++; break;
      case Sweep::again: break;
      case Sweep::stop: return;
    }
  }
}

template <typename Fn>
Entry* IndexShard::turn_hand(size_t steps, Fn stop) {
  if (used_ == 0) return nullptr;
  for (; steps > 0; steps--) {
    Entry& s = slots_[hand_];
    if (s.handle != 0 && stop(s)) return &s;
    hand_ = (hand_ + 1) & mask();
  }
  return nullptr;
}

template <typename Fn>
Entry* IndexShard::near_hand(size_t n, Fn is_it) {
  if (slots_.empty()) return nullptr;
  for (size_t i = hand_; n > 0; n--, i = (i + 1) & mask()) {
    Entry& s = slots_[i];
    if (s.handle != 0 && is_it(s)) return &s;
  }
  return nullptr;
}

}  // namespace zsm::detail
