// Hardened pools (ZS_POOL_HARDENED): how a call trusts the handle it is given. Misuse must be
// caught before it corrupts anything, at the price of a few instructions, so the checks use
// only what the pool keeps anyway, and only in branches a default pool never takes.
//   Handles. A hardened pool's handle is its cell's address with the pool's tag in the top
//   16 bits, which no cell address uses (zspage/obj.h): tag = generation << 48, the
//   generation counted per process over hardened pools (1..65535, then round again). A new
//   pool's region often lies where a destroyed one's did, so the address alone cannot tell a
//   live handle from a stale one; the tag can, until 65535 more hardened pools have been
//   created (a stale handle of a pool created exactly k * 65535 pools earlier, whose cell is
//   live at the same address, is taken for the live one). Never reusing a region's address
//   would need no such limit, but each region holds 8 GiB of address space, and tests and
//   fuzzers create tens of thousands of pools. Headers and every internal path hold the
//   cell's address; the tag is stripped where a call is checked and added where a store
//   returns. A handle is checked to be one of the pool's cells once stripped (a range check:
//   a wrong tag leaves top bits set), and its cell to hold an obj: a cell that holds none
//   holds 0 (never used) or a free link, which is an address in the region, while an obj is
//   a ZsPage address shifted up by 16, above any address. The check is made on every read of
//   the cell, under the shard lock too, so that two threads freeing one handle cannot both
//   pass it. A free also checks the object's header against the cell, and reads and writes
//   are checked against the size in the header. A double free is missed only once the
//   handle has been handed out again. A store reaches the tagging path through the one
//   compare it makes anyway (ZsPool::fast.store_size_limit), so a default pool's store pays
//   nothing for it.
//   Reads. Each thread records the reads it has in progress (pool/open_reads.h): a read_end
//   must match one, and unlocks the zspage that read locked, with a decrement that refuses a
//   count that is not positive (-1 would read as "a writer holds it"); a free of an object
//   the thread is reading is refused. A free of an object another thread reads cannot be
//   told from a free of its neighbour (the zspage lock counts readers of all its objects),
//   so it goes ahead; that read's end finds the cell changed and reports it, and meanwhile
//   nothing is unlocked wrongly. Missed: the freed slot and cell reused by a new store
//   before the read ends, which leaves the cell as the read found it.
//   Failures go to zspage/report.h.
// The default paths take a handle as it is (TrustHandle: misuse is undefined behaviour);
// both checkers are inlined into the lookups (pool/lookups.h), so the default code is
// unchanged by them. Part of the object paths' one translation unit (object_api.cpp).
#pragma once
#ifndef ZSM_OBJECT_PATHS_TU
#error "pool/hardened.h belongs to pool/object_api.cpp's translation unit only"
#endif

#include "base/compiler.h"
#include "zspage/obj.h"
#include "zspage/report.h"
#include "zspage/types.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {
namespace {

// A default pool's trust: the obj a cell holds is taken as it is.
struct TrustHandle {
  unsigned long operator()(unsigned long obj) const { return obj; }
  void check_header(ClassGeometry, unsigned long) const {}
};

// The handle a hardened pool returns for a cell: the cell's address with the pool's tag.
inline unsigned long tag_handle(const ZsPool* pool, unsigned long cell) {
  return cell ^ pool->id.handle_tag;
}

// A hardened pool's checks of what one call's handle leads to.
struct CheckHandle {
  const ZsPool* pool;
  const char* call;
  unsigned long cell;  // the handle's cell: the handle without the pool's tag
  // The handle as the caller passed it, for a report (kept as `cell` alone, which saves a
  // register on the paths that check).
  [[nodiscard]] unsigned long handle() const { return tag_handle(pool, cell); }
  // A cell of this pool that holds no obj holds 0 or a link inside the cell region.
  ZSM_ALWAYS_INLINE unsigned long operator()(unsigned long obj) const {
    if (ZSM_UNLIKELY(obj == 0 || pool->metadata.cells.contains(obj)))
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
  unsigned long cell = handle ^ pool->id.handle_tag;
  if (ZSM_UNLIKELY(!pool->metadata.cells.is_cell(cell))) report_foreign_handle(pool, call, handle);
  return {pool, call, cell};
}

}  // namespace
}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
