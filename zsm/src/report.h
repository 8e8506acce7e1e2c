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

// `handle` is not a handle of this pool: never returned by it, from another pool, or from a
// destroyed pool.
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
// zs_obj_read_end() of a handle this thread has no read of in progress: never begun, ended
// already, or begun in another thread.
[[noreturn]] ZSM_COLD_PATH void report_no_read_in_progress(const Pool* pool, const char* call,
                                                           unsigned long handle);
// A free of an object this thread is reading.
[[noreturn]] ZSM_COLD_PATH void report_free_while_read(const Pool* pool, const char* call,
                                                       unsigned long handle);
// The end of a read whose object was freed (by another thread) while the read was in
// progress.
[[noreturn]] ZSM_COLD_PATH void report_freed_while_read(const Pool* pool, const char* call,
                                                        unsigned long handle);
// A read begun on a thread that holds `max` reads already (open_reads.h).
[[noreturn]] ZSM_COLD_PATH void report_too_many_reads(const Pool* pool, const char* call,
                                                      unsigned long handle, unsigned max);
// A broken invariant found by the debug checks (check.cpp), described by `what`.
[[noreturn]] ZSM_COLD_PATH void report_invariant(const Pool* pool, const char* what);

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
