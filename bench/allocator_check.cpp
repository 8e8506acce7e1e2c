// zsm_allocator_check: the four general-purpose allocators share one benchmark process
// (bench/variants.h); this checks, linked exactly as the benchmarks are, that
//   1. the process's malloc family and operator new/delete resolve to mimalloc (or to the
//      sanitizer runtime that replaces malloc), and no name of them to jemalloc or tcmalloc;
//   2. each trait's store lands in its own allocator and in no other: every allocator is
//      asked about the pointer, each by a query that is safe on any pointer or counts only
//      its own allocations (mimalloc: mi_heap_check_owned on the default heap, which
//      mi_malloc uses; glibc: mallinfo2's in-use bytes, libc's own; jemalloc:
//      thread.allocated; tcmalloc: MallocExtension_GetOwnership).
// Prints every check; exits 1 if any failed.
#include <dlfcn.h>
#include <gperftools/malloc_extension_c.h>
#include <malloc.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "live_set.h"
#include "variants.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ZSM_SANITIZER_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ZSM_SANITIZER_MALLOC 1
#endif
#endif

namespace zsm_bench {
namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) failures++;
}

// The file of the library that defines `addr`, or "?".
std::string library_of(const void* addr) {
  Dl_info info{};
  if (addr == nullptr || dladdr(addr, &info) == 0 || info.dli_fname == nullptr) return "?";
  return info.dli_fname;
}

bool names_jemalloc_or_tcmalloc(const std::string& file) {
  return file.find("jemalloc") != std::string::npos || file.find("tcmalloc") != std::string::npos;
}

// Every name jemalloc or tcmalloc_minimal exports that libc, libstdc++ or mimalloc export too.
constexpr const char* kSharedNames[] = {
    // the malloc family
    "malloc", "free", "calloc", "realloc", "memalign", "posix_memalign", "__posix_memalign",
    "aligned_alloc", "valloc", "pvalloc", "cfree", "malloc_usable_size", "malloc_size",
    "__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc", "__libc_memalign",
    "__libc_valloc", "__libc_pvalloc", "__libc_cfree",
    // glibc's statistics and tuning, and the system calls tcmalloc wraps for its hooks
    "mallinfo", "mallopt", "malloc_stats", "mmap", "mmap64", "mremap", "munmap", "sbrk",
    // operator new and delete
    "_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t", "_ZnwmSt11align_val_t",
    "_ZnamSt11align_val_t", "_ZnwmSt11align_val_tRKSt9nothrow_t",
    "_ZnamSt11align_val_tRKSt9nothrow_t", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm",
    "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t", "_ZdlPvSt11align_val_t",
    "_ZdaPvSt11align_val_t", "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_tRKSt9nothrow_t"};

void check_process_names() {
  const std::string mimalloc_file = library_of(reinterpret_cast<const void*>(&mi_malloc));
  const std::string malloc_file = library_of(dlsym(RTLD_DEFAULT, "malloc"));
  std::printf("the process's malloc: %s\n", malloc_file.c_str());
#ifndef ZSM_SANITIZER_MALLOC
  check(malloc_file == mimalloc_file, "malloc is mimalloc's (" + mimalloc_file + ")");
#endif
  for (const char* name : kSharedNames) {
    void* addr = dlsym(RTLD_DEFAULT, name);
    if (addr == nullptr) continue;
    const std::string file = library_of(addr);
    check(!names_jemalloc_or_tcmalloc(file), std::string(name) + " -> " + file);
  }
}

size_t glibc_in_use() { return mallinfo2().uordblks; }

uint64_t jemalloc_thread_allocated() {
  uint64_t bytes = 0;
  size_t len = sizeof(bytes);
  if (mallctl("thread.allocated", &bytes, &len, nullptr, 0) != 0) return 0;
  return bytes;
}

// Which allocators hold `p`, which was stored between the two snapshots.
struct Owners {
  bool mimalloc, glibc, jemalloc, tcmalloc;
};

template <typename A>
void check_trait_lands_in_its_own() {
  constexpr size_t kBytes = 1000;
  auto* pool = A::create();
  const size_t glibc_before = glibc_in_use();
  const uint64_t jemalloc_before = jemalloc_thread_allocated();
  const unsigned long h = A::store(pool, source_bytes(), kBytes);
  const uint64_t jemalloc_after = jemalloc_thread_allocated();
  const size_t glibc_after = glibc_in_use();
  const void* p = reinterpret_cast<const void*>(h);
  const Owners owners{mi_heap_check_owned(mi_heap_get_default(), p), glibc_after > glibc_before,
                      jemalloc_after > jemalloc_before,
                      MallocExtension_GetOwnership(p) == MallocExtension_kOwned};
  const std::string name = A::name;
  check(p != nullptr, name + ": store returned memory");
  check(owners.mimalloc == (name == "mimalloc"), name + ": mimalloc owns it? " +
                                                     (owners.mimalloc ? "yes" : "no"));
  check(owners.glibc == (name == "glibc"), name + ": glibc's in-use bytes grew? " +
                                               (owners.glibc ? "yes" : "no"));
  check(owners.jemalloc == (name == "jemalloc"), name + ": jemalloc's thread.allocated grew? " +
                                                     (owners.jemalloc ? "yes" : "no"));
  check(owners.tcmalloc == (name == "tcmalloc"), name + ": tcmalloc owns it? " +
                                                     (owners.tcmalloc ? "yes" : "no"));
  A::free(pool, h);
  A::destroy(pool);
}

}  // namespace
}  // namespace zsm_bench

int main() {
  using namespace zsm_bench;
  bool stats = false;
  size_t len = sizeof(stats);
  if (mallctl("config.stats", &stats, &len, nullptr, 0) != 0 || !stats) {
    std::printf("FAIL jemalloc is built without statistics (thread.allocated)\n");
    return 1;
  }
  check_process_names();
  check_trait_lands_in_its_own<mimalloc>();
  check_trait_lands_in_its_own<glibc>();
  check_trait_lands_in_its_own<jemalloc>();
  check_trait_lands_in_its_own<tcmalloc>();
  std::printf("%s\n", failures == 0 ? "every allocator's calls land in its own library"
                                    : "mismatches found");
  return failures == 0 ? 0 : 1;
}
