// Record arenas and the cell region (design: records.h).
#include "memory/records.h"

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
  if (reinterpret_cast<uintptr_t>(map) + len > kRecordAddressLimit) {
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

RecordArena::~RecordArena() {
  if (region_ != nullptr) return;  // the region unmaps its chunks
  while (chunks_ != nullptr) {
    Chunk* next = chunks_->next;
    munmap(chunks_, kChunkSize);
    chunks_ = next;
  }
}

void* RecordArena::new_chunk() {
  if (region_ != nullptr) return region_->carve_chunk();
  void* map = mmap(nullptr, kChunkSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return nullptr;
  if (reinterpret_cast<uintptr_t>(map) + kChunkSize > kRecordAddressLimit) {
    munmap(map, kChunkSize);
    return nullptr;
  }
  return map;
}

// Records come zero-filled from the OS, which is a valid initial ZsPage and HandleCell, and
// are never re-initialised here: a recycled ZsPage keeps its lock word (see pool/lookups.h).
void* RecordArena::alloc_free() {
  void* record = free_;
  if (record != nullptr) std::memcpy(&free_, record, sizeof(free_));
  return record;
}

void* RecordArena::alloc() {
  if (void* record = alloc_free()) return record;
  if (chunks_ == nullptr || carved_ + record_size_ > kChunkSize) {
    auto* chunk = static_cast<Chunk*>(new_chunk());
    if (chunk == nullptr) return nullptr;
    chunk->next = chunks_;
    chunks_ = chunk;
    carved_ = kChunkHeader;
  }
  void* record = reinterpret_cast<char*>(chunks_) + carved_;
  carved_ += record_size_;
  return record;
}

size_t RecordArena::carved_bytes() const {
  size_t bytes = 0;
  for (const Chunk* chunk = chunks_; chunk != nullptr; chunk = chunk->next)
    bytes += chunk == chunks_ ? carved_ : kChunkSize;
  return bytes;
}

void RecordArena::free(void* record) {
  std::memcpy(record, &free_, sizeof(free_));
  free_ = record;
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
