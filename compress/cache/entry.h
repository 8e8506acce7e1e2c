// The entry (internal): what the cache's index keeps of one key. The index (index.h) places
// entries by their hash and knows nothing else of them; the record store (record_store.h)
// reads and frees the record an entry names; the core (cache_core.h) sets the kind, the sizes
// and the flags. No behaviour here, so that neither part depends on the other.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zsm::detail {

// How a record's stored bytes hold its value.
enum Kind : uint8_t { kCompressed, kRecompressed, kRaw, kSame };

// Entry::flags. Set by readers too (under the shard's read lock): through std::atomic_ref.
constexpr uint8_t kReferenced = 1;       // CLOCK: used since the hand last passed
constexpr uint8_t kRecompressTried = 2;  // recompress() has looked at it
constexpr uint8_t kIdle = 4;             // not read or written since mark_idle()
constexpr uint8_t kOnFile = 8;           // promoted from the backing file, which still has it
constexpr uint8_t kReleasePending = 16;  // staged to be freed from memory once on file
constexpr uint8_t kReferencedAgain = 32; // CLOCK: used again, while kReferenced was set

// One slot of an index shard: the record's handle and sizes, 32 bits of the key's hash, and
// the flags. A handle of 0 marks an empty slot.
struct Entry {
  unsigned long handle = 0;  // 0: an empty slot
  uint32_t hash = 0;         // bits 0..31 of the key's hash (bits above pick the shard)
  uint32_t value_size = 0;
  uint32_t stored_size = 0;  // bytes after the key
  uint16_t key_size = 0;
  uint8_t kind = 0;
  uint8_t flags = 0;

  [[nodiscard]] size_t record_size() const { return size_t{key_size} + stored_size; }
};
static_assert(sizeof(Entry) == 24, "the index costs 24 bytes an entry");

}  // namespace zsm::detail
