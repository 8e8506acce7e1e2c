// The locked path: zs_malloc(), zs_store() and zs_free() under the shard's lock, with no
// per-thread cache, as mm/zsmalloc.c runs them (locked_path:: in pool/pool.h runs it on any
// pool; the cached entries fall back on it). A store takes a cell from the shard's cell
// stock and the first free slot of the shard's hot zspage (zspage/zspage.h, "Lazy
// fullness"); alloc_object_slow() finds or makes a zspage when there is none. A free pins
// the object by its shard's lock (pool/lookups.h) and gives slot and cell back. Argument
// checks and hardened pools' handles are taken care of by alloc_checked() and
// free_checked(), off the path a default pool's calls take. Part of the object paths' one
// translation unit (object_api.cpp).
#pragma once
#ifndef ZSM_OBJECT_PATHS_TU
#error "pool/locked_path.h belongs to pool/object_api.cpp's translation unit only"
#endif

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "base/compiler.h"
#include "base/lock.h"
#include "pool/hardened.h"
#include "pool/lookups.h"
#include "pool/open_reads.h"
#include "pool/profile.h"
#include "tcache/thread_cache.h"
#include "zspage/check.h"
#include "zspage/obj.h"
#include "zspage/report.h"
#include "zspage/shard_placement.h"
#include "zspage/types.h"
#include "zspage/zspage.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {
namespace {

// --- a new zspage ---------------------------------------------------------------------------

// For a pool at its memory limit: takes back the slots threads' caches reserve and frees the
// shards' spare zspages, then charges. Takes every shard's lock in turn; call with none held.
ZSM_COLD_PATH bool charge_pages_after_reclaim(ZsPool* pool, unsigned long pages) {
  drain_thread_caches(pool);
  free_all_spares(pool);
  return charge_pages(pool, pages);
}

// alloc_zspage(): a new, empty, unlisted zspage for the shard, or nullptr (limit reached,
// no page, no metadata). Called without the shard's lock; on failure nothing is left held.
// Sets *reclaimed when it took back the slots threads' caches reserve (at the limit). In
// the translation unit of the store, as in the kernel, so that the inline policy's choice
// for it (ZSM_ZSPAGE_HELPER) is the one the kernel's compiler makes.
ZSM_ZSPAGE_HELPER ZsPage* alloc_zspage(ZsPool* pool, ClassShard* shard, bool* reclaimed) {
  uint32_t n = shard->pages_per_zspage;
  if (!charge_pages(pool, n) && (*reclaimed = true, !charge_pages_after_reclaim(pool, n)))
    return nullptr;
  ZsPage* zspage = alloc_zspage_metadata(pool, shard);
  if (zspage == nullptr) {
    uncharge_pages(pool, n);
    return nullptr;
  }
  if (!alloc_zspage_pages(pool, zspage, n)) {
    free_zspage_metadata(pool, shard, zspage);
    uncharge_pages(pool, n);
    return nullptr;
  }
  init_zspage(shard, zspage);
  return zspage;
}

// --- the store ------------------------------------------------------------------------------

// Places an object of `size` bytes for `handle` in the first free slot of the shard's hot
// zspage, publishes it in the handle's cell (counted by allocation profiling when that is
// on) and fills it. The fill comes last, so that only the cell and the shard live across its
// copy. Publishing first is safe: no one has the handle yet, and compaction, which finds
// objects through their headers, waits for the shard's lock.
template <typename Fill>
ZSM_ALWAYS_INLINE void place_object(ZsPool* pool, ClassShard* shard, ZsPage* zspage,
                                    unsigned long handle, size_t size, zs_alloc_tag* tag,
                                    Fill fill) ZSM_REQUIRES(shard->lock) {
  const ClassGeometry geom = shard->geom;
  NewObj placed = obj_malloc(geom, zspage, make_header(handle, size));
  zspage->huge_size_m1 = static_cast<uint16_t>(size - 1);
  if (zspage->inuse == shard->objs_per_zspage) retire_full_hot(shard, zspage);
  shard->stats[ZS_OBJS_INUSE]++;
  unsigned long obj = placed.obj;
  if (profiling_enabled()) {
    profile_alloc(pool, shard, handle, size, tag);
    obj |= kObjProfiled;
  }
  record_obj(handle, obj);
  fill(geom, obj, placed.payload);
}

// place_object(), then the shard's checks and unlock: a store's end. Returns the handle.
template <typename Fill>
ZSM_ALWAYS_INLINE unsigned long place_and_unlock(ZsPool* pool, ClassShard* shard,
                                                 ZsPage* zspage, unsigned long handle,
                                                 size_t size, zs_alloc_tag* tag, Fill fill)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  place_object(pool, shard, zspage, handle, size, tag, fill);
  debug_check_class(pool, shard, zspage);
  shard->lock.unlock();
  return handle;
}

