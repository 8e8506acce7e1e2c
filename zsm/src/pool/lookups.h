// Finding and pinning the object behind a handle, for a free (the shard lock) and for a read
// or write (the zspage's read lock).
//
// Finding an object's shard without a pool lock. The kernel's zs_free takes pool->lock for
// read so that migration cannot move the object between reading the cell and taking the
// shard lock. Here ZsPage metadata is type-stable (never unmapped before the pool dies), so a
// free reads cell -> zspage -> shard without any lock, takes that shard's lock, then reads
// the cell again: if the zspage it names belongs to that shard, the object is pinned (only
// this shard's lock holder can move or free it). Otherwise it raced with compaction: retry.
// ZsPage::shard is only ever set or cleared under that shard's own lock, which is what makes
// the check sound. Readers do the same with the zspage read lock instead of the shard lock.
//
// The lookups take the handle's cell address: a default pool's handle is that address, a
// hardened pool's is stripped of its tag by check_handle() first (pool/hardened.h). Part of
// the object paths' one translation unit (object_api.cpp).
#pragma once
#ifndef ZSM_OBJECT_PATHS_TU
#error "pool/lookups.h belongs to pool/object_api.cpp's translation unit only"
#endif

#include <cstddef>

#include "base/compiler.h"
#include "base/lock.h"
#include "pool/hardened.h"
#include "pool/open_reads.h"
#include "zspage/obj.h"
#include "zspage/report.h"
#include "zspage/types.h"
#include "zspage/zspage.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {
namespace {

// The shard of the object behind the cell as its zspage names it now, without a lock: it
// may change until that shard is locked (nullptr: the zspage was just freed).
template <typename Check>
ZSM_ALWAYS_INLINE ClassShard* unlocked_shard_of(unsigned long cell, Check check) {
  return obj_to_zspage(check(handle_to_obj(cell)))->shard.load(std::memory_order_relaxed);
}

// An object pinned by its shard's lock: the shard, locked, and the obj its cell held then.
struct Pinned {
  ClassShard* shard;
  unsigned long obj;
};

// With `shard` locked: the object behind the cell, pinned when it is still in `shard` (else
// its `shard` is nullptr). The obj read here is the one the caller goes on with: no read
// again.
template <typename Check>
ZSM_ALWAYS_INLINE Pinned pin_if_still_in(ClassShard* shard, unsigned long cell, Check check) {
  unsigned long obj = check(handle_to_cell(cell)->load(std::memory_order_relaxed));
  return {obj_to_zspage(obj)->shard.load(std::memory_order_relaxed) == shard ? shard : nullptr,
          obj};
}

// Locks the shard of the object behind the cell and returns the object, pinned until the
// caller unlocks.
template <typename Check>
ZSM_ALWAYS_INLINE Pinned lock_shard_of(unsigned long cell, Check check)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  Backoff backoff;
  for (;;) {
    ClassShard* shard = unlocked_shard_of(cell, check);
    if (ZSM_LIKELY(shard != nullptr)) {
      lock_shard(shard);
      Pinned pinned = pin_if_still_in(shard, cell, check);
      if (ZSM_LIKELY(pinned.shard != nullptr)) return pinned;
      shard->lock.unlock();
    }
    backoff.pause();
  }
}

// lock_shard_of() without waiting: the object, pinned, when its shard's lock is free and the
// object is still in it; else its `shard` is nullptr, and the caller waits in
// lock_shard_of().
template <typename Check>
ZSM_ALWAYS_INLINE Pinned try_lock_shard_of(unsigned long cell, Check check)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  ClassShard* shard = unlocked_shard_of(cell, check);
  if (ZSM_UNLIKELY(shard == nullptr || !shard->lock.try_lock())) return {nullptr, 0};
  Pinned pinned = pin_if_still_in(shard, cell, check);
  if (ZSM_UNLIKELY(pinned.shard == nullptr)) shard->lock.unlock();
  return pinned;
}

