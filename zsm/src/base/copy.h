// copy_payload(): the copy into and out of pool pages (design and measurements in copy.cpp).
// Every copy of object bytes between a caller's buffer and a pool page, or between two pool
// pages, goes through it: zs_store, zs_obj_write, the copy-out of zs_obj_read_begin,
// compaction's moves, and (through the public zs_memcpy()) the compressed cache. Buffers
// must not overlap, as for memcpy.
//
// Out of line and named "copy_payload" on purpose: tools/lib/count_pairs.py leaves functions of
// that name out of the allocator's instruction count, as it leaves out memcpy.
#pragma once

#include <cstddef>

#include "base/compiler.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

// Copies n bytes from src to dst (n may be 0). Writes nothing outside [dst, dst + n).
ZSM_COPY_FUNCTION void copy_payload(void* dst, const void* src, size_t n);

#if defined(__x86_64__)
// The two forms copy_payload() chooses between for n > 128, exposed for the tests and the
// copy benchmark: SSE2 (any x86-64) and AVX2 (only where copy_payload_avx2_usable() says so).
// Any n is accepted.
void copy_payload_sse2(void* dst, const void* src, size_t n);
void copy_payload_avx2(void* dst, const void* src, size_t n);
bool copy_payload_avx2_usable();
#endif

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
