// Per-thread caches: the store/free pair without a lock.
//
// What a cache holds. A free does not give the object's slot back to its zspage: it pushes
// the handle onto the freeing thread's magazine for the object's class, and the handle's
// cell goes on naming the slot, whose header stays as it was. The slot is *reserved*: its
// zspage still counts it in use. A store into that class pops the newest handle, writes the
// header and the payload into the slot the cell names, and returns the same handle. Neither
// side takes a lock, writes to the zspage or the shard, or makes an atomic read-modify-write;
// in steady state the pair is a pop, a push and the copy. A store finds its class's magazine
// in the pool's magazine map (shared by the pools of one geometry), a free in the object's
// zspage metadata (ZsPage::magazine_offset), so that a thread switching among many pools
// reads as few pages of each as it can. A magazine holds the handles of one class, whichever
// shard, zspage or thread the objects came from, so an object freed by another thread than
// the one that stored it simply joins the freeing thread's cache.
//
// Bounds. A magazine of a class of `size` bytes holds min(kMaxMagazine, kMagazineBytes /
// size) handles; classes above kMagazineBytes and the huge class are not cached. So a
// thread reserves at most ZsPool::tcache.cache_bytes_per_thread in a pool (the sum over classes,
// computed when the pool is created; the class table, and so the sum, depends on the page
// size and the chain: docs/design.md lists every geometry, tests/zsm/bookkeeping_test.cpp
// checks them), and zs_pool_stats() reports that bound and what all threads' caches hold now
// (cached_objs, cached_bytes). Reserved slots can also keep partly used zspages
// from being freed until they are taken back. A cache's own memory (the magazines, malloc'd
// per thread and pool) is zs_pool_stats().thread_cache_bytes, not pool bookkeeping.
//
// Reaching other threads' caches. Compaction, the class statistics, zs_check_pool(), a
// store that finds the pool at its memory limit, and zs_destroy_pool() need the reserved
// slots back, or at least need no thread to be inside its cache. The owner's fast path is
// bracketed by a flag of its cache, written with plain stores, and blocking a pool's
// caches changes each cache's key, so that the one compare that finds the thread's cache
// for the pool also sees it blocked:
//     owner:   in_fast = 1; compiler barrier; if (pool_key != pool) leave, go another way
//              (another cache, or the locked path); ... pop or push ...; in_fast = 0
//              (release)
//     drainer: under the registry lock, caches_blocked += 1 and, when it was 0, every cache
//              of the pool keyed pool | kBlockedKey; heavy barrier; for each cache: wait
//              until in_fast == 0, then take its handles (under the registry lock, a batch
//              at a time) and free them with the shard locks once the registry is unlocked
// The heavy barrier is membarrier(2) MEMBARRIER_CMD_PRIVATE_EXPEDITED, which runs a full
// memory barrier on every CPU that runs a thread of this process: after it, each owner
// either has its in_fast = 1 visible to the drainer, or will see the blocked key when it
// loads it (Dekker's argument, with the owner's half of the fence made free). Where
// membarrier is refused (kernels before 4.14, valgrind), mprotect() on a private page
// stands in: changing a mapping's protection makes the kernel interrupt every CPU that may
// cache it (a TLB shootdown), which serialises those CPUs, as folly's asymmetric barrier
// does. While caches are blocked, stores and frees take the locked path; the drainer
// unblocks when done (the last unblock keys the caches with the pool again) (compaction only after it has compacted, so that no slot it moves
// is reserved). Under ThreadSanitizer, which cannot see an asymmetric barrier, both halves
// use sequentially consistent atomics instead, the same protocol in the C++ model.
//
// Threads and pools. A thread's caches are registered with their pools under one process-
// wide lock (registry_lock, tcache/registry.h), and the thread keeps them in a table of its
// own by pool slot (cache_table). `current_cache` (one load from the thread pointer) names
// the one the thread used last; a call on another pool looks its cache up in the table
// (switch_thread_cache(), inline) or makes one. When the thread exits, its
// caches go back to their pools, their slots freed a batch at a time with the registry
// unlocked (zs_destroy_pool() waits for a batch in flight). No page source is called with
// the registry locked, so a source's free_page may call into other pools.
// zs_destroy_pool() detaches the caches of other threads (their slots die with the pool;
// the threads must not be using the pool, as for any call racing with destroy), and a
// detached cache never matches a pool again. Every pool is also in a process-wide list
// under the same lock, which the fork() handlers walk (tcache/fork.cpp): in a child, a
// cache whose thread the child does not have is orphaned, and the pool's next drain takes
// its slots and frees it.
//
// Not cached: hardened pools (their checks of a free need the shard lock, so that two frees
// of one handle cannot both pass), stores while allocation profiling is on and frees of
// objects it counted (its figures are kept under the shard lock), and pools created with
// ZS_POOL_NO_THREAD_CACHE, which run the kernel's design on every pair.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/compiler.h"
#include "base/copy.h"
#include "base/list.h"
#include "zspage/obj.h"
#include "zspage/types.h"

