// kapi.h: the kernel's zsmalloc, compiled by kernel/kernel_build.py and renamed per variant, as
// allocator traits with the interface of bench/variants.h (create, store, malloc, write, free,
// read_begin/read_end, total_pages, compact), so that bench/live_set.h and the drivers run it
// as they run zsm. kapi_symbols.h (generated) names each variant's symbols and the form of the
// tree's API:
//   KZS_FORM_MAP        6.1: zs_map_object()/zs_unmap_object() (ZS_MM_WO to write, RO to read)
//   KZS_FORM_OBJ_WRITE  newer: zs_obj_write(), zs_obj_read_begin()/zs_obj_read_end()
//   KZS_MALLOC_NID      zs_malloc() takes a NUMA node
//   KZS_STORE_SRC_FIRST zs_store(pool, src, size, gfp[, nid]) exists
// Without zs_store(), store() is zs_malloc() and the write, which is what the kernel's users do.
#pragma once

#include <cstddef>
#include <cstring>

#include "kapi_symbols.h"
#include "kservices.h"

namespace kzs {

// zram's allocation flags for a compressed page: GFP_NOIO | __GFP_NOWARN | __GFP_HIGHMEM |
// __GFP_MOVABLE (the kernel's bit values, kernel/kshim.h).
inline constexpr unsigned kGfp = 0x400u | 0x2000u | 0x02u | 0x08u;
inline constexpr int kNumaNoNode = -1;
enum { kMapRW = 0, kMapRO = 1, kMapWO = 2 };  // enum zs_mapmode

struct PoolStats {
  long pages_compacted;  // atomic_long_t in 6.1, unsigned long later: the same 8 bytes
  long more[7];          // room for fields newer kernels add
};

}  // namespace kzs

#ifdef KZS_FORM_MAP
#define KZS_DECLARE_WRITE_API(v)                                                              \
  void* kzs_##v##_map(void* pool, unsigned long h, int mode) __asm__(KZS_SYM_##v##_zs_map_object); \
  void kzs_##v##_unmap(void* pool, unsigned long h) __asm__(KZS_SYM_##v##_zs_unmap_object);
