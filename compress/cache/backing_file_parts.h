// What the backing file's sources share (backing_file.h has the layout): a record's header on
// file, its length and its checksum, the 4 KiB alignment O_DIRECT wants, and the clock.
#pragma once

#include <xxhash.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace zsm::detail::backing_file_parts {

inline constexpr size_t kAlign = 4096;  // O_DIRECT: buffers, offsets and lengths
inline constexpr uint32_t kMagic = 0x465a534d;  // "MSZF"

struct Header {
  uint64_t checksum;  // XXH3-64 of everything after it: the rest of the header, key, stored
  uint32_t magic;
  uint16_t key_size;
  uint8_t kind;
  uint8_t unused;
  uint32_t value_size;
  uint32_t stored_size;
  uint64_t hash;
  uint64_t identity;
  uint64_t generation;
};
static_assert(sizeof(Header) == 48);

inline size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
inline size_t record_length(size_t key_size, size_t stored_size) {
  return round_up(sizeof(Header) + key_size + stored_size, 16);
}

// The checksum of a record laid out at `at`: its bytes from after the checksum field to the
// end of the stored bytes (padding excluded).
inline uint64_t checksum_of(const std::byte* at, size_t key_size, size_t stored_size) {
  constexpr size_t skip = sizeof(uint64_t);
  return XXH3_64bits(at + skip, sizeof(Header) - skip + key_size + stored_size);
}

inline uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace zsm::detail::backing_file_parts
