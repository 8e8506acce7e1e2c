// The pool: zsmalloc's object store (mm/zsmalloc.c), in userspace. This file holds the design
// and the object API (store, malloc, free, read, write); the rest of the pool is by component:
//   pool_types.h    the types: ZsPool, ClassShard, ZsPage, handle cells
//   obj.h           the encodings: obj values, headers, where an object's bytes lie
//   zspage.h/.cpp   the zspage and class-shard layer: fullness lists, obj_malloc/obj_free,
//                   the shards' cell caches, the zspage life cycle (alloc_zspage() is here,
//                   beside zs_malloc(), as in the kernel: see zspage.h)
//   compact.cpp     compaction
//   pool_create.cpp creation, teardown and the pool-wide figures
//   records.h/.cpp  where cells and zspage metadata live; lock.h the locks; report.h fatal
//                   reports; check.cpp the invariants; profile.cpp allocation profiling;
//                   stats.cpp the class statistics; vm_source.cpp the default page source
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
// Fullness. Each class shard sorts its zspages into 12 fullness groups (0 %, 0-9 % ..
// 90-99 %, 100 %) and keeps those of the first 11 on lists, newest first, with a bitmap of
// the non-empty lists; full zspages are on no list (nothing looks for them), only counted.
// Fullness is lazy (zspage.h, "Lazy fullness"): the zspage a free takes from full to one
// short becomes the shard's hot zspage, off the lists, and takes the next stores, so that a
// steady store/free pair moves no zspage between lists; it goes back on its list when
// another becomes hot or a free takes it below its group, and before compaction, which needs
// the lists exact. Statistics count it where it belongs. A store with no hot zspage takes
// the head of the fullest non-full list as the hot one, so allocation still goes to a
// zspage of the fullest group with room. A zspage that a free leaves empty
// is freed at once, as in the kernel, unless it is its shard's only empty zspage: that one
// stays on the 0 % list as a spare so that a store/free pair at a zspage boundary does not
// build and tear down a zspage each time. zs_compact() frees the spares.
//
// Shards. Each size class is split into lock shards (zs_pool_config.nr_shards, one per CPU by
// default), each a ClassShard with its own lock, zspages, lists and handle cache; `cls` in
// the code is one shard of a class. A thread stores into its own shard: in a pool with
// per-thread caches, its first cached call gives it a shard of its own (threads take them in
// turn); otherwise it starts on shard 0. When it finds its shard busy for longer than a
// short spin, it moves, to a shard of its own if it has none yet, later to the next one,
// and stays there. So threads storing into one class soon stop sharing a lock, without chasing each
// other on every brief wait. A free locks the shard that owns the object's zspage, wherever
// the freeing thread is. Shards follow threads, not CPUs, because a thread's objects
// live in the shard it stored them in: a thread that stays in its shard frees into it too,
// while a per-CPU choice would scatter a migrating thread's objects over the shards.
// Compaction takes every shard of a class at once. With one shard per class the pool is the
// kernel's: one lock and one set of lists per class.
//
// Lock order: ZsPool::compaction_in_progress (flag) -> ClassShard::lock
//             -> ZspageLock (try only) -> ZsPool::source_lock, ShardArenas::lock
//             -> CellRegion's lock (leaves).
//   ClassShard::lock fullness lists, free lists, inuse counts, stats, the shard's cell cache.
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
//   makes anyway (ZsPool::store_size_limit), so a default pool's store pays nothing for it.
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

#include <algorithm>
#include <cerrno>

#include "check.h"
#include "copy.h"
#include "obj.h"
#include "open_reads.h"
#include "profile.h"
#include "report.h"
#include "thread_cache.h"
#include "zspage.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

