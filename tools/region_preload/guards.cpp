// What keeps a program from undoing its region by accident (preload.cpp):
// - descriptors: close(), close_range() and closefrom() leave the region's own descriptors
//   open (zsm_region_descriptors(); closing one reports success). The region would survive
//   anyway (its threads keep copies), but its calls would then have to borrow them, and a
//   child of fork() would lose the descriptors reserved for its userfaultfd.
// - mlockall() locks the program's pages as they fault (MCL_ONFAULT added): populating every
//   page at once would fault in the whole region; the region's range is then unlocked again.
//   mlock() and mlock2() lock what they are asked outside the region, and nothing inside.
#include "preload.h"

#include <signal.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace zsm_preload {
namespace {

constexpr int kMostFds = 8;

// The region's descriptors into fds; how many.
int region_fds(const Layout& l, int* fds) { return std::clamp(zsm_region_descriptors(l.region, fds, kMostFds), 0, kMostFds); }

bool is_region_fd(const Layout& l, int fd) {
  int fds[kMostFds];
  int n = region_fds(l, fds);
  for (int i = 0; i < n; ++i) {
    if (fds[i] == fd) return true;
  }
  return false;
}

// close_range() of [first, last], around the region's descriptors.
int close_around(const Layout& l, unsigned first, unsigned last, int flags) {
  int fds[kMostFds];
  int n = region_fds(l, fds);
  std::sort(fds, fds + n);
  unsigned from = first;
  int rc = 0;
  for (int i = 0; i < n; ++i) {
    auto fd = static_cast<unsigned>(fds[i]);
    if (fd < from || fd > last) continue;
    if (fd > from) rc |= next.close_range(from, fd - 1, flags);
    from = fd + 1;
  }
  if (from <= last && from != 0) rc |= next.close_range(from, last, flags);
  if (from == 0) rc |= next.close_range(0, last, flags);
  return rc;
}

}  // namespace
}  // namespace zsm_preload

using zsm_preload::Layout;
using zsm_preload::next;
using zsm_preload::on;

extern "C" {

// --- Descriptors. ---------------------------------------------------------------------------

__attribute__((visibility("default"))) int close(int fd) {
  const Layout* l = on();
  if (l != nullptr && zsm_preload::is_region_fd(*l, fd)) return 0;  // the region's: left open
  return next.close(fd);
}

__attribute__((visibility("default"))) int close_range(unsigned int first, unsigned int last, int flags) {
  const Layout* l = on();
  if (l == nullptr || first > last) return next.close_range(first, last, flags);
  return zsm_preload::close_around(*l, first, last, flags);
}

__attribute__((visibility("default"))) void closefrom(int lowfd) {
  close_range(static_cast<unsigned>(std::max(lowfd, 0)), UINT_MAX, 0);
}

// --- Locking memory. ------------------------------------------------------------------------

__attribute__((visibility("default"))) int mlockall(int flags) {
  const Layout* l = on();
  if (l == nullptr) return next.mlockall(flags);
  int rc = next.mlockall(flags | MCL_ONFAULT);
  if (rc == 0) munlock(reinterpret_cast<void*>(l->begin), l->end - l->begin);
  return rc;
}

__attribute__((visibility("default"))) int mlock(const void* addr, size_t len) {
  const Layout* l = on();
  auto a = reinterpret_cast<uintptr_t>(addr);
  if (l == nullptr || !zsm_preload::overlaps_region(*l, addr, len)) return next.mlock(addr, len);
  int rc = 0;
  if (a < l->begin) rc |= next.mlock(addr, l->begin - a);
  if (a + len > l->end) rc |= next.mlock(reinterpret_cast<void*>(l->end), a + len - l->end);
  return rc;
}

__attribute__((visibility("default"))) int mlock2(const void* addr, size_t len, unsigned int flags) {
  const Layout* l = on();
  auto a = reinterpret_cast<uintptr_t>(addr);
  if (l == nullptr || !zsm_preload::overlaps_region(*l, addr, len)) return next.mlock2(addr, len, flags);
  int rc = 0;
  if (a < l->begin) rc |= next.mlock2(addr, l->begin - a, flags);
  if (a + len > l->end) rc |= next.mlock2(reinterpret_cast<void*>(l->end), a + len - l->end, flags);
  return rc;
}

}  // extern "C"
