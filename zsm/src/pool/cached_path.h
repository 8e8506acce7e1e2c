// The store and free through the calling thread's cache (tcache/thread_cache.h): what the C
// API's zs_store(), zs_malloc() and zs_free() run. A load from the thread pointer, the
// cache's in-fast-path flag set and one compare of its key with the pool find the thread's
// cache for the pool and enter it (the key also says when the pool's caches are blocked);
// a store pops a reserved slot of the class and writes its header and payload, a free
// pushes the handle. The locked path (pool/locked_path.h) takes over when the magazine is
// empty or full, the pool's caches are blocked, the pool keeps none, or allocation
// profiling is on. Part of the object paths' one
// translation unit (object_api.cpp).
#pragma once
#ifndef ZSM_OBJECT_PATHS_TU
#error "pool/cached_path.h belongs to pool/object_api.cpp's translation unit only"
#endif

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/compiler.h"
#include "pool/locked_path.h"
#include "pool/lookups.h"
#include "pool/payload.h"
#include "pool/pool.h"
#include "pool/profile.h"
#include "tcache/thread_cache.h"
#include "zspage/obj.h"
#include "zspage/shard_placement.h"
#include "zspage/types.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {
namespace {

// The locked path as a function of its own (its entry, guard included), behind a cached
// store that cannot use the cache. The fill comes first, so that for zs_store(pool, src,
// size) its source and size arrive in the registers they came in: the entry neither moves
// them nor keeps copies for this call. The cached store's guard failing and its miss share
// this one way out, so that the store keeps its source in the register it came in (the
// golden counts, bench/golden/fast_path.json, guard the store's instructions).
template <typename Fill>
ZSM_OFF_FAST_PATH unsigned long alloc_behind_cache(ZsPool* pool, Fill fill, size_t size,
                                                   zs_alloc_tag* tag) {
  return locked_alloc(pool, size, tag, fill);
}

// The cached store into a zspage whose pages are not contiguous (a page source that hands
// out pages one by one, at addresses of its choosing): the slot found and its header and
// payload written as the locked path writes them (obj_write(), split at the page end), then
// the fast path left (`in_fast` cleared) and the handle returned. A null `src` (zs_malloc())
// writes the header only.
ZSM_OFF_FAST_PATH unsigned long store_scattered_then_clear(const Magazine& magazine,
                                                           unsigned long handle,
                                                           const void* src, size_t size,
                                                           std::atomic<uint32_t>* in_fast) {
  const ClassGeometry g = magazine.geom;
  unsigned long obj = handle_to_cell(handle)->load(std::memory_order_relaxed);
  Location loc = obj_location(g, obj_to_zspage(obj), obj_to_idx(obj));
  *obj_word(loc) = make_header(handle, size);
  if (src != nullptr) obj_write(g, obj, loc.page + loc.offset + kHandleSize, src, size);
  in_fast->store(0, std::memory_order_release);
  return handle;
}

// The store and the malloc inside the fast path of the pool's cache `tc` (entered): the
// newest reserved slot of the class, its header and payload written (the cell already names
// it); the locked path for a store its guard refuses (locked_alloc() in pool/locked_path.h
// says what it guards) and when the magazine is empty.
template <typename Fill>
ZSM_ALWAYS_INLINE unsigned long alloc_in_cache(ZsPool* pool, ThreadCache* tc, size_t size,
                                               zs_alloc_tag* tag, Fill fill) {
  if (ZSM_UNLIKELY(!fill.valid() || size - 1 >= pool->fast.store_size_limit)) {
    leave_fast_path(tc);
    return alloc_behind_cache(pool, fill, size, tag);
  }
  Magazine& magazine = magazine_for(pool, tc, size + kHandleSize);
  uint32_t reserved = magazine.top_bytes();
  if (ZSM_UNLIKELY(reserved == 0)) {
    leave_fast_path(tc);
    return alloc_behind_cache(pool, fill, size, tag);
  }
  const Reserved r = magazine.pop(reserved);
  const unsigned long handle = r.handle;
  const ZsPage* zspage = obj_to_zspage(r.obj);
  if (ZSM_UNLIKELY(!(zspage->layout & kPagesContiguous)))
    return store_scattered_then_clear(magazine, handle, fill.source(), size, &tc->in_fast);
  // The zspage's bytes are one range: the slot is at index x slot size, and the payload after
  // its header never needs a split.
  char* slot = zspage->pages()[0] + size_t{obj_to_idx(r.obj)} * magazine.geom.size;
  *reinterpret_cast<unsigned long*>(slot) = make_header(handle, size);
  // The copy leaves the fast path after it (leave_fast_path()) and returns the handle.
  return fill.into_slot_then_clear(magazine.copy, slot + kHandleSize, &tc->in_fast, handle);
}

// A store whose thread's last cache could not take it: its cache for the pool, found or
// made, entered if not blocked; or the locked path where the pool keeps none (a null
// pool, one without caches, profiling on) or its caches are blocked.
template <typename Fill>
ZSM_OFF_FAST_PATH unsigned long alloc_other_cache(ZsPool* pool, Fill fill, size_t size,
                                                  zs_alloc_tag* tag) {
  ThreadCache* tc;
  if (pool != nullptr && pool->fast.thread_caches && !profiling_enabled() &&
      (tc = switch_thread_cache(pool)) != nullptr) {
    place_thread();
    if (enter_fast_path(pool, tc)) return alloc_in_cache(pool, tc, size, tag, fill);
  } else {
    name_own_no_cache();
  }
  return alloc_behind_cache(pool, fill, size, tag);
}

// The store and the malloc of the C API (no cache's key matches a null pool or one without
// caches).
template <typename Fill>
ZSM_ALWAYS_INLINE unsigned long alloc_entry(ZsPool* pool, size_t size, zs_alloc_tag* tag,
                                            Fill fill) {
  ThreadCache* tc = current_cache;
  if (ZSM_LIKELY(enter_fast_path(pool, tc))) {
    if (ZSM_LIKELY(!profiling_enabled())) return alloc_in_cache(pool, tc, size, tag, fill);
    leave_fast_path(tc);
  }
  return alloc_other_cache(pool, fill, size, tag);
}

// The free inside the fast path of the pool's cache `tc` (entered): the object's slot stays
// reserved there; the locked path when the magazine is full or profiling counted the
// object.
ZSM_ALWAYS_INLINE void free_in_cache(ZsPool* pool, ThreadCache* tc, unsigned long handle) {
  unsigned long obj = handle_to_cell(handle)->load(std::memory_order_relaxed);
  bool cached = !(ZSM_PROFILING && (obj & kObjProfiled)) &&
                tc->magazine_at(obj_to_zspage(obj)->magazine_offset).push(handle, obj);
  leave_fast_path(tc);
  if (ZSM_LIKELY(cached)) return;
  free_reserved(pool, handle);
}

// A free whose thread's last cache could not take it (see alloc_other_cache()).
ZSM_OFF_FAST_PATH void free_other_cache(ZsPool* pool, unsigned long handle) {
  ThreadCache* tc;
  if (pool != nullptr && pool->fast.thread_caches && (tc = switch_thread_cache(pool)) != nullptr) {
    if (enter_fast_path(pool, tc)) return free_in_cache(pool, tc, handle);
    return free_reserved(pool, handle);
  }
  name_own_no_cache();
  locked_path::free(pool, handle);
}

}  // namespace
}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
