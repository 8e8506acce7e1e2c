// The allocator's own API: the kernel's zs_* calls on a ZsPool, in the namespace of one
// compiled variant (see base/compiler.h and zsm/CMakeLists.txt). Each zsm::zs_* function is
// what the public C function of the same name does (api/c_api.cpp forwards to it);
// locked_path:: holds the locked store, malloc and free without a per-thread cache, as
// mm/zsmalloc.c runs them, which benchmarks call directly (zsm::<variant>::locked_path::store).
// Argument checks that the C API promises (NULL pool, bad sizes) are done here. Every
// function declared here is defined in pool/.
//
// No include guard on purpose: a file that calls several variants includes this header once
// per variant, with ZSM_VARIANT_NS redefined before each (see bench/variants.h); including it
// twice for one variant only repeats declarations.

// The library calls the plain functions: the call-site macros of zsmalloc.h are for users,
// and every target that includes this header is compiled without them (zsm/CMakeLists.txt).
#ifndef ZSM_NO_ALLOC_TAGS
#error "zsm's internal headers need ZSM_NO_ALLOC_TAGS (set by zsm_add_core_variant)"
#endif
#include <zsm/zsmalloc.h>

#include <cstddef>
#include <cstdio>

#include "base/compiler.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

struct ZsPool;

ZsPool* zs_create_pool(const char* name, const zs_pool_config* cfg);
void zs_destroy_pool(ZsPool* pool);
const char* zs_pool_name(const ZsPool* pool);

// Through the calling thread's cache when the pool has per-thread caches
// (tcache/thread_cache.h), the locked path otherwise.
unsigned long zs_malloc(ZsPool* pool, size_t size);
unsigned long zs_store(ZsPool* pool, const void* src, size_t size);
unsigned long zs_malloc_tagged(ZsPool* pool, size_t size, zs_alloc_tag* tag);
unsigned long zs_store_tagged(ZsPool* pool, const void* src, size_t size, zs_alloc_tag* tag);
void zs_free(ZsPool* pool, unsigned long handle);

// The locked path on any pool, no cache: the kernel's functions, which the inline-policy A/B
// measures (pool/locked_path.h).
namespace locked_path {
unsigned long malloc(ZsPool* pool, size_t size);
unsigned long store(ZsPool* pool, const void* src, size_t size);
unsigned long malloc_tagged(ZsPool* pool, size_t size, zs_alloc_tag* tag);
unsigned long store_tagged(ZsPool* pool, const void* src, size_t size, zs_alloc_tag* tag);
void free(ZsPool* pool, unsigned long handle);
}  // namespace locked_path

void zs_obj_write(ZsPool* pool, unsigned long handle, const void* src, size_t size);
void* zs_obj_read_begin(ZsPool* pool, unsigned long handle, size_t mem_len, void* local_copy);
void zs_obj_read_end(ZsPool* pool, unsigned long handle, size_t mem_len, void* mem);
size_t zs_obj_capacity(ZsPool* pool, unsigned long handle);

size_t zs_huge_class_size(const ZsPool* pool);
unsigned zs_lookup_class_index(const ZsPool* pool, unsigned size);
unsigned long zs_get_total_pages(const ZsPool* pool);
unsigned long zs_compact(ZsPool* pool);
void zs_drain_thread_caches(ZsPool* pool);
void zs_pool_stats(const ZsPool* pool, struct zs_pool_stats* stats);
size_t zs_pool_bookkeeping_bytes(ZsPool* pool);

unsigned zs_class_count(const ZsPool* pool);
int zs_class_stats(ZsPool* pool, unsigned index, struct zs_class_stats* out);
int zs_print_classes(ZsPool* pool, FILE* out);
int zs_check_pool(ZsPool* pool, FILE* report);

int zs_alloc_profiling_set(int enabled);
int zs_alloc_profiling_enabled();
size_t zs_alloc_info_read(zs_alloc_info* out, size_t max);
int zs_print_allocinfo(FILE* out, size_t max);

// For the pool's own files: frees a slot a thread's cache reserved, as a free without a
// cache does (the shard's lock taken); zs_create_pool() hands it to the caches
// (ZsPool::tcache.free_reserved_slot).
void free_reserved(ZsPool* pool, unsigned long handle);

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