#define KZS_DEFINE_WRITE_API(v)                                                               \
  static void write(Pool* p, unsigned long h, const void* src, size_t n) {                   \
    void* dst = kzs_##v##_map(p, h, kzs::kMapWO);                                             \
    memcpy(dst, src, n);                                                                      \
    kzs_##v##_unmap(p, h);                                                                    \
  }                                                                                           \
  static void* read_begin(Pool* p, unsigned long h, size_t, void*) {                         \
    return kzs_##v##_map(p, h, kzs::kMapRO);                                                  \
  }                                                                                           \
  static void read_end(Pool* p, unsigned long h, size_t, void*) { kzs_##v##_unmap(p, h); }
#else
#define KZS_DECLARE_WRITE_API(v)                                                              \
  void kzs_##v##_obj_write(void* pool, unsigned long h, const void* src, size_t n)            \
      __asm__(KZS_SYM_##v##_zs_obj_write);                                                    \
  void* kzs_##v##_read_begin(void* pool, unsigned long h, size_t n, void* copy)               \
      __asm__(KZS_SYM_##v##_zs_obj_read_begin);                                               \
  void kzs_##v##_read_end(void* pool, unsigned long h, size_t n, void* mem)                   \
      __asm__(KZS_SYM_##v##_zs_obj_read_end);
#define KZS_DEFINE_WRITE_API(v)                                                               \
  static void write(Pool* p, unsigned long h, const void* src, size_t n) {                   \
    kzs_##v##_obj_write(p, h, src, n);                                                        \
  }                                                                                           \
  static void* read_begin(Pool* p, unsigned long h, size_t n, void* copy) {                  \
    return kzs_##v##_read_begin(p, h, n, copy);                                               \
  }                                                                                           \
  static void read_end(Pool* p, unsigned long h, size_t n, void* mem) {                      \
    kzs_##v##_read_end(p, h, n, mem);                                                         \
  }
#endif

#ifdef KZS_MALLOC_NID
#define KZS_MALLOC_ARGS , int nid
#define KZS_MALLOC_PASS , kzs::kNumaNoNode
#else
#define KZS_MALLOC_ARGS
#define KZS_MALLOC_PASS
#endif

#ifdef KZS_STORE_SRC_FIRST
#define KZS_DECLARE_STORE(v)                                                                  \
  unsigned long kzs_##v##_store(void* pool, const void* src, size_t n, unsigned gfp KZS_MALLOC_ARGS) \
      __asm__(KZS_SYM_##v##_zs_store);
#define KZS_DEFINE_STORE(v)                                                                   \
  static constexpr bool kHasStore = true;                                                    \
  static unsigned long store(Pool* p, const void* src, size_t n) {                           \
    return kzs_##v##_store(p, src, n, kzs::kGfp KZS_MALLOC_PASS);                             \
  }
#else
#define KZS_DECLARE_STORE(v)
#define KZS_DEFINE_STORE(v)                                                                   \
  static constexpr bool kHasStore = false;                                                   \
  static unsigned long store(Pool* p, const void* src, size_t n) {                           \
    unsigned long h = malloc(p, n);                                                           \
    if (h != 0) write(p, h, src, n);                                                          \
    return h;                                                                                 \
  }
#endif

// One variant's symbols, and its traits struct kzs::<v>.
#define KZS_VARIANT(v)                                                                        \
  extern "C" {                                                                                \
  int kzs_##v##_module_init() __asm__(KZS_SYM_##v##_kshim_module_init);                       \
  void* kzs_##v##_create(const char* name) __asm__(KZS_SYM_##v##_zs_create_pool);            \
  void kzs_##v##_destroy(void* pool) __asm__(KZS_SYM_##v##_zs_destroy_pool);                 \
  unsigned long kzs_##v##_malloc(void* pool, size_t n, unsigned gfp KZS_MALLOC_ARGS)          \
      __asm__(KZS_SYM_##v##_zs_malloc);                                                       \
  void kzs_##v##_free(void* pool, unsigned long h) __asm__(KZS_SYM_##v##_zs_free);           \
  unsigned long kzs_##v##_total_pages(void* pool) __asm__(KZS_SYM_##v##_zs_get_total_pages); \
  unsigned long kzs_##v##_compact(void* pool) __asm__(KZS_SYM_##v##_zs_compact);             \
  size_t kzs_##v##_huge_class_size(void* pool) __asm__(KZS_SYM_##v##_zs_huge_class_size);    \
  void kzs_##v##_pool_stats(void* pool, kzs::PoolStats* s) __asm__(KZS_SYM_##v##_zs_pool_stats); \
  KZS_DECLARE_WRITE_API(v)                                                                    \
  KZS_DECLARE_STORE(v)                                                                        \
  }                                                                                           \
  namespace kzs {                                                                             \
  struct v {                                                                                  \
    static constexpr const char* name = #v;                                                   \
    using Pool = void;                                                                        \
    static int module_init() { return kzs_##v##_module_init(); }                             \
    static Pool* create() { return kzs_##v##_create("kernel"); }                             \
    static void destroy(Pool* p) { kzs_##v##_destroy(p); }                                    \
    static unsigned long malloc(Pool* p, size_t n) {                                          \
      unsigned long h = kzs_##v##_malloc(p, n, kGfp KZS_MALLOC_PASS);                         \
      return h > static_cast<unsigned long>(-4096L) ? 0 : h; /* an ERR_PTR is a failure */    \
    }                                                                                         \
    static void free(Pool* p, unsigned long h) { kzs_##v##_free(p, h); }                      \
    static unsigned long total_pages(Pool* p) { return kzs_##v##_total_pages(p); }           \
    static unsigned long compact(Pool* p) { return kzs_##v##_compact(p); }                   \
    static size_t huge_class_size(Pool* p) { return kzs_##v##_huge_class_size(p); }         \
    static long pages_compacted(Pool* p) {                                                    \
      PoolStats s{};                                                                          \
      kzs_##v##_pool_stats(p, &s);                                                            \
      return s.pages_compacted;                                                               \
    }                                                                                         \
    KZS_DEFINE_WRITE_API(v)                                                                   \
    KZS_DEFINE_STORE(v)                                                                       \
  };                                                                                          \
  }

#ifdef KZS_HAS_patched_zs_malloc
KZS_VARIANT(patched)
#endif
#ifdef KZS_HAS_baseline_zs_malloc
KZS_VARIANT(baseline)
#endif
#ifdef KZS_HAS_kernel_zs_malloc
KZS_VARIANT(kernel)
#endif

namespace kzs {

// Calls f(traits) for the variant called `name`; false when this binary has none by that name.
template <typename F>
bool with_variant(const char* name, F&& f) {
#ifdef KZS_HAS_patched_zs_malloc
  if (std::strcmp(name, "patched") == 0) return f(patched{}), true;
#endif
#ifdef KZS_HAS_baseline_zs_malloc
  if (std::strcmp(name, "baseline") == 0) return f(baseline{}), true;
#endif
#ifdef KZS_HAS_kernel_zs_malloc
  if (std::strcmp(name, "kernel") == 0) return f(kernel{}), true;
#endif
  return false;
}

// The process-wide set-up: the page arena (1 GiB of address space, touched on use) and each
// variant's module init (zs_init(): the per-CPU mapping area, the cpu-hotplug state).
inline bool init_all() {
  if (kshim_mm_init(1ul << 18) != 0) return false;
  bool ok = true;
#ifdef KZS_HAS_patched_zs_malloc
  ok = ok && patched::module_init() == 0;
#endif
#ifdef KZS_HAS_baseline_zs_malloc
  ok = ok && baseline::module_init() == 0;
#endif
#ifdef KZS_HAS_kernel_zs_malloc
  ok = ok && kernel::module_init() == 0;
#endif
  return ok;
}

// Whether every page and slab object went back (after every pool is destroyed).
inline bool all_memory_back() {
  return kshim_pages_in_use() == 0 && kshim_bad_pages() == 0 && kshim_nr_zspages() == 0 &&
         kshim_slab_objects() == 0;
}

}  // namespace kzs
