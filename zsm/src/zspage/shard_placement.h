// Which lock shard of a class a store goes to. Each size class is split into lock shards
// (zs_pool_config.nr_shards, one per CPU by default), each a ClassShard with its own lock,
// zspages, lists and cell stock. A thread stores into its own shard: in a pool with
// per-thread caches, its first cached call gives it a shard of its own (threads take them in
// turn); otherwise it starts on shard 0. When it finds its shard busy for longer than a
// short spin, it moves, to a shard of its own if it has none yet, later to the next one, and
// stays there. So threads storing into one class soon stop sharing a lock, without chasing
// each other on every brief wait. A free locks the shard that owns the object's zspage,
// wherever the freeing thread is. Shards follow threads, not CPUs, because a thread's objects
// live in the shard it stored them in: a thread that stays in its shard frees into it too,
// while a per-CPU choice would scatter a migrating thread's objects over the shards.
// Compaction takes every shard of a class at once. With one shard per class the pool is the
// kernel's: one lock and one set of lists per class.
//
// A thread's shard is a hint, kept per thread and process-wide (one per thread, not per
// pool), masked by each pool's shard count. Hints of live threads are kept apart (the lowest
// free one is taken; an exiting thread gives its hint back), so that the threads alive at
// one time spread over the shards. The inline helpers are the store path's; the rest is out
// of line in shard_placement.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/compiler.h"
#include "zspage/types.h"
#include "zspage/zspage.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

// The shard this thread stores into, before masking, and kPlaced once the thread has a
// shard of its own. initial-exec: one load from the thread pointer, in the shared library
// too.
extern ZSM_INITIAL_EXEC_TLS constinit thread_local uint32_t shard_hint;
inline constexpr uint32_t kPlaced = 1u << 31;  // above any shard mask

// A shard of its own for this thread (the lowest hint no live thread holds), as a hint with
// kPlaced set.
uint32_t own_shard_hint();

// A store found its shard `shard` busy: waits a short spin for it, then, where the class has
// other shards, moves this thread to another one and waits for that. Returns the shard it
// locked.
ZSM_COLD_PATH ClassShard* lock_busy_store_shard(const ZsPool* pool, ClassShard* first,
                                                ClassShard* shard) ZSM_NO_THREAD_SAFETY_ANALYSIS;

// In a child of fork(): the hints of the parent's other threads are free again.
void forget_other_threads_shard_hints();

// Gives this thread a shard of its own if it has none yet. A thread's first cached call
// does: stores that reuse their cache's slots never find a shard busy, so without this
// every thread would stay on shard 0, and threads' objects would share zspages and cache
// lines.
inline void place_thread() {
  if ((shard_hint & kPlaced) == 0) shard_hint = own_shard_hint();
}

// get_size_class_index() for a request of up to page_size + header bytes: shard 0 of its
// class.
inline ClassShard* first_shard_for_size(const ZsPool* pool, size_t size) {
  return pool->fast.first_shard_by_granule[(size + (1u << kGranuleShift) - 1) >> kGranuleShift];
}

// The shard lock_store_shard() tries first: this thread's shard of the class whose shard 0
// is `first`. A pool of one shard (the kernel's design) reads no hint.
inline ClassShard* store_shard(const ZsPool* pool, ClassShard* first) {
  if (pool->fast.shard_mask == 0) return first;
  return first + (shard_hint & pool->fast.shard_mask);
}

// Locks this thread's shard of the class whose shard 0 is `first` and returns it (one
// compare-and-swap when it is free; see lock_busy_store_shard() when it is not).
inline ClassShard* lock_store_shard(const ZsPool* pool, ClassShard* first)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  ClassShard* shard = store_shard(pool, first);
  if (ZSM_LIKELY(shard->lock.try_lock())) return shard;
  return lock_busy_store_shard(pool, first, shard);
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
