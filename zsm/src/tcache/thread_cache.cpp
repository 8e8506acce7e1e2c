// Per-thread caches off the fast path (design: thread_cache.h): making and registering a
// thread's cache, giving it back when the thread exits, the heavy half of the handshake, and
// draining every cache of a pool for compaction, statistics, the memory limit and teardown.
// fork() handling is in fork.cpp.
#include "tcache/thread_cache.h"

#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <type_traits>
#include <vector>

#include "base/lock.h"
#include "tcache/registry.h"
#include "zspage/report.h"
#include "zspage/shard_placement.h"
#include "zspage/zspage.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

Mutex registry_lock;
constinit IntrusiveList<ZsPool> all_pools;
Mutex barrier_lock;

namespace {

// Cache slots (ZsPool::fast.cache_slot): those of destroyed pools, reused newest first, and the
// next never used. Room for every slot is reserved when the slot is first handed out, so
// that giving one back never allocates. Made on first use, so that a pool made by another
// library's static constructor (the preload library's, say) finds it; never destroyed: a pool
// may outlive static destruction. Guarded by registry_lock.
std::vector<uint32_t>& free_slots() {
  static auto* const slots = new std::vector<uint32_t>;
  return *slots;
}
uint32_t next_slot ZSM_GUARDED_BY(registry_lock) = 0;

// Magazine maps (ZsPool::fast.magazine_by_granule), one per distinct class table: pools of one
// geometry share theirs, so that a thread storing round-robin into many pools reads one
// map, not a page of its own per pool. There are at most as many as the geometries the
// process has made pools of; never freed, as a pool may outlive static destruction.
struct MagazineMap {
  const MagazineMap* next;
  size_t granules;
  uint32_t* offsets;
};
const MagazineMap* magazine_maps ZSM_GUARDED_BY(registry_lock) = nullptr;

// --- one cache ------------------------------------------------------------------------------

// Makes a cache for the pool, its magazines in one allocation, where init_thread_caches()
// placed them.
ThreadCache* make_cache(ZsPool* pool) {
  void* mem = std::malloc(pool->tcache.thread_cache_size);
  if (mem == nullptr) return nullptr;
  auto* tc = new (mem) ThreadCache;
  tc->bytes = pool->tcache.thread_cache_size;
  tc->nr_magazines = pool->tcache.nr_magazines;
  for (uint32_t c = 0; c < pool->classes.nr_class_shards; c += pool->fast.shard_mask + 1) {
    const ClassShard& shard = pool->classes.class_shards[c];
    auto* m = new (&tc->magazine_at(shard.magazine_offset)) Magazine(shard.magazine_capacity);
    m->geom = shard.geom;
    m->copy = copy_payload_for_class(obj_capacity(&shard));
  }
  return tc;  // keyed once in the pool's list (key_caches())
}

void destroy_cache(ThreadCache* tc) {
  static_assert(std::is_trivially_destructible_v<Magazine>);
  tc->~ThreadCache();
  std::free(tc);
}

// Handles a drain takes out of caches under the registry lock, to free once it has dropped
// the lock: no page source is called with a process-wide lock held (zsmalloc.h, "struct
// zs_page_source").
constexpr uint32_t kDrainBatch = 256;

// Moves up to `room` of the cache's reserved handles to `out`; returns how many. Fewer than
// `room`: the cache is empty. The owner is outside its fast path and cannot enter it.
uint32_t take_handles(ThreadCache* tc, unsigned long* out, uint32_t room)
    ZSM_REQUIRES(registry_lock) {
  uint32_t taken = 0;
  Magazine* m = tc->first_magazine();
  for (uint32_t i = 0; i < tc->nr_magazines && taken < room; i++, m = m->next())
    while (taken < room && m->top_bytes() != 0) out[taken++] = m->pop(m->top_bytes()).handle;
  return taken;
}

void free_handles(ZsPool* pool, const unsigned long* handles, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) pool->tcache.free_reserved_slot(pool, handles[i]);
}

// A drain has taken an orphaned cache's slots (see ThreadCache::orphaned): nothing else will.
void release_if_orphaned(ZsPool* pool, ThreadCache* tc) ZSM_REQUIRES(registry_lock) {
  if (!tc->orphaned) return;
  pool->tcache.caches.remove(tc);
  destroy_cache(tc);
}

