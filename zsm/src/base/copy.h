// copy_payload(): the copy into and out of pool pages (design and measurements in copy.cpp).
// Every copy of object bytes between a caller's buffer and a pool page, or between two pool
// pages, goes through it: zs_store, zs_obj_write, the copy-out of zs_obj_read_begin,
// compaction's moves, and (through the public zs_memcpy()) the compressed cache. Buffers
// must not overlap, as for memcpy.
//
// Out of line and named "copy_payload" on purpose: tools/lib/count_pairs.py leaves functions of
// that name out of the allocator's instruction count, as it leaves out memcpy.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/compiler.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

// Copies n bytes from src to dst (n may be 0). Writes nothing outside [dst, dst + n).
ZSM_COPY_FUNCTION void copy_payload(void* dst, const void* src, size_t n);

// Where copy_payload() changes shape (copy.cpp): unaligned stores up to this many bytes, stores
// aligned to dst above.
inline constexpr size_t kUnalignedUpTo = 1024;

// The cached store's copy (pool/cached_path.h): copies n bytes from src to dst as
// copy_payload() does, then stores 0 to *flag with release order (the store's leave of its
// fast path, which must follow the copy) and returns `result` (the store's handle), so that
// the store ends in a tail call to it and keeps no stack frame.
using CopyThenClear = unsigned long (*)(void* dst, const void* src, size_t n,
                                        std::atomic<uint32_t>* flag, unsigned long result);
// The copy for a class whose payloads are at most `max_n` bytes, chosen once when the class's
// magazines are set up: the shape for its sizes, the width for this CPU. Any n is copied
// correctly; max_n only decides which shape is fastest.
CopyThenClear copy_payload_for_class(size_t max_n);

#if defined(__x86_64__)
// The shapes and widths copy_payload() chooses between (copy.cpp), exposed for the tests and
// the copy benchmark: SSE2 (any x86-64) and AVX2 (only where copy_payload_avx2_usable() says
// so). Any n is accepted by each.
void copy_payload_unaligned_sse2(void* dst, const void* src, size_t n);
void copy_payload_aligned_sse2(void* dst, const void* src, size_t n);
void copy_payload_unaligned_avx2(void* dst, const void* src, size_t n);
void copy_payload_aligned_avx2(void* dst, const void* src, size_t n);
bool copy_payload_avx2_usable();
#endif

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
