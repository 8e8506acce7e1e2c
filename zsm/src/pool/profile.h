// Allocation profiling: live bytes and objects per call site and per size class, after the
// kernel's alloc tags (lib/alloc_tag.c) and its mem_alloc_profiling_key.
//
// The switch is a relaxed atomic flag read with an unlikely hint, one per compiled variant.
// A store checks it once under the shard lock; when it is on, profile_alloc() points the
// handle's tag slot (the cell's mirror word, memory/metadata.h) at the call site's tag, adds to the
// site's counters (atomics: sites are shared by threads and pools) and to the shard's
// (under its lock); the store then sets kObjProfiled in the obj it records.
// The free tests that bit of the obj it reads anyway, so only counted objects are taken off,
// whatever the switch says by then; compaction copies the bit when it moves an object, and
// the tag slot belongs to the handle, which never moves. The size comes from the object's
// header (obj_size()).
//
// The hooks are ZSM_PROFILE_HOOK: out of line by default, so that the disabled fast path
// carries only the check, or inline for the A/B (base/compiler.h). Without ZSM_PROFILING they
// are empty stubs and the check is a constant false.
#pragma once

#include <zsm/zsmalloc.h>

#include <atomic>

#include "zspage/obj.h"
#include "zspage/types.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

#if ZSM_PROFILING

extern std::atomic<bool> g_profiling_enabled;
extern zs_alloc_tag g_untagged;

inline bool profiling_enabled() {
  return ZSM_UNLIKELY(g_profiling_enabled.load(std::memory_order_relaxed));
}

// Links the tag into the list zs_alloc_info_read() reads, once.
void register_alloc_tag(zs_alloc_tag* tag);

// Registration comes last, so that the out-of-line hook needs no stack frame: a tail call.
ZSM_PROFILE_HOOK void profile_alloc(const ZsPool* pool, ClassShard* shard, unsigned long handle,
                                    size_t size, zs_alloc_tag* tag) ZSM_REQUIRES(shard->lock) {
  if (tag == nullptr) tag = &g_untagged;
  pool->metadata.cells.mirror_of(handle)->store(reinterpret_cast<unsigned long>(tag),
                                                std::memory_order_relaxed);
  __atomic_fetch_add(&tag->bytes, size, __ATOMIC_RELAXED);
  __atomic_fetch_add(&tag->calls, 1, __ATOMIC_RELAXED);
  shard->prof_objs++;
  shard->prof_bytes += size;
  if (__atomic_load_n(&tag->registered, __ATOMIC_ACQUIRE) == 0) register_alloc_tag(tag);
}

ZSM_PROFILE_HOOK void profile_free(const ZsPool* pool, ClassShard* shard, unsigned long handle,
                                   size_t size) ZSM_REQUIRES(shard->lock) {
  auto* tag = reinterpret_cast<zs_alloc_tag*>(
      pool->metadata.cells.mirror_of(handle)->load(std::memory_order_relaxed));
  __atomic_fetch_sub(&tag->bytes, size, __ATOMIC_RELAXED);
  __atomic_fetch_sub(&tag->calls, 1, __ATOMIC_RELAXED);
  shard->prof_objs--;
  shard->prof_bytes -= size;
}

#else

inline constexpr bool profiling_enabled() { return false; }

inline void profile_alloc(const ZsPool*, ClassShard*, unsigned long, size_t, zs_alloc_tag*) {}

inline void profile_free(const ZsPool*, ClassShard*, unsigned long, size_t) {}

#endif

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
