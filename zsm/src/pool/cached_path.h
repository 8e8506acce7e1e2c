// The store and free through the calling thread's cache (cache/thread_cache.h): what the C
// API's zs_store(), zs_malloc() and zs_free() run. A load from the thread pointer and a
// compare find the thread's cache for the pool; a store pops a reserved slot of the class
// and writes its header and payload, a free pushes the handle. The kernel's path
// (pool/kernel_path.h) takes over when the magazine is empty or full, the pool's caches are
// blocked, the pool keeps none, or allocation profiling is on. Part of the object paths' one
// translation unit (object_api.cpp).
#pragma once
#ifndef ZSM_OBJECT_PATHS_TU
#error "pool/cached_path.h belongs to pool/object_api.cpp's translation unit only"
#endif

#include <cstddef>
#include <cstdint>

#include "base/compiler.h"
#include "cache/thread_cache.h"
#include "pool/kernel_path.h"
#include "pool/lookups.h"
#include "pool/pool.h"
#include "pool/profile.h"
#include "zspage/obj.h"
#include "zspage/shard_placement.h"
#include "zspage/types.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {
namespace {

// The kernel's path as a function of its own (its entry, guard included), behind a cached
// store that cannot use the cache. The fill comes first, so that for zs_store(pool, src,
// size) its source and size arrive in the registers they came in: the entry neither moves
// them nor keeps copies for this call. (The cached store's guard failing and its miss share
// this one way out: with two, the store keeps its source in another register, two
// instructions more per call.)
template <typename Fill>
ZSM_OFF_FAST_PATH unsigned long alloc_behind_cache(ZsPool* pool, Fill fill, size_t size,
                                                   zs_alloc_tag* tag) {
  return kernel_alloc(pool, size, tag, fill);
}

// The store and the malloc with the thread's cache `tc` of the pool in hand: the newest
// reserved slot of the class, its header and payload written (the cell already names it);
// the kernel's path for a store its guard refuses (kernel_alloc() in pool/kernel_path.h says
// what it guards), when the magazine is empty or when the pool's caches are blocked.
template <typename Fill>
ZSM_ALWAYS_INLINE unsigned long alloc_from_cache(ZsPool* pool, ThreadCache* tc, size_t size,
                                                 zs_alloc_tag* tag, Fill fill) {
  if (ZSM_UNLIKELY(!fill.valid() || size - 1 >= pool->store_size_limit) ||
      !enter_fast_path(pool, tc))
    return alloc_behind_cache(pool, fill, size, tag);
  Magazine& magazine = magazine_for(pool, tc, size + kHandleSize);
  uint32_t reserved = magazine.size();
  if (ZSM_UNLIKELY(reserved == 0)) {
    leave_fast_path(tc);
    return alloc_behind_cache(pool, fill, size, tag);
  }
  unsigned long handle = magazine.pop(reserved);
  unsigned long obj = handle_to_cell(handle)->load(std::memory_order_relaxed);
  // The slot's first page and offset, from the class's geometry in the magazine.
  size_t start = size_t{obj_to_idx(obj)} * magazine.geom.size;
  char* const* pages = obj_to_zspage(obj)->pages() + (start >> magazine.geom.page_shift);
  size_t offset = start & magazine.geom.page_mask;
  *reinterpret_cast<unsigned long*>(pages[0] + offset) = make_header(handle, size);
  // The copy leaves the fast path after it (leave_fast_path()) and returns the handle.
  return fill.into_pages_then_clear(magazine.copy, magazine.geom.page_mask, pages,
                                    offset + kHandleSize, &tc->in_fast, handle);
}

// A store whose thread's last cache is not the pool's: its cache for the pool, found or
// made, or the kernel's path where the pool keeps none (or profiling is on).
template <typename Fill>
ZSM_OFF_FAST_PATH unsigned long alloc_other_cache(ZsPool* pool, Fill fill, size_t size,
                                                  zs_alloc_tag* tag) {
  ThreadCache* tc;
  if (pool != nullptr && pool->thread_caches && !profiling_enabled() &&
      (tc = switch_thread_cache(pool)) != nullptr) {
    place_thread();
    return alloc_from_cache(pool, tc, size, tag, fill);
  }
  return alloc_behind_cache(pool, fill, size, tag);
}

// The store and the malloc of the C API (no cache matches a null pool or one without
// caches).
template <typename Fill>
ZSM_ALWAYS_INLINE unsigned long alloc_entry(ZsPool* pool, size_t size, zs_alloc_tag* tag,
                                            Fill fill) {
  ThreadCache* tc = current_cache;
  if (ZSM_LIKELY(tc->serves(pool)) && !profiling_enabled())
    return alloc_from_cache(pool, tc, size, tag, fill);
  return alloc_other_cache(pool, fill, size, tag);
}

// The free with the thread's cache `tc` of the pool in hand: the object's slot stays
// reserved there; the locked path when the magazine is full, the caches are blocked, or
// profiling counted the object.
ZSM_ALWAYS_INLINE void free_to_cache(ZsPool* pool, ThreadCache* tc, unsigned long handle) {
  if (ZSM_UNLIKELY(handle == 0)) return;
  if (ZSM_LIKELY(enter_fast_path(pool, tc))) {
    unsigned long obj = handle_to_cell(handle)->load(std::memory_order_relaxed);
    bool cached = !(ZSM_PROFILING && (obj & kObjProfiled)) &&
                  tc->magazine_at(obj_to_zspage(obj)->magazine_offset).push(handle);
    leave_fast_path(tc);
    if (ZSM_LIKELY(cached)) return;
  }
  free_reserved(pool, handle);
}

// A free whose thread's last cache is not the pool's (see alloc_other_cache()).
ZSM_OFF_FAST_PATH void free_other_cache(ZsPool* pool, unsigned long handle) {
  ThreadCache* tc;
  if (pool != nullptr && pool->thread_caches && (tc = switch_thread_cache(pool)) != nullptr)
    return free_to_cache(pool, tc, handle);
  kernel_path::free(pool, handle);
}

}  // namespace
}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
