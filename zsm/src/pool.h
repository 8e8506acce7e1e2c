// The allocator's own API: the kernel's zs_* calls on a Pool, in the namespace of one
// compiled variant (see compiler.h and zsm/CMakeLists.txt). c_api.cpp maps the public C API
// onto these; benchmarks that link several variants call them as zsm::<variant>::zs_store().
// Argument checks that the C API promises (NULL pool, bad sizes) are done here.
//
// No include guard on purpose: a file that calls several variants includes this header once
// per variant, with ZSM_VARIANT_NS redefined before each (see bench/variants.h); including it
// twice for one variant only repeats declarations.

// The library calls the plain functions: the call-site macros of zsmalloc.h are for users.
#define ZSM_NO_ALLOC_TAGS 1
#include <zsm/zsmalloc.h>
#undef zs_malloc
#undef zs_store

#include <cstddef>
#include <cstdio>

#include "compiler.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

struct Pool;

Pool* zs_create_pool(const char* name, const zs_pool_config* cfg);
void zs_destroy_pool(Pool* pool);
const char* zs_pool_name(const Pool* pool);

unsigned long zs_malloc(Pool* pool, size_t size);
unsigned long zs_store(Pool* pool, const void* src, size_t size);
unsigned long zs_malloc_tagged(Pool* pool, size_t size, zs_alloc_tag* tag);
unsigned long zs_store_tagged(Pool* pool, const void* src, size_t size, zs_alloc_tag* tag);
void zs_free(Pool* pool, unsigned long handle);
void zs_obj_write(Pool* pool, unsigned long handle, const void* src, size_t size);
void* zs_obj_read_begin(Pool* pool, unsigned long handle, size_t mem_len, void* local_copy);
void zs_obj_read_end(Pool* pool, unsigned long handle, size_t mem_len, void* mem);
size_t zs_obj_capacity(Pool* pool, unsigned long handle);

size_t zs_huge_class_size(const Pool* pool);
unsigned zs_lookup_class_index(const Pool* pool, unsigned size);
unsigned long zs_get_total_pages(const Pool* pool);
unsigned long zs_compact(Pool* pool);
void zs_pool_stats(const Pool* pool, struct zs_pool_stats* stats);
size_t zs_pool_bookkeeping_bytes(Pool* pool);

unsigned zs_class_count(const Pool* pool);
int zs_class_stats(Pool* pool, unsigned index, struct zs_class_stats* out);
int zs_print_classes(Pool* pool, FILE* out);
int zs_check_pool(Pool* pool, FILE* report);

int zs_alloc_profiling_set(int enabled);
int zs_alloc_profiling_enabled();
size_t zs_alloc_info_read(zs_alloc_info* out, size_t max);
int zs_print_allocinfo(FILE* out, size_t max);

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
