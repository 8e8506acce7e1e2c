// The fatal-report path (design: report.h).
#include "report.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include "pool_types.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

namespace {

[[noreturn]] __attribute__((format(printf, 2, 3))) void die(const Pool* pool, const char* fmt,
                                                             ...) {
  std::fprintf(stderr, "zsm: fatal: pool '%s': ", pool->name.c_str());
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace

void report_foreign_handle(const Pool* pool, const char* call, unsigned long handle) {
  die(pool, "%s(handle %#lx): not a handle of this pool (never returned by it, or from another pool)",
      call, handle);
}

void report_free_handle(const Pool* pool, const char* call, unsigned long handle) {
  die(pool, "%s(handle %#lx): handle is not allocated (freed already: double free or use after free)",
      call, handle);
}

void report_corrupt_header(const Pool* pool, const char* call, unsigned long handle,
                           unsigned long header) {
  die(pool, "%s(handle %#lx): object header %#lx does not name the handle (pool memory overwritten)",
      call, handle, header);
}

void report_out_of_bounds(const Pool* pool, const char* call, unsigned long handle, size_t len,
                          size_t size) {
  die(pool, "%s(handle %#lx): %zu bytes of an object of %zu bytes (past its end)", call, handle,
      len, size);
}

void report_invariant(const Pool* pool, const char* what) {
  die(pool, "invariant broken: %s", what);
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
