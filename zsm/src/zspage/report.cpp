// The fatal-report path (design: report.h).
#include "zspage/report.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include "zspage/types.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

namespace {

// Prints "zsm: fatal: ", the pool's name when there is one, the message, and aborts.
[[noreturn]] ZSM_PRINTF_FORMAT(2, 3) void die(const ZsPool* pool, const char* fmt,
                                                             ...) {
  std::fputs("zsm: fatal: ", stderr);
  if (pool != nullptr) std::fprintf(stderr, "pool '%s': ", pool->id.name.c_str());
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace

void report_dcheck_failed(const char* cond, const char* file, int line) {
  die(nullptr, "%s:%d: ZSM_DCHECK(%s) failed", file, line, cond);
}

void report_foreign_handle(const ZsPool* pool, const char* call, unsigned long handle) {
  die(pool, "%s(handle %#lx): not a handle of this pool (never returned by it, from another pool, or from a destroyed one)",
      call, handle);
}

void report_free_handle(const ZsPool* pool, const char* call, unsigned long handle) {
  die(pool, "%s(handle %#lx): handle is not allocated (freed already: double free or use after free)",
      call, handle);
}

void report_corrupt_header(const ZsPool* pool, const char* call, unsigned long handle,
                           unsigned long header) {
  die(pool, "%s(handle %#lx): object header %#lx does not name the handle (pool memory overwritten)",
      call, handle, header);
}

void report_out_of_bounds(const ZsPool* pool, const char* call, unsigned long handle, size_t len,
                          size_t size) {
  die(pool, "%s(handle %#lx): %zu bytes of an object of %zu bytes (past its end)", call, handle,
      len, size);
}

void report_no_read_in_progress(const ZsPool* pool, const char* call, unsigned long handle) {
  die(pool, "%s(handle %#lx): no read of this handle is in progress on this thread (never begun, ended already, or begun in another thread)",
      call, handle);
}

void report_free_while_read(const ZsPool* pool, const char* call, unsigned long handle) {
  die(pool, "%s(handle %#lx): the object is being read by this thread (zs_obj_read_end() first)",
      call, handle);
}

void report_freed_while_read(const ZsPool* pool, const char* call, unsigned long handle) {
  die(pool, "%s(handle %#lx): the object was freed while this read was in progress", call,
      handle);
}

void report_too_many_reads(const ZsPool* pool, const char* call, unsigned long handle,
                           unsigned max) {
  die(pool, "%s(handle %#lx): more than %u reads in progress on this thread (the limit of a hardened pool)",
      call, handle, max);
}

void report_invariant(const ZsPool* pool, const char* what) {
  die(pool, "invariant broken: %s", what);
}

void report_fatal(const char* what) { die(nullptr, "%s", what); }

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