// Takes the read lock of the zspage that holds the object behind the cell; returns the obj.
template <typename Check>
ZSM_ALWAYS_INLINE unsigned long read_lock_obj(unsigned long cell, Check check) {
  Backoff backoff;
  for (;;) {
    unsigned long obj = check(handle_to_obj(cell));
    ZsPage* zspage = obj_to_zspage(obj);
    if (ZSM_LIKELY(zspage->lock.try_read())) {
      if (ZSM_LIKELY(handle_to_obj(cell) == obj)) return obj;
      zspage->lock.read_unlock();
    }
    backoff.pause();
  }
}

// Drops the read lock a default pool's read took on the zspage of the object behind `handle`.
inline void read_unlock_obj(unsigned long handle) {
  obj_to_zspage(handle_to_cell(handle)->load(std::memory_order_relaxed))->lock.read_unlock();
}

// The shard of a pinned object: its zspage's shard pointer is stable.
inline ClassShard* pinned_shard(unsigned long obj) {
  return obj_to_zspage(obj)->shard.load(std::memory_order_relaxed);
}

// A hardened pool's pin_for_access(): the handle and the object's size checked. Inlined into
// pin_for_access(), whose default path bench/golden counts: out of line it would change the
// code of that path too.
ZSM_ALWAYS_INLINE unsigned long pin_checked(ZsPool* pool, const char* call, unsigned long handle,
                                            size_t len) {
  CheckHandle check = check_handle(pool, call, handle);
  unsigned long obj = read_lock_obj(check.cell, check);
  size_t size = obj_size(pinned_shard(obj)->geom, obj);
  if (ZSM_UNLIKELY(len > size)) report_out_of_bounds(pool, call, check.handle(), len, size);
  return obj;
}

// The pinned object behind `handle` for a write of `len` bytes, or a look at it: a hardened
// pool also checks the handle and the object's size.
unsigned long pin_for_access(ZsPool* pool, const char* call, unsigned long handle, size_t len) {
  if (ZSM_LIKELY(!pool->fast.hardened)) return read_lock_obj(handle, TrustHandle{});
  return pin_checked(pool, call, handle, len);
}

// The reads in progress on this thread, in hardened pools (pool/open_reads.h).
thread_local OpenReads open_reads;

// A hardened pool's pin for zs_obj_read_begin(): checked, and recorded as a read in progress.
unsigned long pin_and_record_read(ZsPool* pool, unsigned long handle, size_t len) {
  const char* call = "zs_obj_read_begin";
  if (ZSM_UNLIKELY(open_reads.full()))
    report_too_many_reads(pool, call, handle, OpenReads::kMaxReads);
  unsigned long obj = pin_checked(pool, call, handle, len);
  open_reads.add(pool, handle, obj);
  return obj;
}

// The pinned object behind `handle` for a read of `len` bytes (pin_for_access(), and a
// hardened pool records the read).
unsigned long pin_for_read(ZsPool* pool, unsigned long handle, size_t len) {
  if (ZSM_LIKELY(!pool->fast.hardened)) return read_lock_obj(handle, TrustHandle{});
  return pin_and_record_read(pool, handle, len);
}

// A hardened pool's zs_obj_read_end(): ends a read of the handle in progress on this thread,
// unlocking the zspage that read locked. The cell must still hold the object the read
// began on: a free cannot have moved it, only freed it.
void end_recorded_read(ZsPool* pool, unsigned long handle) {
  const char* call = "zs_obj_read_end";
  CheckHandle check = check_handle(pool, call, handle);
  OpenReads::Read* read = open_reads.find(pool, handle);
  if (ZSM_UNLIKELY(read == nullptr)) report_no_read_in_progress(pool, call, handle);
  if (ZSM_UNLIKELY(handle_to_obj(check.cell) != read->obj))
    report_freed_while_read(pool, call, handle);
  if (ZSM_UNLIKELY(!obj_to_zspage(read->obj)->lock.read_unlock_checked()))
    report_invariant(pool, "zs_obj_read_end: a read in progress found its zspage's reader "
                           "count not positive");
  open_reads.remove(read);
}

}  // namespace
}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
