// The region's page table: one 8-byte state word and one 8-byte copy word per page, one bit per
// page saying it is mapped (the evictor's CLOCK hand walks those bits), and a byte of heat
// (how often the page came back after the hand took it out: aging probes it less). Vocabulary: a
// *page* is one 4 KiB page of the region; its *copy* is its contents kept compressed (a pool
// object, one repeated word, the whole page, or an extent of the backing file).
//
// A page is in one of five kinds:
//   empty      never written since creation or discard: unmapped, reads as zeros, costs nothing
//   resident   mapped, writable, no valid copy (dirty)
//   clean      mapped, write-protected, its copy still valid: evicting it costs no compression;
//              the first write takes a write-protect fault, which frees the copy
//   probation  unmapped, its bytes in a slot of the probation stage (probation.h), and its copy
//              if it was clean: a touch is a minor fault that also says the page is in use
//   stored     unmapped, its copy holds its contents
//
// Locking: each page's state word has a lock bit (zram's slot lock). Whoever changes a page
// (its kind, copy, pins, mark or slot) holds its lock, as a PageLock: a fault server
// installing it, the evictor taking it, a range call; the change itself is one of the
// transitions of page_moves.h, or the copy store's. Two parties racing for one page serialise on the bit; the
// second sees the first's result and acts on it (a fault finds the page mapped and only wakes
// its thread; the evictor finds it gone and skips it). The evictor only ever try-locks, so it
// never waits for a fault, and a holder of a page's lock waits only for the locks below
// it (region_core.h's lock order) and the kernel's own calls. Waiting is a futex on the
// word's low half, which a SIGBUS handler may do too. The lock orders the copy word and the
// page's memory as well: whoever takes the lock sees what the last holder wrote.
//
// The tables are anonymous mappings: they read as zeros (empty) and cost memory only where
// pages were used. Where the kernel maps no shared zero page for a read (some do not), reading
// a table's page costs memory too, so the hands that walk the region skip, by a bit for each
// chunk of 512 pages (one page of state words) ever used, what was never used.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace zsm::region {

enum class Kind : uint8_t { empty = 0, resident = 1, clean = 2, stored = 3, probation = 4 };
// A copy in the pool (compressed, or whole), one repeated word, on file; or in the overflow
// pool (copy_store.h): what the pool's budget had no room for and no file could take.
enum class CopyKind : uint8_t { none = 0, pool = 1, same = 2, whole = 3, file = 4, overflow = 5, overflow_whole = 6 };
inline bool in_a_pool(CopyKind k) {
  return k == CopyKind::pool || k == CopyKind::whole || k == CopyKind::overflow || k == CopyKind::overflow_whole;
}
inline bool kept_whole(CopyKind k) { return k == CopyKind::whole || k == CopyKind::overflow_whole; }

inline constexpr uint32_t kMaxPins = (1u << 11) - 1;
inline constexpr uint8_t kMostHeat = 6;  // a page found in use is passed over up to 63 turns
inline constexpr uint32_t kNoPage = UINT32_MAX;

// A page's state, unpacked. comp_len: a pool or file copy's compressed bytes (0 for a whole
// page on file); slot: the probation slot holding its bytes (kind probation), or for a stored
// page when the evictor took it out of memory (probation.h's departure stamp, 0 for none);
// for the other kinds a stale value, read by no one.
struct PageState {
  Kind kind = Kind::empty;
  bool referenced = false;  // CLOCK's mark (for a stored page: the write-back hand's)
  CopyKind copy = CopyKind::none;
  uint16_t pins = 0;
  uint16_t comp_len = 0;
  uint32_t slot = 0;

  bool mapped() const { return kind == Kind::resident || kind == Kind::clean; }
  bool has_copy() const { return copy != CopyKind::none; }
};
static_assert(sizeof(PageState) == 12);

class PageTable {
 public:
  PageTable() = default;
  PageTable(const PageTable&) = delete;
  PageTable& operator=(const PageTable&) = delete;
  ~PageTable();
  // False (errno set) when the tables cannot be mapped.
  bool allocate(uint32_t pages);
  uint32_t pages() const { return pages_; }

  // p's state without its lock: a hint that may be stale by the time it is used.
  PageState peek(uint32_t p) const;

  // The copy word (handle, repeated word or file location), without p's lock: a hint, as
  // peek() is. Its holder reads and writes it through PageLock.
  uint64_t copy_word(uint32_t p) const { return copies_[p]; }

