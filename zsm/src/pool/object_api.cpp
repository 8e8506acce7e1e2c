// The pool: zsmalloc's object store (mm/zsmalloc.c), in userspace. This file holds the design
// and the object API: store, malloc and free (through the thread's cache, and on the
// kernel's locked path), read, write and capacity. zsm/src/README.md gives the layers.
//
// Vocabulary. A *page* is one page of the pool's page size (4, 16 or 64 KiB), taken from the
// pool's page source. A *zspage* is a chain of 1..chain pages that holds the objects of one
// size *class*. An *object* is one slot of the class size in a zspage. A *handle* is what the
// user holds: the address of an 8-byte *handle cell* that says where the object is now. A
// class is split into lock *shards* (zspage/shard_placement.h), each a ClassShard.
//
// Object and handle encoding (helpers in zspage/obj.h).
//   handle  = address of a HandleCell (8-aligned, nonzero). It never changes. Every cell of a
//             pool lies in the pool's CellRegion (memory/metadata.h), one reserved range.
//   obj     = *cell = (address of the ZsPage metadata << 16) | flags | object index.
//             The index (15 bits) is zspage-wide (object i starts at byte i * size of the
//             chain) and covers the largest zspage (16 x 64 KiB / 32 B = 32768 objects); bit
//             15 marks an object allocation profiling counted (pool/profile.h); 48 address
//             bits cover every user-space address. Compaction moves an object by rewriting
//             its cell, so handles stay valid.
//   header  = the first 8 bytes of a live non-huge object: handle | (size - 1) << 48 |
//             OBJ_ALLOCATED_TAG, where size is what the object was allocated with.
//             A free object's first 8 bytes are instead a link: next free index << 1 (tag 0).
//             Huge objects (one per one-page zspage) have no header: the page is all payload,
//             and the zspage's huge_size_m1 holds the size. A huge object never moves (its
//             zspage is full or empty), so nothing needs its handle.
// zspage layout. pages() lists the chain; objects sit back to back over the concatenated
// pages and may span one page boundary. A free object's link fits in its first page, because
// objects start on 16-byte boundaries. Free objects form a LIFO list from `freeobj`. Where
// the page source hands out runs (the default source), a zspage's pages are one run, adjacent
// in the address space (ZsPage::layout says so): the cached store then writes an object as one
// range, with no page-span check; the locked path and reads keep the kernel's per-page
// arithmetic, which gives the same bytes either way.
//
// Fullness. Each shard sorts its zspages into 12 fullness groups (0 %, 0-9 % .. 90-99 %,
// 100 %) and keeps those of the first 11 on lists, newest first, with a bitmap of the
// non-empty lists; full zspages are on no list (nothing looks for them), only counted. One
// zspage per shard, the hot one, takes the stores and is on no list: zspage/zspage.h, "Lazy
// fullness". A zspage that a free leaves empty is freed at once, as in the kernel, unless it
// is its shard's only empty zspage: that one stays on the 0 % list as a spare so that a
// store/free pair at a zspage boundary does not build and tear down a zspage each time.
// zs_compact() frees the spares.
//
// Lock order: ZsPool::compaction.in_progress (flag) -> ClassShard::lock
//             -> ZspageLock (try only) -> ZsPool::source.lock, ShardArenas::lock
//             -> CellRegion's lock (leaves).
//   ClassShard::lock fullness lists, free lists, inuse counts, stats, the shard's cell
//                    stock. Store and free take one shard's; compaction takes all shards of
//                    one class, in index order.
//   ZspageLock       held for read by zs_obj_read_begin..end and zs_obj_write, so the object
//                    cannot move; compaction only trylocks it for write before emptying a
//                    zspage, and leaves that zspage alone if a reader is in.
//   There is no pool-wide lock on any store, free, read or write path: a free finds its
//   object's shard without one (pool/lookups.h).
//
// Moving an object (compaction) copies it to its new slot, then publishes the new obj in
// the cell with a release store: a reader that sees the new cell sees the copied bytes.
//
// Hardened pools (ZS_POOL_HARDENED) check every handle and object they are given:
// pool/hardened.h.
//
// One translation unit. The store, free, read and write paths are this file and the headers
// it alone includes (pool/payload.h, hardened.h, lookups.h, locked_path.h, cached_path.h;
// each refuses any other includer), so that their helpers have internal linkage and inline
// into the entry points as the kernel's static helpers inline into zs_malloc(): the inline
// policy (base/compiler.h) acts on them, and bench/golden counts the result.
#define ZSM_OBJECT_PATHS_TU 1