namespace {

// --- a new zspage ---------------------------------------------------------------------------

// alloc_zspage(): a new, empty, unlisted zspage for the class, or nullptr (limit reached,
// no page, no metadata). Called without the class lock; on failure nothing is left held.
// Sets *reclaimed when it took back the slots threads' caches reserve (at the limit).
ZSM_ZSPAGE_HELPER ZsPage* alloc_zspage(ZsPool* pool, ClassShard* cls, bool* reclaimed) {
  uint32_t n = cls->pages_per_zspage;
  if (!charge_pages(pool, n) && (*reclaimed = true, !charge_pages_after_reclaim(pool, n)))
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

// --- the payload ----------------------------------------------------------------------------

// obj_write() of `len` bytes that cross the end of the payload's page: the rest goes to the
// start of the next page of the zspage. Out of line, and with the geometry read again from
// the object's shard (its zspage's `cls` is stable while the object is pinned), so that the
// caller keeps nothing live for this path: what a store keeps in registers across its one
// copy is the shard and the cell. The rest is copied first, so that the copy into the
// payload's page, which needs only what the function was given, ends it as a tail call.
ZSM_OFF_FAST_PATH void write_across_pages(unsigned long obj, char* payload, const void* src,
                                          size_t len) {
  const ZsPage* zspage = obj_to_zspage(obj);
  const ClassGeometry g = zspage->cls.load(std::memory_order_relaxed)->geom;
  size_t first = g.page_size() - (reinterpret_cast<uintptr_t>(payload) & g.page_mask);
  char* next_page = zspage_location(g, zspage, (obj_to_idx(obj) + 1) * size_t{g.size}).page;
  copy_payload(next_page, static_cast<const char*>(src) + first, len - first);
  copy_payload(payload, src, first);
}

// obj_write(): copies `len` bytes into the payload of object `obj`, which starts at `payload`,
// across a page boundary when the object spans one. Pages are aligned to the page size (a
// page source's contract), so the payload's address gives its offset in the page. The
// object must be pinned (class lock or zspage read lock).
static ZSM_WRITE_HELPER void obj_write(ClassGeometry g, unsigned long obj, char* payload,
                                     const void* src, size_t len) {
  if (ZSM_LIKELY((reinterpret_cast<uintptr_t>(payload) & g.page_mask) + len <= g.page_size()))
    copy_payload(payload, src, len);
  else
    write_across_pages(obj, payload, src, len);
}

// obj_write() of an object whose payload the caller has not found yet (zs_obj_write()).
static ZSM_WRITE_HELPER void obj_write(ClassGeometry g, unsigned long obj, const void* src,
                                     size_t len) {
  Location loc = payload_location(g, obj_to_zspage(obj), obj_to_idx(obj));
  obj_write(g, obj, loc.page + loc.offset, src, len);
}

// Copies `len` bytes to offset `offset` of pages[0], where `first` of them fit, and the rest
// to the start of pages[1]. Out of line, so that the cached store, whose payloads mostly fit
// in one page, keeps no registers for two copies; its parameters come in the order the
// store has them in registers. The rest is copied first, so that the copy into pages[0]
// ends it as a tail call.
ZSM_OFF_FAST_PATH void copy_across_pages(char* const* pages, const void* src, size_t len,
                                         size_t first, size_t offset) {
  char* payload = pages[0] + offset;
  copy_payload(pages[1], static_cast<const char*>(src) + first, len - first);
  copy_payload(payload, src, first);
}

// --- lookups -------------------------------------------------------------------------------

// The shard this thread stores into, before masking, and kPlaced once the thread has moved
// (see lock_store_shard()). initial-exec: one load from the thread pointer, in the shared
// library too.
ZSM_INITIAL_EXEC_TLS thread_local uint32_t shard_hint = 0;
constexpr uint32_t kPlaced = 1u << 31;  // above any shard mask

// The hints of the threads placed now, one bit each; bit 0 stands for the threads not placed,
// which use shard 0. A thread is placed on the lowest free hint and gives it back when it
// exits, so the threads alive at one time hold different hints and spread over the shards,
// and a thread that starts after another exited takes its place instead of counting on,
// which gave every other new thread of a 2-shard pool the shard of a thread still running.
// (Hints are per process and masks per pool, so after exits two live threads can still
// share a shard that another leaves free.) Past 63 threads alive at once, hints count on
// from 64.
std::atomic<uint64_t> hints_in_use{1};
std::atomic<uint32_t> hints_past_bitmap{64};

// The hint bit this thread holds (0: none), given back when the thread exits.
struct HeldHint {
  uint32_t bit = 0;
  ~HeldHint() {
    if (bit != 0) hints_in_use.fetch_and(~(uint64_t{1} << bit), std::memory_order_relaxed);
  }
};
thread_local HeldHint held_hint;

// Pauses a store spends on its busy shard before it moves. Stores and frees hold a shard for
// tens of nanoseconds, so most waits end within this; moving at once cost more than it saved
// (a thread that moves leaves its objects behind, their frees keep taking its old shard,
// and the thread that owns that one moves in turn: the two chased each other around).
constexpr int kBusyShardSpins = 64;

// A shard of its own for a thread that has not had one: the lowest hint no live thread holds.
uint32_t own_shard_hint() {
  uint64_t used = hints_in_use.load(std::memory_order_relaxed);
  while (~used != 0) {
    const uint32_t bit = static_cast<uint32_t>(__builtin_ctzll(~used));
    if (hints_in_use.compare_exchange_weak(used, used | (uint64_t{1} << bit),
                                           std::memory_order_relaxed)) {
      held_hint.bit = bit;
      return kPlaced | bit;
    }
  }
  return kPlaced | hints_past_bitmap.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

void forget_other_threads_shard_hints() {
  uint64_t mine = held_hint.bit != 0 ? uint64_t{1} << held_hint.bit : 0;
  hints_in_use.store(1 | mine, std::memory_order_relaxed);
}

namespace {

// Gives this thread a shard of its own if it has none yet. A thread's first cached call
// does: stores that reuse their cache's slots never find a shard busy, so without this
// every thread would stay on shard 0, and threads' objects would share zspages and cache
// lines.
void place_thread() {
  if ((shard_hint & kPlaced) == 0) shard_hint = own_shard_hint();
}

// get_size_class_index() for a request of up to page_size + header bytes: shard 0 of its
// class.
inline ClassShard* first_shard_for_size(const ZsPool* pool, size_t size) {
  return pool->first_shard_by_granule[(size + (1u << kGranuleShift) - 1) >> kGranuleShift];
}

// A store found its shard `cls` busy: waits up to kBusyShardSpins pauses for it, then, where
// the class has other shards, moves this thread to another one and waits for that. A
// thread's first move takes it to a shard of its own (own_shard_hint()), so threads
// that store at the same time spread over the shards at once; later moves go to the next.
ZSM_COLD_PATH ClassShard* lock_busy_store_shard(const ZsPool* pool, ClassShard* first,
                                                ClassShard* cls) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  if (cls->lock.try_lock_spinning(kBusyShardSpins)) {
    count_under_lock(cls->lock_waits);
    return cls;
  }
  if (pool->shard_mask != 0) {
    shard_hint = (shard_hint & kPlaced) != 0 ? shard_hint + 1 : own_shard_hint();
    cls = first + (shard_hint & pool->shard_mask);
    lock_shard(cls);
    count_under_lock(cls->moves_in);
    return cls;
  }
  lock_shard_contended(cls);
  return cls;
}

// The shard lock_store_shard() tries first: this thread's shard of the class whose shard 0
// is `first`. A pool of one shard (the kernel's design) reads no hint.
inline ClassShard* store_shard(const ZsPool* pool, ClassShard* first) {
  if (pool->shard_mask == 0) return first;
  return first + (shard_hint & pool->shard_mask);
}

// Locks this thread's shard of the class whose shard 0 is `first` and returns it (one
// compare-and-swap when it is free; see lock_busy_store_shard() when it is not).
inline ClassShard* lock_store_shard(const ZsPool* pool, ClassShard* first)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  ClassShard* cls = store_shard(pool, first);
  if (ZSM_LIKELY(cls->lock.try_lock())) return cls;
  return lock_busy_store_shard(pool, first, cls);
}

// How a path trusts the obj it reads from a handle's cell. The default paths take it as it
// is (misuse is undefined behaviour); hardened pools check it first (see "Hardened pools"
// above). Both are inlined into the lookups below, so the default code is unchanged.
struct TrustHandle {
  unsigned long operator()(unsigned long obj) const { return obj; }
  void check_header(ClassGeometry, unsigned long) const {}
};

// The handle a hardened pool returns for a cell: the cell's address with the pool's tag.
inline unsigned long tag_handle(const ZsPool* pool, unsigned long cell) {
  return cell ^ pool->handle_tag;
}

struct CheckHandle {
  const ZsPool* pool;
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
ZSM_ALWAYS_INLINE CheckHandle check_handle(const ZsPool* pool, const char* call,
                                           unsigned long handle) {
  unsigned long cell = handle ^ pool->handle_tag;
  if (ZSM_UNLIKELY(!pool->cells.is_cell(cell))) report_foreign_handle(pool, call, handle);
  return {pool, call, cell};
}

// The lookups below take the handle's cell address: a default pool's handle is that
// address, a hardened pool's is stripped of its tag by check_handle() first.

// The class of the object behind the cell as its zspage names it now, without a lock: it
// may change until that class is locked (nullptr: the zspage was just freed).
template <typename Check>
ZSM_ALWAYS_INLINE ClassShard* unlocked_class_of(unsigned long cell, Check check) {
  return obj_to_zspage(check(handle_to_obj(cell)))->cls.load(std::memory_order_relaxed);
}

// An object pinned by its class's lock: the class, locked, and the obj its cell held then.
struct Pinned {
  ClassShard* cls;
  unsigned long obj;
};

// With `cls` locked: the object behind the cell, pinned when it is still in `cls` (else its
// `cls` is nullptr). The obj read here is the one the caller goes on with: no read again.
template <typename Check>
ZSM_ALWAYS_INLINE Pinned pin_if_still_in(ClassShard* cls, unsigned long cell, Check check) {
  unsigned long obj = check(handle_to_cell(cell)->load(std::memory_order_relaxed));
  return {obj_to_zspage(obj)->cls.load(std::memory_order_relaxed) == cls ? cls : nullptr, obj};
}

// Locks the class of the object behind the cell and returns the object, pinned until the
// caller unlocks (see "Finding an object's class" above).
template <typename Check>
ZSM_ALWAYS_INLINE Pinned lock_class_of(unsigned long cell, Check check)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  Backoff backoff;
  for (;;) {
    ClassShard* cls = unlocked_class_of(cell, check);
    if (ZSM_LIKELY(cls != nullptr)) {
      lock_shard(cls);
      Pinned pinned = pin_if_still_in(cls, cell, check);
      if (ZSM_LIKELY(pinned.cls != nullptr)) return pinned;
      cls->lock.unlock();
    }
    backoff.pause();
  }
}

// lock_class_of() without waiting: the object, pinned, when its class's lock is free and the
// object is still in it; else its `cls` is nullptr, and the caller waits in lock_class_of().
template <typename Check>
ZSM_ALWAYS_INLINE Pinned try_lock_class_of(unsigned long cell, Check check)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  ClassShard* cls = unlocked_class_of(cell, check);
  if (ZSM_UNLIKELY(cls == nullptr || !cls->lock.try_lock())) return {nullptr, 0};
  Pinned pinned = pin_if_still_in(cls, cell, check);
  if (ZSM_UNLIKELY(pinned.cls == nullptr)) cls->lock.unlock();
  return pinned;
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
inline ClassShard* pinned_class(unsigned long obj) {
  return obj_to_zspage(obj)->cls.load(std::memory_order_relaxed);
}

// A hardened pool's pin_for_access(): the handle and the object's size checked. Inlined into
// pin_for_access(), whose default path bench/golden counts: out of line it would change the
// code of that path too.
ZSM_ALWAYS_INLINE unsigned long pin_checked(ZsPool* pool, const char* call, unsigned long handle,
                                            size_t len) {
  CheckHandle check = check_handle(pool, call, handle);
  unsigned long obj = read_lock_obj(check.cell, check);
  size_t size = obj_size(pinned_class(obj)->geom, obj);
  if (ZSM_UNLIKELY(len > size)) report_out_of_bounds(pool, call, check.handle(), len, size);
  return obj;
}

// The pinned object behind `handle` for a write of `len` bytes, or a look at it: a hardened
// pool also checks the handle and the object's size.
unsigned long pin_for_access(ZsPool* pool, const char* call, unsigned long handle, size_t len) {
  if (ZSM_LIKELY(!pool->hardened)) return read_lock_obj(handle, TrustHandle{});
  return pin_checked(pool, call, handle, len);
}

// The reads in progress on this thread, in hardened pools (open_reads.h).
thread_local OpenReads open_reads;

// A hardened pool's pin for zs_obj_read_begin(): checked, and recorded as a read in progress.
unsigned long pin_and_record_read(ZsPool* pool, unsigned long handle, size_t len) {
  const char* call = "zs_obj_read_begin";
  if (ZSM_UNLIKELY(open_reads.full()))
    report_too_many_reads(pool, call, handle, OpenReads::kMaxReads);
  unsigned long obj = pin_checked(pool, call, handle, len);
  open_reads.add(pool, handle, obj);
  return obj;
}

// The pinned object behind `handle` for a read of `len` bytes (pin_for_access(), and a
// hardened pool records the read).
unsigned long pin_for_read(ZsPool* pool, unsigned long handle, size_t len) {
  if (ZSM_LIKELY(!pool->hardened)) return read_lock_obj(handle, TrustHandle{});
  return pin_and_record_read(pool, handle, len);
}

// A hardened pool's zs_obj_read_end(): ends a read of the handle in progress on this thread,
// unlocking the zspage that read locked. The cell must still hold the object the read
// began on: a free cannot have moved it, only freed it.
void end_recorded_read(ZsPool* pool, unsigned long handle) {
  const char* call = "zs_obj_read_end";
  CheckHandle check = check_handle(pool, call, handle);
  OpenReads::Read* read = open_reads.find(pool, handle);
  if (ZSM_UNLIKELY(read == nullptr)) report_no_read_in_progress(pool, call, handle);
  if (ZSM_UNLIKELY(handle_to_obj(check.cell) != read->obj))
    report_freed_while_read(pool, call, handle);
  if (ZSM_UNLIKELY(!obj_to_zspage(read->obj)->lock.read_unlock_checked()))
    report_invariant(pool, "zs_obj_read_end: a read in progress found its zspage's reader "
                           "count not positive");
  open_reads.remove(read);
}

// Places an object of `size` bytes for `handle` in the first free slot of the shard's hot
// zspage, publishes it in the handle's cell (counted by allocation profiling when that is
// on) and fills it. The fill comes last, so that only the cell and the shard live across its
// copy. Publishing first is safe: no one has the handle yet, and compaction, which finds
// objects through their headers, waits for the shard's lock.
template <typename Fill>
ZSM_ALWAYS_INLINE void place_object(ZsPool* pool, ClassShard* cls, ZsPage* zspage,
                                    unsigned long handle, size_t size, zs_alloc_tag* tag,
                                    Fill fill) ZSM_REQUIRES(cls->lock) {
  const ClassGeometry geom = cls->geom;
  NewObj placed = obj_malloc(geom, zspage, make_header(handle, size));
  zspage->huge_size_m1 = static_cast<uint16_t>(size - 1);
  if (zspage->inuse == cls->objs_per_zspage) retire_full_hot(cls, zspage);
  cls->stats[ZS_OBJS_INUSE]++;
  unsigned long obj = placed.obj;
  if (profiling_enabled()) {
    profile_alloc(pool, cls, handle, size, tag);
    obj |= kObjProfiled;
  }
  record_obj(handle, obj);
  fill(geom, obj, placed.payload);
}

// A store found no hot zspage in its shard and no listed one to make hot: a new zspage, made
// with the lock dropped, is listed (empty) and the fullest listed zspage becomes hot (another
// store may have made one hot, or frees may have listed fuller ones, meanwhile). When no
// zspage can be had, the slots threads' caches reserve are taken back (alloc_zspage() does
// at the memory limit), and a slot that gave the shard, or that another store or free left
// meanwhile, serves the store. Returns the hot zspage; on failure gives the cell back,
// unlocks and returns nullptr with errno ENOMEM.
ZSM_COLD_PATH ZsPage* make_new_zspage_hot(ZsPool* pool, ClassShard* cls, unsigned long handle)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  cls->lock.unlock();
  pool->zspages_being_added.fetch_add(1, std::memory_order_relaxed);
  bool reclaimed = false;
  ZsPage* zspage = alloc_zspage(pool, cls, &reclaimed);
  if (ZSM_UNLIKELY(zspage == nullptr)) {
    pool->zspages_being_added.fetch_sub(1, std::memory_order_relaxed);
    if (!reclaimed && pool->thread_caches) drain_thread_caches(pool);
    lock_shard(cls);
    if (ZsPage* hot = cls->hot != nullptr ? cls->hot : make_fullest_hot(cls)) return hot;
    cache_free_handle(pool, cls, handle);
    cls->lock.unlock();
    errno = ENOMEM;
    return nullptr;
  }
  lock_shard(cls);
  zspage->cls.store(cls, std::memory_order_relaxed);
  insert_zspage(cls, zspage, ZS_INUSE_RATIO_0);
  cls->stats[ZS_OBJS_ALLOCATED] += cls->objs_per_zspage;
  pool->zspages_being_added.fetch_sub(1, std::memory_order_relaxed);
  return cls->hot != nullptr ? cls->hot : make_fullest_hot(cls);
}

// A store whose own shard `own` of the class has no room and can get no zspage: the first
// other shard of the class with a free slot takes it (a thread's objects and their frees
// stay in the shard it stored them in, so another thread's frees leave room there). Returns
// the cell, or 0 with errno ENOMEM when no shard of the class has a free slot.
template <typename Fill>
ZSM_COLD_PATH unsigned long alloc_in_other_shard(ZsPool* pool, ClassShard* first,
                                                 const ClassShard* own, size_t size,
                                                 zs_alloc_tag* tag, Fill fill)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (uint32_t s = 0; s <= pool->shard_mask; s++) {
    ClassShard* cls = first + s;
    if (cls == own) continue;
    lock_shard(cls);
    ZsPage* zspage = cls->hot != nullptr ? cls->hot : make_fullest_hot(cls);
    unsigned long handle = zspage != nullptr ? cache_alloc_handle(pool, cls) : 0;
    if (handle != 0) {
      place_object(pool, cls, zspage, handle, size, tag, fill);
      debug_check_class(pool, cls, zspage);
      cls->lock.unlock();
      return handle;
    }
    cls->lock.unlock();
  }
  errno = ENOMEM;
  return 0;
}

