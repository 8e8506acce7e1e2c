// What thread_cache.cpp and fork.cpp share, inside tcache/ only: the process-wide registry of
// pools and their caches, and the heavy half of the handshake (design: thread_cache.h).
#pragma once

#include "base/compiler.h"
#include "base/list.h"
#include "base/lock.h"
#include "tcache/thread_cache.h"
#include "zspage/types.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

// Guards every pool's list of caches and the caches' `pool` fields against a thread
// exiting, a pool being destroyed and a drain, which may happen at once, and the list of
// every pool. Taken off the fast path only, never under a shard lock (a drain takes shard
// locks under it).
extern Mutex registry_lock;
// Every registered pool, newest first (ZsPool::registry.links).
extern IntrusiveList<ZsPool> all_pools ZSM_GUARDED_BY(registry_lock);
// Serialises the mprotect() barrier (a leaf: nothing is taken under it).
extern Mutex barrier_lock;

// Blocking a pool's caches (thread_cache.h, "Reaching other threads' caches"): the key
// each cache of the pool has now, its address with kBlockedKey while blocked; keying every
// cache of the pool so; and counting a block in or out, which keys them when the count
// leaves or reaches 0.
uintptr_t pool_key_now(const ZsPool* pool) ZSM_REQUIRES(registry_lock);
void key_caches(ZsPool* pool) ZSM_REQUIRES(registry_lock);
void block_caches(ZsPool* pool) ZSM_REQUIRES(registry_lock);
void unblock_caches(ZsPool* pool) ZSM_REQUIRES(registry_lock);

// A full memory barrier on every CPU running a thread of this process.
void heavy_barrier();
// Waits until the owner of `tc` is outside its fast path; the pool's caches are blocked,
// so it cannot come back in.
void wait_for_owner(const ThreadCache* tc);
// The cache belongs to the calling thread's list of caches.
bool owned_by_this_thread(const ThreadCache* tc);

// fork.cpp: installs the fork() handlers (once per variant: register_pool() calls it from a
// static initialiser); false when pthread_atfork() failed.
bool handle_fork();

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
