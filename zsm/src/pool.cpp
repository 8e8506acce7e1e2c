// The pool: zsmalloc's object store (mm/zsmalloc.c), in userspace.
//
// Vocabulary. A *page* is one page of the pool's page size (4, 16 or 64 KiB), taken from the
// pool's page source. A *zspage* is a chain of 1..chain pages that holds the objects of one
// size *class*. An *object* is one slot of the class size in a zspage. A *handle* is what the
// user holds: the address of an 8-byte *handle cell* that says where the object is now.
//
// Object and handle encoding (helpers in obj.h).
//   handle  = address of a HandleCell (8-aligned, nonzero). It never changes. Every cell of a
//             pool lies in the pool's CellRegion (records.h), one reserved range.
//   obj     = *cell = (address of the ZsPage metadata << 16) | flags | object index.
//             The index (15 bits) is zspage-wide (object i starts at byte i * size of the
//             chain) and covers the largest zspage (16 x 64 KiB / 32 B = 32768 objects); bit
//             15 marks an object allocation profiling counted (profile.h); 48 address bits
//             cover every user-space address. Compaction moves an object by rewriting its
//             cell, so handles stay valid.
//   header  = the first 8 bytes of a live non-huge object: handle | (size - 1) << 48 |
//             OBJ_ALLOCATED_TAG, where size is what the object was allocated with.
//             A free object's first 8 bytes are instead a link: next free index << 1 (tag 0).
//             Huge objects (one per one-page zspage) have no header: the page is all payload,
//             and the zspage's huge_size_m1 holds the size. A huge object never moves (its
//             zspage is full or empty), so nothing needs its handle.
// zspage layout. pages() lists the chain; objects sit back to back over the concatenated
// pages and may span one page boundary. A free object's link fits in its first page, because
// objects start on 16-byte boundaries. Free objects form a LIFO list from `freeobj`.
//
// Fullness. Each class keeps its zspages on 12 lists by fullness group (0 %, 0-9 % .. 90-99 %,
// 100 %), newest first, and a bitmap of the non-empty ones. Allocation takes the head of the
// fullest non-full list. A zspage that a free leaves empty is freed at once, as in the
// kernel, unless it is its class's only empty zspage: that one stays on the 0 % list as a
// spare so that a store/free pair at a zspage boundary does not build and tear down a zspage
// each time. zs_compact() frees the spares.
//
// Shards. Each size class is split into nr_shards lock shards (one per CPU by default), each
// a SizeClass with its own lock, zspages, lists and handle cache. A thread stores into its
// own shard and moves to the next when it finds that one busy, so threads storing into one
// class soon stop sharing a lock; a free locks the shard that owns the object's zspage,
// wherever the freeing thread is. Shards follow threads, not CPUs, because a thread's objects
// live in the shard it stored them in: a thread that stays in its shard frees into it too,
// while a per-CPU choice would scatter a migrating thread's objects over the shards.
// Compaction takes every shard of a class at once. With nr_shards = 1 the pool is the
// kernel's: one lock and one set of lists per class.
//
// Lock order: Pool::compaction_in_progress (flag) -> SizeClass::lock -> ZspageLock (try only)
//             -> Pool::source_lock, ShardArenas::lock -> CellRegion's lock (leaves).
//   SizeClass::lock  fullness lists, free lists, inuse counts, stats, the shard's handle cache.
//                    Store and free take one shard's; compaction takes all shards of one
//                    class, in index order.
//   ZspageLock       held for read by zs_obj_read_begin..end and zs_obj_write, so the object
//                    cannot move; compaction only trylocks it for write before emptying a
//                    zspage, and leaves that zspage alone if a reader is in.
//   There is no pool-wide lock on any store, free, read or write path.
//
// Finding an object's class without a pool lock. The kernel's zs_free takes pool->lock for
// read so that migration cannot move the object between reading the cell and taking the
// class lock. Here ZsPage metadata is type-stable (never unmapped before the pool dies), so a
// free reads cell -> zspage -> cls without any lock, takes that class lock, then reads the
// cell again: if the zspage it names belongs to that class, the object is pinned (only this
// class's lock holder can move or free it). Otherwise it raced with compaction: retry. `cls`
// is only ever set or cleared under the class's own lock, which is what makes the check sound.
// Readers do the same with the zspage read lock instead of the class lock.
//
// Moving an object (compaction) copies it to its new slot, then publishes the new obj in
// the cell with a release store: a reader that sees the new cell sees the copied bytes.
//
// Hardened pools (ZS_POOL_HARDENED). Misuse must be caught before it corrupts anything, at
// the price of a few instructions, so the checks use only what the pool keeps anyway, and
// only in branches a default pool never takes.
//   Handles. A hardened pool's handle is its cell's address with the pool's tag in the top
//   16 bits, which no cell address uses (obj.h): tag = generation << 48, the generation
//   counted per process over hardened pools (1..65535, then round again). A new pool's
//   region often lies where a destroyed one's did, so the address alone cannot tell a live
//   handle from a stale one; the tag can, until 65535 more hardened pools have been created
//   (a stale handle of a pool created exactly k * 65535 pools earlier, whose cell is live at
//   the same address, is taken for the live one). Never reusing a region's address would
//   need no such limit, but each region holds 8 GiB of address space, and tests and fuzzers
//   create tens of thousands of pools. Headers and every internal path hold the cell's
//   address; the tag is stripped where a call is checked and added where a store returns.
//   A handle is checked to be one of the pool's cells once stripped (a range check: a wrong
//   tag leaves top bits set), and its cell to hold an obj: a cell that holds none holds 0
//   (never used) or a free link, which is an address in the region, while an obj is a ZsPage
//   address shifted up by 16, above any address. The check is made on every read of the
//   cell, under the class lock too, so that two threads freeing one handle cannot both pass
//   it. A free also checks the object's header against the cell, and reads and writes are
//   checked against the size in the header. A double free is missed only once the handle
//   has been handed out again. A store reaches the tagging path through the one compare it
//   makes anyway (Pool::store_size_limit), so a default pool's store pays nothing for it.
//   Reads. Each thread records the reads it has in progress (open_reads.h): a read_end must
//   match one, and unlocks the zspage that read locked, with a decrement that refuses a
//   count that is not positive (-1 would read as "a writer holds it"); a free of an
//   object the thread is reading is refused. A free of an object another thread reads cannot
//   be told from a free of its neighbour (the zspage lock counts readers of all its
//   objects), so it goes ahead; that read's end finds the cell changed and reports it, and
//   meanwhile nothing is unlocked wrongly. Missed: the freed slot and cell reused by a new
//   store before the read ends, which leaves the cell as the read found it.
//   Failures go to report.h.
#include "pool.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include "check.h"
#include "obj.h"
#include "open_reads.h"
#include "pool_types.h"
#include "profile.h"
#include "report.h"
#include "vm_source.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