// Takes up to kDrainBatch handles out of the pool's caches, whose owners it waits for (the
// caches are blocked); frees the orphaned caches it leaves empty. Returns how many.
uint32_t take_reserved(ZsPool* pool, unsigned long* batch) ZSM_REQUIRES(registry_lock) {
  uint32_t taken = 0;
  for (ThreadCache* tc : pool->tcache.caches) {  // release_if_orphaned() may free tc
    if (taken == kDrainBatch) break;
    wait_for_owner(tc);
    taken += take_handles(tc, batch + taken, kDrainBatch - taken);
    if (taken < kDrainBatch) release_if_orphaned(pool, tc);
  }
  return taken;
}

// The exiting owner's cache `tc` gives its slots back to its pool, if it still has one, a
// batch at a time, freed with the registry unlocked; zs_destroy_pool() waits for a batch in
// flight (ZsPool::tcache.exit_frees_in_flight). Then the cache leaves the pool's list.
void give_back(ThreadCache* tc) {
  unsigned long batch[kDrainBatch];
  for (;;) {
    ZsPool* pool;
    uint32_t n;
    {
      MutexGuard guard(registry_lock);
      pool = tc->pool();
      if (pool == nullptr) return;
      n = take_handles(tc, batch, kDrainBatch);
      if (n == 0) {
        pool->tcache.caches.remove(tc);
        return;
      }
      pool->tcache.exit_frees_in_flight.fetch_add(1, std::memory_order_relaxed);
    }
    free_handles(pool, batch, n);
    pool->tcache.exit_frees_in_flight.fetch_sub(1, std::memory_order_release);
  }
}

// --- a thread's caches ----------------------------------------------------------------------

// The caches this thread has made, one per pool it used, by the pool's cache slot
// (ZsPool::fast.cache_slot, unique among live pools): finding a pool's cache is one load and a
// compare, however many pools the thread uses (switch_thread_cache() reads the table through
// cache_table). Given back when the thread exits. Only the owner touches the table; the
// registry lock guards what pools see of its caches.
class ThreadCaches {
 public:
  // Called when switch_thread_cache() found none: the slot holds no cache or one detached
  // from a destroyed pool that had the slot before.
  ThreadCache* add(ZsPool* pool) {
    const uint32_t slot = pool->fast.cache_slot;
    try {
      if (slot >= by_slot_.size()) by_slot_.resize(slot + 1, nullptr);
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
    cache_table = {by_slot_.data(), static_cast<uint32_t>(by_slot_.size())};
    prune_detached();
    ThreadCache* tc = make_cache(pool);
    if (tc == nullptr) return nullptr;
    tc->owner = this;
    MutexGuard guard(registry_lock);
    pool->tcache.caches.push_front(tc);
    tc->pool_key.store(pool_key_now(pool), std::memory_order_release);
    by_slot_[slot] = tc;
    return tc;
  }

  ~ThreadCaches() {
    exiting = true;
    current_cache = &own_no_cache;
    cache_table = {};
    for (ThreadCache* tc : by_slot_) {
      if (tc == nullptr) continue;
      give_back(tc);
      destroy_cache(tc);
    }
  }

  // Set once the thread's caches are being given back: later calls on this thread (from
  // other thread_local destructors) take the locked path.
  static inline thread_local bool exiting = false;

 private:
  // Frees the caches whose pools were destroyed (detached: in no pool's list). Once per new
  // cache, so that a thread keeps no more detached caches than it made since.
  void prune_detached() {
    for (ThreadCache*& tc : by_slot_) {
      if (tc == nullptr || tc->pool() != nullptr) continue;
      if (current_cache == tc) current_cache = &own_no_cache;
      destroy_cache(tc);
      tc = nullptr;
    }
  }

  std::vector<ThreadCache*> by_slot_;
};

thread_local ThreadCaches thread_caches;

// How many handles a magazine of the class holds (thread_cache.h, "Bounds").
uint32_t magazine_capacity(const ClassShard& shard) {
  if (is_huge(shard.geom) || shard.geom.size > kMagazineBytes) return 0;
  return std::min(kMaxMagazine, kMagazineBytes / shard.geom.size);
}

}  // namespace

