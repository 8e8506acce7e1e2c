// Every fatal error the library reports, in one place (after scudo's report.h). Hardened
// pools call these on API misuse, ZSM_DEBUG_INVARIANTS builds on a broken invariant; each
// prints one line naming the pool, the call and what is wrong to stderr, then aborts.
// Nothing in the pool has been changed when they are called.
#pragma once

#include <cstddef>

#include "compiler.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

struct Pool;

// `handle` is not a handle cell of this pool: never returned by it, or from another pool.
[[noreturn]] ZSM_COLD_PATH void report_foreign_handle(const Pool* pool, const char* call,
                                                      unsigned long handle);
// `handle` is a cell of this pool that holds no object: freed already, or never returned.
[[noreturn]] ZSM_COLD_PATH void report_free_handle(const Pool* pool, const char* call,
                                                   unsigned long handle);
// The object's header does not name `handle`: the pool's memory was overwritten.
[[noreturn]] ZSM_COLD_PATH void report_corrupt_header(const Pool* pool, const char* call,
                                                      unsigned long handle,
                                                      unsigned long header);
// A read or write of `len` bytes of an object allocated with `size` bytes.
[[noreturn]] ZSM_COLD_PATH void report_out_of_bounds(const Pool* pool, const char* call,
                                                     unsigned long handle, size_t len,
                                                     size_t size);
// A broken invariant found by the debug checks (check.cpp), described by `what`.
[[noreturn]] ZSM_COLD_PATH void report_invariant(const Pool* pool, const char* what);

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