// alloc_object() off its common path: this thread's shard was busy (`cls` is nullptr: it
// waits in lock_store_shard()), its cell cache is empty or it has no hot zspage (the head of
// the fullest list becomes hot, or a new zspage is made). Out of line, so that what lives
// across the calls of these paths does not cost the common path registers, but not cold: a
// store after a free into a zspage that was not full comes here (1-2 % of steady pairs at
// some sizes), and g++ inlines a cold function's copy as a byte loop (rep movsb). Returns the
// cell and unlocks, or 0 with errno ENOMEM.
template <typename Fill>
ZSM_OFF_FAST_PATH unsigned long alloc_object_slow(ZsPool* pool, ClassShard* first, ClassShard* cls,
                                              size_t size, zs_alloc_tag* tag, Fill fill)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  if (cls == nullptr) cls = lock_store_shard(pool, first);
  unsigned long handle = cache_alloc_handle(pool, cls);
  if (ZSM_UNLIKELY(handle == 0)) {
    cls->lock.unlock();
    errno = ENOMEM;
    return 0;
  }
  ZsPage* zspage = cls->hot;
  if (zspage == nullptr && (zspage = make_fullest_hot(cls)) == nullptr &&
      (zspage = make_new_zspage_hot(pool, cls, handle)) == nullptr)
    return pool->shard_mask != 0 ? alloc_in_other_shard(pool, first, cls, size, tag, fill) : 0;
  place_object(pool, cls, zspage, handle, size, tag, fill);
  debug_check_class(pool, cls, zspage);
  cls->lock.unlock();
  return handle;
}