namespace {

constexpr uint32_t kHandleBatch = 64;                   // cells moved between class and pool
constexpr unsigned kMaxShards = 64, kDefaultMaxShards = 16;

static_assert(sizeof(unsigned long) == 8, "handles and obj values need 64-bit longs");

// --- fullness lists -----------------------------------------------------------------------

ZSM_ALWAYS_INLINE void insert_zspage(SizeClass* cls, ZsPage* zspage, int fullness)
    ZSM_REQUIRES(cls->lock) {
  cls->stats[fullness]++;
  zspage->fullness = static_cast<uint8_t>(fullness);
  if (fullness == ZS_INUSE_RATIO_100) return;
  ZsPage* head = cls->fullness_list[fullness];
  zspage->prev = nullptr;
  zspage->next = head;
  if (head != nullptr) head->prev = zspage;
  cls->fullness_list[fullness] = zspage;
  cls->nonempty |= static_cast<uint16_t>(1u << fullness);
}

ZSM_ALWAYS_INLINE void remove_zspage(SizeClass* cls, ZsPage* zspage) ZSM_REQUIRES(cls->lock) {
  int fullness = zspage->fullness;
  cls->stats[fullness]--;
  if (fullness == ZS_INUSE_RATIO_100) return;
  if (zspage->prev != nullptr)
    zspage->prev->next = zspage->next;
  else
    cls->fullness_list[fullness] = zspage->next;
  if (zspage->next != nullptr) zspage->next->prev = zspage->prev;
  if (cls->fullness_list[fullness] == nullptr)
    cls->nonempty &= static_cast<uint16_t>(~(1u << fullness));
}

// Moves the zspage to the group its inuse count calls for; returns that group. Two compares
// tell that it stays where it is, which is the common case.
inline int fix_fullness_group(SizeClass* cls, ZsPage* zspage) ZSM_REQUIRES(cls->lock) {
  int fg = zspage->fullness;
  uint32_t inuse = zspage->inuse;
  if (ZSM_LIKELY(inuse >= cls->fullness_lo[fg] && inuse <= cls->fullness_hi[fg])) return fg;
  remove_zspage(cls, zspage);
  fg = get_fullness_group(cls, zspage);
  insert_zspage(cls, zspage, fg);
  return fg;
}

int putback_zspage(SizeClass* cls, ZsPage* zspage) ZSM_REQUIRES(cls->lock) {
  int fg = get_fullness_group(cls, zspage);
  insert_zspage(cls, zspage, fg);
  return fg;
}

// The fullest zspage with a free slot, or nullptr.
inline ZsPage* find_get_zspage(SizeClass* cls) ZSM_REQUIRES(cls->lock) {
  unsigned with_room = cls->nonempty & ((1u << ZS_INUSE_RATIO_100) - 1);
  if (ZSM_UNLIKELY(with_room == 0)) return nullptr;
  return cls->fullness_list[31 - __builtin_clz(with_room)];
}

// --- handle cells ---------------------------------------------------------------------------

// Moves up to kHandleBatch cells from the pool into the class's cache.
ZSM_COLD_PATH void refill_handle_cache(Pool* pool, SizeClass* cls) ZSM_REQUIRES(cls->lock) {
  ShardArenas& arenas = pool->arenas[cls->shard];
  MutexGuard guard(arenas.lock);
  for (uint32_t i = 0; i < kHandleBatch; i++) {
    auto* cell = static_cast<HandleCell*>(arenas.cells->alloc());
    if (cell == nullptr) break;
    cell->store(reinterpret_cast<unsigned long>(cls->free_cells), std::memory_order_relaxed);
    cls->free_cells = cell;
    cls->nr_free_cells++;
  }
}

// Gives kHandleBatch cells of an overfull class cache back to the pool.
ZSM_COLD_PATH void drain_handle_cache(Pool* pool, SizeClass* cls) ZSM_REQUIRES(cls->lock) {
  ShardArenas& arenas = pool->arenas[cls->shard];
  MutexGuard guard(arenas.lock);
  for (uint32_t i = 0; i < kHandleBatch; i++) {
    HandleCell* cell = cls->free_cells;
    cls->free_cells = reinterpret_cast<HandleCell*>(cell->load(std::memory_order_relaxed));
    cls->nr_free_cells--;
    arenas.cells->free(cell);
  }
}

// cache_alloc_handle(): a free cell from the class's cache; 0 when memory is short.
inline unsigned long cache_alloc_handle(Pool* pool, SizeClass* cls) ZSM_REQUIRES(cls->lock) {
  if (ZSM_UNLIKELY(cls->free_cells == nullptr)) {
    refill_handle_cache(pool, cls);
    if (cls->free_cells == nullptr) return 0;
  }
  HandleCell* cell = cls->free_cells;
  cls->free_cells = reinterpret_cast<HandleCell*>(cell->load(std::memory_order_relaxed));
  cls->nr_free_cells--;
  return reinterpret_cast<unsigned long>(cell);
}

inline void cache_free_handle(Pool* pool, SizeClass* cls, unsigned long handle)
    ZSM_REQUIRES(cls->lock) {
  HandleCell* cell = handle_to_cell(handle);
  cell->store(reinterpret_cast<unsigned long>(cls->free_cells), std::memory_order_relaxed);
  cls->free_cells = cell;
  if (ZSM_UNLIKELY(++cls->nr_free_cells > 2 * kHandleBatch)) drain_handle_cache(pool, cls);
}

// --- zspages --------------------------------------------------------------------------------

// Charges `pages` against the pool's memory limit; false when it would be exceeded.
bool charge_pages(Pool* pool, unsigned long pages) {
  unsigned long cur = pool->pages_allocated.load(std::memory_order_relaxed);
  do {
    if (pool->max_pages != 0 && cur + pages > pool->max_pages) return false;
  } while (!pool->pages_allocated.compare_exchange_weak(cur, cur + pages,
                                                        std::memory_order_relaxed));
  return true;
}

void uncharge_pages(Pool* pool, unsigned long pages) {
  pool->pages_allocated.fetch_sub(pages, std::memory_order_relaxed);
}

ZsPage* alloc_zspage_metadata(Pool* pool, const SizeClass* cls) {
  ShardArenas& arenas = pool->arenas[cls->shard];
  MutexGuard guard(arenas.lock);
  void* record = arenas.meta[cls->pages_per_zspage]->alloc();
  return record != nullptr ? std::launder(static_cast<ZsPage*>(record)) : nullptr;
}

void free_zspage_metadata(Pool* pool, const SizeClass* cls, ZsPage* zspage) {
  ShardArenas& arenas = pool->arenas[cls->shard];
  MutexGuard guard(arenas.lock);
  arenas.meta[zspage->nr_pages]->free(zspage);
}

void free_pages(Pool* pool, char* const* pages, uint32_t n) {
  MutexGuard guard(pool->source_lock);
  for (uint32_t i = 0; i < n; i++) pool->source.free_page(pool->source.ctx, pages[i]);
}

// init_zspage(): an empty zspage whose free list runs through every object in order.
void init_zspage(const SizeClass* cls, ZsPage* zspage) {
  zspage->inuse = 0;
  zspage->freeobj = 0;
  for (uint32_t i = 0; i < cls->objs_per_zspage; i++) {
    uint32_t next = i + 1 < cls->objs_per_zspage ? i + 1 : kFreeListEnd;
    *obj_word(obj_location(cls->geom, zspage, i)) = static_cast<unsigned long>(next)
                                                    << OBJ_TAG_BITS;
  }
}

// __free_zspage(): gives an empty, unlisted zspage's pages and metadata back.
void free_zspage(Pool* pool, SizeClass* cls, ZsPage* zspage) ZSM_REQUIRES(cls->lock) {
  zspage->cls.store(nullptr, std::memory_order_relaxed);
  cls->stats[ZS_OBJS_ALLOCATED] -= cls->objs_per_zspage;
  free_pages(pool, zspage->pages(), zspage->nr_pages);
  free_zspage_metadata(pool, cls, zspage);
  uncharge_pages(pool, cls->pages_per_zspage);
}

// A zspage a free has just left empty (already on the 0 % list): keep it as the class's
// spare unless the class has one already.
void release_empty_zspage(Pool* pool, SizeClass* cls, ZsPage* zspage) ZSM_REQUIRES(cls->lock) {
  if (cls->stats[ZS_INUSE_RATIO_0] > 1) {
    remove_zspage(cls, zspage);
    free_zspage(pool, cls, zspage);
  }
}

// Frees the class's spare empty zspages; returns the pages freed.
unsigned long free_empty_zspages(Pool* pool, SizeClass* cls) ZSM_REQUIRES(cls->lock) {
  unsigned long freed = 0;
  while (ZsPage* zspage = cls->fullness_list[ZS_INUSE_RATIO_0]) {
    remove_zspage(cls, zspage);
    free_zspage(pool, cls, zspage);
    freed += cls->pages_per_zspage;
  }
  return freed;
}

// Frees every class's spare; for a pool at its memory limit.
ZSM_COLD_PATH unsigned long free_all_spares(Pool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  unsigned long freed = 0;
  for (uint32_t c = 0; c < pool->nr_classes; c++) {
    SizeClass* cls = &pool->classes[c];
    MutexGuard guard(cls->lock);
    freed += free_empty_zspages(pool, cls);
  }
  return freed;
}

// alloc_zspage(): a new, empty, unlisted zspage for the class, or nullptr (limit reached,
// no page, no metadata). Called without the class lock; on failure nothing is left held.
ZSM_SLOW_PATH ZsPage* alloc_zspage(Pool* pool, SizeClass* cls) {
  uint32_t n = cls->pages_per_zspage;
  if (!charge_pages(pool, n) && (free_all_spares(pool) == 0 || !charge_pages(pool, n)))
    return nullptr;
  ZsPage* zspage = alloc_zspage_metadata(pool, cls);
  if (zspage == nullptr) {
    uncharge_pages(pool, n);
    return nullptr;
  }
  zspage->nr_pages = static_cast<uint8_t>(n);
  uint32_t got = 0;
  {
    MutexGuard guard(pool->source_lock);
    for (; got < n; got++) {
      zspage->pages()[got] = static_cast<char*>(pool->source.alloc_page(pool->source.ctx));
      if (zspage->pages()[got] == nullptr) break;
    }
  }
  if (got < n) {
    free_pages(pool, zspage->pages(), got);
    free_zspage_metadata(pool, cls, zspage);
    uncharge_pages(pool, n);
    return nullptr;
  }
  init_zspage(cls, zspage);
  return zspage;
}

// --- objects: the hot helpers ------------------------------------------------------------

// obj_malloc(): takes the first free slot of a zspage, writes `header` (make_header()) and
// returns the new obj value. The caller holds the class lock, and records the obj in the
// handle's cell when the object is ready.
static ZSM_OBJ_HELPER unsigned long obj_malloc(ClassGeometry g, ZsPage* zspage,
                                               unsigned long header) {
  uint32_t obj_idx = zspage->freeobj;
  unsigned long* word = obj_word(obj_location(g, zspage, obj_idx));
  zspage->freeobj = static_cast<uint32_t>(*word >> OBJ_TAG_BITS);
  *word = header;
  zspage->inuse++;
  return location_to_obj(zspage, obj_idx);
}

// obj_free(): puts slot `obj_idx` back at the head of the zspage's free list. The caller
// holds the class lock.
static ZSM_OBJ_HELPER void obj_free(ClassGeometry g, ZsPage* zspage, uint32_t obj_idx) {
  *obj_word(obj_location(g, zspage, obj_idx)) = static_cast<unsigned long>(zspage->freeobj)
                                                << OBJ_TAG_BITS;
  zspage->freeobj = obj_idx;
  zspage->inuse--;
}

// obj_write(): copies `len` bytes into the payload of object `obj`, across a page boundary
// when the object spans one. The object must be pinned (class lock or zspage read lock).
static ZSM_WRITE_HELPER void obj_write(ClassGeometry g, unsigned long obj, const void* src,
                                     size_t len) {
  const ZsPage* zspage = obj_to_zspage(obj);
  Location loc = payload_location(g, zspage, obj_to_idx(obj));
  if (ZSM_LIKELY(loc.offset + len <= g.page_size())) {
    std::memcpy(loc.page + loc.offset, src, len);
  } else {
    size_t first = g.page_size() - loc.offset;
    std::memcpy(loc.page + loc.offset, src, first);
    std::memcpy(zspage_location(g, zspage, (obj_to_idx(obj) + 1) * size_t{g.size}).page,
                static_cast<const char*>(src) + first, len - first);
  }
}

// --- lookups -------------------------------------------------------------------------------

// The shard this thread stores into, before masking. Every thread starts on shard 0 and moves
// to the next shard each time it finds its shard's lock taken, so threads that store at the
// same time spread over the shards and stay apart (see lock_store_shard()).
// initial-exec: one load from the thread pointer, in the shared library too.
__attribute__((tls_model("initial-exec"))) thread_local uint32_t shard_hint = 0;

inline constexpr unsigned kGranuleShift = 4;  // Pool::class_by_granule

// get_size_class_index() for a request of up to page_size + header bytes: shard 0 of its
// class.
inline SizeClass* class_for_size(const Pool* pool, size_t size) {
  return pool->class_by_granule[(size + (1u << kGranuleShift) - 1) >> kGranuleShift];
}

// The next shard of the class for a thread whose shard was busy.
ZSM_COLD_PATH SizeClass* move_to_next_shard(const Pool* pool, SizeClass* first) {
  shard_hint++;
  return first + (shard_hint & pool->shard_mask);
}

// Locks this thread's shard of the class whose shard 0 is `first` and returns it. Where the
// shard is busy and there are others, the thread moves to the next one (and stays there).
inline SizeClass* lock_store_shard(const Pool* pool, SizeClass* first)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  SizeClass* cls = first + (shard_hint & pool->shard_mask);
  if (ZSM_LIKELY(cls->lock.try_lock())) return cls;
  if (pool->shard_mask != 0) cls = move_to_next_shard(pool, first);
  cls->lock.lock();
  return cls;
}