#include "pool/pool.h"

#include <cerrno>

#include "base/copy.h"
#include "pool/cached_path.h"
#include "pool/hardened.h"
#include "pool/locked_path.h"
#include "pool/lookups.h"
#include "pool/payload.h"
#include "zspage/obj.h"
#include "zspage/types.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

// --- the locked path ----------------------------------------------------------------------

unsigned long locked_path::malloc(ZsPool* pool, size_t size) {
  return locked_alloc(pool, size, nullptr, NoFill{});
}

unsigned long locked_path::malloc_tagged(ZsPool* pool, size_t size, zs_alloc_tag* tag) {
  return locked_alloc(pool, size, tag, NoFill{});
}

unsigned long locked_path::store(ZsPool* pool, const void* src, size_t size) {
  return locked_alloc(pool, size, nullptr, CopyFill{src, size});
}

unsigned long locked_path::store_tagged(ZsPool* pool, const void* src, size_t size,
                                        zs_alloc_tag* tag) {
  return locked_alloc(pool, size, tag, CopyFill{src, size});
}

ZSM_OFF_FAST_PATH void free_reserved(ZsPool* pool, unsigned long handle) {
  free_cell(pool, handle, TrustHandle{});
}

void locked_path::free(ZsPool* pool, unsigned long handle) {
  if (ZSM_UNLIKELY(pool == nullptr || handle == 0)) return;
  if (ZSM_UNLIKELY(pool->fast.hardened))
    free_checked(pool, handle);
  else
    free_cell(pool, handle, TrustHandle{});
}

// --- the C API's store, malloc and free: through this thread's cache ------------------------

unsigned long zs_store(ZsPool* pool, const void* src, size_t size) {
  return alloc_entry(pool, size, nullptr, CopyFill{src, size});
}

unsigned long zs_store_tagged(ZsPool* pool, const void* src, size_t size, zs_alloc_tag* tag) {
  return alloc_entry(pool, size, tag, CopyFill{src, size});
}

unsigned long zs_malloc(ZsPool* pool, size_t size) {
  return alloc_entry(pool, size, nullptr, NoFill{});
}

unsigned long zs_malloc_tagged(ZsPool* pool, size_t size, zs_alloc_tag* tag) {
  return alloc_entry(pool, size, tag, NoFill{});
}

void zs_free(ZsPool* pool, unsigned long handle) {
  if (ZSM_UNLIKELY(handle == 0)) return;
  ThreadCache* tc = current_cache;
  if (ZSM_LIKELY(enter_fast_path(pool, tc))) return free_in_cache(pool, tc, handle);
  free_other_cache(pool, handle);
}

// --- reads and writes -----------------------------------------------------------------------

void zs_obj_write(ZsPool* pool, unsigned long handle, const void* src, size_t size) {
  if (ZSM_UNLIKELY(pool == nullptr || handle == 0 || (src == nullptr && size != 0))) {
    errno = EINVAL;
    return;
  }
  if (size == 0) return;
  unsigned long obj = pin_for_access(pool, "zs_obj_write", handle, size);
  const ClassShard* shard = pinned_shard(obj);
  if (ZSM_LIKELY(size <= obj_capacity(shard)))
    obj_write(shard->geom, obj, src, size);
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
  const ClassShard* shard = pinned_shard(obj);
  if (ZSM_UNLIKELY(mem_len > obj_capacity(shard))) {
    // Not in a hardened pool, whose pin reports any length past the object's size (no read
    // is recorded here that nothing would end).
    ZSM_DCHECK(!pool->fast.hardened);
    zspage->lock.read_unlock();
    errno = EINVAL;
    return nullptr;
  }
  const ClassGeometry geom = shard->geom;
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
  if (ZSM_UNLIKELY(pool->fast.hardened))
    end_recorded_read(pool, handle);
  else
    read_unlock_obj(handle);
}

size_t zs_obj_capacity(ZsPool* pool, unsigned long handle) {
  if (pool == nullptr || handle == 0) return 0;
  unsigned long obj = pin_for_access(pool, "zs_obj_capacity", handle, 0);
  size_t capacity = obj_capacity(pinned_shard(obj));
  obj_to_zspage(obj)->lock.read_unlock();
  return capacity;
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