// A store found no hot zspage in its shard and no listed one to make hot: a new zspage, made
// with the lock dropped, is listed (empty) and the fullest listed zspage becomes hot (another
// store may have made one hot, or frees may have listed fuller ones, meanwhile). When no
// zspage can be had, the slots threads' caches reserve are taken back (alloc_zspage() does
// at the memory limit), and a slot that gave the shard, or that another store or free left
// meanwhile, serves the store. Returns the hot zspage; on failure gives the cell back,
// unlocks and returns nullptr with errno ENOMEM.
ZSM_COLD_PATH ZsPage* make_new_zspage_hot(ZsPool* pool, ClassShard* shard, unsigned long handle)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  shard->lock.unlock();
  pool->pages.zspages_being_added.fetch_add(1, std::memory_order_relaxed);
  bool reclaimed = false;
  ZsPage* zspage = alloc_zspage(pool, shard, &reclaimed);
  if (ZSM_UNLIKELY(zspage == nullptr)) {
    pool->pages.zspages_being_added.fetch_sub(1, std::memory_order_relaxed);
    if (!reclaimed && pool->fast.thread_caches) drain_thread_caches(pool);
    lock_shard(shard);
    if (ZsPage* hot = shard->hot != nullptr ? shard->hot : make_fullest_hot(shard)) return hot;
    free_handle(pool, shard, handle);
    shard->lock.unlock();
    errno = ENOMEM;
    return nullptr;
  }
  lock_shard(shard);
  zspage->shard.store(shard, std::memory_order_relaxed);
  zspage->magazine_offset = shard->magazine_offset;
  insert_zspage(shard, zspage, ZS_INUSE_RATIO_0);
  shard->stats[ZS_OBJS_ALLOCATED] += shard->objs_per_zspage;
  pool->pages.zspages_being_added.fetch_sub(1, std::memory_order_relaxed);
  return shard->hot != nullptr ? shard->hot : make_fullest_hot(shard);
}

// A store whose own shard `own` of the class has no room and can get no zspage: the first
// other shard of the class with a free slot takes it (a thread's objects and their frees
// stay in the shard it stored them in, so another thread's frees leave room there). Returns
// the cell, or 0 with errno ENOMEM when no shard of the class has a free slot.
template <typename Fill>
ZSM_COLD_PATH unsigned long alloc_in_other_shard(ZsPool* pool, ClassShard* first,
                                                 const ClassShard* own, size_t size,
                                                 zs_alloc_tag* tag, Fill fill)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (uint32_t s = 0; s <= pool->fast.shard_mask; s++) {
    ClassShard* shard = first + s;
    if (shard == own) continue;
    lock_shard(shard);
    ZsPage* zspage = shard->hot != nullptr ? shard->hot : make_fullest_hot(shard);
    unsigned long handle = zspage != nullptr ? alloc_handle(pool, shard) : 0;
    if (handle != 0) return place_and_unlock(pool, shard, zspage, handle, size, tag, fill);
    shard->lock.unlock();
  }
  errno = ENOMEM;
  return 0;
}

// alloc_object() off its common path: this thread's shard was busy (`shard` is nullptr: it
// waits in lock_store_shard()), its cell stock is empty or it has no hot zspage (the head of the
// fullest list becomes hot, or a new zspage is made). Out of line, so that what lives across
// the calls of these paths does not cost the common path registers, but not cold: a store
// after a free into a zspage that was not full comes here, and g++ inlines a cold
// function's copy as a byte loop (rep movsb). Returns the cell and unlocks, or 0 with errno
// ENOMEM.
template <typename Fill>
ZSM_OFF_FAST_PATH unsigned long alloc_object_slow(ZsPool* pool, ClassShard* first,
                                                  ClassShard* shard, size_t size,
                                                  zs_alloc_tag* tag, Fill fill)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  if (shard == nullptr) shard = lock_store_shard(pool, first);
  unsigned long handle = alloc_handle(pool, shard);
  if (ZSM_UNLIKELY(handle == 0)) {
    shard->lock.unlock();
    errno = ENOMEM;
    return 0;
  }
  ZsPage* zspage = shard->hot;
  if (zspage == nullptr && (zspage = make_fullest_hot(shard)) == nullptr &&
      (zspage = make_new_zspage_hot(pool, shard, handle)) == nullptr)
    return pool->fast.shard_mask != 0
               ? alloc_in_other_shard(pool, first, shard, size, tag, fill)
               : 0;
  return place_and_unlock(pool, shard, zspage, handle, size, tag, fill);
}

// The kernel's zs_malloc(), written once for the malloc and the store: a stocked cell of the
// shard and the first free slot of its hot zspage, under the shard's lock;
// alloc_object_slow() when the shard is busy or either is missing. `fill` writes the object
// (the store's copy) once it is placed, before the lock is dropped. The arguments are
// valid and the pool a default one (see locked_alloc()). Returns the cell, or 0 with errno
// ENOMEM.
template <typename Fill>
ZSM_ALWAYS_INLINE unsigned long alloc_object(ZsPool* pool, size_t size, zs_alloc_tag* tag,
                                             Fill fill) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  ClassShard* first = first_shard_for_size(pool, size + kHandleSize);
  ClassShard* shard = store_shard(pool, first);
  if (ZSM_UNLIKELY(!shard->lock.try_lock()))
    return alloc_object_slow(pool, first, nullptr, size, tag, fill);
  ZsPage* zspage = shard->hot;
  if (ZSM_UNLIKELY(zspage == nullptr || shard->cell_stock == nullptr))
    return alloc_object_slow(pool, first, shard, size, tag, fill);
  unsigned long handle = alloc_handle(pool, shard);
  return place_and_unlock(pool, shard, zspage, handle, size, tag, fill);
}