// How a path trusts the obj it reads from a handle's cell. The default paths take it as it
// is (misuse is undefined behaviour); hardened pools check it first (see "Hardened pools"
// above). Both are inlined into the lookups below, so the default code is unchanged.
struct TrustHandle {
  unsigned long operator()(unsigned long obj) const { return obj; }
  void check_header(ClassGeometry, unsigned long) const {}
};

// The handle a hardened pool returns for a cell: the cell's address with the pool's tag.
inline unsigned long tag_handle(const Pool* pool, unsigned long cell) {
  return cell ^ pool->handle_tag;
}

struct CheckHandle {
  const Pool* pool;
  const char* call;
  unsigned long cell;  // the handle's cell: the handle without the pool's tag
  // The handle as the caller passed it, for a report (kept as `cell` alone, which saves a
  // register on the paths that check).
  [[nodiscard]] unsigned long handle() const { return tag_handle(pool, cell); }
  // A cell of this pool that holds no obj holds 0 or a link inside the cell region.
  ZSM_ALWAYS_INLINE unsigned long operator()(unsigned long obj) const {
    if (ZSM_UNLIKELY(obj == 0 || pool->cells.contains(obj)))
      report_free_handle(pool, call, handle());
    return obj;
  }
  // The header of the pinned object `obj` names the handle (huge objects have none).
  ZSM_ALWAYS_INLINE void check_header(ClassGeometry g, unsigned long obj) const {
    if (is_huge(g)) return;
    unsigned long header = *obj_word(obj_location(g, obj_to_zspage(obj), obj_to_idx(obj)));
    if (ZSM_UNLIKELY(header_to_handle(header) != cell))
      report_corrupt_header(pool, call, handle(), header);
  }
};

