// The pool's data structures: ZsPool, ClassShard, ZsPage and handle cells. The layout, the
// encodings and the lock order are explained at the top of pool/object_api.cpp; this header
// holds the types only (the helpers that work on them are in zspage.h and obj.h). Below it:
// classes/ (the class table), memory/ (pool metadata, page sources) and base/.
#pragma once

#include <zsm/zsmalloc.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/compiler.h"
#include "base/list.h"
#include "base/lock.h"
#include "classes/size_class.h"
#include "memory/metadata.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

class VmSource;
struct ClassShard;
struct ThreadCache;
struct ZsPool;

// enum fullness_group: 0 = empty, 1..10 = 0-9%, 10-19% .. 90-99% in use, 11 = full.
inline constexpr int ZS_INUSE_RATIO_0 = 0;
inline constexpr int ZS_INUSE_RATIO_10 = 1;
inline constexpr int ZS_INUSE_RATIO_99 = 10;
inline constexpr int ZS_INUSE_RATIO_100 = 11;
inline constexpr int NR_FULLNESS_GROUPS = 12;
static_assert(NR_FULLNESS_GROUPS == ZS_NR_FULLNESS_GROUPS);

// enum class_stat_type: 0..11 count zspages per fullness group, then objects.
inline constexpr int ZS_OBJS_ALLOCATED = NR_FULLNESS_GROUPS;
inline constexpr int ZS_OBJS_INUSE = NR_FULLNESS_GROUPS + 1;
inline constexpr int NR_CLASS_STAT_TYPES = NR_FULLNESS_GROUPS + 2;

using HandleCell = std::atomic<unsigned long>;

// Metadata of one zspage. Type-stable: once carved from a metadata chunk it stays a ZsPage
// until the pool dies, so a thread holding a stale pointer may still read `shard` and touch
// `lock` (pool/lookups.h, "Finding an object's shard without a pool lock").
struct ZsPage {
  ListLinks<ZsPage> links;            // on its shard's fullness list (shard lock)
  std::atomic<ClassShard*> shard;     // owning shard; nullptr while free (written under its lock)
  ZspageLock lock;                    // readers vs. compaction
  uint32_t inuse;                     // live objects (shard lock)
  uint32_t freeobj;                   // index of the first free object (shard lock)
  uint8_t fullness;                   // fullness group while listed; a hot zspage's floor
  uint8_t nr_pages;                   // size of the pages[] that follows
  // Size - 1 of the last object stored in the zspage: in the huge class, which has no
  // header, the size of its one object. Written for every store, as cheaper than a branch.
  uint16_t huge_size_m1;
  // Its class's ClassShard::magazine_offset (set with `shard`), so that a free into a thread's
  // cache finds the magazine in the zspage it reads anyway, not in the shard.
  uint32_t magazine_offset;
  // How its pages were had (kPages* below): set with them, read without a lock (stable for
  // the zspage's life).
  uint8_t layout;
  // char* pages[nr_pages] follows the struct.

  ListLinks<ZsPage>& list_links() { return links; }
  [[nodiscard]] char** pages() { return reinterpret_cast<char**>(this + 1); }
  [[nodiscard]] char* const* pages() const { return reinterpret_cast<char* const*>(this + 1); }
};
static_assert(sizeof(ZsPage) % alignof(char*) == 0);

// ZsPage::layout. kPagesContiguous: pages()[k] == pages()[0] + k * page size, so the zspage's
// bytes are one range and no object in it needs a split copy (the cached store relies on it,
// pool/cached_path.h). kPagesOneRun: the pages are one run of the pool's run source
// (ZsPool::source.runs), which takes them back whole.
inline constexpr uint8_t kPagesContiguous = 1;
inline constexpr uint8_t kPagesOneRun = 2;

// What the object helpers need to know of a class. They take it by value, so the compiler
// keeps it in registers across the stores they make (a store through a uint32_t* could
// otherwise be the class's own fields, and force them to be read again).
struct ClassGeometry {
  uint32_t size = 0;                  // slot size, header included
  uint32_t page_shift = 0;
  uint32_t page_mask = 0;             // page size - 1
  uint32_t payload_offset = 0;        // kHandleSize; 0 for the huge class (no header)
  [[nodiscard]] size_t page_size() const { return size_t{page_mask} + 1; }
};

