// Block arenas and the cell region (design: metadata.h).
#include "memory/metadata.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>


namespace zsm {
inline namespace ZSM_VARIANT_NS {

CellRegion::~CellRegion() {
  if (base_ != nullptr) munmap(base_, map_len_);
}

// PROT_NONE and MAP_NORESERVE: address space only, until chunks are carved.
bool CellRegion::reserve(bool with_mirror) {
  size_t len = with_mirror ? 2 * kReserve : kReserve;
  void* map = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) return false;
  if (reinterpret_cast<uintptr_t>(map) + len > kMetadataAddressLimit) {
    munmap(map, len);
    return false;
  }
  base_ = static_cast<char*>(map);
  size_ = kReserve;
  map_len_ = len;
  return true;
}

void* CellRegion::carve_chunk() {
  MutexGuard guard(lock_);
  size_t carved = carved_.load(std::memory_order_relaxed);
  if (base_ == nullptr || carved + kChunkSize > size_) return nullptr;
  char* chunk = base_ + carved;
  if (mprotect(chunk, kChunkSize, PROT_READ | PROT_WRITE) != 0) return nullptr;
  if (map_len_ > size_ && mprotect(chunk + size_, kChunkSize, PROT_READ | PROT_WRITE) != 0)
    return nullptr;
  carved_.store(carved + kChunkSize, std::memory_order_release);
  return chunk;
}

MetadataArena::~MetadataArena() {
  if (region_ != nullptr) return;  // the region unmaps its chunks
  while (chunks_ != nullptr) {
    Chunk* next = chunks_->next;
    munmap(chunks_, kChunkSize);
    chunks_ = next;
  }
}

void* MetadataArena::new_chunk() {
  if (region_ != nullptr) return region_->carve_chunk();
  void* map = mmap(nullptr, kChunkSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return nullptr;
  if (reinterpret_cast<uintptr_t>(map) + kChunkSize > kMetadataAddressLimit) {
    munmap(map, kChunkSize);
    return nullptr;
  }
  return map;
}

// Blocks come zero-filled from the OS, which is a valid initial ZsPage and HandleCell, and
// are never re-initialised here: a recycled ZsPage keeps its lock word (see pool/lookups.h).
void* MetadataArena::alloc_free() {
  void* block = free_;
  if (block != nullptr) std::memcpy(&free_, block, sizeof(free_));
  return block;
}

void* MetadataArena::alloc() {
  if (void* block = alloc_free()) return block;
  if (chunks_ == nullptr || carved_ + block_size_ > kChunkSize) {
    auto* chunk = static_cast<Chunk*>(new_chunk());
    if (chunk == nullptr) return nullptr;
    chunk->next = chunks_;
    chunks_ = chunk;
    carved_ = kChunkHeader;
  }
  void* block = reinterpret_cast<char*>(chunks_) + carved_;
  carved_ += block_size_;
  return block;
}

size_t MetadataArena::carved_bytes() const {
  size_t bytes = 0;
  for (const Chunk* chunk = chunks_; chunk != nullptr; chunk = chunk->next)
    bytes += chunk == chunks_ ? carved_ : kChunkSize;
  return bytes;
}

void MetadataArena::free(void* block) {
  std::memcpy(block, &free_, sizeof(free_));
  free_ = block;
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