// A hardened pool's check that `handle` is one of its own: its tag is the pool's and the
// rest is one of its cells (a wrong tag leaves top bits set, which no cell address has).
// Returns the checker for what the cell holds.
ZSM_ALWAYS_INLINE CheckHandle check_handle(const Pool* pool, const char* call,
                                           unsigned long handle) {
  unsigned long cell = handle ^ pool->handle_tag;
  if (ZSM_UNLIKELY(!pool->cells.is_cell(cell))) report_foreign_handle(pool, call, handle);
  return {pool, call, cell};
}

// The lookups below take the handle's cell address: a default pool's handle is that
// address, a hardened pool's is stripped of its tag by check_handle() first.

// Locks the class of the object behind the cell and returns it; the object is pinned until
// the caller unlocks (see "Finding an object's class" above).
template <typename Check>
ZSM_ALWAYS_INLINE SizeClass* lock_class_of(unsigned long cell, Check check)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  Backoff backoff;
  for (;;) {
    SizeClass* cls = obj_to_zspage(check(handle_to_obj(cell)))->cls.load(std::memory_order_relaxed);
    if (ZSM_LIKELY(cls != nullptr)) {
      cls->lock.lock();
      ZsPage* zspage = obj_to_zspage(check(handle_to_cell(cell)->load(std::memory_order_relaxed)));
      if (ZSM_LIKELY(zspage->cls.load(std::memory_order_relaxed) == cls)) return cls;
      cls->lock.unlock();
    }
    backoff.pause();
  }
}

// Takes the read lock of the zspage that holds the object behind the cell; returns the obj.
template <typename Check>
ZSM_ALWAYS_INLINE unsigned long read_lock_obj(unsigned long cell, Check check) {
  Backoff backoff;
  for (;;) {
    unsigned long obj = check(handle_to_obj(cell));
    ZsPage* zspage = obj_to_zspage(obj);
    if (ZSM_LIKELY(zspage->lock.try_read())) {
      if (ZSM_LIKELY(handle_to_obj(cell) == obj)) return obj;
      zspage->lock.read_unlock();
    }
    backoff.pause();
  }
}


// Drops the read lock a default pool's read took on the zspage of the object behind `handle`.
inline void read_unlock_obj(unsigned long handle) {
  obj_to_zspage(handle_to_cell(handle)->load(std::memory_order_relaxed))->lock.read_unlock();
}

// The zspage of a pinned object: its class pointer is stable.
inline SizeClass* pinned_class(unsigned long obj) {
  return obj_to_zspage(obj)->cls.load(std::memory_order_relaxed);
}

// A hardened pool's pin_for_access(): the handle and the object's size checked. Inlined into
// pin_for_access(), whose default path bench/golden counts: out of line it would change the
// code of that path too.
ZSM_ALWAYS_INLINE unsigned long pin_checked(Pool* pool, const char* call, unsigned long handle, size_t len) {
  CheckHandle check = check_handle(pool, call, handle);
  unsigned long obj = read_lock_obj(check.cell, check);
  size_t size = obj_size(pinned_class(obj)->geom, obj);
  if (ZSM_UNLIKELY(len > size)) report_out_of_bounds(pool, call, check.handle(), len, size);
  return obj;
}

// The pinned object behind `handle` for a write of `len` bytes, or a look at it: a hardened
// pool also checks the handle and the object's size.
unsigned long pin_for_access(Pool* pool, const char* call, unsigned long handle, size_t len) {
  if (ZSM_LIKELY(!pool->hardened)) return read_lock_obj(handle, TrustHandle{});
  return pin_checked(pool, call, handle, len);
}

// The reads in progress on this thread, in hardened pools (open_reads.h).
thread_local OpenReads open_reads;

// A hardened pool's pin for zs_obj_read_begin(): checked, and recorded as a read in progress.
unsigned long pin_and_record_read(Pool* pool, unsigned long handle, size_t len) {
  const char* call = "zs_obj_read_begin";
  if (ZSM_UNLIKELY(open_reads.full()))
    report_too_many_reads(pool, call, handle, OpenReads::kMaxReads);
  unsigned long obj = pin_checked(pool, call, handle, len);
  open_reads.add(pool, handle, obj);
  return obj;
}