// The kernel's zs_malloc(), written once for zs_malloc() and zs_store(): a cell from the
// shard's cache and the first free slot of its hot zspage (see "Lazy fullness" in zspage.h),
// under the shard's lock; alloc_object_slow() when the shard is busy or either is missing.
// `fill` writes the object (zs_store()'s copy) once it is placed, before the lock is dropped.
// Returns the cell, or 0 with errno ENOMEM.
template <typename Fill>
ZSM_ALWAYS_INLINE unsigned long alloc_object(ZsPool* pool, size_t size, zs_alloc_tag* tag,
                                             Fill fill) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  ClassShard* first = first_shard_for_size(pool, size + kHandleSize);
  ClassShard* cls = store_shard(pool, first);
  if (ZSM_UNLIKELY(!cls->lock.try_lock()))
    return alloc_object_slow(pool, first, nullptr, size, tag, fill);
  ZsPage* zspage = cls->hot;
  if (ZSM_UNLIKELY(zspage == nullptr || cls->free_cells == nullptr))
    return alloc_object_slow(pool, first, cls, size, tag, fill);
  unsigned long handle = cache_alloc_handle(pool, cls);
  place_object(pool, cls, zspage, handle, size, tag, fill);
  debug_check_class(pool, cls, zspage);
  cls->lock.unlock();
  return handle;
}

