// The region's core (zsm/region.h is its contract). Vocabulary: a *page* is one 4 KiB page of
// the region; a page's *copy* is its contents kept compressed (a pool object, one repeated
// word, or the whole page when it does not compress).
//
// A page is in one of five states (PageState::kind):
//   empty     never written since creation or discard: unmapped, reads as zeros, costs nothing
//   resident  mapped, writable, no valid copy (dirty)
//   clean     mapped, write-protected, its copy still valid: evicting it only unmaps it; the
//             first write takes a WP fault, which frees the copy and makes it resident
//   probation unmapped, its bytes kept decompressed in a probation slot (and its copy, if it
//             was clean): a touch is a minor fault (no decompression) and counts as a reference
//   stored    unmapped, the copy holds its contents; a touch faults it back in
// Transitions happen only under `mutex_`, held by a handler thread while it serves faults
// and by a caller of the range calls; whoever holds it never touches the region's memory
// except to read a mapped page, so no holder can fault on the region. The handler threads
// (one pinned to each CPU, faults.cpp says why) take the lock to read the userfaultfd and
// serve what it holds; faults queue there in between. So page states are plain 4-byte
// bitfields, not atomics: only the lock holder touches them; the counters that
// zsm_region_stats() reads without the lock are atomics.
//
// Eviction keeps mapped + probation pages <= the budget, in batches: pick victims by CLOCK
// over the mapped pages (a reference is a minor fault from probation, or a write to a clean
// page), write-protect the dirty ones, save them (copy their bytes into probation slots, or
// compress them when probation is off or the eviction was asked for), read the userfaultfd:
// a write fault on a victim abandons its eviction (the writer is un-protected and woken when
// its fault is served), then unmap the rest. A write that comes after that read is held by
// the write protection until the page is unmapped, then refaults and finds the saved bytes:
// no write is lost either way. Pages leave probation oldest first, compressed from their slot
// (or only dropped from it, when their copy is still valid).
//
// Faults that arrive while the lock holder is evicting are queued in `pending_` and served,
// in order, before the lock is released (by whoever holds it). In the SIGBUS mode
// (ZSM_REGION_SELF_SERVE) nothing is queued: each faulting thread takes the lock in its
// SIGBUS handler and serves its own fault; a write to a victim being evicted waits for the
// lock and finds the page unmapped, its bytes saved.
//
// With a backing file, a store the pool refuses (compressed_budget_bytes reached) first
// writes back a batch of stored pages' copies to the file (page_file.h), chosen by a second
// hand that sweeps the pages in address order and passes over each stored page once before
// taking it: a page stored since the hand last came by is left for the next turn (its
// `referenced` mark, unused while a page is stored, says so); an eviction's own victims are
// taken too, when its batch is larger than the pool can hold. The pool is then compacted
// and the store retried. A page read back from the file is installed clean, its copy kept
// on file until the page is written.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <signal.h>
#include <sys/mman.h>

#include <linux/userfaultfd.h>
#include <zsm/codec.hpp>
#include <zsm/region.h>

#include "page_file.h"
#include "uffd.h"

