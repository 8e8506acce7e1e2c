// The public C API (zsm/zsmalloc.h): each call forwards to the function of the same name in
// the variant this library was built with (pool/pool.h). struct zs_pool is the opaque face
// of zsm::ZsPool. The top layer: nothing in zsm/src includes it.
#include <cerrno>

#include "base/copy.h"
#include "memory/vm_source.h"
#include "pool/pool.h"

namespace {
zsm::ZsPool* impl(zs_pool* pool) { return reinterpret_cast<zsm::ZsPool*>(pool); }
zsm::VmSource* impl(zs_vm_source* vm) { return reinterpret_cast<zsm::VmSource*>(vm); }
}  // namespace

extern "C" {

ZSM_API zs_pool* zs_create_pool(const char* name) { return zs_create_pool_ex(name, nullptr); }

ZSM_API zs_pool* zs_create_pool_ex(const char* name, const zs_pool_config* cfg) {
  return reinterpret_cast<zs_pool*>(zsm::zs_create_pool(name, cfg));
}

ZSM_API void zs_destroy_pool(zs_pool* pool) { zsm::zs_destroy_pool(impl(pool)); }

ZSM_API const char* zs_pool_name(zs_pool* pool) { return zsm::zs_pool_name(impl(pool)); }

ZSM_API void zs_memcpy(void* dst, const void* src, size_t n) { zsm::copy_payload(dst, src, n); }

ZSM_API unsigned long zs_malloc(zs_pool* pool, size_t size) {
  return zsm::zs_malloc(impl(pool), size);
}

ZSM_API unsigned long zs_store(zs_pool* pool, const void* src, size_t size) {
  return zsm::zs_store(impl(pool), src, size);
}

ZSM_API unsigned long zs_malloc_tagged(zs_pool* pool, size_t size, zs_alloc_tag* tag) {
  return zsm::zs_malloc_tagged(impl(pool), size, tag);
}

ZSM_API unsigned long zs_store_tagged(zs_pool* pool, const void* src, size_t size,
                                      zs_alloc_tag* tag) {
  return zsm::zs_store_tagged(impl(pool), src, size, tag);
}

ZSM_API void zs_free(zs_pool* pool, unsigned long handle) { zsm::zs_free(impl(pool), handle); }

ZSM_API void zs_obj_write(zs_pool* pool, unsigned long handle, const void* src, size_t size) {
  zsm::zs_obj_write(impl(pool), handle, src, size);
}

ZSM_API void* zs_obj_read_begin(zs_pool* pool, unsigned long handle, size_t mem_len,
                                void* local_copy) {
  return zsm::zs_obj_read_begin(impl(pool), handle, mem_len, local_copy);
}

ZSM_API void zs_obj_read_end(zs_pool* pool, unsigned long handle, size_t mem_len, void* mem) {
  zsm::zs_obj_read_end(impl(pool), handle, mem_len, mem);
}

ZSM_API size_t zs_obj_capacity(zs_pool* pool, unsigned long handle) {
  return zsm::zs_obj_capacity(impl(pool), handle);
}

ZSM_API size_t zs_huge_class_size(zs_pool* pool) { return zsm::zs_huge_class_size(impl(pool)); }

ZSM_API unsigned int zs_lookup_class_index(zs_pool* pool, unsigned int size) {
  return zsm::zs_lookup_class_index(impl(pool), size);
}

ZSM_API unsigned long zs_get_total_pages(zs_pool* pool) {
  return zsm::zs_get_total_pages(impl(pool));
}

ZSM_API unsigned long zs_compact(zs_pool* pool) { return zsm::zs_compact(impl(pool)); }

ZSM_API void zs_drain_thread_caches(zs_pool* pool) { zsm::zs_drain_thread_caches(impl(pool)); }

ZSM_API size_t zs_pool_bookkeeping_bytes(zs_pool* pool) {
  return zsm::zs_pool_bookkeeping_bytes(impl(pool));
}

ZSM_API void zs_pool_stats(zs_pool* pool, struct zs_pool_stats* stats) {
  zsm::zs_pool_stats(impl(pool), stats);
}

ZSM_API unsigned int zs_class_count(zs_pool* pool) { return zsm::zs_class_count(impl(pool)); }

ZSM_API int zs_class_stats(zs_pool* pool, unsigned int index, struct zs_class_stats* out) {
  return zsm::zs_class_stats(impl(pool), index, out);
}

ZSM_API int zs_print_classes(zs_pool* pool, FILE* out) {
  return zsm::zs_print_classes(impl(pool), out);
}

ZSM_API int zs_check_pool(zs_pool* pool, FILE* report) {
  return zsm::zs_check_pool(impl(pool), report);
}

ZSM_API int zs_alloc_profiling_set(int enabled) { return zsm::zs_alloc_profiling_set(enabled); }

ZSM_API int zs_alloc_profiling_enabled(void) { return zsm::zs_alloc_profiling_enabled(); }

ZSM_API size_t zs_alloc_info_read(struct zs_alloc_info* out, size_t max) {
  return zsm::zs_alloc_info_read(out, max);
}

ZSM_API int zs_print_allocinfo(FILE* out, size_t max) { return zsm::zs_print_allocinfo(out, max); }

ZSM_API zs_vm_source* zs_vm_source_create(size_t page_size, size_t reserve_bytes,
                                          size_t retain_pages) {
  return reinterpret_cast<zs_vm_source*>(
      zsm::VmSource::create(page_size, reserve_bytes, 0, retain_pages));
}

ZSM_API zs_vm_source* zs_vm_source_create_ex(const zs_vm_source_config* cfg) {
  if (cfg == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return reinterpret_cast<zs_vm_source*>(zsm::VmSource::create(
      cfg->page_size, cfg->reserve_bytes, cfg->limit_bytes, cfg->retain_pages));
}

ZSM_API void zs_vm_source_destroy(zs_vm_source* vm) { delete impl(vm); }

ZSM_API zs_page_source zs_vm_source_ops(zs_vm_source* vm) {
  if (vm == nullptr) return {};  // no callbacks: a pool refuses it (EINVAL)
  return {zsm::VmSource::alloc_page_cb, zsm::VmSource::free_page_cb, vm};
}

ZSM_API size_t zs_vm_source_pages_in_use(zs_vm_source* vm) {
  return vm != nullptr ? impl(vm)->pages_in_use() : 0;
}

ZSM_API size_t zs_vm_source_pages_resident(zs_vm_source* vm) {
  return vm != nullptr ? impl(vm)->pages_resident() : 0;
}

}  // extern "C"