// The pinned object behind `handle` for a read of `len` bytes (pin_for_access(), and a
// hardened pool records the read).
unsigned long pin_for_read(Pool* pool, unsigned long handle, size_t len) {
  if (ZSM_LIKELY(!pool->hardened)) return read_lock_obj(handle, TrustHandle{});
  return pin_and_record_read(pool, handle, len);
}

// A hardened pool's zs_obj_read_end(): ends a read of the handle in progress on this thread,
// unlocking the zspage that read locked. The cell must still hold the object the read
// began on: a free cannot have moved it, only freed it.
void end_recorded_read(Pool* pool, unsigned long handle) {
  const char* call = "zs_obj_read_end";
  CheckHandle check = check_handle(pool, call, handle);
  OpenReads::Read* read = open_reads.find(pool, handle);
  if (ZSM_UNLIKELY(read == nullptr)) report_no_read_in_progress(pool, call, handle);
  if (ZSM_UNLIKELY(handle_to_obj(check.cell) != read->obj))
    report_freed_while_read(pool, call, handle);
  if (ZSM_UNLIKELY(!obj_to_zspage(read->obj)->lock.read_unlock_checked()))
    report_invariant(pool, "zs_obj_read_end: a read in progress found its zspage's reader count not positive");
  open_reads.remove(read);
}

// Places an object of `size` bytes for `handle` in the first free slot of `zspage`, fills it
// and publishes it in the handle's cell, counted by allocation profiling when that is on.
template <typename Fill>
ZSM_ALWAYS_INLINE void place_object(Pool* pool, SizeClass* cls, ZsPage* zspage,
                                    unsigned long handle, size_t size, zs_alloc_tag* tag,
                                    Fill fill) ZSM_REQUIRES(cls->lock) {
  const ClassGeometry geom = cls->geom;
  unsigned long obj = obj_malloc(geom, zspage, make_header(handle, size));
  zspage->huge_size_m1 = static_cast<uint16_t>(size - 1);
  fill(geom, obj);
  if (profiling_enabled()) {
    profile_alloc(pool, cls, handle, size, tag);
    obj |= kObjProfiled;
  }
  record_obj(handle, obj);
  cls->stats[ZS_OBJS_INUSE]++;
}

// The body of zs_malloc() and zs_store() for a request that fits a page: places the object
// and returns its cell (0 with errno ENOMEM). `fill` runs under the class lock once the
// object is placed, before anyone else can see the cell.
template <typename Fill>
ZSM_ALWAYS_INLINE unsigned long alloc_cell(Pool* pool, size_t size, zs_alloc_tag* tag, Fill fill)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  SizeClass* cls = lock_store_shard(pool, class_for_size(pool, size + kHandleSize));
  unsigned long handle = cache_alloc_handle(pool, cls);
  if (ZSM_UNLIKELY(handle == 0)) {
    cls->lock.unlock();
    errno = ENOMEM;
    return 0;
  }
  ZsPage* zspage = find_get_zspage(cls);
  if (ZSM_LIKELY(zspage != nullptr)) {
    place_object(pool, cls, zspage, handle, size, tag, fill);
    fix_fullness_group(cls, zspage);
    debug_check_class(pool, cls, zspage);
    cls->lock.unlock();
    return handle;
  }

  cls->lock.unlock();
  zspage = alloc_zspage(pool, cls);
  cls->lock.lock();
  if (ZSM_UNLIKELY(zspage == nullptr)) {
    cache_free_handle(pool, cls, handle);
    cls->lock.unlock();
    errno = ENOMEM;
    return 0;
  }
  zspage->cls.store(cls, std::memory_order_relaxed);
  place_object(pool, cls, zspage, handle, size, tag, fill);
  insert_zspage(cls, zspage, get_fullness_group(cls, zspage));
  cls->stats[ZS_OBJS_ALLOCATED] += cls->objs_per_zspage;
  debug_check_class(pool, cls, zspage);
  cls->lock.unlock();
  return handle;
}

// zs_alloc() off its fast path: a bad argument, or any store into a hardened pool, whose
// handle carries the pool's tag.
template <typename Fill>
ZSM_OFF_FAST_PATH unsigned long alloc_checked(Pool* pool, size_t size, zs_alloc_tag* tag,
                                              Fill fill) {
  if (pool == nullptr || size - 1 >= pool->page_size) {
    errno = pool == nullptr || size == 0 ? EINVAL : ENOSPC;
    return 0;
  }
  unsigned long cell = alloc_cell(pool, size, tag, fill);
  return cell != 0 ? tag_handle(pool, cell) : 0;
}

// The body of zs_malloc() and zs_store(), written once. The compare every store makes of
// the size against Pool::store_size_limit also sends a hardened pool's stores off the fast
// path, so that a default pool's stores pay nothing for hardened ones.
template <typename Fill>
ZSM_ALWAYS_INLINE unsigned long zs_alloc(Pool* pool, size_t size, zs_alloc_tag* tag, Fill fill) {
  if (ZSM_UNLIKELY(pool == nullptr || size - 1 >= pool->store_size_limit))
    return alloc_checked(pool, size, tag, fill);
  return alloc_cell(pool, size, tag, fill);
}

// zs_store()'s fill, inlined like the rest of its body, so that what zs_store() calls is
// obj_write(), as the inline policy intends, and not a wrapper around it.
struct CopyFill {
  const void* src;
  size_t size;
  ZSM_ALWAYS_INLINE void operator()(ClassGeometry geom, unsigned long obj) const {
    obj_write(geom, obj, src, size);
  }
};

struct NoFill {
  void operator()(ClassGeometry, unsigned long) const {}
};

// The body of zs_store(): zs_alloc() with a copy of `src` as the fill.
ZSM_ALWAYS_INLINE unsigned long zs_alloc_copy(Pool* pool, const void* src, size_t size,
                                              zs_alloc_tag* tag) {
  if (ZSM_UNLIKELY(src == nullptr)) {
    errno = EINVAL;
    return 0;
  }
  return zs_alloc(pool, size, tag, CopyFill{src, size});
}

// The object's class is locked: frees it, and its handle, and unlocks.
ZSM_ALWAYS_INLINE void free_locked(Pool* pool, SizeClass* cls, unsigned long handle,
                                   unsigned long obj) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  ZsPage* zspage = obj_to_zspage(obj);
  if (ZSM_PROFILING && ZSM_UNLIKELY(obj & kObjProfiled))
    profile_free(pool, cls, handle, obj_size(cls->geom, obj));
  cls->stats[ZS_OBJS_INUSE]--;
  obj_free(cls->geom, zspage, obj_to_idx(obj));
  if (ZSM_UNLIKELY(fix_fullness_group(cls, zspage) == ZS_INUSE_RATIO_0))
    release_empty_zspage(pool, cls, zspage);
  cache_free_handle(pool, cls, handle);
  debug_check_class(pool, cls, zspage);
  cls->lock.unlock();
}

