// Hardened pools' record of the reads in progress on one thread, so that zs_obj_read_end()
// can be matched to its zs_obj_read_begin() and zs_free() can refuse an object the thread
// is reading (pool/lookups.h keeps one table per thread, thread_local; default pools never touch
// it).
//
// A table of (pool, handle, obj) entries, one per read in progress, in no order (a removal
// moves the last entry into the gap). A thread may hold several reads at once, of one handle
// more than once and over several pools: a read_end takes any entry of its pool and handle,
// since the entries of one handle of one pool are alike (the object cannot move while it is read, so their obj is the
// same). obj says which zspage the read locked, so the read_end unlocks that one whatever the
// handle's cell says by then. The table has room for kMaxReads reads; a hardened read past
// that is reported (zsmalloc.h states the limit), since a read it could not record could not
// be checked. Reads never ended (a bug of the caller's, or a pool destroyed with reads open)
// keep their entries for the thread's life and count against that limit. The table is
// constant-initialised and trivially destructible: no guard on the thread-local access, no
// allocation, nothing to run at thread exit.
//
// Another thread's reads are not here: a free of an object that another thread reads is not
// refused, and that read's end finds the object gone (pool/hardened.h).
#pragma once

#include <cstdint>

namespace zsm {
inline namespace ZSM_VARIANT_NS {

struct ZsPool;

class OpenReads {
 public:
  static constexpr uint32_t kMaxReads = 32;

  struct Read {
    const ZsPool* pool;
    unsigned long handle;  // as the caller passed it
    unsigned long obj;     // what the cell held when the read began
  };

  [[nodiscard]] bool full() const { return count_ == kMaxReads; }

  void add(const ZsPool* pool, unsigned long handle, unsigned long obj) {
    reads_[count_++] = {pool, handle, obj};
  }

  // The latest read of `handle` in `pool` in progress on this thread, or nullptr.
  [[nodiscard]] Read* find(const ZsPool* pool, unsigned long handle) {
    for (uint32_t i = count_; i-- > 0;)
      if (reads_[i].pool == pool && reads_[i].handle == handle) return &reads_[i];
    return nullptr;
  }

  // Ends `read` (an entry find() returned): the last entry takes its place.
  void remove(Read* read) { *read = reads_[--count_]; }

 private:
  Read reads_[kMaxReads] = {};
  uint32_t count_ = 0;
};

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
