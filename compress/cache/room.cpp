// Room in the cache (cache_core.h, "Room" and "Density"): CLOCK eviction, compaction, and the
// loop that stores a record while the pool has no room for it: a policy over the index's CLOCK
// hands (IndexShard::turn_hand()) and the record store's pool. Called with no shard lock held;
// evict_one() takes one shard's write lock at a time.
#include "cache_core.h"

#include <chrono>

namespace zsm::detail {

namespace {

bool test_and_clear(Entry& s, uint8_t flag) {
  return std::atomic_ref<uint8_t>(s.flags).fetch_and(static_cast<uint8_t>(~flag),
                                                     std::memory_order_relaxed) & flag;
}

}  // namespace

// A get's mark: referenced, and referenced again if it was already (one pass of the hand
// clears one mark), and no longer idle. Read by threads holding the shard's read lock only:
// through std::atomic_ref.
void note_read(Entry& s) noexcept {
  std::atomic_ref<uint8_t> flags(s.flags);
  uint8_t was = flags.fetch_or(kReferenced, std::memory_order_relaxed);
  if (was & kReferenced) was = flags.fetch_or(kReferencedAgain, std::memory_order_relaxed);
  if (was & kIdle) flags.fetch_and(static_cast<uint8_t>(~kIdle), std::memory_order_relaxed);
}

size_t CacheCore::bytes_held() const noexcept {
  return records_.pool_bytes() + zs_pool_bookkeeping_bytes(records_.pool()) + index_.bytes() +
         (file_ ? file_->memory_bytes() : 0);
}

// CLOCK over one shard at a time, shards in turn. Evicts an entry the hand finds
// unreferenced, never the record `keep`; with a backing file, waits up to max_write_wait for
// a writer whose queue is full before it drops an entry for want of room in the queue.
//
// With a class to prefer (a store found the pool at its page limit and no free slot in that
// class), it evicts instead the first unreferenced entry of that class within kClassScan slots
// of the hand, if there is one (see of_class_near_hand()). Why: evicting another class's entry
// frees a slot there, rarely a page, so the store still fails and every such eviction leaves
// a hole that only compaction (moving objects) gives back; a slot of the store's own class is
// taken by the store at once.
bool CacheCore::evict_one(unsigned long keep, unsigned prefer_class) noexcept {
  const std::chrono::milliseconds wait =
      file_ ? options_.backing_file->max_write_wait : std::chrono::milliseconds(0);
  Evicted r = evict_one_now(keep, prefer_class, wait.count() > 0);
  if (r == Evicted::writer_busy) {
    const auto deadline = std::chrono::steady_clock::now() + wait;
    do {
      r = evict_one_now(keep, prefer_class, file_->wait_for_writer(deadline));
    } while (r == Evicted::writer_busy);
  }
  return r == Evicted::one;
}

// One pass of evict_one(). With a file, the victim goes to it; when the writer's queue is
// full and the caller may wait, the victim stays (the hand on it) and writer_busy says why.
// Backpressure: an entry the file has room for is not dropped for want of CPU on the writer.
CacheCore::Evicted CacheCore::evict_one_now(unsigned long keep, unsigned prefer_class,
                                            bool may_wait) noexcept {
  size_t start = next_victim_.fetch_add(1, std::memory_order_relaxed);
  for (size_t tries = 0; tries < index_.nr_shards(); tries++) {
    IndexShard& sh = index_.shard((start + tries) % index_.nr_shards());
    std::unique_lock guard(sh.lock());
    Entry* victim = clock_hand(sh, keep);
    if (victim == nullptr) continue;
    if (prefer_class != kAnyClass) victim = of_class_near_hand(sh, victim, keep, prefer_class);
    if (file_) {
      Staged r = write_back(*victim, false);
      if (r == Staged::queue_full && may_wait) return Evicted::writer_busy;
      if (r == Staged::taken)
        counters_.written_back++;
      else
        file_->count_dropped(r);
    }
    drop(sh, victim);
    counters_.evictions++;
    return Evicted::one;
  }
  return Evicted::none;
}

// Moves the shard's hand to the next entry other than `keep` that is not referenced since the
// hand last passed, clearing one mark of each referenced one on the way (an entry read twice
// since the hand passed survives two passes), and returns that entry; the hand stays on it.
// Nullptr when the shard holds no other entry: three turns clear every mark.
Entry* CacheCore::clock_hand(IndexShard& sh, unsigned long keep) noexcept {
  return sh.turn_hand(3 * sh.table_slots() + 1, [keep](Entry& s) {
    return s.handle != keep && !test_and_clear(s, kReferencedAgain) &&
           !test_and_clear(s, kReferenced);
  });
}

// The first unreferenced entry of class `cls` (other than `keep`) in the kClassScan slots from
// the hand, else `at_hand`. It only reads the bits, so the hand moves no faster than CLOCK's
// and entries read since it last passed keep their standing.
Entry* CacheCore::of_class_near_hand(IndexShard& sh, Entry* at_hand, unsigned long keep,
                                    unsigned cls) const noexcept {
  Entry* near = sh.near_hand(kClassScan, [&](Entry& s) {
    return s.handle != keep &&
           !(std::atomic_ref<uint8_t>(s.flags).load(std::memory_order_relaxed) & kReferenced) &&
           records_.class_of_record(s.record_size()) == cls;
  });
  return near != nullptr ? near : at_hand;
}

// Pool bytes outside live objects: free slots inside zspages, and the rounding of objects up
// to their class's slot size (an estimate: each object counted at its size with its header).
size_t CacheCore::holes() const noexcept {
  size_t held = records_.pool_bytes(),
         live = counters_.record_bytes.load() + counters_.entries.load() * ZS_HANDLE_SIZE;
  return held > live ? held - live : 0;
}

// Whether compacting may free pages: the holes have grown by more than kCompactAfterZspages
// of the largest zspage since the last compaction left them. Not the holes alone: part of
// them no compaction frees (each class's last, partly filled zspage, and class rounding), and
// a pool held with those above a threshold would compact for nothing at every call.
bool CacheCore::worth_compacting() const noexcept {
  return records_.pool_bytes() > 4 * records_.page_size() &&
         holes() > holes_left_.load() + kCompactAfterZspages * records_.zspage_bytes();
}

// Frees some pool memory, and says what counts as progress: an entry evicted, or the pool
// compacted below `floor` pages. Compacts first when worth_compacting(); otherwise, or when
// compaction does not go below the floor, evicts one entry other than `keep` (of
// `prefer_class` if it can, see evict_one()); with nothing left to evict, compaction is the
// last resort.
CacheCore::Room CacheCore::free_some(size_t floor, unsigned long keep,
                                     unsigned prefer_class) noexcept {
  if (worth_compacting() && compact() > 0 && records_.pool_pages() < floor)
    return Room::compacted;
  if (evict_one(keep, prefer_class)) return Room::evicted;
  compact();
  return records_.pool_pages() < floor ? Room::compacted : Room::none;
}

// Compacts when worth_compacting(), unless another thread is compacting already: that one
// frees the same holes (zs_compact() covers the whole pool).
void CacheCore::compact_if_worth() noexcept {
  if (!worth_compacting()) return;
  std::unique_lock guard(compact_lock_, std::try_to_lock);
  if (!guard.owns_lock() || !worth_compacting()) return;
  zs_compact(records_.pool());
  holes_left_ = holes();
}

unsigned long CacheCore::compact() noexcept {
  std::lock_guard guard(compact_lock_);
  unsigned long freed = zs_compact(records_.pool());
  holes_left_ = holes();
  return freed;
}

// Brings bytes_held() down to `limit`, keeping the record `keep` (the one a put just stored).
// False when everything else is gone and it still does not fit.
bool CacheCore::make_room(size_t limit, unsigned long keep) noexcept {
  while (bytes_held() > limit)
    if (free_some(records_.pool_pages(), keep) == Room::none) return false;
  return true;
}

// Stores a record, making room while the pool has none; 0 when it cannot fit even in an
// empty pool.
//
// Why this ends. A failed attempt can leave pages behind: a split record's last pieces are
// stored, a piece before them finds no page, and their zspages, freed again, stay as their
// classes' spares. Compacting frees exactly those spares, so "compaction freed pages" would let
// the next attempt do the same forever. Progress is therefore measured against the pages held
// before the failed attempt: each retry follows an eviction (entries fall) or a pool smaller
// than before that attempt (pages fall, entries unchanged). Alone, the pair (entries, pages
// before the attempt) falls in lexicographic order at every retry and cannot fall forever. With
// puts failing on other threads at the same time, the pages before an attempt may include their
// leftovers, which their compaction then frees, and two such puts could each see the other's
// leftovers go and retry forever. So at most kCompactionRetries retries may follow a compaction
// alone; past that the floor is 0, which no compaction goes below, so only an eviction lets a
// put retry, and each eviction removes an entry (what other threads add is their own puts'
// progress).
//
// Within a zspage of the capacity, a put first evicts an entry of its own class (see
// evict_one()): the store then takes the slot that freed, so a full cache replaces entries
// without opening a zspage. Otherwise the store would open one past the capacity, and
// make_room() would evict entries of every class until enough zspages empty or compaction,
// moving objects, frees them.
unsigned long CacheCore::store_making_room(std::span<std::byte> record) noexcept {
  constexpr unsigned kCompactionRetries = 4;
  if (bytes_held() + records_.zspage_bytes() > options_.capacity_bytes)
    evict_one(0, records_.class_of_record(record.size()));
  for (unsigned compactions = 0;;) {
    size_t pages_before = records_.pool_pages();
    if (unsigned long handle = records_.store_record(record)) return handle;
    Room room = free_some(compactions < kCompactionRetries ? pages_before : 0, 0,
                          records_.class_of_record(record.size()));
    if (room == Room::none) return 0;
    if (room == Room::compacted) compactions++;
  }
}

// mem_used_max: the most pool bytes seen after a put.
void CacheCore::note_mem_used() noexcept {
  uint64_t used = records_.pool_bytes(), max = counters_.mem_used_max.load();
  while (used > max && !counters_.mem_used_max.compare_exchange_weak(max, used)) {
  }
}

}  // namespace zsm::detail