// zs_free() of the object behind the cell, trusted, or in a hardened pool checked, with the
// cell and the object's header, before anything changes.
template <typename Check>
ZSM_ALWAYS_INLINE void free_cell(Pool* pool, unsigned long cell, Check check)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  SizeClass* cls = lock_class_of(cell, check);
  unsigned long obj = handle_to_cell(cell)->load(std::memory_order_relaxed);
  check.check_header(cls->geom, obj);
  free_locked(pool, cls, cell, obj);
}

// A hardened pool's zs_free(): the handle checked, and refused while this thread reads it.
void free_checked(Pool* pool, unsigned long handle) {
  CheckHandle check = check_handle(pool, "zs_free", handle);
  if (ZSM_UNLIKELY(open_reads.find(pool, handle) != nullptr))
    report_free_while_read(pool, "zs_free", handle);
  free_cell(pool, check.cell, check);
}

}  // namespace

// --- the API ---------------------------------------------------------------------------------

unsigned long zs_malloc(Pool* pool, size_t size) {
  return zs_alloc(pool, size, nullptr, NoFill{});
}

unsigned long zs_malloc_tagged(Pool* pool, size_t size, zs_alloc_tag* tag) {
  return zs_alloc(pool, size, tag, NoFill{});
}

unsigned long zs_store(Pool* pool, const void* src, size_t size) {
  return zs_alloc_copy(pool, src, size, nullptr);
}

unsigned long zs_store_tagged(Pool* pool, const void* src, size_t size, zs_alloc_tag* tag) {
  return zs_alloc_copy(pool, src, size, tag);
}

void zs_free(Pool* pool, unsigned long handle) {
  if (ZSM_UNLIKELY(pool == nullptr || handle == 0)) return;
  if (ZSM_UNLIKELY(pool->hardened))
    free_checked(pool, handle);
  else
    free_cell(pool, handle, TrustHandle{});
}

void zs_obj_write(Pool* pool, unsigned long handle, const void* src, size_t size) {
  if (ZSM_UNLIKELY(pool == nullptr || handle == 0 || (src == nullptr && size != 0))) {
    errno = EINVAL;
    return;
  }
  if (size == 0) return;
  unsigned long obj = pin_for_access(pool, "zs_obj_write", handle, size);
  const SizeClass* cls = pinned_class(obj);
  if (ZSM_LIKELY(size <= obj_capacity(cls)))
    obj_write(cls->geom, obj, src, size);
  else
    errno = EINVAL;
  obj_to_zspage(obj)->lock.read_unlock();
}

void* zs_obj_read_begin(Pool* pool, unsigned long handle, size_t mem_len, void* local_copy) {
  if (ZSM_UNLIKELY(pool == nullptr || handle == 0)) {
    errno = EINVAL;
    return nullptr;
  }
  unsigned long obj = pin_for_read(pool, handle, mem_len);
  ZsPage* zspage = obj_to_zspage(obj);
  const SizeClass* cls = pinned_class(obj);
  if (ZSM_UNLIKELY(mem_len > obj_capacity(cls))) {
    zspage->lock.read_unlock();
    errno = EINVAL;
    return nullptr;
  }
  const ClassGeometry geom = cls->geom;
  Location loc = payload_location(geom, zspage, obj_to_idx(obj));
  if (ZSM_LIKELY(loc.offset + mem_len <= geom.page_size())) return loc.page + loc.offset;
  size_t first = geom.page_size() - loc.offset;
  std::memcpy(local_copy, loc.page + loc.offset, first);
  std::memcpy(static_cast<char*>(local_copy) + first,
              zspage_location(geom, zspage, (obj_to_idx(obj) + 1) * size_t{geom.size}).page,
              mem_len - first);
  return local_copy;
}

void zs_obj_read_end(Pool* pool, unsigned long handle, size_t, void*) {
  if (ZSM_UNLIKELY(pool == nullptr || handle == 0)) return;
  if (ZSM_UNLIKELY(pool->hardened))
    end_recorded_read(pool, handle);
  else
    read_unlock_obj(handle);
}

size_t zs_obj_capacity(Pool* pool, unsigned long handle) {
  if (pool == nullptr || handle == 0) return 0;
  unsigned long obj = pin_for_access(pool, "zs_obj_capacity", handle, 0);
  size_t capacity = obj_capacity(pinned_class(obj));
  obj_to_zspage(obj)->lock.read_unlock();
  return capacity;
}

// --- compaction ----------------------------------------------------------------------------

namespace {

// The lock shards of one class, compacted as one: the kernel's algorithm runs over the union
// of their lists with every shard's lock held, so objects move between shards and no shard
// keeps a half-empty zspage that another shard could take in.
struct ClassShards {
  SizeClass* first;
  uint32_t count;
  SizeClass* begin() const { return first; }
  SizeClass* end() const { return first + count; }
};

void lock_shards(ClassShards shards) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (SizeClass& cls : shards) cls.lock.lock();  // in index order, the only multi-lock path
}

void unlock_shards(const Pool* pool, ClassShards shards) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (SizeClass& cls : shards) {
    debug_check_class(pool, &cls, nullptr);
    cls.lock.unlock();
  }
}

bool shards_contended(ClassShards shards) {
  for (SizeClass& cls : shards)
    if (cls.lock.is_contended()) return true;
  return false;
}

// zs_can_compact() over all shards of the class.
unsigned long shards_can_compact(ClassShards shards) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  unsigned long allocated = 0, inuse = 0;
  for (SizeClass& cls : shards) {
    allocated += cls.stats[ZS_OBJS_ALLOCATED];
    inuse += cls.stats[ZS_OBJS_INUSE];
  }
  return can_compact_pages(allocated, inuse, shards.first);
}

// isolate_dst_zspage(): the fullest non-full, non-empty zspage of any shard, off its list.
ZsPage* isolate_dst_zspage(ClassShards shards) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (int fg = ZS_INUSE_RATIO_99; fg >= ZS_INUSE_RATIO_10; fg--) {
    for (SizeClass& cls : shards) {
      if (ZsPage* zspage = cls.fullness_list[fg]) {
        remove_zspage(&cls, zspage);
        return zspage;
      }
    }
  }
  return nullptr;
}

// isolate_src_zspage(): the emptiest non-empty zspage of any shard, off its list.
ZsPage* isolate_src_zspage(ClassShards shards) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (int fg = ZS_INUSE_RATIO_10; fg <= ZS_INUSE_RATIO_99; fg++) {
    for (SizeClass& cls : shards) {
      if (ZsPage* zspage = cls.fullness_list[fg]) {
        remove_zspage(&cls, zspage);
        return zspage;
      }
    }
  }
  return nullptr;
}

// The shard an isolated zspage belongs to (its cls is stable under the shard's lock).
inline SizeClass* owner(const ZsPage* zspage) {
  return zspage->cls.load(std::memory_order_relaxed);
}

