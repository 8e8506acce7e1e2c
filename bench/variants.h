// The allocators a benchmark can run, as traits with one shape, so that every family is
// written once and instantiated per allocator:
//   cached             zsm as a user gets it: the patched build, a default pool (per-thread
//                      caches on, one shard per CPU), called through the C API's entries.
//   cached_baseline    the same on the baseline build: the A/B of the inline policies with
//                      the caches on (tools/lib/ab.py).
//   uncached           the patched build's pools with ZS_POOL_NO_THREAD_CACHE (one shard),
//                      through the C API's entries, as a user who turns the caches off.
//   patched, baseline  zsm compiled twice from the same sources, under the namespaces
//                      zsm::bench_patched and zsm::bench_baseline, with the two inline
//                      policies (bench/CMakeLists.txt); called directly, no indirection.
//                      ZSM_BENCH_WITH_PATCHED/_BASELINE say which are linked in.
//   hardened           patched on pools created with ZS_POOL_HARDENED (which keep no cache).
//   prof_inline_off/on, prof_outline_off/on
//                      patched with allocation profiling compiled in (zsm::bench_prof_inline,
//                      zsm::bench_prof_outline: its hooks inline or out of line), with the
//                      switch off or on while the pool lives. ZSM_BENCH_WITH_PROFILING.
//   mimalloc, glibc,   allocation + memcpy + free through each allocator's own entry points:
//   jemalloc, tcmalloc mi_malloc/mi_free, glibc's malloc/free (looked up by version, below),
//                      mallocx/dallocx, tc_malloc/tc_free: what a user would pick instead.
//   *_zcopy            each of those four with zsm's copy (copy_payload()) in place of
//                      memcpy: the copy held equal, so that a ratio compares allocators alone.
// Each trait has: name, Pool, create(), destroy(), store(), free().
// zsm traits add: malloc(), write(), read_begin(), read_end(), total_pages(), compact(),
// pool_stats().
//
// All four general-purpose allocators live in one process. mimalloc, jemalloc and tcmalloc
// each export malloc, free and operator new/delete, and the first library in the link order
// that defines a name serves every caller of it. bench/CMakeLists.txt links mimalloc first,
// then libstdc++ and libc, then jemalloc and tcmalloc_minimal: the process's malloc family
// and operator new/delete are mimalloc's (under a sanitizer, its runtime's), and the names
// only jemalloc or tcmalloc would take from libstdc++ or libc (nothrow delete, mallinfo,
// mmap, sbrk, ...) stay with those. What is measured does not go through those names: each
// trait calls its allocator's own exported functions (mi_malloc, mallocx, tc_malloc, glibc's
// malloc by version), which no other library defines, so who serves the process's malloc
// changes nothing in the measured calls. bench/allocator_check.cpp checks both for real.
// ZSM_BENCH_ZSM_ONLY (a cross build, bench/CMakeLists.txt's ZSM_POOL_ONLY): the zsm traits
// alone, without the general-purpose allocators.
#pragma once

#if !ZSM_BENCH_ZSM_ONLY
#include <dlfcn.h>
#include <gperftools/tcmalloc.h>
#include <jemalloc/jemalloc.h>
#include <mimalloc.h>
#endif

#include <cstddef>
#include <cstdlib>
#include <cstring>

#define ZSM_VARIANT_NS bench_patched
#include "base/copy.h"
#include "pool/pool.h"
#undef ZSM_VARIANT_NS
#define ZSM_VARIANT_NS bench_baseline
#include "pool/pool.h"
#undef ZSM_VARIANT_NS
#define ZSM_VARIANT_NS bench_prof_inline
#include "pool/pool.h"
#undef ZSM_VARIANT_NS
#define ZSM_VARIANT_NS bench_prof_outline
#include "pool/pool.h"
#undef ZSM_VARIANT_NS