// A store that failed its entry's guard: the arguments checked (errno EINVAL or ENOSPC), then a
// hardened pool's store, whose handle carries the pool's tag.
template <typename Fill>
ZSM_OFF_FAST_PATH unsigned long alloc_checked(ZsPool* pool, size_t size, zs_alloc_tag* tag,
                                              Fill fill) {
  if (!fill.valid() || pool == nullptr || size - 1 >= pool->classes.page_size) {
    errno = !fill.valid() || pool == nullptr || size == 0 ? EINVAL : ENOSPC;
    return 0;
  }
  unsigned long cell = alloc_object(pool, size, tag, fill);
  return cell != 0 ? tag_handle(pool, cell) : 0;
}

// The locked path's store and malloc, from their entry: the guard, then alloc_object(). The
// guard sends a store off its fast path for a bad argument or because the pool is hardened
// (whose stores tag their handles): the one compare of the size against
// ZsPool::fast.store_size_limit does both, so that a default pool's stores pay nothing for
// hardened ones. The cached store's entry (pool/cached_path.h) has the same guard but for
// the null pool, which no cache serves. The two are written apart so that each compiles to
// its own register allocation (the golden counts guard both paths' instructions).
template <typename Fill>
ZSM_ALWAYS_INLINE unsigned long locked_alloc(ZsPool* pool, size_t size, zs_alloc_tag* tag,
                                             Fill fill) {
  if (ZSM_UNLIKELY(!fill.valid() || pool == nullptr || size - 1 >= pool->fast.store_size_limit))
    return alloc_checked(pool, size, tag, fill);
  return alloc_object(pool, size, tag, fill);
}

// --- the free -------------------------------------------------------------------------------

// The object's shard is locked: frees it, and its handle, and unlocks. The cell goes back to
// the cell stock before the fullness moves and the stock is trimmed after them, so that
// only the pool and the shard live across the calls of those rare paths.
ZSM_ALWAYS_INLINE void free_locked(ZsPool* pool, ClassShard* shard, unsigned long handle,
                                   unsigned long obj) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  ZsPage* zspage = obj_to_zspage(obj);
  if (ZSM_PROFILING && ZSM_UNLIKELY(obj & kObjProfiled))
    profile_free(pool, shard, handle, obj_size(shard->geom, obj));
  shard->stats[ZS_OBJS_INUSE]--;
  obj_free(shard->geom, zspage, obj_to_idx(obj));
  stock_cell(shard, handle);
  fix_fullness_after_free(pool, shard, zspage);
  trim_cell_stock(pool, shard);
  debug_check_class(pool, shard, zspage);
  shard->lock.unlock();
}

// Frees the pinned object behind the cell (its shard locked by the caller): the header
// checked first in a hardened pool.
template <typename Check>
ZSM_ALWAYS_INLINE void free_pinned(ZsPool* pool, Pinned pinned, unsigned long cell, Check check)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  check.check_header(pinned.shard->geom, pinned.obj);
  free_locked(pool, pinned.shard, cell, pinned.obj);
}

// free_cell() when the object's shard lock was taken, or the object moved meanwhile: waits
// for it. Out of line, so that what the waits keep across their calls does not cost the
// common path registers.
template <typename Check>
ZSM_COLD_PATH void free_cell_waiting(ZsPool* pool, unsigned long cell, Check check) {
  free_pinned(pool, lock_shard_of(cell, check), cell, check);
}

// The free of the object behind the cell, trusted, or in a hardened pool checked, with the
// cell and the object's header, before anything changes.
template <typename Check>
ZSM_ALWAYS_INLINE void free_cell(ZsPool* pool, unsigned long cell, Check check) {
  Pinned pinned = try_lock_shard_of(cell, check);
  if (ZSM_UNLIKELY(pinned.shard == nullptr)) return free_cell_waiting(pool, cell, check);
  free_pinned(pool, pinned, cell, check);
}

// A hardened pool's free: the handle checked, and refused while this thread reads it. Out
// of line, so that its checks do not cost a default pool's free registers.
ZSM_OFF_FAST_PATH void free_checked(ZsPool* pool, unsigned long handle) {
  CheckHandle check = check_handle(pool, "zs_free", handle);
  if (ZSM_UNLIKELY(open_reads.find(pool, handle) != nullptr))
    report_free_while_read(pool, "zs_free", handle);
  free_cell(pool, check.cell, check);
}

}  // namespace
}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