  // The mapped bits, set and cleared by the transitions under the page's lock (page_moves.h).
  bool is_mapped(uint32_t p) const;
  // The first page >= from whose mapped bit is set, or kNoPage; scans at most `limit` pages.
  uint32_t next_mapped(uint32_t from, uint32_t limit) const;

  // Chunks of pages one of which was ever other than empty (set by unlock, never cleared): a
  // page outside them is empty, and its table entries need not be read.
  static constexpr uint32_t kChunkPages = 512;
  bool chunk_used(uint32_t p) const;
  // The first page >= from in a used chunk, or kNoPage.
  uint32_t next_used(uint32_t from) const;
  // Bytes the tables may take for `pages` pages (all of them used).
  static size_t bookkeeping_bytes(uint32_t pages);

 private:
  // The lock is taken and released through PageLock; the mapped bits change by PageMoves.
  friend class PageLock;
  friend class PageMoves;
  friend struct PageTableTestPeer;
  // Waits for page p's lock; its state.
  PageState lock(uint32_t p);
  // p's lock if free now: true with *out set.
  bool try_lock(uint32_t p, PageState* out);
  // Publishes p's new state and releases its lock, waking whoever waits for it.
  void unlock(uint32_t p, const PageState& s);
  void set_mapped(uint32_t p, bool on);
  // Adds one pin to p (delta +1) or takes one (-1) without its lock, in one compare-and-swap,
  // where nobody holds the lock and the page is resident and writable (a pin), or pinned (an
  // unpin): what a pin of a page in use costs, without a range call. The pin count before, or
  // -1 when p was not so (the caller takes the lock).
  int add_pin_unlocked(uint32_t p, int delta);
  void mark_used(uint32_t p);

  std::atomic<uint64_t>* states_ = nullptr;
  uint64_t* copies_ = nullptr;
  std::atomic<uint64_t>* mapped_ = nullptr;  // 64 pages a word
  std::atomic<uint64_t>* used_ = nullptr;    // 64 chunks a word
  uint8_t* heat_ = nullptr;                  // a byte a page, under its lock (PageLock::heat)
  uint32_t pages_ = 0;
  size_t bytes_ = 0;
};

// A page's lock, held for a scope or handed on (an array of them: the evictor's victims, a
// fault-around run), and the page's state as its holder sees it, published when the lock is
// released. Anyone holding it reads the state; only the transitions (page_moves.h) change the
// page's kind, mark, slot and pins, and only the copy store (copy_store.h) its copy fields
// and copy word: the compiler holds every other caller to reading.
class PageLock {
 public:
  PageLock() = default;  // holds nothing
  // Waits for p's lock: called holding no other page's lock (region_core.h's lock order).
  PageLock(PageTable& t, uint32_t p) : t_(&t), p_(p), s_(t.lock(p)) {}
  // p's lock if it is free now; else one that holds nothing.
  static PageLock try_lock(PageTable& t, uint32_t p) {
    PageLock l;
    if (t.try_lock(p, &l.s_)) l.t_ = &t, l.p_ = p;
    return l;
  }
  PageLock(PageLock&& o) noexcept : t_(o.t_), p_(o.p_), s_(o.s_) { o.t_ = nullptr; }
  PageLock& operator=(PageLock&& o) noexcept {
    if (this != &o) {
      release();
      t_ = o.t_, p_ = o.p_, s_ = o.s_;
      o.t_ = nullptr;
    }
    return *this;
  }
  PageLock(const PageLock&) = delete;
  PageLock& operator=(const PageLock&) = delete;
  ~PageLock() { release(); }

  // Publishes the state and lets the page go; the lock then holds nothing.
  void release() {
    if (t_ != nullptr) t_->unlock(p_, s_);
    t_ = nullptr;
  }
  explicit operator bool() const { return t_ != nullptr; }
  uint32_t page() const { return p_; }
  const PageState& state() const { return s_; }
  uint64_t copy_word() const { return t_->copies_[p_]; }
  // How many times in a row the page came back after the hand took it out (0 to kMostHeat):
  // the aging hand passes it over on all but one turn in 2^heat (evictor_aging.cpp).
  uint8_t heat() const { return t_->heat_[p_]; }

 private:
  friend class PageMoves;
  friend class CopyStore;
  friend struct PageTableTestPeer;
  PageState& state_to_change() { return s_; }
  uint64_t& copy_word_to_change() { return t_->copies_[p_]; }
  void set_mapped(bool on) { t_->set_mapped(p_, on); }
  void set_heat(uint8_t h) { t_->heat_[p_] = h; }

  PageTable* t_ = nullptr;
  uint32_t p_ = 0;
  PageState s_;
};

}  // namespace zsm::region