// zs_store()'s fill: the copy, inlined like the rest of its body, so that what zs_store()
// calls is obj_write(), as the inline policy intends, and not a wrapper around it.
struct CopyFill {
  const void* src;
  size_t size;
  [[nodiscard]] bool valid() const { return src != nullptr; }
  ZSM_ALWAYS_INLINE void operator()(ClassGeometry geom, unsigned long obj, char* payload) const {
    obj_write(geom, obj, payload, src, size);
  }
  // The cached store's copy: the payload starts at `offset` in pages[0] and may run on
  // into pages[1] (it starts at least 8 bytes before the page ends).
  ZSM_ALWAYS_INLINE void into_pages(uint32_t page_mask, char* const* pages, size_t offset) const {
    if (ZSM_LIKELY(offset + size <= size_t{page_mask} + 1))
      copy_payload(pages[0] + offset, src, size);
    else
      copy_across_pages(pages, src, size, size_t{page_mask} + 1 - offset, offset);
  }
};

// zs_malloc()'s fill: nothing.
struct NoFill {
  [[nodiscard]] bool valid() const { return true; }
  void operator()(ClassGeometry, unsigned long, char*) const {}
  void into_pages(uint32_t, char* const*, size_t) const {}
};

// zs_alloc() off its fast path: a bad argument, or any store into a hardened pool, whose
// handle carries the pool's tag.
template <typename Fill>
ZSM_OFF_FAST_PATH unsigned long alloc_checked(ZsPool* pool, size_t size, zs_alloc_tag* tag,
                                              Fill fill) {
  if (!fill.valid() || pool == nullptr || size - 1 >= pool->page_size) {
    errno = !fill.valid() || pool == nullptr || size == 0 ? EINVAL : ENOSPC;
    return 0;
  }
  unsigned long cell = alloc_object(pool, size, tag, fill);
  return cell != 0 ? tag_handle(pool, cell) : 0;
}

