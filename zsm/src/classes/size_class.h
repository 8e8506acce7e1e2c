// The size-class table, computed by the kernel's rule (mm/zsmalloc.c, zs_create_pool()).
//
// Index i asks for objects of min(32 + i * delta, page) bytes, delta = page_size >> 8. Each
// class picks its zspage length (1..chain pages) by least tail waste, ties to fewer pages,
// power-of-two sizes always 1 page. Walking from the largest index down, a class with the same
// (pages, objs) as the last class created is merged into it: its requests are served by that
// larger class. The largest class that is neither 1 page nor 1 object sets huge_class_size.
//
// Everything here is constexpr: the default tables are checked by static_assert below, and
// the pool builds its own table at creation for its page and chain sizes. No dependency on
// the rest of the allocator; the constants the public header states are taken from it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include <zsm/zsmalloc.h>

#include "base/compiler.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

inline constexpr unsigned kMinAllocSize = ZS_MIN_ALLOC_SIZE;
inline constexpr unsigned kHandleSize = ZS_HANDLE_SIZE;  // the in-object header
inline constexpr unsigned kClassBits = 8;                // CLASS_BITS: delta = page_size >> 8
inline constexpr unsigned kMinChain = ZS_MIN_CHAIN_SIZE, kMaxChain = ZS_MAX_CHAIN_SIZE,
                          kDefaultChain = ZS_DEFAULT_CHAIN_SIZE;
inline constexpr unsigned kMinPageShift = 12, kMaxPageShift = 16;
// DIV_ROUND_UP(page - 32, page >> 8) + 1 is 255 for 4 KiB pages and 257 for larger ones.
inline constexpr unsigned kMaxClassIndices = 257;

struct ClassRow {
  uint32_t size = 0;      // object slot size, header included
  uint32_t pages = 0;     // pages per zspage
  uint32_t objs = 0;      // objects per zspage
  uint32_t resolve = 0;   // index of the distinct class serving this index (itself if distinct)
  [[nodiscard]] constexpr bool huge() const { return pages == 1 && objs == 1; }
  [[nodiscard]] constexpr uint32_t waste(uint32_t page_size) const {
    return pages * page_size - objs * size;
  }
};

struct ClassTable {
  uint32_t page_size = 0;
  uint32_t page_shift = 0;
  uint32_t chain = 0;
  uint32_t delta = 0;
  uint32_t nr_indices = 0;    // ZS_SIZE_CLASSES
  uint32_t nr_distinct = 0;
  uint32_t huge_class_size = 0;
  std::array<ClassRow, kMaxClassIndices> rows{};

  [[nodiscard]] constexpr bool distinct(uint32_t i) const { return rows[i].resolve == i; }

  // get_size_class_index(): the index serving a request of `size` bytes (header included).
  [[nodiscard]] constexpr uint32_t index_of(size_t size) const {
    if (size <= kMinAllocSize) return 0;
    size_t i = (size - kMinAllocSize + delta - 1) / delta;
    return i < nr_indices ? static_cast<uint32_t>(i) : nr_indices - 1;
  }
};

[[nodiscard]] constexpr bool valid_geometry(size_t page_size, unsigned chain) {
  bool pow2 = page_size != 0 && (page_size & (page_size - 1)) == 0;
  return pow2 && page_size >= (size_t{1} << kMinPageShift) &&
         page_size <= (size_t{1} << kMaxPageShift) && chain >= kMinChain && chain <= kMaxChain;
}

// calculate_zspage_chain_size(): the chain length with the least tail waste.
[[nodiscard]] constexpr uint32_t zspage_chain_size(uint32_t size, uint32_t page_size,
                                                   uint32_t chain) {
  if ((size & (size - 1)) == 0) return 1;
  uint32_t best = 1, best_waste = page_size % size;
  for (uint32_t pages = 2; pages <= chain; pages++) {
    uint32_t waste = (pages * page_size) % size;
    if (waste < best_waste) {
      best = pages;
      best_waste = waste;
    }
  }
  return best;
}

[[nodiscard]] constexpr ClassTable build_class_table(uint32_t page_size, uint32_t chain) {
  ClassTable t;
  t.page_size = page_size;
  while ((1u << t.page_shift) < page_size) t.page_shift++;
  t.chain = chain;
  t.delta = page_size >> kClassBits;
  t.nr_indices = (page_size - kMinAllocSize + t.delta - 1) / t.delta + 1;
  const ClassRow* last_created = nullptr;
  for (uint32_t i = t.nr_indices; i-- > 0;) {
    uint32_t size = kMinAllocSize + i * t.delta;
    if (size > page_size) size = page_size;
    uint32_t pages = zspage_chain_size(size, page_size, chain);
    uint32_t objs = pages * page_size / size;
    if (pages != 1 && objs != 1 && t.huge_class_size == 0)
      t.huge_class_size = size - (kHandleSize - 1);
    if (last_created != nullptr && last_created->pages == pages && last_created->objs == objs) {
      t.rows[i] = *last_created;  // can_merge(): served by the larger class
      continue;
    }
    t.rows[i] = ClassRow{size, pages, objs, i};
    last_created = &t.rows[i];
    t.nr_distinct++;
  }
  return t;
}

// Checks the invariants every table must keep; returns a description of the first broken
// one, or nullptr.
const char* validate_class_table(const ClassTable& t);

// Prints one row per index: index, size asked, pages, objs and size of the serving class,
// tail waste, and marks for huge and merged rows.
void print_class_table(const ClassTable& t, FILE* out);

// The kernel's published figures for 4 KiB pages (Documentation/mm/zsmalloc.rst, min-waste rule).
static_assert(build_class_table(4096, 8).nr_distinct == 119);
static_assert(build_class_table(4096, 8).huge_class_size == 3625);
static_assert(build_class_table(4096, 4).nr_distinct == 69);
static_assert(build_class_table(4096, 4).huge_class_size == 3257);
static_assert(build_class_table(4096, 8).nr_indices == 255);
static_assert(build_class_table(16384, 8).nr_distinct == 121);
static_assert(build_class_table(65536, 8).nr_distinct == 123);

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