// --- the heavy barrier ----------------------------------------------------------------------

namespace {

#if !ZSM_TSAN  // under TSan the barrier is a fence (see heavy_barrier())
long membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

// mprotect() on a page of our own, which makes the kernel interrupt every CPU that may hold
// a translation of it: the stand-in for membarrier where that is refused.
void mprotect_barrier() {
  static char* page = [] {
    void* p = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }();
  if (page == nullptr) report_fatal("thread caches: no page for the mprotect() barrier");
  MutexGuard guard(barrier_lock);
  if (mprotect(page, 4096, PROT_READ | PROT_WRITE) != 0)
    report_fatal("thread caches: mprotect() failed");
  *static_cast<volatile char*>(page) = 0;  // make it present, so that narrowing it shoots down
  if (mprotect(page, 4096, PROT_READ) != 0) report_fatal("thread caches: mprotect() failed");
}
#endif

}  // namespace

void heavy_barrier() {
#if ZSM_TSAN
  std::atomic_thread_fence(std::memory_order_seq_cst);
#else
  static std::atomic<int> use_membarrier{-1};  // -1: not tried yet
  int use = use_membarrier.load(std::memory_order_relaxed);
  if (use < 0) {
    use = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 ? 1 : 0;
    use_membarrier.store(use, std::memory_order_relaxed);
  }
  if (use == 1 && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  mprotect_barrier();
#endif
}

void wait_for_owner(const ThreadCache* tc) {
  Backoff backoff;
  while (tc->in_fast.load(std::memory_order_seq_cst) != 0) backoff.pause();
}

bool owned_by_this_thread(const ThreadCache* tc) { return tc->owner == &thread_caches; }

// --- the pool's side ------------------------------------------------------------------------

ThreadCache first_no_cache;
constinit thread_local ThreadCache own_no_cache;
constinit thread_local ThreadCache* current_cache = &first_no_cache;
constinit thread_local CacheTable cache_table;

ThreadCache* add_thread_cache(ZsPool* pool) {
  if (ThreadCaches::exiting) return nullptr;
  ThreadCache* tc = thread_caches.add(pool);
  if (tc != nullptr) current_cache = tc;
  return tc;
}

namespace {

// The magazine offset of the class serving each granule, as a map shared by every pool with
// the same one (MagazineMap); nullptr when memory is short.
const uint32_t* shared_magazine_map(const ZsPool* pool) {
  const size_t granules = (pool->classes.page_size >> kGranuleShift) + 2;
  auto offset_of = [pool](size_t g) {
    return pool->fast.first_shard_by_granule[g]->magazine_offset;
  };
  auto matches_pool = [&](const MagazineMap* map) {
    if (map->granules != granules) return false;
    for (size_t g = 0; g < granules; g++)
      if (map->offsets[g] != offset_of(g)) return false;
    return true;
  };
  MutexGuard guard(registry_lock);
  for (const MagazineMap* map = magazine_maps; map != nullptr; map = map->next)
    if (matches_pool(map)) return map->offsets;
  auto* offsets = new (std::nothrow) uint32_t[granules];
  auto* map = offsets != nullptr ? new (std::nothrow) MagazineMap{magazine_maps, granules, offsets}
                                 : nullptr;
  if (map == nullptr) {
    delete[] offsets;
    return nullptr;
  }
  for (size_t g = 0; g < granules; g++) offsets[g] = offset_of(g);
  magazine_maps = map;
  return offsets;
}

}  // namespace

bool init_thread_caches(ZsPool* pool) {
  const uint32_t nr_shards = pool->fast.shard_mask + 1;
  pool->tcache.nr_magazines = pool->classes.nr_class_shards / nr_shards;
  pool->tcache.cache_bytes_per_thread = 0;
  pool->tcache.thread_cache_size = sizeof(ThreadCache);
  for (uint32_t c = 0; c < pool->classes.nr_class_shards; c++) {
    ClassShard& shard = pool->classes.class_shards[c];
    shard.magazine_capacity = magazine_capacity(shard);
    if (shard.shard_index != 0) {  // the class's magazine is its first shard's
      shard.magazine_offset = pool->classes.class_shards[c - shard.shard_index].magazine_offset;
      continue;
    }
    shard.magazine_offset = static_cast<uint32_t>(pool->tcache.thread_cache_size);
    pool->tcache.thread_cache_size += Magazine::bytes(shard.magazine_capacity);
    pool->tcache.cache_bytes_per_thread += size_t{shard.magazine_capacity} * shard.geom.size;
  }
  pool->fast.magazine_by_granule = shared_magazine_map(pool);
  return pool->fast.magazine_by_granule != nullptr;
}

uintptr_t pool_key_now(const ZsPool* pool) {
  uintptr_t key = reinterpret_cast<uintptr_t>(pool);
  return pool->fast.caches_blocked.load(std::memory_order_relaxed) != 0 ? key | kBlockedKey : key;
}

void key_caches(ZsPool* pool) {
  const uintptr_t key = pool_key_now(pool);
  for (ThreadCache* tc : pool->tcache.caches)
    tc->pool_key.store(key, ZSM_TSAN ? std::memory_order_seq_cst : std::memory_order_release);
}

void block_caches(ZsPool* pool) {
  if (pool->fast.caches_blocked.fetch_add(1, std::memory_order_relaxed) == 0) key_caches(pool);
}

void unblock_caches(ZsPool* pool) {
  if (pool->fast.caches_blocked.fetch_sub(1, std::memory_order_relaxed) == 1) key_caches(pool);
}

unsigned long block_and_drain_thread_caches(ZsPool* pool) {
  {
    MutexGuard guard(registry_lock);
    block_caches(pool);
  }
  if (!pool->fast.thread_caches) return 0;
  heavy_barrier();
  unsigned long freed_before = pages_freed_by_this_thread();
  unsigned long batch[kDrainBatch];
  for (;;) {
    uint32_t n;
    {
      MutexGuard guard(registry_lock);
      n = take_reserved(pool, batch);
    }
    if (n == 0) break;
    free_handles(pool, batch, n);
  }
  return pages_freed_by_this_thread() - freed_before;
}

void unblock_thread_caches(ZsPool* pool) {
  MutexGuard guard(registry_lock);
  unblock_caches(pool);
}

void drain_thread_caches(ZsPool* pool) {
  block_and_drain_thread_caches(pool);
  unblock_thread_caches(pool);
}

bool register_pool(ZsPool* pool) {
  static const bool fork_handled = handle_fork();
  if (!fork_handled) return false;
  MutexGuard guard(registry_lock);
  if (!free_slots().empty()) {
    pool->fast.cache_slot = free_slots().back();
    free_slots().pop_back();
  } else {
    try {
      free_slots().reserve(size_t{next_slot} + 1);
    } catch (const std::bad_alloc&) {
      return false;
    }
    pool->fast.cache_slot = next_slot++;
  }
  all_pools.push_front(pool);
  pool->registry.registered = true;
  return true;
}

void unregister_pool(ZsPool* pool) {
  MutexGuard guard(registry_lock);
  while (ThreadCache* tc = pool->tcache.caches.front()) {
    pool->tcache.caches.remove(tc);
    if (tc->orphaned)
      destroy_cache(tc);
    else
      tc->pool_key.store(kNoPool, std::memory_order_relaxed);
  }
  if (pool->registry.registered) {
    all_pools.remove(pool);
    pool->registry.registered = false;
    free_slots().push_back(pool->fast.cache_slot);
  }
}

void wait_for_exiting_threads(const ZsPool* pool) {
  Backoff backoff;
  while (pool->tcache.exit_frees_in_flight.load(std::memory_order_acquire) != 0) backoff.pause();
}

ThreadCacheFigures thread_cache_figures(const ZsPool* pool) {
  ThreadCacheFigures figures;
  MutexGuard guard(registry_lock);
  for (const ThreadCache* tc : pool->tcache.caches) {
    figures.own_bytes += tc->bytes;
    Magazine* m = const_cast<ThreadCache*>(tc)->first_magazine();
    for (uint32_t i = 0; i < tc->nr_magazines; i++, m = m->next()) {
      unsigned long n = m->size();
      figures.objs += n;
      figures.bytes += n * m->geom.size;
    }
  }
  return figures;
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