// zs_alloc() as a function of its own: the locked path behind a cached store's misses. The
// fill comes first, so that for zs_store_entry(pool, src, size) its source and size arrive
// in the registers they came in: the entry neither moves them nor keeps copies for this call.
template <typename Fill>
ZSM_OFF_FAST_PATH unsigned long alloc_uncached(ZsPool* pool, Fill fill, size_t size,
                                               zs_alloc_tag* tag) {
  if (ZSM_UNLIKELY(!fill.valid() || pool == nullptr || size - 1 >= pool->store_size_limit))
    return alloc_checked(pool, size, tag, fill);
  return alloc_object(pool, size, tag, fill);
}

// zs_store() and zs_malloc() with the thread's cache `tc` of the pool in hand: the newest
// reserved slot of the class, its header and payload written (the cell already names it);
// the locked path when the magazine is empty or the pool's caches are blocked.
template <typename Fill>
ZSM_ALWAYS_INLINE unsigned long alloc_from_cache(ZsPool* pool, ThreadCache* tc, size_t size,
                                                 zs_alloc_tag* tag, Fill fill) {
  if (ZSM_UNLIKELY(!fill.valid() || size - 1 >= pool->store_size_limit) ||
      !enter_fast_path(pool, tc))
    return alloc_uncached(pool, fill, size, tag);
  Magazine& magazine = magazine_for(pool, tc, size + kHandleSize);
  uint32_t reserved = magazine.size();
  if (ZSM_UNLIKELY(reserved == 0)) {
    leave_fast_path(tc);
    return alloc_uncached(pool, fill, size, tag);
  }
  unsigned long handle = magazine.pop(reserved);
  unsigned long obj = handle_to_cell(handle)->load(std::memory_order_relaxed);
  // The slot's first page and offset, from the class's geometry in the magazine.
  size_t start = size_t{obj_to_idx(obj)} * magazine.geom.size;
  char* const* pages = obj_to_zspage(obj)->pages() + (start >> magazine.geom.page_shift);
  size_t offset = start & magazine.geom.page_mask;
  *reinterpret_cast<unsigned long*>(pages[0] + offset) = make_header(handle, size);
  fill.into_pages(magazine.geom.page_mask, pages, offset + kHandleSize);
  leave_fast_path(tc);
  return handle;
}

// A store whose thread's last cache is not the pool's: its cache for the pool, found or
// made, or the kernel's path where the pool keeps none (or profiling is on). Parameters in
// alloc_uncached()'s order.
template <typename Fill>
ZSM_OFF_FAST_PATH unsigned long alloc_other_cache(ZsPool* pool, Fill fill, size_t size,
                                                  zs_alloc_tag* tag) {
  ThreadCache* tc;
  if (pool != nullptr && pool->thread_caches && !profiling_enabled() &&
      (tc = switch_thread_cache(pool)) != nullptr) {
    place_thread();
    return alloc_from_cache(pool, tc, size, tag, fill);
  }
  return alloc_uncached(pool, fill, size, tag);
}

