// Per-thread caches off the fast path (design: thread_cache.h): making and registering a
// thread's cache, giving it back when the thread exits, the heavy half of the handshake, and
// draining every cache of a pool for compaction, statistics, the memory limit and teardown.
#include "thread_cache.h"

#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <type_traits>
#include <vector>

#include "lock.h"
#include "pool.h"
#include "report.h"
#include "zspage.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

namespace {

// A cache of no pool: what current_cache names until a thread's first cached call, and
// again once the thread's caches are gone. Never written (its pool never matches).
ThreadCache no_cache;

// Guards every pool's list of caches and the caches' `pool` fields against a thread
// exiting, a pool being destroyed and a drain, which may happen at once. Taken off the
// fast path only, never under a shard lock (a drain takes shard locks under it).
Mutex registry_lock;

// --- the heavy barrier ----------------------------------------------------------------------

#if !ZSM_TSAN  // under TSan the barrier is a fence (see heavy_barrier())
long membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

// mprotect() on a page of our own, which makes the kernel interrupt every CPU that may hold
// a translation of it: the stand-in for membarrier where that is refused.
void mprotect_barrier() {
  static Mutex lock;
  static char* page = [] {
    void* p = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }();
  if (page == nullptr) report_fatal("thread caches: no page for the mprotect() barrier");
  MutexGuard guard(lock);
  if (mprotect(page, 4096, PROT_READ | PROT_WRITE) != 0)
    report_fatal("thread caches: mprotect() failed");
  *static_cast<volatile char*>(page) = 0;  // make it present, so that narrowing it shoots down
  if (mprotect(page, 4096, PROT_READ) != 0) report_fatal("thread caches: mprotect() failed");
}
#endif

// A full memory barrier on every CPU running a thread of this process.
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

// --- one cache ------------------------------------------------------------------------------

// Makes a cache for the pool, its magazines in one allocation, where init_thread_caches()
// placed them.
ThreadCache* make_cache(ZsPool* pool) {
  void* mem = std::malloc(pool->thread_cache_size);
  if (mem == nullptr) return nullptr;
  auto* tc = new (mem) ThreadCache;
  tc->bytes = pool->thread_cache_size;
  tc->nr_magazines = pool->nr_magazines;
  for (uint32_t c = 0; c < pool->nr_class_shards; c += pool->shard_mask + 1) {
    const ClassShard& cls = pool->class_shards[c];
    auto* m = new (&tc->magazine_at(cls.magazine)) Magazine;
    m->capacity = cls.magazine_capacity;
    m->geom = cls.geom;
  }
  tc->pool_key.store(reinterpret_cast<uintptr_t>(pool), std::memory_order_relaxed);
  return tc;
}

void destroy_cache(ThreadCache* tc) {
  static_assert(std::is_trivially_destructible_v<Magazine>);
  tc->~ThreadCache();
  std::free(tc);
}

void link_cache(ZsPool* pool, ThreadCache* tc) ZSM_REQUIRES(registry_lock) {
  tc->next = pool->caches;
  if (pool->caches != nullptr) pool->caches->prev = tc;
  pool->caches = tc;
}

void unlink_cache(ZsPool* pool, ThreadCache* tc) ZSM_REQUIRES(registry_lock) {
  if (tc->prev != nullptr)
    tc->prev->next = tc->next;
  else
    pool->caches = tc->next;
  if (tc->next != nullptr) tc->next->prev = tc->prev;
  tc->prev = tc->next = nullptr;
}

// Frees every slot the cache reserves. The owner is outside its fast path and cannot enter
// it (it is the caller, or the pool's caches are blocked).
void free_reserved_slots(ZsPool* pool, ThreadCache* tc) {
  Magazine* m = tc->first_magazine();
  for (uint32_t i = 0; i < tc->nr_magazines; i++, m = m->next())
    while (uint32_t n = m->size()) free_reserved(pool, m->pop(n));
}

// --- a thread's caches ----------------------------------------------------------------------

// The caches this thread has made, one per pool it used; given back when the thread exits.
// Only the owner touches the list; the registry lock guards what pools see of its caches.
class ThreadCaches {
 public:
  ThreadCache* find(const ZsPool* pool) {
    prune_detached();
    for (ThreadCache* tc : caches_)
      if (tc->serves(pool)) return tc;
    return nullptr;
  }

