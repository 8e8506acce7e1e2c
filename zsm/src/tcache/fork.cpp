// fork() handling for every pool and its thread caches.
//
// A child of fork() has one thread, the one that forked, and a copy of every pool as the
// parent's threads left it. So that the child can go on using its pools (zsmalloc.h,
// "fork()"), the prepare handler brings every pool to a state no thread is inside: it takes
// the registry, blocks every pool's caches and waits until no owner is inside its fast path,
// then takes every lock of every pool (its shards', metadata arenas' and page source's) and
// the barrier's. Every change to a pool is made under those, so the child's copy is
// consistent, but for what a vanished thread kept to itself: the slots its caches reserve
// (they are orphaned, and the pool's next drain gives them back), a zspage it was adding
// between two of those locks (lost to the child, which recounts the pool's pages), a read it
// had begun (that zspage stays read-locked; compaction passes it by). The parent's handler
// unlocks everything; the child's also clears what vanished threads held: blocked caches,
// in-fast-path flags, a compaction in progress, lock waiters and shard hints.
//
// A page source's callback runs under its pool's locks and may call into another pool,
// whose locks the prepare may hold already. So the prepare never waits long for one lock
// while it holds others: it gives them all back, sleeps a moment and starts again.
#include "tcache/registry.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/lock.h"
#include "tcache/thread_cache.h"
#include "zspage/shard_placement.h"
#include "zspage/types.h"
#include "zspage/zspage.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

namespace {

constexpr int kForkLockPatience = 4096;  // Backoff pauses on one lock before starting again

bool lock_patiently(Mutex& m) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  Backoff backoff;
  for (int i = 0; i < kForkLockPatience; i++) {
    if (m.try_lock()) return true;
    backoff.pause();
  }
  return false;
}

// Calls `visit(lock)` for every lock of a registered pool, in the lock order (pool/object_api.cpp).
template <typename Visit>
void for_each_pool_lock(ZsPool* pool, Visit visit) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (uint32_t c = 0; c < pool->classes.nr_class_shards; c++)
    visit(pool->classes.class_shards[c].lock);
  for (uint32_t s = 0; s <= pool->fast.shard_mask; s++) visit(pool->metadata.arenas[s].lock);
  visit(pool->source.lock);
}

// Blocks every pool's caches and waits until no owner is inside its fast path.
void block_all_caches() ZSM_REQUIRES(registry_lock) {
  for (ZsPool* pool : all_pools) block_caches(pool);
  heavy_barrier();
  for (ZsPool* pool : all_pools)
    for (const ThreadCache* tc : pool->tcache.caches) wait_for_owner(tc);
}

void unblock_all_caches() ZSM_REQUIRES(registry_lock) {
  for (ZsPool* pool : all_pools) unblock_caches(pool);
}

// Takes every lock of every pool; false, with none of them held, when one stays busy.
bool lock_all_pools() ZSM_REQUIRES(registry_lock) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  size_t taken = 0;
  bool ok = true;
  for (ZsPool* pool : all_pools) {
    if (!ok) break;
    for_each_pool_lock(pool, [&](Mutex& m) ZSM_NO_THREAD_SAFETY_ANALYSIS {
      if (ok && (ok = lock_patiently(m))) taken++;
    });
  }
  if (ok) return true;
  for (ZsPool* pool : all_pools) {
    if (taken == 0) break;
    for_each_pool_lock(pool, [&](Mutex& m) ZSM_NO_THREAD_SAFETY_ANALYSIS {
      if (taken > 0 && taken--) m.unlock();
    });
  }
  return false;
}

void prepare_fork() ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (unsigned round = 1;; round++) {
    registry_lock.lock();
    block_all_caches();
    if (lock_all_pools()) {
      barrier_lock.lock();
      return;
    }
    unblock_all_caches();
    registry_lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(round, 1000u)));
  }
}

void after_fork_in_parent() ZSM_NO_THREAD_SAFETY_ANALYSIS {
  barrier_lock.unlock();
  for (ZsPool* pool : all_pools)
    for_each_pool_lock(pool, [](Mutex& m) ZSM_NO_THREAD_SAFETY_ANALYSIS { m.unlock(); });
  unblock_all_caches();
  registry_lock.unlock();
}

// The child's copy of a pool, whose users other than this thread have vanished.
void forget_vanished_threads(ZsPool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  pool->fast.caches_blocked.store(0, std::memory_order_relaxed);
  key_caches(pool);
  pool->compaction.in_progress.store(false, std::memory_order_relaxed);
  pool->tcache.exit_frees_in_flight.store(0, std::memory_order_relaxed);
  for (ThreadCache* tc : pool->tcache.caches) {
    tc->in_fast.store(0, std::memory_order_relaxed);
    if (!owned_by_this_thread(tc)) tc->orphaned = true;
  }
  if (pool->pages.zspages_being_added.load(std::memory_order_relaxed) != 0) {
    pool->pages.allocated.store(count_zspage_pages(pool), std::memory_order_relaxed);
    pool->pages.zspages_being_added.store(0, std::memory_order_relaxed);
  }
  for_each_pool_lock(pool, [](Mutex& m) ZSM_NO_THREAD_SAFETY_ANALYSIS {
    m.forget_waiters();
    m.unlock();
  });
}

void after_fork_in_child() ZSM_NO_THREAD_SAFETY_ANALYSIS {
  barrier_lock.forget_waiters();
  barrier_lock.unlock();
  for (ZsPool* pool : all_pools)
    forget_vanished_threads(pool);
  forget_other_threads_shard_hints();
  registry_lock.forget_waiters();
  registry_lock.unlock();
}

}  // namespace

bool handle_fork() {
  return pthread_atfork(prepare_fork, after_fork_in_parent, after_fork_in_child) == 0;
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