// The C API's zs_store() and zs_malloc(): a load from the thread pointer and a compare find
// the thread's cache for the pool (no cache matches a null pool or one without caches).
template <typename Fill>
ZSM_ALWAYS_INLINE unsigned long alloc_entry(ZsPool* pool, size_t size, zs_alloc_tag* tag,
                                            Fill fill) {
  ThreadCache* tc = current_cache;
  if (ZSM_LIKELY(tc->serves(pool)) && !profiling_enabled())
    return alloc_from_cache(pool, tc, size, tag, fill);
  return alloc_other_cache(pool, fill, size, tag);
}

// zs_malloc() and zs_store(). The one compare of the size against ZsPool::store_size_limit
// also sends a hardened pool's stores off the fast path, so that a default pool's stores
// pay nothing for hardened ones.
template <typename Fill>
ZSM_ALWAYS_INLINE unsigned long zs_alloc(ZsPool* pool, size_t size, zs_alloc_tag* tag, Fill fill) {
  if (ZSM_UNLIKELY(!fill.valid() || pool == nullptr || size - 1 >= pool->store_size_limit))
    return alloc_checked(pool, size, tag, fill);
  return alloc_object(pool, size, tag, fill);
}

// The object's class is locked: frees it, and its handle, and unlocks. The cell goes back to
// the cache before the fullness moves and the cache is trimmed after them, so that only the
// pool and the shard live across the calls of those rare paths.
ZSM_ALWAYS_INLINE void free_locked(ZsPool* pool, ClassShard* cls, unsigned long handle,
                                   unsigned long obj) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  ZsPage* zspage = obj_to_zspage(obj);
  if (ZSM_PROFILING && ZSM_UNLIKELY(obj & kObjProfiled))
    profile_free(pool, cls, handle, obj_size(cls->geom, obj));
  cls->stats[ZS_OBJS_INUSE]--;
  obj_free(cls->geom, zspage, obj_to_idx(obj));
  cache_put_handle(cls, handle);
  fix_fullness_after_free(pool, cls, zspage);
  cache_trim(pool, cls);
  debug_check_class(pool, cls, zspage);
  cls->lock.unlock();
}

// Frees the pinned object behind the cell (its class locked by the caller): the header
// checked first in a hardened pool.
template <typename Check>
ZSM_ALWAYS_INLINE void free_pinned(ZsPool* pool, Pinned pinned, unsigned long cell, Check check)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  check.check_header(pinned.cls->geom, pinned.obj);
  free_locked(pool, pinned.cls, cell, pinned.obj);
}

// free_cell() when the object's class lock was taken, or the object moved meanwhile: waits
// for it. Out of line, so that what the waits keep across their calls does not cost the
// common path registers.
template <typename Check>
ZSM_COLD_PATH void free_cell_waiting(ZsPool* pool, unsigned long cell, Check check) {
  free_pinned(pool, lock_class_of(cell, check), cell, check);
}

// zs_free() of the object behind the cell, trusted, or in a hardened pool checked, with the
// cell and the object's header, before anything changes.
template <typename Check>
ZSM_ALWAYS_INLINE void free_cell(ZsPool* pool, unsigned long cell, Check check) {
  Pinned pinned = try_lock_class_of(cell, check);
  if (ZSM_UNLIKELY(pinned.cls == nullptr)) return free_cell_waiting(pool, cell, check);
  free_pinned(pool, pinned, cell, check);
}

// A hardened pool's zs_free(): the handle checked, and refused while this thread reads it.
// Out of line, so that its checks do not cost a default pool's free registers.
ZSM_OFF_FAST_PATH void free_checked(ZsPool* pool, unsigned long handle) {
  CheckHandle check = check_handle(pool, "zs_free", handle);
  if (ZSM_UNLIKELY(open_reads.find(pool, handle) != nullptr))
    report_free_while_read(pool, "zs_free", handle);
  free_cell(pool, check.cell, check);
}

}  // namespace

// --- the API ---------------------------------------------------------------------------------

unsigned long zs_malloc(ZsPool* pool, size_t size) {
  return zs_alloc(pool, size, nullptr, NoFill{});
}

unsigned long zs_malloc_tagged(ZsPool* pool, size_t size, zs_alloc_tag* tag) {
  return zs_alloc(pool, size, tag, NoFill{});
}

unsigned long zs_store(ZsPool* pool, const void* src, size_t size) {
  return zs_alloc(pool, size, nullptr, CopyFill{src, size});
}

unsigned long zs_store_tagged(ZsPool* pool, const void* src, size_t size, zs_alloc_tag* tag) {
  return zs_alloc(pool, size, tag, CopyFill{src, size});
}

ZSM_OFF_FAST_PATH void free_reserved(ZsPool* pool, unsigned long handle) {
  free_cell(pool, handle, TrustHandle{});
}

