// The region (zsm/region.h is its contract): the parts below, composed, and the calls that
// span them. Each part owns its fields and says who may change them:
//   PageTable   page_table.h   a state word per page, its lock bit, the copy words, mapped bits
//   PageMoves   page_moves.h   the page transitions: the only writers of a page's kind and
//                              mapped bit, and of the counts and budget that follow them
//   CopyStore   copy_store.h   the copies: the pool, the codec, the backing file
//   Probation   probation.h    the probation stage's ring of slots
//   Budget      budget.h       decompressed pages in use, the watermarks, waiting for room
//   ForkGate    fork_gate.h    what fork() waits for
//   PageCalls   page_calls.h   the userfaultfd's calls, from any thread (descriptors.h)
//   FaultServer fault_server.h serving one fault
//   Evictor     evictor.h      the evictor thread (and keeper of the descriptors)
//   Handlers    handlers.h     the handler threads (default mode); self_serve.h: SIGBUS mode
// region.cpp makes and destroys a region and runs its range calls; fork.cpp is what fork()
// does to it; c_api.cpp is zsm/region.h.
//
// Lock order, outermost first (a lock is taken only under those above it, or none):
//   fork.cpp's list_mutex      the regions fork() knows: held from every region's
//                              fork_prepare to its fork_parent or fork_child
//   the SIGBUS mode's buffers  a faulting thread's set (self_serve.h), held while it serves
//   ForkGate                   entered by faults, range calls and evictor batches; closed by
//                              fork_prepare, which waits for all inside to leave
//   page locks (page_table.h)  inside the gate. lock() waits, so it is called holding no other
//                              page lock; every further page is try_lock'ed (fault-around, the
//                              evictor's victims and holes, retiring probation, write-back)
//   Evictor::writeback_lock_   with page locks or none; it try-locks the pages it writes back
//   Budget's apply lock        with page locks (a retune as retired pages grow the pool) or none
//   Region::advice_lock_       inside the gate, never with a page lock
//   Probation's ring lock      a leaf
//   a pool object read         (zs_obj_read_begin..end), then CopyStore::file_lock_ under it
//   zsmalloc's own locks       leaves: the pool calls nothing back
// Nothing waits for budget room or for the gate while holding a page lock (waiting for room
// leaves the gate first), and a holder of a page lock touches no region memory that may fault
// (every signal is blocked there). fork(): list_mutex, each region's gate closed, its apply
// lock, its file_lock_, then the pool's own prepare handler: the pools register theirs before
// the region does (the copy store makes them first), and prepare handlers run last-registered
// first.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <zsm/codec.hpp>
#include <zsm/region.h>

#include "budget.h"
#include "copy_store.h"
#include "counters.h"
#include "evictor.h"
#include "fault_server.h"
#include "fork_advice.h"
#include "fork_gate.h"
#include "handlers.h"
#include "page_calls.h"
#include "page_moves.h"
#include "page_table.h"
#include "probation.h"
#include "self_serve.h"

namespace zsm::region {

struct Settings {
  size_t size = 0;
  uint32_t budget_pages = 0;
  bool budget_all = false;           // the budget bounds the pool and the tables too
  CodecOptions codec;
  zs_pool_config pool{};             // max_pages: compressed_budget_bytes
  unsigned fault_around = 16;
  unsigned spin_us = 0;
  unsigned probation_divisor = 8;    // probation holds budget / divisor pages; 0 = none
  uint32_t cold_age_ms = 0;          // aging (evictor_aging.cpp); 0 = off
  uint32_t stall_target_ppm = 0;     // the cold age's steering; 0 = fixed
  uint32_t report_every_ms = 0;      // the caller's report on the evictor's thread; 0 = none
  std::function<void()> report;
  UffdRequest uffd;                  // user mode only, SIGBUS, UFFDIO_MOVE
  bool one_handler = false;
  std::string backing_file;          // "" = none
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
  size_t size() const { return settings_.size; }
  bool contains(uintptr_t a) const { return a - base_ < settings_.size; }

  // The SIGBUS mode: the calling thread's fault at `a`, in its handler (self_serve.cpp).
  void serve_own_fault(uintptr_t a, bool write);

  // Range calls on pages [first, first + count): 0 or -errno.
  int prefetch(uint32_t first, uint32_t count);
  int evict(uint32_t first, uint32_t count);
  int discard(uint32_t first, uint32_t count);
  int pin(uint32_t first, uint32_t count);
  uint64_t pin_limit(uint32_t count) const;
  int unpin(uint32_t first, uint32_t count);
  int advise(uint32_t first, uint32_t count, int advice);
  int reset(uint32_t first, uint32_t count);
  int set_budget(uint32_t pages);
  void stats(struct zsm_region_stats* out) const;
  // zsm_region_descriptors(): the ones in the program's table.
  int descriptors(int* fds, int n) const;

  // fork.cpp: before fork() (the gate closed, the file copied), and after, in each process.
  void fork_prepare();
  void fork_parent();
  void fork_child();

 private:
  explicit Region(const Settings& s);
  int init(std::string* why);
  int check_pool_budget(std::string* why) const;
  int open_userfaultfd(std::string* why);
  void start_threads();
  void keeper_start(pid_t tid);
  uint64_t others_bytes() const;
  void before_batch();
  size_t bookkeeping_bytes() const;
  void reprotect_clean_pages();
  void pull_copies_the_child_lacks();
  void set_fork_advice(uint32_t first, uint32_t count, uint8_t flag, bool on);
  void apply_fork_advice_in_child();
  void set_access(uint32_t first, uint32_t end, bool accessible);
  void discard_page(PageLock& l);
  void check_counts();
  uintptr_t addr(uint32_t p) const { return base_ + uintptr_t{p} * kPageSize; }
  void follow_budget(uint32_t budget_pages);

  // What a range call holds: every signal blocked (a handler touching the page whose lock
  // this thread holds would wait for itself) and the fork gate.
  class RangeCall {
   public:
    explicit RangeCall(Region& r);
    ~RangeCall();
    RangeCall(const RangeCall&) = delete;
    RangeCall& operator=(const RangeCall&) = delete;
    // Outside the gate (holding no page), until the evictor makes room after `seen`.
    void wait_for_room(uint32_t seen);

   private:
    Region& r_;
    sigset_t saved_;
  };

  Settings settings_;
  pid_t owner_ = 0;
  bool forked_child_ = false;  // a child of fork()'s copy (fork_child ran)
  uintptr_t base_ = 0;
  uint32_t npages_ = 0;
  std::atomic<uint64_t> bookkeeping_{0};  // bookkeeping_bytes() at the last batch, for retunes

  Counters counters_;
  PageTable pages_;
  CopyStore copies_{counters_};
  Probation probation_{counters_};
  Budget budget_{counters_};
  ForkGate gate_;
  Event evictor_wake_;
  PageCalls calls_;
  ReservedFds reserve_;  // what a child of fork() needs of the program's descriptor table
  ForkAdvice fork_advice_;  // under advice_lock_, inside the fork gate
  SpinLock advice_lock_;
  RegionParts parts_{pages_, copies_, probation_, budget_, counters_, calls_, gate_, evictor_wake_};
  PageMoves moves_{copies_, probation_, budget_, counters_};
  std::unique_ptr<FaultServer> server_;
  std::unique_ptr<Evictor> evictor_;
  std::unique_ptr<Handlers> handlers_;
  SignalBuffers signal_buffers_;
};

// fork.cpp: the regions fork() must know of.
void register_for_fork(Region* r);
void unregister_for_fork(Region* r);

}  // namespace zsm::region
