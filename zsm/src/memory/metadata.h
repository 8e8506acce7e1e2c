// Where the pool metadata lives: handle cells and zspage metadata, in blocks.
//
// MetadataArena hands out fixed-size blocks from 64 KiB chunks, carved on demand and recycled
// through a free list linked through the blocks' first word; nothing is unmapped before the
// pool dies, which is what makes the blocks type-stable (see pool/lookups.h, "Finding an
// object's shard without a pool lock"). Chunks come from mmap, or, for handle cells, from
// the pool's CellRegion.
//
// CellRegion is one reserved range of address space per pool that every handle cell of the
// pool lies in, so that "is this a cell of this pool" is a range check (hardened pools, see
// pool/hardened.h). A region's address is often reused by the next pool, so in time the range
// alone cannot tell pools apart: hardened handles also carry a tag (pool/hardened.h). Every word
// of the carved part is a cell or a chunk header, and holds one of: 0 (never used), an
// address inside the region (a free cell's link, or a chunk link), or a live obj (ZsPage
// address << 16, far above any address). When allocation profiling is built in, a second
// range of the same size mirrors the first: the word at the same offset there is the cell's
// tag slot (pool/profile.cpp). Chunks are made read-write as they are carved, under a lock of the
// region's own (a leaf lock).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/compiler.h"
#include "base/lock.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

// Every block lies below 2^48, so that the encodings of zspage/obj.h can shift a block's address
// up by 16 bits (an obj) or use the top 16 bits of one (handle tags, header sizes).
inline constexpr uintptr_t kMetadataAddressLimit = uintptr_t{1} << 48;

class CellRegion {
 public:
  static constexpr size_t kChunkSize = size_t{64} << 10;

  CellRegion() = default;
  CellRegion(const CellRegion&) = delete;
  CellRegion& operator=(const CellRegion&) = delete;
  ~CellRegion();

  // Reserves the range (and its mirror when `with_mirror`); false when it cannot.
  bool reserve(bool with_mirror);
  // A zero-filled, read-write chunk of kChunkSize bytes, or nullptr when the region is used up.
  void* carve_chunk() ZSM_EXCLUDES(lock_);
  // True when `word` is an address inside the carved part of the region.
  [[nodiscard]] bool contains(unsigned long word) const {
    return word - reinterpret_cast<uintptr_t>(base_) < carved_.load(std::memory_order_acquire);
  }
  // True when `handle` is the address of a cell of the region (in it, and 8-aligned).
  [[nodiscard]] bool is_cell(unsigned long handle) const {
    return contains(handle) && handle % sizeof(unsigned long) == 0;
  }
  // The mirror word of the cell at `handle` (only with a mirror).
  [[nodiscard]] std::atomic<unsigned long>* mirror_of(unsigned long handle) const {
    return reinterpret_cast<std::atomic<unsigned long>*>(handle + size_);
  }

 private:
  static constexpr size_t kReserve = size_t{8} << 30;  // 2^30 cells: 32 GiB of the smallest objects

  char* base_ = nullptr;
  size_t size_ = 0;                     // bytes reserved, and the mirror's distance
  size_t map_len_ = 0;                  // with the mirror
  Mutex lock_;
  std::atomic<size_t> carved_{0};       // bytes from base_ made read-write and handed out
};

class MetadataArena {
 public:
  // Chunks from `region` when given (handle cells), else from mmap.
  explicit MetadataArena(size_t block_size, CellRegion* region = nullptr)
      : block_size_(block_size), region_(region) {}
  MetadataArena(const MetadataArena&) = delete;
  MetadataArena& operator=(const MetadataArena&) = delete;
  ~MetadataArena();

  // nullptr when memory is short. Blocks are 8-aligned and below 2^48 (see obj encoding).
  void* alloc();
  // A block of the free list, or nullptr when it is empty: never carves.
  void* alloc_free();
  void free(void* block);
  // Bytes of blocks ever handed out (touched memory), free or not.
  [[nodiscard]] size_t carved_bytes() const;
  // Calls fn(block) for every block ever handed out, free or not.
  template <typename Fn>
  void for_each_block(Fn fn) const;

 private:
  struct Chunk {
    Chunk* next;
  };
  static constexpr size_t kChunkSize = CellRegion::kChunkSize;
  static constexpr size_t kChunkHeader = 64;
  void* new_chunk();

  const size_t block_size_;
  CellRegion* const region_;
  Chunk* chunks_ = nullptr;           // newest first; carving happens in the newest
  size_t carved_ = 0;                 // bytes carved from the newest chunk
  void* free_ = nullptr;              // free blocks, linked through their first word
};

template <typename Fn>
void MetadataArena::for_each_block(Fn fn) const {
  for (const Chunk* chunk = chunks_; chunk != nullptr; chunk = chunk->next) {
    size_t end = chunk == chunks_ ? carved_ : kChunkSize;
    for (size_t off = kChunkHeader; off + block_size_ <= end; off += block_size_)
      fn(reinterpret_cast<char*>(const_cast<Chunk*>(chunk)) + off);
  }
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