  ThreadCache* add(ZsPool* pool) {
    try {
      caches_.reserve(caches_.size() + 1);
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
    ThreadCache* tc = make_cache(pool);
    if (tc == nullptr) return nullptr;
    MutexGuard guard(registry_lock);
    link_cache(pool, tc);
    caches_.push_back(tc);
    return tc;
  }

  ~ThreadCaches() {
    exiting = true;
    current_cache = &no_cache;
    MutexGuard guard(registry_lock);
    for (ThreadCache* tc : caches_) {
      if (ZsPool* pool = tc->pool()) {
        free_reserved_slots(pool, tc);
        unlink_cache(pool, tc);
      }
      destroy_cache(tc);
    }
  }

  // Set once the thread's caches are being given back: later calls on this thread (from
  // other thread_local destructors) take the locked path.
  static inline thread_local bool exiting = false;

 private:
  // Frees the caches whose pools were destroyed (detached: in no pool's list).
  void prune_detached() {
    std::erase_if(caches_, [](ThreadCache* tc) {
      if (tc->pool() != nullptr) return false;
      if (current_cache == tc) current_cache = &no_cache;
      destroy_cache(tc);
      return true;
    });
  }

  std::vector<ThreadCache*> caches_;
};

thread_local ThreadCaches thread_caches;

// Waits until the owner of `tc` is outside its fast path; the pool's caches are blocked,
// so it cannot come back in.
void wait_for_owner(const ThreadCache* tc) {
  Backoff backoff;
  while (tc->in_fast.load(std::memory_order_seq_cst) != 0) backoff.pause();
}

// How many handles a magazine of the class holds (thread_cache.h, "Bounds").
uint32_t magazine_capacity(const ClassShard& cls) {
  if (is_huge(cls.geom) || cls.geom.size > kMagazineBytes) return 0;
  return std::min(kMaxMagazine, kMagazineBytes / cls.geom.size);
}

}  // namespace

constinit thread_local ThreadCache* current_cache = &no_cache;

ThreadCache* adopt_thread_cache(ZsPool* pool) {
  if (ThreadCaches::exiting) return nullptr;
  ThreadCache* tc = thread_caches.find(pool);
  if (tc == nullptr) tc = thread_caches.add(pool);
  if (tc != nullptr) current_cache = tc;
  return tc;
}

bool init_thread_caches(ZsPool* pool) {
  const uint32_t nr_shards = pool->shard_mask + 1;
  pool->nr_magazines = pool->nr_class_shards / nr_shards;
  pool->cache_bytes_per_thread = 0;
  pool->thread_cache_size = sizeof(ThreadCache);
  for (uint32_t c = 0; c < pool->nr_class_shards; c++) {
    ClassShard& cls = pool->class_shards[c];
    cls.magazine_capacity = magazine_capacity(cls);
    if (cls.shard != 0) {  // the class's magazine is its first shard's
      cls.magazine = pool->class_shards[c - cls.shard].magazine;
      continue;
    }
    cls.magazine = static_cast<uint32_t>(pool->thread_cache_size);
    pool->thread_cache_size += Magazine::bytes(cls.magazine_capacity);
    pool->cache_bytes_per_thread += size_t{cls.magazine_capacity} * cls.geom.size;
  }
  size_t granules = (pool->page_size >> kGranuleShift) + 2;
  pool->magazine_by_granule = new (std::nothrow) uint32_t[granules];
  if (pool->magazine_by_granule == nullptr) return false;
  for (size_t g = 0; g < granules; g++)
    pool->magazine_by_granule[g] = pool->first_shard_by_granule[g]->magazine;
  return true;
}

unsigned long block_and_drain_thread_caches(ZsPool* pool) {
  pool->caches_blocked.fetch_add(1, std::memory_order_seq_cst);
  if (!pool->thread_caches) return 0;
  heavy_barrier();
  unsigned long freed_before = pages_freed_by_this_thread();
  MutexGuard guard(registry_lock);
  for (ThreadCache* tc = pool->caches; tc != nullptr; tc = tc->next) {
    wait_for_owner(tc);
    free_reserved_slots(pool, tc);
  }
  return pages_freed_by_this_thread() - freed_before;
}

void unblock_thread_caches(ZsPool* pool) {
  pool->caches_blocked.fetch_sub(1, std::memory_order_seq_cst);
}

void drain_thread_caches(ZsPool* pool) {
  block_and_drain_thread_caches(pool);
  unblock_thread_caches(pool);
}

void zs_drain_thread_caches(ZsPool* pool) {
  if (pool != nullptr) drain_thread_caches(pool);
}

void detach_thread_caches(ZsPool* pool) {
  MutexGuard guard(registry_lock);
  while (ThreadCache* tc = pool->caches) {
    unlink_cache(pool, tc);
    tc->pool_key.store(kNoPool, std::memory_order_relaxed);
  }
}

ThreadCacheFigures thread_cache_figures(const ZsPool* pool) {
  ThreadCacheFigures figures;
  MutexGuard guard(registry_lock);
  for (const ThreadCache* tc = pool->caches; tc != nullptr; tc = tc->next) {
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
