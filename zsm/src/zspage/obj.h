// The encodings of the pool, in one place: obj values (what a handle cell holds), object
// headers, handle tags, and where an object's bytes lie in its zspage. pool/object_api.cpp
// explains them in prose at its top; this header holds only the tiny helpers the pool's files
// share, all inline and lock-free.
#pragma once

#include <cstddef>
#include <cstdint>

#include "zspage/types.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

static_assert(sizeof(unsigned long) == 8, "handles and obj values need 64-bit longs");

// obj = (ZsPage address << kObjIndexBits) | flags | object index.
inline constexpr unsigned kObjIndexBits = 16;
inline constexpr unsigned long kObjIndexMask = 0x7fff;
// Set in the obj of an object that allocation profiling counted (pool/profile.h): the free takes
// it off its site and class again. The largest zspage has 32768 objects, so bit 15 is free.
inline constexpr unsigned long kObjProfiled = 0x8000;
static_assert((kMaxChain << kMaxPageShift) / kMinAllocSize <= kObjIndexMask + 1,
              "object index bits must cover the largest zspage");
static_assert(kMetadataAddressLimit == uintptr_t{1} << (64 - kObjIndexBits),
              "pool metadata (ZsPage blocks, handle cells) must leave the top kObjIndexBits free");

// A hardened pool's handle = cell address ^ (generation << kHandleTagShift): cells lie below
// kMetadataAddressLimit, so the top bits are free to tell the pool (pool/hardened.h).
// Generations run 1..kHandleGenerations; a default pool's handle is the cell address.
inline constexpr unsigned kHandleTagShift = 64 - kObjIndexBits;
inline constexpr unsigned long kHandleGenerations = (1UL << (64 - kHandleTagShift)) - 1;

// header = cell | (object size - 1) << kHeaderSizeShift | OBJ_ALLOCATED_TAG. Cells are
// addresses below kMetadataAddressLimit, so the top 16 bits carry the size the object was
// allocated with (checked in hardened pools, counted by profiling). A free object's first
// word is a link instead, with the tag clear.
inline constexpr unsigned long OBJ_ALLOCATED_TAG = 1;
inline constexpr unsigned OBJ_TAG_BITS = 1;
inline constexpr unsigned kHeaderSizeShift = 64 - kObjIndexBits;
inline constexpr unsigned long kHeaderHandleMask = (1UL << kHeaderSizeShift) - 1 - OBJ_ALLOCATED_TAG;
inline constexpr uint32_t kFreeListEnd = ~0U >> OBJ_TAG_BITS;  // a link to no object
static_assert((size_t{1} << kMaxPageShift) - 1 <= (~0UL >> kHeaderSizeShift),
              "the header's size bits must hold every object size");

inline unsigned long location_to_obj(const ZsPage* zspage, uint32_t obj_idx) {
  return (reinterpret_cast<uintptr_t>(zspage) << kObjIndexBits) | obj_idx;
}

inline ZsPage* obj_to_zspage(unsigned long obj) {
  return reinterpret_cast<ZsPage*>(obj >> kObjIndexBits);
}

inline uint32_t obj_to_idx(unsigned long obj) { return obj & kObjIndexMask; }

inline HandleCell* handle_to_cell(unsigned long handle) {
  return reinterpret_cast<HandleCell*>(handle);
}

inline void record_obj(unsigned long handle, unsigned long obj) {
  handle_to_cell(handle)->store(obj, std::memory_order_release);
}

inline unsigned long handle_to_obj(unsigned long handle) {
  return handle_to_cell(handle)->load(std::memory_order_acquire);
}

inline unsigned long make_header(unsigned long handle, size_t size) {
  return handle | (static_cast<unsigned long>(size - 1) << kHeaderSizeShift) | OBJ_ALLOCATED_TAG;
}

inline unsigned long header_to_handle(unsigned long header) { return header & kHeaderHandleMask; }

inline size_t header_to_size(unsigned long header) { return (header >> kHeaderSizeShift) + 1; }

// A byte of a zspage: the page and the offset in it.
struct Location {
  char* page;
  size_t offset;
};

// Where byte `off` of the zspage's concatenated pages lies.
inline Location zspage_location(ClassGeometry g, const ZsPage* zspage, size_t off) {
  return {zspage->pages()[off >> g.page_shift], off & g.page_mask};
}

// Where object `obj_idx` starts (its header or free link).
inline Location obj_location(ClassGeometry g, const ZsPage* zspage, uint32_t obj_idx) {
  return zspage_location(g, zspage, size_t{obj_idx} * g.size);
}

// Where object `obj_idx`'s payload starts: in the page of its header, which ends at least 8
// bytes before the page does. Derived from obj_location() so that the compiler can share the
// work with obj_malloc() when both are inlined into zs_store().
inline Location payload_location(ClassGeometry g, const ZsPage* zspage, uint32_t obj_idx) {
  Location loc = obj_location(g, zspage, obj_idx);
  loc.offset += g.payload_offset;
  return loc;
}

// The first word of an object: its header or free link. Objects start 16-byte aligned, so
// the word never spans pages. The huge class has no header, but its one object's first word
// serves as a link while it is free, and the header obj_malloc() writes there is
// overwritten by the payload: the same code serves both.
inline unsigned long* obj_word(Location loc) {
  return reinterpret_cast<unsigned long*>(loc.page + loc.offset);
}

inline bool is_huge(ClassGeometry g) { return g.payload_offset == 0; }

inline size_t obj_capacity(const ClassShard* shard) {
  return shard->geom.size - shard->geom.payload_offset;
}

// The size a live object was allocated with: from its header, or for the huge class (no
// header) from its zspage. The object must be pinned.
inline size_t obj_size(ClassGeometry g, unsigned long obj) {
  const ZsPage* zspage = obj_to_zspage(obj);
  if (is_huge(g)) return size_t{zspage->huge_size_m1} + 1;
  return header_to_size(*obj_word(obj_location(g, zspage, obj_to_idx(obj))));
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