// One lock shard of a size class. A class has shard_mask + 1 of them, side by side in
// ZsPool::classes.class_shards; each holds its own zspages, lists, statistics and cell stock, so
// threads on different shards never share a lock or a zspage. With one shard per class, a
// ClassShard is the kernel's struct size_class.
struct alignas(64) ClassShard {
  Mutex lock;
  // Immutable after pool creation.
  ClassGeometry geom;
  uint32_t objs_per_zspage = 0;
  uint32_t pages_per_zspage = 0;
  uint32_t index = 0;                 // the class's index (zs_lookup_class_index)
  uint32_t shard_index = 0;           // which of the class's shards, 0 .. shard_mask
  uint32_t magazine_offset = 0;       // bytes from a thread cache to the class's magazine
                                      // (ThreadCache::magazine_at())
  uint32_t magazine_capacity = 0;     // handles that magazine holds; 0: not cached
  // The inuse range of each fullness group, so that fix_fullness_group() can tell with two
  // compares that a zspage stays in its group (groups no inuse value maps to: lo > hi).
  uint32_t fullness_lo[NR_FULLNESS_GROUPS] = {};
  uint32_t fullness_hi[NR_FULLNESS_GROUPS] = {};
  // The group of a zspage one object short of full: the floor of a hot zspage made by a
  // free (zspage.h, "Lazy fullness").
  uint32_t almost_full_group = 0;
  // Under `lock`.
  uint16_t nonempty ZSM_GUARDED_BY(lock) = 0;  // bit g set: fullness_list[g] is not empty
  // The hot zspage (zspage.h, "Lazy fullness"); nullptr when there is none.
  ZsPage* hot ZSM_GUARDED_BY(lock) = nullptr;
  // Zspages by fullness group, newest first. Full zspages (group 100 %) are on no list: no
  // allocation or compaction looks for them. stats[ZS_INUSE_RATIO_100] still counts them.
  IntrusiveList<ZsPage> fullness_list[ZS_INUSE_RATIO_100] ZSM_GUARDED_BY(lock);
  unsigned long stats[NR_CLASS_STAT_TYPES] ZSM_GUARDED_BY(lock) = {};
  // Free handle cells kept by the shard for its stores, linked through the cells
  // (zspage.h, "The cell stock").
  HandleCell* cell_stock ZSM_GUARDED_BY(lock) = nullptr;
  uint32_t nr_stocked_cells ZSM_GUARDED_BY(lock) = 0;
  // Allocation profiling (pool/profile.h): objects and bytes counted in this shard. A free may
  // land in another shard of the class than its store did (compaction moves objects between
  // shards), so one shard's figures may wrap below zero; the class's sum is exact.
  unsigned long prof_objs ZSM_GUARDED_BY(lock) = 0;
  unsigned long prof_bytes ZSM_GUARDED_BY(lock) = 0;
  // Lock statistics (zs_pool_stats), written under `lock`, read without it: acquisitions
  // that found the lock held and waited, and stores that moved into this shard from a busy
  // one. Atomics, so that a reader races with no one; a store of load + 1, never a locked
  // read-modify-write.
  std::atomic<unsigned long> lock_waits{0};
  std::atomic<unsigned long> moves_in{0};
};

// The pool metadata of one shard: handle cells and zspage metadata (one arena per chain
// length). Blocks go back to the shard that handed them out (a cell to its object's shard,
// metadata to its zspage's), so blocks of different shards never share a cache line.
struct alignas(64) ShardArenas {
  Mutex lock;
  MetadataArena* cells ZSM_GUARDED_BY(lock) = nullptr;
  MetadataArena* meta[kMaxChain + 1] ZSM_GUARDED_BY(lock) = {};
};

inline constexpr unsigned kGranuleShift = 4;  // PoolFastLine::first_shard_by_granule: 16 bytes

// ZsPool's fields, in groups by the layer or part that writes them (each group's comment
// names it; readers are everywhere). Once zs_create_pool() has returned, the object paths
// write only PoolPages.

// What every store and free reads, in one cache line (a thread that switches pools on every
// call, as one pool per tenant does, then takes one miss here, not three). Set by
// zs_create_pool() (pool/create.cpp), but for the fields tcache/ writes.
struct alignas(64) PoolFastLine {
  // first_shard[] by 16-byte granule of the request (header included): entry g serves
  // requests of 16g - 15 .. 16g bytes. Class boundaries fall on multiples of 16 at every
  // page size, so a shift and a load find the class with no division and no clamp.
  ClassShard** first_shard_by_granule = nullptr;  // page_size / 16 + 2 entries
  // Entry g: its first shard's magazine_offset. Shared by the pools of one geometry
  // (tcache/thread_cache.cpp), so not the pool's own to free.
  const uint32_t* magazine_by_granule = nullptr;
  // What a store's size - 1 must be below to take the fast path: page_size in a default
  // pool; 0 in a hardened one, so that its stores take the path that tags handles.
  uint32_t store_size_limit = 0;
  uint32_t shard_mask = 0;                       // shards per class - 1
  // Per-thread caches (tcache/thread_cache.h). Off in hardened pools and with
  // ZS_POOL_NO_THREAD_CACHE.
  // > 0: stores and frees take the locked path (tcache/: changed under the registry lock,
  // with every cache's key, tcache/thread_cache.h)
  std::atomic<uint32_t> caches_blocked{0};
  uint32_t cache_slot = 0;                       // this pool's entry in each thread's table of
                                                 // caches (tcache/thread_cache.cpp, ThreadCaches)
  bool hardened = false;                         // ZS_POOL_HARDENED
  bool thread_caches = false;
};
static_assert(alignof(PoolFastLine) == 64 && sizeof(PoolFastLine) == 64,
              "what stores and frees read lies in one cache line");