#if defined(__SANITIZE_THREAD__)
#define ZSM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ZSM_TSAN 1
#endif
#endif
#ifndef ZSM_TSAN
#define ZSM_TSAN 0
#endif

namespace zsm {
inline namespace ZSM_VARIANT_NS {

inline constexpr uint32_t kMagazineBytes = 4096;  // per class and thread
inline constexpr uint32_t kMaxMagazine = 32;      // handles per class and thread

// One reserved slot: its handle, and the obj its cell held when it was freed, so that a store
// finds the slot without reading the cell (one dependent load fewer before its copy can
// start). The slot cannot move while reserved: compaction drains the caches first.
struct Reserved {
  unsigned long handle;
  unsigned long obj;
};
inline constexpr uint32_t kReservedBytes = sizeof(Reserved);

// The reserved slots of one class in one thread's cache, newest last, in the array that
// follows the struct (`capacity()` of them; the next magazine follows that). Only the owner
// changes it, inside its fast path or with the pool's caches blocked; `top` is atomic so that
// statistics may read it at any time (relaxed: a plain load and store). `top` and `end` are
// byte offsets into the array, so that a pop and a push index it with no scaling.
struct alignas(8) Magazine {
  std::atomic<uint32_t> top{0};  // size() * kReservedBytes
  uint32_t end = 0;              // capacity() * kReservedBytes
  ClassGeometry geom;  // the class's, for the store's header and payload
  // The store's copy for the class's payloads (base/copy.h), which also ends its fast path.
  CopyThenClear copy = nullptr;

  explicit Magazine(uint32_t capacity) : end(capacity * kReservedBytes) {}
  [[nodiscard]] uint32_t capacity() const { return end / kReservedBytes; }
  Reserved* slots() { return reinterpret_cast<Reserved*>(this + 1); }
  // The magazine after this one in its cache.
  Magazine* next() { return reinterpret_cast<Magazine*>(&at(end)); }
  [[nodiscard]] uint32_t top_bytes() const { return top.load(std::memory_order_relaxed); }
  [[nodiscard]] uint32_t size() const { return top_bytes() / kReservedBytes; }
  // The newest slot, with `t` = top_bytes() > 0.
  Reserved pop(uint32_t t) {
    t -= kReservedBytes;
    top.store(t, std::memory_order_relaxed);
    return at(t);
  }
  // False when full (and always for a class that is not cached: capacity 0).
  bool push(unsigned long handle, unsigned long obj) {
    uint32_t t = top_bytes();
    if (ZSM_UNLIKELY(t >= end)) return false;
    // top first: t's only later use is then the entry's address.
    top.store(t + kReservedBytes, std::memory_order_relaxed);
    at(t) = {handle, obj};
    return true;
  }
  // The bytes a magazine of `capacity` slots takes.
  static size_t bytes(uint32_t capacity) {
    return sizeof(Magazine) + size_t{capacity} * sizeof(Reserved);
  }

 private:
  Reserved& at(uint32_t offset) {
    return *reinterpret_cast<Reserved*>(reinterpret_cast<char*>(slots()) + offset);
  }
};

// The pool_key of a cache of no pool: an address no pool has, so that no call matches it,
// not even one with a null pool.
inline constexpr uintptr_t kNoPool = 1;
// Set in the pool_key of every cache of a pool while its caches are blocked
// (ZsPool::fast.caches_blocked > 0), so that the fast path's one compare of key and pool also
// refuses a blocked cache. Pools are aligned to more than this bit.
inline constexpr uintptr_t kBlockedKey = 2;

// One thread's cache for one pool: a magazine per distinct class (ClassShard::magazine_offset).
struct ThreadCache {
  // The pool's address, with kBlockedKey set while the pool's caches are blocked (written
  // under the registry lock); kNoPool once detached (the pool was destroyed), and in a cache
  // of no pool.
  std::atomic<uintptr_t> pool_key{kNoPool};
  std::atomic<uint32_t> in_fast{0};    // the owner is inside its fast path
  ListLinks<ThreadCache> links;        // on its pool's list of caches (registry lock)
  const void* owner = nullptr;         // the owning thread's list of caches (ThreadCaches)
  // The owner vanished: the cache was inherited by a child of fork() from a thread that the
  // child does not have. The pool's next drain takes its slots and frees it (registry lock).
  bool orphaned = false;
  size_t bytes = 0;                    // this allocation, magazines and handle arrays included
  uint32_t nr_magazines = 0;
  ListLinks<ThreadCache>& list_links() { return links; }
  // The magazines follow the struct in the same allocation, each with its handles.
  Magazine* first_magazine() { return reinterpret_cast<Magazine*>(this + 1); }
  // The magazine `offset` bytes from the cache (ClassShard::magazine_offset): a byte offset, so
  // that finding it takes no multiplication.
  Magazine& magazine_at(uint32_t offset) {
    return *reinterpret_cast<Magazine*>(reinterpret_cast<char*>(this) + offset);
  }
  // This cache belongs to `pool`, blocked or not (a null pool, or one without caches, has
  // none).
  [[nodiscard]] bool belongs_to(const ZsPool* p) const {
    return (pool_key.load(std::memory_order_relaxed) & ~kBlockedKey) ==
           reinterpret_cast<uintptr_t>(p);
  }
  // The pool, or nullptr when detached.
  [[nodiscard]] ZsPool* pool() const {
    uintptr_t key = pool_key.load(std::memory_order_relaxed);
    return key == kNoPool ? nullptr : reinterpret_cast<ZsPool*>(key & ~kBlockedKey);
  }
};
static_assert(sizeof(ThreadCache) % alignof(Magazine) == 0);

// The cache this thread used last; a cache of no pool until then.
extern ZSM_INITIAL_EXEC_TLS constinit thread_local ThreadCache* current_cache;

// Caches of no pool. The fast path writes the in_fast flag of current_cache before it
// compares the key, so a thread's calls on pools without caches must write a cache of its
// own: current_cache starts as the one cache of no pool that all threads share (a
// thread_local's address is no constant), and a call that finds no cache to use names the
// thread's own from then on (name_own_no_cache()).
extern ThreadCache first_no_cache;
extern ZSM_INITIAL_EXEC_TLS constinit thread_local ThreadCache own_no_cache;
inline void name_own_no_cache() {
  if (ZSM_UNLIKELY(current_cache == &first_no_cache)) current_cache = &own_no_cache;
}

// The owner's half of the handshake (see the top of this file).
inline void enter_order_barrier() {
#if ZSM_TSAN
  std::atomic_thread_fence(std::memory_order_seq_cst);
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}
inline constexpr std::memory_order kOwnerOrder =
    ZSM_TSAN ? std::memory_order_seq_cst : std::memory_order_relaxed;

inline void leave_fast_path(ThreadCache* tc) { tc->in_fast.store(0, std::memory_order_release); }

// Enters the owner's fast path in `tc` when it is the cache of `pool` and the pool's caches
// are not blocked; otherwise false, and not entered. Reads nothing of the pool, so `pool`
// may be null or a pool without caches (no key matches those). Acquire: what a drainer did
// to the magazines comes before its unblocking key.
ZSM_ALWAYS_INLINE bool enter_fast_path(const ZsPool* pool, ThreadCache* tc) {
  tc->in_fast.store(1, kOwnerOrder);
  enter_order_barrier();
  if (ZSM_LIKELY(tc->pool_key.load(ZSM_TSAN ? std::memory_order_seq_cst
                                            : std::memory_order_acquire) ==
                 reinterpret_cast<uintptr_t>(pool)))
    return true;
  leave_fast_path(tc);
  return false;
}

// This thread's caches by pool (ZsPool::fast.cache_slot): the table that ThreadCaches
// (thread_cache.cpp) keeps, named from the thread pointer so that a call on another pool
// finds its cache without a function call. Empty while the thread exits.
struct CacheTable {
  ThreadCache* const* by_slot = nullptr;
  uint32_t size = 0;
};
extern ZSM_INITIAL_EXEC_TLS constinit thread_local CacheTable cache_table;

// Makes and registers this thread's cache for the pool (its first cached call there) and
// makes it current_cache; nullptr when the thread is exiting or memory is short (the call
// then takes the locked path).
ZSM_COLD_PATH ThreadCache* add_thread_cache(ZsPool* pool);

// A call on a pool that is not the one the thread used last: the thread's cache for it
// becomes current_cache, looked up in the table or made.
inline ThreadCache* switch_thread_cache(ZsPool* pool) {
  const uint32_t slot = pool->fast.cache_slot;
  ThreadCache* tc = slot < cache_table.size ? cache_table.by_slot[slot] : nullptr;
  if (ZSM_UNLIKELY(tc == nullptr || !tc->belongs_to(pool))) return add_thread_cache(pool);
  current_cache = tc;
  return tc;
}

// The magazine of the class that serves a request of `bytes` (header included).
inline Magazine& magazine_for(const ZsPool* pool, ThreadCache* tc, size_t bytes) {
  return tc->magazine_at(
      pool->fast.magazine_by_granule[(bytes + (1u << kGranuleShift) - 1) >> kGranuleShift]);
}

// --- the pool's side (thread_cache.cpp) -------------------------------------------------------

// Sets the pool's magazine map and the bound of what one thread reserves (pool creation).
bool init_thread_caches(ZsPool* pool);
// Blocks the pool's caches, waits for every owner to leave its fast path, and frees every
// reserved slot; the caches stay blocked until unblock_thread_caches(). Takes the registry
// lock: call without it. Returns the pages
// those frees released. Call with no shard lock held (it frees with them).
unsigned long block_and_drain_thread_caches(ZsPool* pool);
void unblock_thread_caches(ZsPool* pool);
// Both: afterwards the pool's figures count no reserved slot (until the next free).
void drain_thread_caches(ZsPool* pool);
// zs_create_pool(): enters the pool in the process-wide registry (false: no memory), which
// fork() handling walks (tcache/fork.cpp).
bool register_pool(ZsPool* pool);
// zs_destroy_pool(): detaches every thread's cache from the pool and takes it out of the
// registry; then waits until no exiting thread is freeing slots into it.
void unregister_pool(ZsPool* pool);
void wait_for_exiting_threads(const ZsPool* pool);
// What the caches of the pool reserve now, and what they take themselves.
struct ThreadCacheFigures {
  unsigned long objs = 0;
  unsigned long bytes = 0;
  size_t own_bytes = 0;
};
ThreadCacheFigures thread_cache_figures(const ZsPool* pool);

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
