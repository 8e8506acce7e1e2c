// Every fatal error the library reports, in one place (after scudo's report.h). Hardened
// pools call these on API misuse, ZSM_DEBUG_INVARIANTS builds on a broken invariant; each
// prints one line naming the pool, the call and what is wrong to stderr, then aborts.
// Nothing in the pool has been changed when they are called.
//
// Two tiers of internal checks, as scudo has CHECK and DCHECK: check.h's invariant checks
// walk whole structures (a shard after every call, in the invariants build), and ZSM_DCHECK
// states one assumption at the line that makes it. Both are compiled in by
// ZSM_DEBUG_INVARIANTS only; elsewhere ZSM_DCHECK compiles to nothing and its condition is
// not evaluated, so it costs the fast path nothing.
#pragma once

#include <cstddef>

#include "base/compiler.h"

#if ZSM_DEBUG_INVARIANTS
#define ZSM_DCHECK(cond)                                                                 \
  (ZSM_LIKELY(cond) ? (void)0                                                            \
                    : ::zsm::ZSM_VARIANT_NS::report_dcheck_failed(#cond, __FILE__, __LINE__))
#else
#define ZSM_DCHECK(cond) ((void)sizeof(!(cond)))
#endif

namespace zsm {
inline namespace ZSM_VARIANT_NS {

struct ZsPool;

// A ZSM_DCHECK found `cond` false at file:line.
[[noreturn]] ZSM_COLD_PATH void report_dcheck_failed(const char* cond, const char* file, int line);

// `handle` is not a handle of this pool: never returned by it, from another pool, or from a
// destroyed pool.
[[noreturn]] ZSM_COLD_PATH void report_foreign_handle(const ZsPool* pool, const char* call,
                                                      unsigned long handle);
// `handle` is a cell of this pool that holds no object: freed already, or never returned.
[[noreturn]] ZSM_COLD_PATH void report_free_handle(const ZsPool* pool, const char* call,
                                                   unsigned long handle);
// The object's header does not name `handle`: the pool's memory was overwritten.
[[noreturn]] ZSM_COLD_PATH void report_corrupt_header(const ZsPool* pool, const char* call,
                                                      unsigned long handle,
                                                      unsigned long header);
// A read or write of `len` bytes of an object allocated with `size` bytes.
[[noreturn]] ZSM_COLD_PATH void report_out_of_bounds(const ZsPool* pool, const char* call,
                                                     unsigned long handle, size_t len,
                                                     size_t size);
// zs_obj_read_end() of a handle this thread has no read of in progress: never begun, ended
// already, or begun in another thread.
[[noreturn]] ZSM_COLD_PATH void report_no_read_in_progress(const ZsPool* pool, const char* call,
                                                           unsigned long handle);
// A free of an object this thread is reading.
[[noreturn]] ZSM_COLD_PATH void report_free_while_read(const ZsPool* pool, const char* call,
                                                       unsigned long handle);
// The end of a read whose object was freed (by another thread) while the read was in
// progress.
[[noreturn]] ZSM_COLD_PATH void report_freed_while_read(const ZsPool* pool, const char* call,
                                                        unsigned long handle);
// A read begun on a thread that holds `max` reads already (pool/open_reads.h).
[[noreturn]] ZSM_COLD_PATH void report_too_many_reads(const ZsPool* pool, const char* call,
                                                      unsigned long handle, unsigned max);
// A broken invariant found by the debug checks (check.cpp), described by `what`.
[[noreturn]] ZSM_COLD_PATH void report_invariant(const ZsPool* pool, const char* what);
// Something the process needs failed where nothing can be undone (a system call that may
// not fail), with no pool to name.
[[noreturn]] ZSM_COLD_PATH void report_fatal(const char* what);

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