namespace zsm::region {

enum class Kind : uint32_t { empty = 0, resident = 1, clean = 2, stored = 3, probation = 4 };
enum class CopyKind : uint32_t { pool = 0, same = 1, whole = 2, file = 3 };

// One page's state: 4 bytes; its copy's handle (or repeated word) is in Region::copies_.
struct PageState {
  uint32_t kind : 3;        // Kind
  uint32_t referenced : 1;  // CLOCK's mark
  uint32_t victim : 1;      // chosen by the eviction in progress
  uint32_t has_copy : 1;    // a copy is held (clean, stored, probation of a clean page)
  uint32_t copy : 2;        // its CopyKind
  uint32_t comp_len : 13;   // a pool or file copy's compressed bytes (file: 0 = a whole page)
  uint32_t pins : 11;       // zsm_region_pin() nesting
};
static_assert(sizeof(PageState) == 4);
inline constexpr uint32_t kMaxPins = (1u << 11) - 1;
inline constexpr uint32_t kNoPage = UINT32_MAX;
inline constexpr size_t kMaxHandlers = 8;  // handler threads, one a CPU (faults.cpp)

// self_serve.cpp: the SIGBUS handler's list of regions, and the signal masks of Locked.
class Region;
bool register_self_serving(Region* r, std::string* why);
void unregister_self_serving(Region* r);
void block_signals(sigset_t* saved);  // every signal the thread can block; saved may be null
void restore_signals(const sigset_t* saved);

// A per-page table of the region's, mapped anonymous: it reads as zeros (a page's empty
// state) and costs memory only where entries were written, so a region much larger than
// what the program touches costs 16 bytes only for each page in use.
template <typename T>
class PageTable {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  PageTable() = default;
  PageTable(const PageTable&) = delete;
  PageTable& operator=(const PageTable&) = delete;
  ~PageTable() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  // False when the mapping fails (errno set).
  bool allocate(size_t n) {
    bytes_ = std::max<size_t>(n * sizeof(T), 1);
    void* m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return false;
    data_ = static_cast<T*>(m);
    return true;
  }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t bytes_ = 0;
};

// Counters read by zsm_region_stats() without the lock.
struct Counters {
  std::atomic<uint64_t> resident{0}, stored{0}, compr_bytes{0}, same{0}, whole{0};
  std::atomic<uint64_t> faults{0}, zero_faults{0}, wp_faults{0}, fault_around{0};
  std::atomic<uint64_t> evictions{0}, clean_evictions{0}, abandoned{0}, refaults{0};
  std::atomic<uint64_t> pinned{0}, probation{0}, probation_faults{0};
  std::atomic<uint64_t> written_back{0}, read_back{0}, file_bytes{0};
};

struct Settings {
  size_t size = 0;
  uint32_t budget_pages = 0;
  CodecOptions codec;
  zs_pool_config pool{};
  unsigned fault_around = 16;
  unsigned spin_us = 0;
  unsigned probation_divisor = 8;  // probation holds budget / divisor pages; 0 = none
  bool force_user_mode_only = false;
  bool one_handler = false;
  bool self_serve = false;
  std::string backing_file;  // "" = none
  uint64_t backing_file_capacity = 0;
};

class Region {
 public:
  // Everything the region needs, or nullptr with *err (-errno) and *why set.
  static std::unique_ptr<Region> create(const Settings& s, int* err, std::string* why);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  uintptr_t base() const { return base_; }
  bool contains(uintptr_t a) const { return a - base_ < size_; }
  // ZSM_REGION_SELF_SERVE: the fault at `a` of the calling thread (its SIGBUS handler, with
  // every signal blocked), served by that thread (self_serve.cpp).
  void serve_own_fault(uintptr_t a, bool write);
  void evictor_main();
  size_t size() const { return size_; }
  // Range calls on pages [first, first + count); 0 or -errno.
  int prefetch(uint32_t first, uint32_t count);
  int evict(uint32_t first, uint32_t count);
  int discard(uint32_t first, uint32_t count);
  int pin(uint32_t first, uint32_t count);
  int unpin(uint32_t first, uint32_t count);
  int set_budget(uint32_t pages);
  void stats(struct zsm_region_stats* out) const;

 private:
  Region() = default;
  int init(const Settings& s, std::string* why);
  int start_self_serving(std::string* why);
  void close_in_child();

  // The region's lock, for the range calls. In the SIGBUS mode every signal is blocked while
  // it is held, so that no signal handler on the holding thread can touch the region and
  // wait for the lock it holds.
  class Locked {
   public:
    explicit Locked(Region& r) : r_(r) {
      if (r_.self_serve_) block_signals(&saved_);
      r_.mutex_.lock();
    }
    ~Locked() {
      r_.mutex_.unlock();
      if (r_.self_serve_) restore_signals(&saved_);
    }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    Region& r_;
    sigset_t saved_;
  };

  // faults.cpp: the handler thread and what it serves.
  std::vector<int> handler_cpus() const;
  void start_handlers();
  void handler_main(bool spin);
  bool wait_for_faults(bool spin);
  void read_faults();
  void serve_pending();
  void serve(const uffd_msg& msg);
  void serve_missing(uint32_t p, bool write);
  void serve_write_protect(uint32_t p);
  void bring_in(uint32_t p, bool writable, uint32_t ahead);
  void install_zero(uint32_t p, bool write);
  void install_copy(uint32_t p, bool writable, bool referenced);
  void install_from_probation(uint32_t p, bool writable);
  void install_run(uint32_t first, uint32_t count);
  uint32_t stored_run_after(uint32_t p) const;
  void make_writable(uint32_t p);
  void after_install(uint32_t p, Kind kind, bool referenced);
  void finish_locked();
  void defer_eviction(uint32_t pages);
  void wake_evictor();
  // SIGBUS mode: how far resident pages may pass the budget while the evictor catches up.
  // At least a fault-around's pages: a fault waits for room for as many, and the evictor
  // makes room down to the budget only.
  uint32_t self_serve_slack() const {
    return std::max({budget_pages_ / 8, uint32_t{16}, uint32_t{fault_around_}});
  }

