// The payload copy of a store and of zs_obj_write(): obj_write() into an object's slot,
// across a page boundary when the object spans one, and the fills that tell the store path
// what to write once an object is placed (CopyFill for zs_store(), NoFill for zs_malloc()).
// Part of the object paths' one translation unit (object_api.cpp, which says why).
#pragma once
#ifndef ZSM_OBJECT_PATHS_TU
#error "pool/payload.h belongs to pool/object_api.cpp's translation unit only"
#endif

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/compiler.h"
#include "base/copy.h"
#include "zspage/obj.h"
#include "zspage/types.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {
namespace {

// obj_write() of `len` bytes that cross the end of the payload's page: the rest goes to the
// start of the next page of the zspage. Out of line, and with the geometry read again from
// the object's shard (its zspage's `shard` is stable while the object is pinned), so that the
// caller keeps nothing live for this path: what a store keeps in registers across its one
// copy is the shard and the cell. The rest is copied first, so that the copy into the
// payload's page, which needs only what the function was given, ends it as a tail call.
ZSM_OFF_FAST_PATH void write_across_pages(unsigned long obj, char* payload, const void* src,
                                          size_t len) {
  const ZsPage* zspage = obj_to_zspage(obj);
  const ClassGeometry g = zspage->shard.load(std::memory_order_relaxed)->geom;
  size_t first = g.page_size() - (reinterpret_cast<uintptr_t>(payload) & g.page_mask);
  char* next_page = zspage_location(g, zspage, (obj_to_idx(obj) + 1) * size_t{g.size}).page;
  copy_payload(next_page, static_cast<const char*>(src) + first, len - first);
  copy_payload(payload, src, first);
}

// obj_write(): copies `len` bytes into the payload of object `obj`, which starts at `payload`,
// across a page boundary when the object spans one. Pages are aligned to the page size (a
// page source's contract), so the payload's address gives its offset in the page. The
// object must be pinned (shard lock or zspage read lock).
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

// zs_store()'s fill: the copy, inlined like the rest of its body, so that what the store
// calls is obj_write(), as the inline policy intends, and not a wrapper around it.
struct CopyFill {
  const void* src;
  size_t size;
  [[nodiscard]] bool valid() const { return src != nullptr; }
  [[nodiscard]] const void* source() const { return src; }
  ZSM_ALWAYS_INLINE void operator()(ClassGeometry geom, unsigned long obj, char* payload) const {
    obj_write(geom, obj, payload, src, size);
  }
  // The cached store's copy into a payload at `payload` in a contiguous zspage, which also
  // ends its fast path (clears `in_fast`) and returns `handle`: the class's own copy (`copy`,
  // chosen when the magazine was set up), tail-called.
  ZSM_ALWAYS_INLINE unsigned long into_slot_then_clear(CopyThenClear copy, char* payload,
                                                       std::atomic<uint32_t>* in_fast,
                                                       unsigned long handle) const {
    return copy(payload, src, size, in_fast, handle);
  }
};

// zs_malloc()'s fill: nothing.
struct NoFill {
  [[nodiscard]] bool valid() const { return true; }
  [[nodiscard]] const void* source() const { return nullptr; }
  void operator()(ClassGeometry, unsigned long, char*) const {}
  ZSM_ALWAYS_INLINE unsigned long into_slot_then_clear(CopyThenClear, char*,
                                                       std::atomic<uint32_t>* in_fast,
                                                       unsigned long handle) const {
    in_fast->store(0, std::memory_order_release);
    return handle;
  }
};

}  // namespace
}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
