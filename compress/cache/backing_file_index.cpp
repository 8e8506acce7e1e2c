// The backing file's index and log (backing_file.h, "Index"): the log's ring buffer, the
// index's open addressing, and what drops records from both: a segment's reuse, the memory
// limit, a failed write. BackingFile's members here run with its lock held, or in its
// constructor before the writer starts.
#include "backing_file.h"

#include <algorithm>
#include <new>
#include <utility>

namespace zsm::detail {

namespace {

constexpr size_t kLeastSlots = 64;

// Index slots from a key's hash: the multiply spreads hashes whose low bits the cache's
// shards already picked.
size_t home_slot(uint64_t hash, size_t mask) {
  return static_cast<size_t>((hash * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

}  // namespace

// --- the log ------------------------------------------------------------------------------

bool RecordLog::reserve_one(size_t most) {
  if (size() < items_.size()) return true;
  if (items_.size() >= most) return false;
  resize(std::max<size_t>(64, std::min(most, items_.size() * 2)));
  return true;
}

void RecordLog::shrink_to(size_t most) {
  if (items_.size() > most && size() <= most) resize(most);
}

void RecordLog::resize(size_t n) {
  std::vector<Item> items(n);
  for (uint64_t p = head_; p < tail_; p++) items[p & (n - 1)] = at(p);
  items_ = std::move(items);
}

void RecordLog::clear() {
  head_ = tail_;
  items_ = {};
}

// --- index and log ------------------------------------------------------------------------

BackingFile::Entry* BackingFile::find(uint64_t hash) {
  return const_cast<Entry*>(std::as_const(*this).find(hash));
}

const BackingFile::Entry* BackingFile::find(uint64_t hash) const {
  const size_t mask = index_.size() - 1;
  for (size_t i = home_slot(hash, mask);; i = (i + 1) & mask) {
    const Entry& e = index_[i];
    if (e.where == 0) return nullptr;
    if (e.hash == hash) return &e;
  }
}

bool BackingFile::is_live(const RecordLog::Item& item) const {
  const Entry* e = find(item.hash);
  return e != nullptr && e->generation == (item.generation & ~RecordLog::kRelease);
}

// The index's size at its limit: the largest power of two whose slots and as many log items
// fit in `index_limit` bytes. Past 7/8 of it, or with the log full, the oldest records go.
void BackingFile::set_index_limit(size_t index_limit) {
  constexpr size_t per_slot = sizeof(Entry) + sizeof(RecordLog::Item);
  most_slots_ = kLeastSlots;
  while (most_slots_ * 2 * per_slot <= index_limit) most_slots_ *= 2;
  if (index_.empty()) return;
  while ((index_used_ > most_slots_ / 8 * 7 || log_.size() > most_slots_) && log_.size() > 0)
    drop_oldest(stats_.evicted_for_index);
  if (index_.size() > most_slots_) resize_index(most_slots_);
  log_.shrink_to(most_slots_);
}

void BackingFile::count_memory() {
  memory_bytes_ = index_.size() * sizeof(Entry) + log_.bytes() +
                  (1 + options_.write_queue_batches) * options_.batch_bytes;
}

void BackingFile::insert(uint64_t hash, uint64_t where, uint64_t generation) {
  if (Entry* e = find(hash)) {
    stats_.bytes_on_file -= length_of(e->where);
    stats_.bytes_on_file += length_of(where);
    e->where = where;
    e->generation = generation;
    return;
  }
  const size_t mask = index_.size() - 1;
  size_t i = home_slot(hash, mask);
  while (index_[i].where != 0) i = (i + 1) & mask;
  index_[i] = {hash, where, generation};
  index_used_++;
  stats_.bytes_on_file += length_of(where);
  stats_.entries_on_file++;
}

// Backward-shift deletion, as the cache's own index: no tombstones.
void BackingFile::remove_at(size_t i) {
  stats_.bytes_on_file -= length_of(index_[i].where);
  stats_.entries_on_file--;
  const size_t mask = index_.size() - 1;
  for (size_t j = (i + 1) & mask; index_[j].where != 0; j = (j + 1) & mask) {
    const size_t home = home_slot(index_[j].hash, mask);
    if (((j - home) & mask) >= ((j - i) & mask)) {
      index_[i] = index_[j];
      i = j;
    }
  }
  index_[i] = Entry{};
  index_used_--;
}

void BackingFile::remove(uint64_t hash, uint64_t generation, uint64_t& counter) {
  Entry* e = find(hash);
  if (e == nullptr || e->generation != generation) return;
  remove_at(static_cast<size_t>(e - index_.data()));
  counter++;
}

void BackingFile::resize_index(size_t slots) {
  std::vector<Entry> old = std::exchange(index_, std::vector<Entry>(slots));
  const size_t mask = index_.size() - 1;
  for (const Entry& e : old) {
    if (e.where == 0) continue;
    size_t i = home_slot(e.hash, mask);
    while (index_[i].where != 0) i = (i + 1) & mask;
    index_[i] = e;
  }
}

// Room in the index and the log for one more record: growing them within the limit, else
// dropping the oldest records. Throws std::bad_alloc when the heap is short, with nothing
// changed but records dropped.
void BackingFile::make_index_room() {
  while (index_used_ + 1 > index_.size() / 8 * 7 && (index_.size() < most_slots_ || log_.size() > 0)) {
    if (index_.size() < most_slots_)
      resize_index(index_.size() * 2);
    else
      drop_oldest(stats_.evicted_for_index);
  }
  while (!log_.reserve_one(most_slots_) && log_.size() > 0) drop_oldest(stats_.evicted_for_index);
}

void BackingFile::drop_oldest(uint64_t& counter) {
  const RecordLog::Item item = log_.at(log_.begin());
  log_.pop_front();
  remove(item.hash, item.generation & ~RecordLog::kRelease, counter);
}

// Pops the records of `segment` from the front of the log (the oldest segment: the one the
// ring reuses), and the dead items among them.
void BackingFile::forget_segment(uint64_t segment) {
  const uint64_t begin = segment * options_.batch_bytes, end = begin + options_.batch_bytes;
  while (log_.size() > 0) {
    const RecordLog::Item& item = log_.at(log_.begin());
    if (const Entry* e = find(item.hash);
        e != nullptr && e->generation == (item.generation & ~RecordLog::kRelease) &&
        (offset_of(e->where) < begin || offset_of(e->where) >= end))
      return;  // a live record of a later segment
    drop_oldest(stats_.evicted);
  }
}

// Forgets the records at log positions [from, to) (a batch whose write failed).
void BackingFile::forget_range(uint64_t from, uint64_t to) {
  uint64_t dropped = 0;
  for (uint64_t p = std::max(from, log_.begin()); p < std::min(to, log_.end()); p++) {
    const RecordLog::Item& item = log_.at(p);
    remove(item.hash, item.generation & ~RecordLog::kRelease, dropped);
  }
}

// The (hash, generation) of the records at log positions [from, to) staged for release and
// still live: those whose entries memory may now free.
// A heap too short for the list leaves the rest in memory, which loses nothing.
std::vector<std::pair<uint64_t, uint64_t>> BackingFile::to_release(uint64_t from, uint64_t to) {
  std::vector<std::pair<uint64_t, uint64_t>> released;
  if (!released_ || stopping_) return released;
  try {
    for (uint64_t p = std::max(from, log_.begin()); p < std::min(to, log_.end()); p++) {
      const RecordLog::Item& item = log_.at(p);
      if ((item.generation & RecordLog::kRelease) && is_live(item))
        released.emplace_back(item.hash, item.generation & ~RecordLog::kRelease);
    }
  } catch (const std::bad_alloc&) {
  }
  return released;
}

}  // namespace zsm::detail