namespace {

// zs_free() with the thread's cache `tc` of the pool in hand: the object's slot stays
// reserved there; the locked path when the magazine is full, the caches are blocked, or
// profiling counted the object.
ZSM_ALWAYS_INLINE void free_to_cache(ZsPool* pool, ThreadCache* tc, unsigned long handle) {
  if (ZSM_UNLIKELY(handle == 0)) return;
  if (ZSM_LIKELY(enter_fast_path(pool, tc))) {
    unsigned long obj = handle_to_cell(handle)->load(std::memory_order_relaxed);
    bool cached = !(ZSM_PROFILING && (obj & kObjProfiled)) &&
                  tc->magazine_at(pinned_class(obj)->magazine).push(handle);
    leave_fast_path(tc);
    if (ZSM_LIKELY(cached)) return;
  }
  free_reserved(pool, handle);
}

}  // namespace

void zs_free(ZsPool* pool, unsigned long handle) {
  if (ZSM_UNLIKELY(pool == nullptr || handle == 0)) return;
  if (ZSM_UNLIKELY(pool->hardened))
    free_checked(pool, handle);
  else
    free_cell(pool, handle, TrustHandle{});
}

// The entry points of the C API: through this thread's cache where the pool has caches
// (alloc_entry()), otherwise the kernel's functions above.
unsigned long zs_store_entry(ZsPool* pool, const void* src, size_t size) {
  return alloc_entry(pool, size, nullptr, CopyFill{src, size});
}

unsigned long zs_store_tagged_entry(ZsPool* pool, const void* src, size_t size,
                                    zs_alloc_tag* tag) {
  return alloc_entry(pool, size, tag, CopyFill{src, size});
}

unsigned long zs_malloc_entry(ZsPool* pool, size_t size) {
  return alloc_entry(pool, size, nullptr, NoFill{});
}

unsigned long zs_malloc_tagged_entry(ZsPool* pool, size_t size, zs_alloc_tag* tag) {
  return alloc_entry(pool, size, tag, NoFill{});
}

namespace {

// A free whose thread's last cache is not the pool's (see alloc_other_cache()).
ZSM_OFF_FAST_PATH void free_other_cache(ZsPool* pool, unsigned long handle) {
  ThreadCache* tc;
  if (pool != nullptr && pool->thread_caches && (tc = switch_thread_cache(pool)) != nullptr)
    return free_to_cache(pool, tc, handle);
  zs_free(pool, handle);
}

}  // namespace

void zs_free_entry(ZsPool* pool, unsigned long handle) {
  ThreadCache* tc = current_cache;
  if (ZSM_LIKELY(tc->serves(pool))) return free_to_cache(pool, tc, handle);
  free_other_cache(pool, handle);
}

void zs_obj_write(ZsPool* pool, unsigned long handle, const void* src, size_t size) {
  if (ZSM_UNLIKELY(pool == nullptr || handle == 0 || (src == nullptr && size != 0))) {
    errno = EINVAL;
    return;
  }
  if (size == 0) return;
  unsigned long obj = pin_for_access(pool, "zs_obj_write", handle, size);
  const ClassShard* cls = pinned_class(obj);
  if (ZSM_LIKELY(size <= obj_capacity(cls)))
    obj_write(cls->geom, obj, src, size);
  else
    errno = EINVAL;
  obj_to_zspage(obj)->lock.read_unlock();
}

void* zs_obj_read_begin(ZsPool* pool, unsigned long handle, size_t mem_len, void* local_copy) {
  if (ZSM_UNLIKELY(pool == nullptr || handle == 0)) {
    errno = EINVAL;
    return nullptr;
  }
  unsigned long obj = pin_for_read(pool, handle, mem_len);
  ZsPage* zspage = obj_to_zspage(obj);
  const ClassShard* cls = pinned_class(obj);
  if (ZSM_UNLIKELY(mem_len > obj_capacity(cls))) {
    // Not in a hardened pool, whose pin reports any length past the object's size (no read
    // is recorded here that nothing would end).
    ZSM_DCHECK(!pool->hardened);
    zspage->lock.read_unlock();
    errno = EINVAL;
    return nullptr;
  }
  const ClassGeometry geom = cls->geom;
  Location loc = payload_location(geom, zspage, obj_to_idx(obj));
  if (ZSM_LIKELY(loc.offset + mem_len <= geom.page_size())) return loc.page + loc.offset;
  size_t first = geom.page_size() - loc.offset;
  copy_payload(local_copy, loc.page + loc.offset, first);
  copy_payload(static_cast<char*>(local_copy) + first,
              zspage_location(geom, zspage, (obj_to_idx(obj) + 1) * size_t{geom.size}).page,
              mem_len - first);
  return local_copy;
}

void zs_obj_read_end(ZsPool* pool, unsigned long handle, size_t, void*) {
  if (ZSM_UNLIKELY(pool == nullptr || handle == 0)) return;
  if (ZSM_UNLIKELY(pool->hardened))
    end_recorded_read(pool, handle);
  else
    read_unlock_obj(handle);
}

size_t zs_obj_capacity(ZsPool* pool, unsigned long handle) {
  if (pool == nullptr || handle == 0) return 0;
  unsigned long obj = pin_for_access(pool, "zs_obj_capacity", handle, 0);
  size_t capacity = obj_capacity(pinned_class(obj));
  obj_to_zspage(obj)->lock.read_unlock();
  return capacity;
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
