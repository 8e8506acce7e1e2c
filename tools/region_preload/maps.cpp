// The program's anonymous mappings in the region (preload.cpp says which): mmap() of a private,
// anonymous, read-write mapping of 64 KiB or more, with no address asked for, takes pages of the
// region's second part (PageRuns, first fit, under one mutex). What a program then does to such
// memory is served as the kernel would, in the region's terms:
// - munmap: the pages are discarded (zsm_region_discard: they cost nothing and read as zeros
//   when handed out again) and freed, a part of a mapping as the kernel frees a part;
// - mremap: grown or shrunk in place where the pages after are free, else moved (a copy) with
//   MREMAP_MAYMOVE; MREMAP_FIXED is refused (EINVAL);
// - madvise: MADV_DONTNEED, MADV_FREE and MADV_REMOVE discard; MADV_WILLNEED prefetches; any
//   other advice is taken and changes nothing;
// - mprotect: read-write (what the pages are) is taken; anything else is refused with EACCES:
//   a region's pages are read-write.
// Calls on memory outside the region go to the kernel as they were; a call that spans both is
// split.
#include "preload.h"

#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstring>

namespace zsm_preload {
namespace {

constexpr size_t kSmallestMapping = 64 << 10;

PageRuns runs;
pthread_mutex_t runs_lock = PTHREAD_MUTEX_INITIALIZER;
size_t page = 4096;

class RunsLocked {
 public:
  RunsLocked() { pthread_mutex_lock(&runs_lock); }
  ~RunsLocked() { pthread_mutex_unlock(&runs_lock); }
  RunsLocked(const RunsLocked&) = delete;
  RunsLocked& operator=(const RunsLocked&) = delete;
};

size_t pages_for(size_t bytes) { return bytes / page + (bytes % page != 0); }

bool takes(int prot, int flags, int fd, void* addr, size_t len) {
  constexpr int kRefused = MAP_FIXED | MAP_FIXED_NOREPLACE | MAP_STACK | MAP_GROWSDOWN | MAP_HUGETLB |
                           MAP_POPULATE | MAP_LOCKED;
  return addr == nullptr && fd == -1 && (flags & MAP_ANONYMOUS) && (flags & MAP_TYPE) == MAP_PRIVATE &&
         !(flags & kRefused) && prot == (PROT_READ | PROT_WRITE) && len >= kSmallestMapping;
}

void discard(const Layout& l, uintptr_t a, size_t len) {
  InLibrary guard;
  zsm_region_discard(l.region, reinterpret_cast<void*>(a), len);
}

// [a, a + len) split into the part before the region, the part in it and the part after;
// `outside` gets the ones outside, `inside` the one inside (either may be empty).
template <typename Outside, typename Inside>
int split(const Layout& l, void* addr, size_t len, Outside outside, Inside inside) {
  auto a = reinterpret_cast<uintptr_t>(addr);
  uintptr_t end = a + len;
  int rc = 0;
  if (a < l.begin) rc |= outside(reinterpret_cast<void*>(a), std::min(end, l.begin) - a);
  uintptr_t in_from = std::max(a, l.begin), in_to = std::min(end, l.end);
  if (in_from < in_to) rc |= inside(in_from, in_to - in_from);
  if (end > l.end) rc |= outside(reinterpret_cast<void*>(std::max(a, l.end)), end - std::max(a, l.end));
  return rc;
}

int unmap_inside(const Layout& l, uintptr_t a, size_t len) {
  uintptr_t from = std::max(a, l.maps_begin), to = std::min(a + len, l.maps_end);
  if (from >= to) return 0;  // the heap's part: not the program's to unmap
  discard(l, from, to - from);
  RunsLocked locked;
  runs.unmap(reinterpret_cast<void*>(from), pages_for(to - from));
  return 0;
}

void* map_inside(size_t len) {
  void* p;
  {
    RunsLocked locked;
    p = runs.allocate(pages_for(len), 1);
  }
  return p;
}

// mremap of a mapping in the region.
void* remap_inside(const Layout& l, void* old, size_t old_len, size_t new_len, int flags) {
  if ((flags & MREMAP_FIXED) || reinterpret_cast<uintptr_t>(old) % page != 0 || new_len == 0) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  size_t have = pages_for(old_len), want = pages_for(new_len);
  auto a = reinterpret_cast<uintptr_t>(old);
  if (want <= have) {
    if (want < have) unmap_inside(l, a + want * page, (have - want) * page);
    return old;
  }
  {
    RunsLocked locked;
    if (runs.pages_of(old) == have && runs.grow(old, want)) return old;
  }
  if (!(flags & MREMAP_MAYMOVE)) {
    errno = ENOMEM;
    return MAP_FAILED;
  }
  void* moved = map_inside(new_len);
  if (moved == nullptr) moved = next.mmap(nullptr, new_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (moved == MAP_FAILED) return MAP_FAILED;
  std::memcpy(moved, old, old_len);
  unmap_inside(l, a, have * page);
  return moved;
}

int advise_inside(const Layout& l, uintptr_t a, size_t len, int advice) {
  InLibrary guard;
  switch (advice) {
    case MADV_DONTNEED:
    case MADV_FREE:
    case MADV_REMOVE: return zsm_region_discard(l.region, reinterpret_cast<void*>(a), len) == 0 ? 0 : -1;
    case MADV_WILLNEED: zsm_region_prefetch(l.region, reinterpret_cast<void*>(a), len); return 0;
    default: return 0;  // the region's pages take no other advice
  }
}

}  // namespace

bool init_maps(const Layout& l, size_t page_size) {
  page = page_size;
  return runs.init(reinterpret_cast<void*>(l.maps_begin), (l.maps_end - l.maps_begin) / page_size, page_size);
}

}  // namespace zsm_preload

using zsm_preload::Layout;
using zsm_preload::next;

extern "C" {

__attribute__((visibility("default"))) void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  const Layout* l = zsm_preload::on();
  if (l != nullptr && !zsm_preload::use_next() && zsm_preload::takes(prot, flags, fd, addr, len)) {
    if (void* p = zsm_preload::map_inside(len)) return p;
  }
  if (!zsm_preload::next_ready()) {
    errno = ENOMEM;
    return MAP_FAILED;
  }
  return next.mmap(addr, len, prot, flags, fd, off);
}

__attribute__((visibility("default"), alias("mmap"))) void* mmap64(void*, size_t, int, int, int, off_t);

__attribute__((visibility("default"))) int munmap(void* addr, size_t len) {
  const Layout* l = zsm_preload::on();
  if (l == nullptr || !zsm_preload::overlaps_region(*l, addr, len)) return next.munmap(addr, len);
  return zsm_preload::split(
      *l, addr, len, [](void* a, size_t n) { return next.munmap(a, n); },
      [&](uintptr_t a, size_t n) { return zsm_preload::unmap_inside(*l, a, n); });
}

__attribute__((visibility("default"))) void* mremap(void* old, size_t old_len, size_t new_len, int flags, ...) {
  void* new_addr = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list args;
    va_start(args, flags);
    new_addr = va_arg(args, void*);
    va_end(args);
  }
  const Layout* l = zsm_preload::on();
  if (l != nullptr && zsm_preload::in_maps(*l, old)) return zsm_preload::remap_inside(*l, old, old_len, new_len, flags);
  if (l != nullptr && zsm_preload::in_heap(*l, old)) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  return next.mremap(old, old_len, new_len, flags, new_addr);
}

__attribute__((visibility("default"))) int madvise(void* addr, size_t len, int advice) {
  const Layout* l = zsm_preload::on();
  if (l == nullptr || !zsm_preload::overlaps_region(*l, addr, len)) return next.madvise(addr, len, advice);
  return zsm_preload::split(
      *l, addr, len, [&](void* a, size_t n) { return next.madvise(a, n, advice); },
      [&](uintptr_t a, size_t n) { return zsm_preload::advise_inside(*l, a, n, advice); });
}

__attribute__((visibility("default"))) int mprotect(void* addr, size_t len, int prot) {
  const Layout* l = zsm_preload::on();
  if (l == nullptr || !zsm_preload::overlaps_region(*l, addr, len)) return next.mprotect(addr, len, prot);
  if (prot != (PROT_READ | PROT_WRITE)) {
    errno = EACCES;  // a region's pages are read-write, and stay so
    return -1;
  }
  return zsm_preload::split(
      *l, addr, len, [&](void* a, size_t n) { return next.mprotect(a, n, prot); }, [](uintptr_t, size_t) { return 0; });
}

}  // extern "C"