namespace zsm_bench {

// A zsm variant whose pools are created with `pool_flags`, with the variant's profiling
// switch on while a pool lives when `profiling` (benchmarks use one pool at a time).
// `calls` says where store, malloc and free go: ZSM_BENCH_API, the calls a user makes
// (through the per-thread cache where the pool has one), or ZSM_BENCH_LOCKED_PATH, the
// kernel's functions (the locked path, on pools without caches and with one shard unless the
// benchmark's configuration asks for more).
#define ZSM_BENCH_API(ns, call) zsm::ns::zs_##call
#define ZSM_BENCH_LOCKED_PATH(ns, call) zsm::ns::locked_path::call
#define ZSM_BENCH_VARIANT(Trait, ns, pool_flags, profiling, calls)                            \
  struct Trait {                                                                              \
    static constexpr const char* name = #Trait;                                               \
    using Pool = zsm::ns::ZsPool;                                                             \
    static Pool* create(const zs_pool_config* cfg = nullptr) {                               \
      zs_pool_config config = cfg != nullptr ? *cfg : zs_pool_config{};                      \
      config.flags |= (pool_flags);                                                           \
      if ((config.flags & ZS_POOL_NO_THREAD_CACHE) != 0 && config.nr_shards == 0)            \
        config.nr_shards = 1;                                                                 \
      if (profiling) zsm::ns::zs_alloc_profiling_set(1);                                      \
      return zsm::ns::zs_create_pool("bench", &config);                                       \
    }                                                                                         \
    static void destroy(Pool* p) {                                                            \
      zsm::ns::zs_destroy_pool(p);                                                            \
      if (profiling) zsm::ns::zs_alloc_profiling_set(0);                                      \
    }                                                                                         \
    static unsigned long store(Pool* p, const void* src, size_t n) {                         \
      return calls(ns, store)(p, src, n);                                                     \
    }                                                                                         \
    static unsigned long malloc(Pool* p, size_t n) { return calls(ns, malloc)(p, n); }        \
    static void write(Pool* p, unsigned long h, const void* src, size_t n) {                 \
      zsm::ns::zs_obj_write(p, h, src, n);                                                    \
    }                                                                                         \
    static void free(Pool* p, unsigned long h) { calls(ns, free)(p, h); }                    \
    static void* read_begin(Pool* p, unsigned long h, size_t n, void* copy) {                \
      return zsm::ns::zs_obj_read_begin(p, h, n, copy);                                       \
    }                                                                                         \
    static void read_end(Pool* p, unsigned long h, size_t n, void* mem) {                    \
      zsm::ns::zs_obj_read_end(p, h, n, mem);                                                 \
    }                                                                                         \
    static unsigned long total_pages(Pool* p) { return zsm::ns::zs_get_total_pages(p); }     \
    static unsigned long compact(Pool* p) { return zsm::ns::zs_compact(p); }                 \
    static struct zs_pool_stats pool_stats(Pool* p) {                                         \
      struct zs_pool_stats stats{};                                                           \
      zsm::ns::zs_pool_stats(p, &stats);                                                      \
      return stats;                                                                           \
    }                                                                                         \
  };

constexpr unsigned kKernelPath = ZS_POOL_NO_THREAD_CACHE;
ZSM_BENCH_VARIANT(cached, bench_patched, 0, false, ZSM_BENCH_API)
ZSM_BENCH_VARIANT(cached_baseline, bench_baseline, 0, false, ZSM_BENCH_API)
// A user's pool with ZS_POOL_NO_THREAD_CACHE, called as `cached` is (one shard, as create()
// gives every locked-path pool).
ZSM_BENCH_VARIANT(uncached, bench_patched, kKernelPath, false, ZSM_BENCH_API)
ZSM_BENCH_VARIANT(patched, bench_patched, kKernelPath, false, ZSM_BENCH_LOCKED_PATH)
ZSM_BENCH_VARIANT(baseline, bench_baseline, kKernelPath, false, ZSM_BENCH_LOCKED_PATH)
ZSM_BENCH_VARIANT(hardened, bench_patched, ZS_POOL_HARDENED | kKernelPath, false,
                  ZSM_BENCH_LOCKED_PATH)
ZSM_BENCH_VARIANT(prof_inline_off, bench_prof_inline, kKernelPath, false, ZSM_BENCH_LOCKED_PATH)
ZSM_BENCH_VARIANT(prof_inline_on, bench_prof_inline, kKernelPath, true, ZSM_BENCH_LOCKED_PATH)
ZSM_BENCH_VARIANT(prof_outline_off, bench_prof_outline, kKernelPath, false,
                  ZSM_BENCH_LOCKED_PATH)
ZSM_BENCH_VARIANT(prof_outline_on, bench_prof_outline, kKernelPath, true, ZSM_BENCH_LOCKED_PATH)
#undef ZSM_BENCH_VARIANT
#undef ZSM_BENCH_API
#undef ZSM_BENCH_LOCKED_PATH

// The copies a general-purpose allocator's store can use: the C library's memcpy, as a user's
// code does, or zsm's own copy (the cached variant's copy_payload(), base/copy.h), so that a
// pair is compared with the copy held equal.
inline void copy_with_memcpy(void* dst, const void* src, size_t n) {
  std::memcpy(dst, src, n);
}
inline void copy_with_zsm(void* dst, const void* src, size_t n) {
  zsm::bench_patched::copy_payload(dst, src, n);
}

#if !ZSM_BENCH_ZSM_ONLY
// A general-purpose allocator behind the same shape: the "pool" is a dummy, a handle is the
// pointer, store is malloc + the copy (memcpy unless `Copy` says otherwise).
template <void* (*Malloc)(size_t), void (*Free)(void*),
          void (*Copy)(void*, const void*, size_t) = copy_with_memcpy>
struct MallocTraits {
  struct Pool {};
  static Pool* create(const zs_pool_config* = nullptr) { return new Pool; }
  static void destroy(Pool* p) { delete p; }
  static unsigned long store(Pool*, const void* src, size_t n) {
    void* mem = Malloc(n);
    if (mem != nullptr) Copy(mem, src, n);
    return reinterpret_cast<unsigned long>(mem);
  }
  static void free(Pool*, unsigned long h) { Free(reinterpret_cast<void*>(h)); }
};

struct mimalloc : MallocTraits<mi_malloc, mi_free> {
  static constexpr const char* name = "mimalloc";
};
// glibc's own malloc and free. Linking libmimalloc.so makes mimalloc the process's malloc
// (it exports malloc, free and even __libc_malloc), so glibc's are looked up by version in
// libc itself; the benchmark calls them through these pointers.
struct GlibcMalloc {
  void* (*malloc)(size_t);
  void (*free)(void*);
  static const GlibcMalloc& get() {
    static const GlibcMalloc fns = [] {
      void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
      GlibcMalloc f{};
      if (libc != nullptr) {
        f.malloc = reinterpret_cast<void* (*)(size_t)>(dlvsym(libc, "malloc", "GLIBC_2.2.5"));
        f.free = reinterpret_cast<void (*)(void*)>(dlvsym(libc, "free", "GLIBC_2.2.5"));
      }
      if (f.malloc == nullptr || f.free == nullptr) std::abort();
      return f;
    }();
    return fns;
  }
};
inline void* glibc_malloc(size_t n) { return GlibcMalloc::get().malloc(n); }
inline void glibc_free(void* p) { GlibcMalloc::get().free(p); }

struct glibc : MallocTraits<glibc_malloc, glibc_free> {
  static constexpr const char* name = "glibc";
};

// jemalloc's non-standard API: flags 0 is plain malloc's behaviour (default arena, thread
// cache, no alignment beyond the default).
inline void* jemalloc_malloc(size_t n) { return mallocx(n, 0); }
inline void jemalloc_free(void* p) { dallocx(p, 0); }

struct jemalloc : MallocTraits<jemalloc_malloc, jemalloc_free> {
  static constexpr const char* name = "jemalloc";
};

// tc_malloc and tc_free are the same functions as tcmalloc's malloc and free (aliases).
struct tcmalloc : MallocTraits<tc_malloc, tc_free> {
  static constexpr const char* name = "tcmalloc";
};

// The same four with zsm's copy in place of memcpy ("copy held equal"): each runs under the
// family malloc+zs_memcpy+free (bench/pair_bench.cpp) with its allocator's name.
struct mimalloc_zcopy : MallocTraits<mi_malloc, mi_free, copy_with_zsm> {
  static constexpr const char* name = "mimalloc";
};
struct glibc_zcopy : MallocTraits<glibc_malloc, glibc_free, copy_with_zsm> {
  static constexpr const char* name = "glibc";
};
struct jemalloc_zcopy : MallocTraits<jemalloc_malloc, jemalloc_free, copy_with_zsm> {
  static constexpr const char* name = "jemalloc";
};
struct tcmalloc_zcopy : MallocTraits<tc_malloc, tc_free, copy_with_zsm> {
  static constexpr const char* name = "tcmalloc";
};
#endif  // !ZSM_BENCH_ZSM_ONLY

}  // namespace zsm_bench
