// The program's anonymous mappings in the region (preload.cpp says which): mmap() of a private,
// anonymous, read-write mapping of 64 KiB or more, with no address asked for, takes pages of the
// region's second part (PageRuns, first fit, under one mutex). What a program then does to
// region memory is served as the kernel serves it on ordinary memory: its checks first, the same
// errors, and nothing outside the pages it names changes:
// - munmap: the address page aligned and the length not 0 (EINVAL); the pages reset (discarded,
//   their fork advice cleared: zsm_region_reset) and freed, part of a mapping as the kernel
//   frees a part. Pages of the malloc family's arena are mimalloc's and stay as they are;
// - mremap: the kernel's checks (flags, alignment, MREMAP_FIXED and MREMAP_DONTUNMAP with
//   MREMAP_MAYMOVE, the same length for DONTUNMAP, a mapping there: EFAULT); grown or shrunk in
//   place where the pages after are free, else moved (a copy), to MREMAP_FIXED's address too;
//   a mapping of the malloc family's arena is refused (EINVAL);
// - madvise: the address page aligned (EINVAL), the pages mapped (ENOMEM), the advice as the
//   kernel serves it on private memory (zsm_region_advise: DONTNEED and FREE discard,
//   WIPEONFORK and DONTFORK honoured at fork(), REMOVE refused, hints taken);
// - mprotect: the kernel's own (it checks, and the region copes with pages it may not touch);
// - mmap(MAP_FIXED) over region memory: the region forgets those pages first, and the kernel's
//   mapping takes their place; they are never handed out again.
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

// Built before any code runs (the library's constructor maps through it) and never destroyed
// (threads still map and unmap while exit() runs destructors).
union Kept {
  PageRuns runs;
  constexpr Kept() : runs() {}
  ~Kept() {}
};
constinit Kept kept;
PageRuns& runs = kept.runs;
pthread_mutex_t runs_lock = PTHREAD_MUTEX_INITIALIZER;
size_t page = 4096;

// Pages the kernel's own mappings took (MAP_FIXED): munmap gives them to the kernel, and they
// stay allocated in `runs` for good (the region's mapping is gone there). Under runs_lock.
struct Foreign {
  uintptr_t begin, end;
};
constexpr size_t kMostForeign = 256;
Foreign foreign[kMostForeign];
size_t foreign_count = 0;

class RunsLocked {
 public:
  RunsLocked() { pthread_mutex_lock(&runs_lock); }
  ~RunsLocked() { pthread_mutex_unlock(&runs_lock); }
  RunsLocked(const RunsLocked&) = delete;
  RunsLocked& operator=(const RunsLocked&) = delete;
};

size_t pages_for(size_t bytes) { return bytes / page + (bytes % page != 0); }
bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % page == 0; }

// Whether the region serves this mmap(): a plain private anonymous read-write mapping, large
// enough, with nothing asked of its place or its pages (what is left to the kernel, an
// unaligned offset included, gets the kernel's own answer).
bool takes(int prot, int flags, int fd, void* addr, size_t len, off_t off) {
  constexpr int kRefused = MAP_FIXED | MAP_FIXED_NOREPLACE | MAP_STACK | MAP_GROWSDOWN | MAP_HUGETLB |
                           MAP_POPULATE | MAP_LOCKED
#ifdef MAP_32BIT
                           | MAP_32BIT
#endif
      ;
  return addr == nullptr && fd == -1 && (flags & MAP_ANONYMOUS) && (flags & MAP_TYPE) == MAP_PRIVATE &&
         !(flags & kRefused) && prot == (PROT_READ | PROT_WRITE) && len >= kSmallestMapping && off % page == 0;
}