static_assert(offsetof(PoolFastLine, thread_caches) + sizeof(bool) <= 64);

// The classes and their shards: built by zs_create_pool() (pool/create.cpp), read-only after.
struct PoolClasses {
  ClassTable table;
  // By class index, merged indices sharing a class: shard 0 of the class (shard s is at
  // first_shard[i] + s). The kernel's pool->size_class[].
  ClassShard* first_shard[kMaxClassIndices] = {};
  ClassShard* class_shards = nullptr;            // distinct classes x shards, class-major
  uint32_t nr_class_shards = 0;                  // distinct classes x shards per class
  uint32_t page_size = 0;
};

// What tells the pool apart: set by zs_create_pool(), read by reports and hardened handles.
struct PoolIdentity {
  std::string name;
  unsigned long handle_tag = 0;                  // hardened: the generation in handles' top bits
};

// Where the pool's pages come from: set by zs_create_pool(), called by zspage/zspage.cpp
// under `lock`.
struct PoolPageSource {
  Mutex lock;                                    // serialises calls into `ops`
  zs_page_source ops = {};
  VmSource* own = nullptr;                       // the default source, when the pool made it
  // The source as a VmSource, when it is one (the default, or a zs_vm_source): each zspage
  // then takes its pages as one run (contiguous).
  VmSource* runs = nullptr;
};

// The pool's pages, counted: charged against `limit` by zspage/zspage.cpp; the zspages on
// their way in, by the locked path (pool/locked_path.h); both recounted by fork() handling
// (tcache/fork.cpp).
struct PoolPages {
  unsigned long limit = 0;                       // 0 = none (zs_pool_config::max_pages)
  std::atomic<unsigned long> allocated{0};
  // Threads between charging pages for a new zspage and listing it (alloc_zspage() ..
  // make_new_zspage_hot(), pool/locked_path.h): a child forked while one is there recounts
  // the pool's pages.
  std::atomic<uint32_t> zspages_being_added{0};
};

// Compaction's state and figure (pool/compact.cpp).
struct PoolCompaction {
  std::atomic<bool> in_progress{false};
  std::atomic<unsigned long> pages_compacted{0};
};

// The pool metadata (memory/metadata.h): handle cells and zspage metadata, made by
// zs_create_pool(), handed out and taken back by zspage/.
struct PoolMetadata {
  CellRegion cells;                              // where every handle cell lies
  ShardArenas* arenas = nullptr;                 // one per shard (PoolFastLine::shard_mask + 1)
};

// The per-thread caches' bookkeeping (tcache/thread_cache.cpp), but for free_reserved_slot.
struct PoolThreadCaches {
  uint32_t nr_magazines = 0;                     // distinct classes
  size_t thread_cache_size = 0;                  // a ThreadCache with its magazines, in bytes
  size_t cache_bytes_per_thread = 0;             // the most one thread's cache reserves
  IntrusiveList<ThreadCache> caches;             // every thread's cache of the pool (registry lock)
  // Frees a slot a thread's cache reserved, with the shard's lock (set by zs_create_pool():
  // the object paths above the caches do the freeing).
  void (*free_reserved_slot)(ZsPool* pool, unsigned long handle) = nullptr;
  // Batches of reserved slots that exiting threads are freeing (tcache/thread_cache.cpp,
  // give_back()); zs_destroy_pool() waits until there are none.
  std::atomic<uint32_t> exit_frees_in_flight{0};
};

// The pool's place in the process-wide registry of pools (tcache/registry.h), which fork()
// handling walks. Written by tcache/thread_cache.cpp under the registry lock.
struct PoolRegistration {
  ListLinks<ZsPool> links;
  bool registered = false;
};

struct ZsPool {
  PoolFastLine fast;                             // pool/create.cpp and tcache/, field by field
  PoolClasses classes;                           // pool/create.cpp
  PoolIdentity id;                               // pool/create.cpp
  PoolPageSource source;                         // pool/create.cpp; called by zspage/
  PoolPages pages;                               // zspage/, pool/locked_path.h, tcache/fork.cpp
  PoolCompaction compaction;                     // pool/compact.cpp, tcache/fork.cpp
  PoolMetadata metadata;                         // pool/create.cpp; the arenas serve zspage/
  PoolThreadCaches tcache;                       // tcache/
  PoolRegistration registry;                     // tcache/ (registry lock)

  ListLinks<ZsPool>& list_links() { return registry.links; }
};

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
