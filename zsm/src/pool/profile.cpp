// Allocation profiling: the switch, the list of tags and the allocinfo report (design:
// profile.h). The report functions exist without ZSM_PROFILING too, and say so.
#include "pool/profile.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "pool/pool.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

#if ZSM_PROFILING

std::atomic<bool> g_profiling_enabled{false};
zs_alloc_tag g_untagged = {"<untagged>", "", 0, 0, 0, 0, nullptr};

namespace {
std::atomic<zs_alloc_tag*> g_tags{nullptr};  // every tag that counted an object, newest first
}  // namespace

void register_alloc_tag(zs_alloc_tag* tag) {
  if (__atomic_exchange_n(&tag->registered, 1, __ATOMIC_ACQ_REL) != 0) return;
  zs_alloc_tag* head = g_tags.load(std::memory_order_relaxed);
  do {
    tag->next = head;
  } while (!g_tags.compare_exchange_weak(head, tag, std::memory_order_release,
                                         std::memory_order_relaxed));
}

int zs_alloc_profiling_set(int enabled) {
  return g_profiling_enabled.exchange(enabled != 0, std::memory_order_relaxed) ? 1 : 0;
}

int zs_alloc_profiling_enabled() { return profiling_enabled() ? 1 : 0; }

namespace {

std::vector<zs_alloc_info> snapshot_sites() {
  std::vector<zs_alloc_info> sites;
  for (zs_alloc_tag* tag = g_tags.load(std::memory_order_acquire); tag != nullptr;
       tag = tag->next) {
    sites.push_back({tag->file, tag->func, tag->line,
                     __atomic_load_n(&tag->bytes, __ATOMIC_RELAXED),
                     __atomic_load_n(&tag->calls, __ATOMIC_RELAXED)});
  }
  // Most bytes first, then by place (std::sort: stable_sort trips clang's deprecation of
  // get_temporary_buffer in libstdc++ 12).
  std::sort(sites.begin(), sites.end(), [](const zs_alloc_info& a, const zs_alloc_info& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    int by_file = std::strcmp(a.file, b.file);
    return by_file != 0 ? by_file < 0 : a.line < b.line;
  });
  return sites;
}

}  // namespace

size_t zs_alloc_info_read(zs_alloc_info* out, size_t max) {
  std::vector<zs_alloc_info> sites = snapshot_sites();
  if (out != nullptr) std::copy_n(sites.begin(), std::min(max, sites.size()), out);
  return sites.size();
}

int zs_print_allocinfo(FILE* out, size_t max) {
  if (out == nullptr) {
    errno = EINVAL;
    return -1;
  }
  std::vector<zs_alloc_info> sites = snapshot_sites();
  if (max != 0 && sites.size() > max) sites.resize(max);
  std::fprintf(out, "allocinfo - version: 1.0\n");
  std::fprintf(out, "#     <size>  <calls> <tag info>\n");
  for (const zs_alloc_info& site : sites)
    std::fprintf(out, "%12lu %8lu %s:%u func:%s\n", site.bytes, site.calls, site.file,
                 site.line, site.func);
  return std::ferror(out) ? (errno = EIO, -1) : 0;
}

#else

int zs_alloc_profiling_set(int) {
  errno = EOPNOTSUPP;
  return -1;
}

int zs_alloc_profiling_enabled() { return 0; }

size_t zs_alloc_info_read(zs_alloc_info*, size_t) { return 0; }

int zs_print_allocinfo(FILE* out, size_t) {
  if (out == nullptr) {
    errno = EINVAL;
    return -1;
  }
  std::fprintf(out, "allocinfo: allocation profiling is not built in (ZSM_PROFILING=OFF)\n");
  return std::ferror(out) ? (errno = EIO, -1) : 0;
}

#endif

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