int fail(int e) {
  errno = e;
  return -1;
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

bool is_foreign(uintptr_t a, size_t len) {
  for (size_t i = 0; i < foreign_count; ++i) {
    if (a < foreign[i].end && a + len > foreign[i].begin) return true;
  }
  return false;
}

// Whether the program holds every page of [a, a + len) in the region as a mapping: the arena's
// pages are the malloc family's (mapped), the second part's those PageRuns handed out.
bool mapped_inside(const Layout& l, uintptr_t a, size_t len) {
  uintptr_t from = std::max(a, l.maps_begin), to = std::min(a + len, l.maps_end);
  if (from >= to) return true;
  RunsLocked locked;
  return runs.mapped(reinterpret_cast<void*>(from), pages_for(to - from));
}

void reset(const Layout& l, uintptr_t a, size_t len) {
  InLibrary guard;
  zsm_region_reset(l.region, reinterpret_cast<void*>(a), len);
}

int unmap_inside(const Layout& l, uintptr_t a, size_t len) {
  uintptr_t from = std::max(a, l.maps_begin), to = std::min(a + len, l.maps_end);
  if (from >= to) return 0;  // the arena's part: the malloc family's, not the program's to unmap
  {
    RunsLocked locked;
    if (is_foreign(from, to - from)) return next.munmap(reinterpret_cast<void*>(from), to - from);
  }
  reset(l, from, to - from);
  RunsLocked locked;
  runs.unmap(reinterpret_cast<void*>(from), pages_for(to - from));
  return 0;
}

void* map_inside(size_t len) {
  RunsLocked locked;
  return runs.allocate(pages_for(len), 1);
}

// mmap(MAP_FIXED) over region memory: the region forgets those pages (its evictor must never
// drop the kernel's new pages there), they are never handed out again, then the kernel maps.
void* map_fixed_over(const Layout& l, void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  uintptr_t from = std::max(reinterpret_cast<uintptr_t>(addr), l.begin);
  uintptr_t to = std::min(reinterpret_cast<uintptr_t>(addr) + len, l.end);
  {
    RunsLocked locked;
    if (foreign_count == kMostForeign) {
      errno = ENOMEM;
      return MAP_FAILED;
    }
  }
  reset(l, from, to - from);
  void* p = next.mmap(addr, len, prot, flags, fd, off);
  if (p == MAP_FAILED) return p;
  RunsLocked locked;
  uintptr_t mfrom = std::max(from, l.maps_begin), mto = std::min(to, l.maps_end);
  if (mfrom < mto) runs.take_at(reinterpret_cast<void*>(mfrom), pages_for(mto - mfrom));
  foreign[foreign_count++] = {from, to};
  return p;
}

// mremap's checks, the kernel's (mm/mremap.c): 0 or the errno.
int remap_error(void* old, size_t old_len, size_t new_len, int flags, void* new_addr) {
  if (flags & ~(MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP)) return EINVAL;
  if ((flags & (MREMAP_FIXED | MREMAP_DONTUNMAP)) && !(flags & MREMAP_MAYMOVE)) return EINVAL;
  if ((flags & MREMAP_DONTUNMAP) && old_len != new_len) return EINVAL;
  if (!aligned(old) || new_len == 0 || old_len == 0) return EINVAL;
  if (flags & MREMAP_FIXED) {
    auto n = reinterpret_cast<uintptr_t>(new_addr), o = reinterpret_cast<uintptr_t>(old);
    if (!aligned(new_addr) || (n < o + old_len && o < n + new_len)) return EINVAL;
  }
  return 0;
}

// The new place of a move: MREMAP_FIXED's address (what was there unmapped first, as the
// kernel does), else pages of the region, else a mapping of the kernel's.
void* place_for(const Layout& l, size_t new_len, int flags, void* new_addr) {
  if (!(flags & MREMAP_FIXED)) {
    if (void* p = map_inside(new_len)) return p;
    return next.mmap(nullptr, new_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  auto n = reinterpret_cast<uintptr_t>(new_addr);
  if (!overlaps_region(l, new_addr, new_len)) {
    return next.mmap(new_addr, new_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  }
  if (n < l.maps_begin || n + new_len > l.maps_end) {
    errno = EINVAL;  // over the malloc family's arena, or across the region's edge
    return MAP_FAILED;
  }
  unmap_inside(l, n, new_len);
  RunsLocked locked;
  return runs.take_at(new_addr, pages_for(new_len)) ? new_addr : MAP_FAILED;
}

// mremap of a mapping in the region.
void* remap_inside(const Layout& l, void* old, size_t old_len, size_t new_len, int flags, void* new_addr) {
  if (int e = remap_error(old, old_len, new_len, flags, new_addr); e != 0) {
    errno = e;
    return MAP_FAILED;
  }
  auto a = reinterpret_cast<uintptr_t>(old);
  if (!mapped_inside(l, a, old_len)) {
    errno = EFAULT;
    return MAP_FAILED;
  }
  size_t have = pages_for(old_len), want = pages_for(new_len);
  if (!(flags & (MREMAP_FIXED | MREMAP_DONTUNMAP))) {
    if (want <= have) {
      if (want < have) unmap_inside(l, a + want * page, (have - want) * page);
      return old;
    }
    RunsLocked locked;
    if (runs.pages_of(old) == have && runs.grow(old, want)) return old;
  }
  if (!(flags & MREMAP_MAYMOVE)) {
    errno = ENOMEM;
    return MAP_FAILED;
  }
  void* moved = place_for(l, new_len, flags, new_addr);
  if (moved == MAP_FAILED || moved == nullptr) {
    if (moved == nullptr) errno = ENOMEM;
    return MAP_FAILED;
  }
  std::memcpy(moved, old, std::min(old_len, new_len));
  if (flags & MREMAP_DONTUNMAP) {
    reset(l, a, have * page);  // the old pages stay mapped, and read as zeros
  } else {
    unmap_inside(l, a, have * page);
  }
  return moved;
}

int advise_inside(const Layout& l, uintptr_t a, size_t len, int advice) {
  if (!mapped_inside(l, a, len)) return fail(ENOMEM);
  InLibrary guard;
  int rc = zsm_region_advise(l.region, reinterpret_cast<void*>(a), len, advice);
  return rc == 0 ? 0 : fail(-rc);
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
  if (l != nullptr && !zsm_preload::use_next() && !zsm_preload::called_from_the_next_malloc(__builtin_return_address(0))) {
    if (zsm_preload::takes(prot, flags, fd, addr, len, off)) {
      if (void* p = zsm_preload::map_inside(len)) return p;
    } else if ((flags & MAP_FIXED) && !(flags & MAP_FIXED_NOREPLACE) && zsm_preload::aligned(addr) && len != 0 &&
               zsm_preload::overlaps_region(*l, addr, len)) {
      return zsm_preload::map_fixed_over(*l, addr, len, prot, flags, fd, off);
    }
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
  if (!zsm_preload::aligned(addr) || len == 0) return zsm_preload::fail(EINVAL);
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
  if (l != nullptr && zsm_preload::in_maps(*l, old)) {
    return zsm_preload::remap_inside(*l, old, old_len, new_len, flags, new_addr);
  }
  if (l != nullptr && zsm_preload::in_heap(*l, old)) {
    errno = EINVAL;  // the malloc family's arena: realloc() moves its blocks
    return MAP_FAILED;
  }
  return next.mremap(old, old_len, new_len, flags, new_addr);
}

__attribute__((visibility("default"))) int madvise(void* addr, size_t len, int advice) {
  const Layout* l = zsm_preload::on();
  if (l == nullptr || !zsm_preload::overlaps_region(*l, addr, len)) return next.madvise(addr, len, advice);
  if (!zsm_preload::aligned(addr)) return zsm_preload::fail(EINVAL);
  return zsm_preload::split(
      *l, addr, len, [&](void* a, size_t n) { return next.madvise(a, n, advice); },
      [&](uintptr_t a, size_t n) { return zsm_preload::advise_inside(*l, a, n, advice); });
}

// The kernel's own: it checks alignment, the protection and that the pages are mapped (the
// region's pages are, to it), and the region copes with pages it cannot move (docs/region.md).
__attribute__((visibility("default"))) int mprotect(void* addr, size_t len, int prot) {
  const Layout* l = zsm_preload::on();
  if (l != nullptr && zsm_preload::overlaps_region(*l, addr, len) && zsm_preload::aligned(addr) &&
      !zsm_preload::mapped_inside(*l, std::max(reinterpret_cast<uintptr_t>(addr), l->begin),
                                  std::min(reinterpret_cast<uintptr_t>(addr) + len, l->end) -
                                      std::max(reinterpret_cast<uintptr_t>(addr), l->begin))) {
    return zsm_preload::fail(ENOMEM);
  }
  return next.mprotect(addr, len, prot);
}

}  // extern "C"