// zs_object_copy(): copies the payload of one slot to another, page by page on both sides.
void copy_object(ClassGeometry g, const ZsPage* dst, uint32_t dst_idx, const ZsPage* src,
                 uint32_t src_idx) {
  size_t d = size_t{dst_idx} * g.size + g.payload_offset;
  size_t s = size_t{src_idx} * g.size + g.payload_offset;
  size_t left = g.size - g.payload_offset;
  while (left > 0) {
    Location to = zspage_location(g, dst, d), from = zspage_location(g, src, s);
    size_t n = std::min({left, g.page_size() - to.offset, g.page_size() - from.offset});
    std::memcpy(to.page + to.offset, from.page + from.offset, n);
    d += n;
    s += n;
    left -= n;
  }
}

// migrate_zspage(): moves live objects from src to dst until src is empty or dst is full.
// src is write-locked, so no reader is inside it; readers of dst are undisturbed. The two may
// belong to different shards, whose in-use counts move with the objects.
void migrate_zspage(ZsPage* src, ZsPage* dst) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  SizeClass* from = owner(src);
  SizeClass* to = owner(dst);
  const ClassGeometry geom = from->geom;
  uint32_t moved = 0;
  for (uint32_t obj_idx = 0; obj_idx < from->objs_per_zspage; obj_idx++) {
    if (src->inuse == 0 || dst->inuse == from->objs_per_zspage) break;
    unsigned long header = *obj_word(obj_location(geom, src, obj_idx));
    if ((header & OBJ_ALLOCATED_TAG) == 0) continue;
    unsigned long handle = header_to_handle(header);
    unsigned long obj = obj_malloc(geom, dst, header);
    copy_object(geom, dst, obj_to_idx(obj), src, obj_idx);
    record_obj(handle, obj | (handle_to_cell(handle)->load(std::memory_order_relaxed) & kObjProfiled));
    obj_free(geom, src, obj_idx);
    moved++;
  }
  from->stats[ZS_OBJS_INUSE] -= moved;
  to->stats[ZS_OBJS_INUSE] += moved;
}

// Puts an isolated zspage back on its shard's lists; frees it if it is empty. Returns the
// pages freed.
unsigned long putback_or_free(Pool* pool, ZsPage* zspage) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  SizeClass* cls = owner(zspage);
  if (putback_zspage(cls, zspage) != ZS_INUSE_RATIO_0) return 0;
  remove_zspage(cls, zspage);
  free_zspage(pool, cls, zspage);
  return cls->pages_per_zspage;
}

// __zs_compact(): compacts one class, all its shards together; returns the pages freed. Like
// the kernel, it keeps one destination until it is full, and stops at the first source a
// reader holds.
unsigned long compact_class(Pool* pool, ClassShards shards) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  lock_shards(shards);
  unsigned long freed = 0;
  for (SizeClass& cls : shards) freed += free_empty_zspages(pool, &cls);
  ZsPage* dst = nullptr;
  while (shards_can_compact(shards) > 0) {
    if (dst == nullptr && (dst = isolate_dst_zspage(shards)) == nullptr) break;
    ZsPage* src = isolate_src_zspage(shards);
    if (src == nullptr) break;
    if (!src->lock.try_write()) {
      putback_zspage(owner(src), src);
      break;
    }
    migrate_zspage(src, dst);
    src->lock.write_unlock();
    freed += putback_or_free(pool, src);
    if (dst->inuse == shards.first->objs_per_zspage || shards_contended(shards)) {
      putback_zspage(owner(dst), dst);
      dst = nullptr;
      unlock_shards(pool, shards);  // let stores and frees of this class in
      sched_yield();
      lock_shards(shards);
    }
  }
  if (dst != nullptr) putback_zspage(owner(dst), dst);
  unlock_shards(pool, shards);
  return freed;
}

}  // namespace

unsigned long zs_compact(Pool* pool) {
  if (pool == nullptr || pool->compaction_in_progress.exchange(true, std::memory_order_acquire))
    return 0;
  unsigned long freed = 0;
  const uint32_t nr_shards = pool->shard_mask + 1;
  for (uint32_t c = 0; c < pool->nr_classes; c += nr_shards)
    freed += compact_class(pool, {&pool->classes[c], nr_shards});
  pool->pages_compacted.fetch_add(freed, std::memory_order_relaxed);
  pool->compaction_in_progress.store(false, std::memory_order_release);
  return freed;
}

// --- pool life -----------------------------------------------------------------------------