  // copies.cpp: a page's compressed copy, made from `src` (a private copy of its bytes).
  bool store_copy(uint32_t p, const std::byte* src);
  void read_page(uint32_t p, std::byte* out) const;
  void load_copy(uint32_t p, std::byte* out);
  void free_copy(uint32_t p);
  void load_from_file(uint32_t p, std::byte* out);
  bool write_back_batch();
  bool write_back(uint32_t p);
  void mark_stored(uint32_t p);

  // eviction.cpp: CLOCK over mapped pages and the eviction of a batch.
  void clock_insert(uint32_t p, bool referenced);
  void clock_remove(uint32_t p);
  uint32_t clock_victim();
  void make_room(uint32_t pages);
  void evict_batch(std::vector<uint32_t>& victims, bool to_probation);
  bool protect_and_save(uint32_t p, uint32_t* slot);
  void abandon_written_victims(size_t first_new_fault, std::vector<uint32_t>& victims,
                               std::vector<uint32_t>& slots);
  void unmap_victims(const std::vector<uint32_t>& victims, const std::vector<uint32_t>& slots);
  void drop_mapped(uint32_t p);
  uint32_t mapped_budget() const { return budget_pages_ - probation_size_; }

  // probation.cpp: unmapped pages kept decompressed, oldest first out.
  void size_probation();
  void reserve_slots(size_t n);
  uint32_t take_slot();
  void probation_put(uint32_t p, uint32_t slot);
  void probation_release(uint32_t p);
  bool probation_retire_oldest();
  bool probation_retire(uint32_t p);
  std::byte* slot_bytes(uint32_t slot) { return probation_.data() + size_t{slot} * kPageSize; }

  uintptr_t addr(uint32_t p) const { return base_ + uintptr_t{p} * kPageSize; }
  std::byte* page(uint32_t p) const { return reinterpret_cast<std::byte*>(addr(p)); }
  Kind kind(uint32_t p) const { return static_cast<Kind>(pages_[p].kind); }
  bool mapped(uint32_t p) const { return kind(p) == Kind::resident || kind(p) == Kind::clean; }
  void set_kind(uint32_t p, Kind k) { pages_[p].kind = static_cast<uint32_t>(k); }
  void check(int rc, const char* what) const;

  pid_t owner_ = 0;  // the process that made the region
  uintptr_t base_ = 0;
  size_t size_ = 0;
  uint32_t npages_ = 0;
  int uffd_ = -1;
  int stop_fd_ = -1;
  bool user_mode_only_ = false;
  unsigned fault_around_ = 16;
  unsigned spin_us_ = 0;
  bool one_handler_ = false;
  bool self_serve_ = false;  // ZSM_REGION_SELF_SERVE: no handler threads, faults are SIGBUS
  bool serving_signal_ = false;  // the lock holder is a SIGBUS handler: allocate nothing
  int evict_fd_ = -1;            // SIGBUS mode: the evictor's eventfd
  bool eviction_stalled_ = false;  // the evictor's last turn left resident pages past the budget
  std::thread evictor_;
  std::unique_ptr<Codec> codec_;
  zs_pool* pool_ = nullptr;
  size_t pool_page_size_ = kPageSize;
  std::unique_ptr<PageFile> file_;  // the backing file, if any
  uint32_t writeback_hand_ = 0;
  bool pool_refused_ = false;  // the pool refused a copy, and nothing was freed since

  std::mutex mutex_;
  PageTable<PageState> pages_;
  PageTable<unsigned long> copies_;  // a page's pool handle, repeated word or file location
  std::vector<uint32_t> frames_;             // CLOCK's ring: a mapped page per slot, or kNoPage
  PageTable<uint32_t> frame_of_;     // a mapped page's slot in frames_ (in probation: its slot)
  std::vector<uint32_t> free_frames_;
  size_t hand_ = 0;
  uint32_t budget_pages_ = 0;
  uint32_t last_fault_ = kNoPage;
  std::deque<uffd_msg> pending_;
  unsigned probation_divisor_ = 8;
  uint32_t probation_size_ = 0;               // slots
  std::vector<std::byte> probation_;          // the slots' bytes
  std::vector<uint32_t> free_slots_;
  std::vector<uint64_t> slot_stamp_;          // per slot: when it was filled
  std::deque<std::pair<uint32_t, uint64_t>> probation_order_;  // (slot, stamp), oldest first
  std::vector<uint32_t> slot_page_;
  uint64_t next_stamp_ = 0;
  std::vector<std::byte> scratch_;    // decompression target, fault_around pages
  std::vector<std::byte> compress_buf_;
  std::vector<std::byte> evict_buf_;  // a victim's bytes, read out of the region
  std::vector<std::byte> file_buf_;   // a copy on its way to or from the backing file
  std::vector<std::byte> zeros_;      // one page of zeros, for writable zero installs

  Counters counters_;
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> handlers_;
};

}  // namespace zsm::region