namespace {

size_t zspage_metadata_size(uint32_t nr_pages) { return sizeof(ZsPage) + nr_pages * sizeof(char*); }

// One shard per CPU, rounded up to a power of two, at most kDefaultMaxShards.
unsigned default_shards() {
  unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  unsigned shards = 1;
  while (shards < cpus && shards < kDefaultMaxShards) shards *= 2;
  return shards;
}

// Hardened pools created in this process, whose count gives each its handle tag.
std::atomic<unsigned long> hardened_pools_created{0};

// The next hardened pool's handle tag: generations 1..kHandleGenerations in turn.
unsigned long next_handle_tag() {
  unsigned long n = hardened_pools_created.fetch_add(1, std::memory_order_relaxed);
  return (n % kHandleGenerations + 1) << kHandleTagShift;
}

// The reservation unit of the pool's own page source: the memory limit when it is below the
// source's default unit, so that a small pool reserves no more than it may use, else the
// default (the source maps more reservations as the pool grows).
size_t reserve_for_limit(unsigned long max_pages, size_t page_size) {
  if (max_pages == 0 || max_pages > VmSource::kDefaultReserve / page_size) return 0;
  return max_pages * page_size;
}

// The inuse range of every fullness group of a class (see SizeClass::fullness_lo).
void init_fullness_ranges(SizeClass* cls) {
  for (int fg = 0; fg < NR_FULLNESS_GROUPS; fg++) {
    cls->fullness_lo[fg] = UINT32_MAX;
    cls->fullness_hi[fg] = 0;
  }
  ZsPage probe{};
  for (uint32_t inuse = 0; inuse <= cls->objs_per_zspage; inuse++) {
    probe.inuse = inuse;
    int fg = get_fullness_group(cls, &probe);
    cls->fullness_lo[fg] = std::min(cls->fullness_lo[fg], inuse);
    cls->fullness_hi[fg] = std::max(cls->fullness_hi[fg], inuse);
  }
}

bool init_classes(Pool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  const ClassTable& t = pool->table;
  pool->nr_classes = t.nr_distinct * (pool->shard_mask + 1);
  pool->classes = new (std::nothrow) SizeClass[pool->nr_classes];
  if (pool->classes == nullptr) return false;
  SizeClass* next = pool->classes;
  for (uint32_t i = t.nr_indices; i-- > 0;) {
    const ClassRow& row = t.rows[i];
    if (!t.distinct(i)) {
      pool->size_class[i] = pool->size_class[row.resolve];
      continue;
    }
    pool->size_class[i] = next;
    for (uint32_t shard = 0; shard <= pool->shard_mask; shard++) {
      SizeClass* cls = next++;
      cls->geom = {row.size, t.page_shift, t.page_size - 1, row.huge() ? 0 : kHandleSize};
      cls->objs_per_zspage = row.objs;
      cls->pages_per_zspage = row.pages;
      cls->index = i;
      cls->shard = shard;
      init_fullness_ranges(cls);
    }
  }
  size_t granules = (t.page_size >> kGranuleShift) + 2;
  pool->class_by_granule = new (std::nothrow) SizeClass*[granules];
  if (pool->class_by_granule == nullptr) return false;
  for (size_t g = 0; g < granules; g++)
    pool->class_by_granule[g] = pool->size_class[t.index_of(g << kGranuleShift)];
  pool->arenas = new (std::nothrow) ShardArenas[pool->shard_mask + 1];
  if (pool->arenas == nullptr) return false;
  for (uint32_t shard = 0; shard <= pool->shard_mask; shard++) {
    ShardArenas& arenas = pool->arenas[shard];
    arenas.cells = new (std::nothrow) RecordArena(sizeof(HandleCell), &pool->cells);
    if (arenas.cells == nullptr) return false;
    for (uint32_t n = 1; n <= t.chain; n++) {
      arenas.meta[n] = new (std::nothrow) RecordArena(zspage_metadata_size(n));
      if (arenas.meta[n] == nullptr) return false;
    }
  }
  return true;
}

// Returns every page of every zspage to the source (zs_destroy_pool with live objects):
// a live zspage is a metadata record with a class.
void free_all_zspages(Pool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  if (pool->arenas == nullptr) return;
  for (uint32_t shard = 0; shard <= pool->shard_mask; shard++) {
    for (RecordArena* arena : pool->arenas[shard].meta) {
      if (arena == nullptr) continue;
      arena->for_each_record([pool](void* record) {
        auto* zspage = static_cast<ZsPage*>(record);
        if (zspage->cls.load(std::memory_order_relaxed) != nullptr)
          free_pages(pool, zspage->pages(), zspage->nr_pages);
      });
    }
  }
}

}  // namespace

Pool* zs_create_pool(const char* name, const zs_pool_config* cfg) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  zs_pool_config defaults{};
  if (cfg == nullptr) cfg = &defaults;
  size_t page_size = cfg->page_size != 0 ? cfg->page_size : 4096;
  unsigned chain = cfg->chain_size != 0 ? cfg->chain_size : kDefaultChain;
  unsigned shards = cfg->nr_shards != 0 ? cfg->nr_shards : default_shards();
  if (!valid_geometry(page_size, chain) ||
      (page_size != 4096 && page_size != 16384 && page_size != 65536) || shards > kMaxShards ||
      (shards & (shards - 1)) != 0 || (cfg->flags & ~ZS_POOL_HARDENED) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  Pool* pool = new (std::nothrow) Pool;
  if (pool == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  try {
    pool->name = name != nullptr ? name : "";
  } catch (const std::bad_alloc&) {
    delete pool;
    errno = ENOMEM;
    return nullptr;
  }
  pool->page_size = static_cast<uint32_t>(page_size);
  pool->shard_mask = shards - 1;
  pool->table = build_class_table(pool->page_size, chain);
  pool->max_pages = cfg->max_pages;
  pool->hardened = (cfg->flags & ZS_POOL_HARDENED) != 0;
  pool->store_size_limit = pool->hardened ? 0 : pool->page_size;
  if (pool->hardened) pool->handle_tag = next_handle_tag();
  if (cfg->page_source != nullptr) {
    pool->source = *cfg->page_source;
  } else {
    size_t reserve = reserve_for_limit(cfg->max_pages, page_size);
    pool->own_source = VmSource::create(page_size, reserve, 0, VmSource::kDefaultRetain);
    if (pool->own_source != nullptr)
      pool->source = {VmSource::alloc_page_cb, VmSource::free_page_cb, pool->own_source};
  }
  int err = 0;
  if (pool->source.alloc_page == nullptr || pool->source.free_page == nullptr)
    err = cfg->page_source != nullptr ? EINVAL : ENOMEM;  // a bad source, or no default one
  else if (!pool->cells.reserve(ZSM_PROFILING) || !init_classes(pool))
    err = ENOMEM;
  if (err != 0) {
    zs_destroy_pool(pool);
    errno = err;
    return nullptr;
  }
  return pool;
}

void zs_destroy_pool(Pool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  if (pool == nullptr) return;
  free_all_zspages(pool);
  delete[] pool->classes;
  delete[] pool->class_by_granule;
  if (pool->arenas != nullptr) {
    for (uint32_t shard = 0; shard <= pool->shard_mask; shard++) {
      delete pool->arenas[shard].cells;
      for (RecordArena* arena : pool->arenas[shard].meta) delete arena;
    }
    delete[] pool->arenas;
  }
  delete pool->own_source;
  delete pool;
}

const char* zs_pool_name(const Pool* pool) { return pool != nullptr ? pool->name.c_str() : ""; }

size_t zs_huge_class_size(const Pool* pool) {
  return pool != nullptr ? pool->table.huge_class_size : 0;
}

unsigned zs_lookup_class_index(const Pool* pool, unsigned size) {
  if (pool == nullptr) return 0;
  return pool->size_class[pool->table.index_of(size)]->index;
}

unsigned long zs_get_total_pages(const Pool* pool) {
  return pool != nullptr ? pool->pages_allocated.load(std::memory_order_relaxed) : 0;
}

size_t zs_pool_bookkeeping_bytes(Pool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  if (pool == nullptr) return 0;
  size_t bytes = sizeof(Pool) + pool->nr_classes * sizeof(SizeClass) +
                 ((pool->page_size >> kGranuleShift) + 2) * sizeof(SizeClass*) +
                 (pool->shard_mask + 1) * sizeof(ShardArenas);
  for (uint32_t shard = 0; shard <= pool->shard_mask; shard++) {
    ShardArenas& arenas = pool->arenas[shard];
    MutexGuard guard(arenas.lock);
    bytes += arenas.cells->carved_bytes();
    for (const RecordArena* arena : arenas.meta)
      if (arena != nullptr) bytes += arena->carved_bytes();
  }
  return bytes;
}

void zs_pool_stats(const Pool* pool, struct zs_pool_stats* stats) {
  if (pool == nullptr || stats == nullptr) return;
  stats->pages_compacted = pool->pages_compacted.load(std::memory_order_relaxed);
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
