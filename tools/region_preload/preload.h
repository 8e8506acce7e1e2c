// What the preload library's parts share (preload.cpp says what the library is): the functions
// it interposes as the next library has them, the region and its two parts, and when a call
// must not be served from the region.
#pragma once

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <signal.h>

#include <zsm/region.h>

#include "page_runs.h"

namespace zsm_preload {

// The interposed functions of the next library in the lookup order (libc), found by dlsym.
struct Next {
  void* (*malloc)(size_t);
  void (*free)(void*);
  void* (*calloc)(size_t, size_t);
  void* (*realloc)(void*, size_t);
  int (*posix_memalign)(void**, size_t, size_t);
  void* (*aligned_alloc)(size_t, size_t);
  void* (*memalign)(size_t, size_t);
  void* (*valloc)(size_t);
  void* (*pvalloc)(size_t);
  size_t (*malloc_usable_size)(void*);
  void* (*mmap)(void*, size_t, int, int, int, off_t);
  int (*munmap)(void*, size_t);
  void* (*mremap)(void*, size_t, size_t, int, ...);
  int (*madvise)(void*, size_t, int);
  int (*mprotect)(void*, size_t, int);
  int (*mlock)(const void*, size_t);
  int (*mlock2)(const void*, size_t, unsigned int);
  int (*mlockall)(int);
  int (*close)(int);
  int (*close_range)(unsigned int, unsigned int, int);
  void (*closefrom)(int);
  int (*sigprocmask)(int, const sigset_t*, sigset_t*);
  int (*pthread_sigmask)(int, const sigset_t*, sigset_t*);
  int (*sigaction)(int, const struct sigaction*, struct sigaction*);
  sighandler_t (*signal)(int, sighandler_t);
  ssize_t (*read)(int, void*, size_t);
  ssize_t (*pread64)(int, void*, size_t, off_t);
  ssize_t (*readv)(int, const struct iovec*, int);
  ssize_t (*preadv)(int, const struct iovec*, int, off_t);
  ssize_t (*write)(int, const void*, size_t);
  ssize_t (*pwrite64)(int, const void*, size_t, off_t);
  ssize_t (*writev)(int, const struct iovec*, int);
  ssize_t (*pwritev)(int, const struct iovec*, int, off_t);
  ssize_t (*recv)(int, void*, size_t, int);
  ssize_t (*recvfrom)(int, void*, size_t, int, struct sockaddr*, socklen_t*);
  ssize_t (*recvmsg)(int, struct msghdr*, int);
  ssize_t (*send)(int, const void*, size_t, int);
  ssize_t (*sendto)(int, const void*, size_t, int, const struct sockaddr*, socklen_t);
  ssize_t (*sendmsg)(int, const struct msghdr*, int);
  ssize_t (*vmsplice)(int, const struct iovec*, unsigned long, unsigned int);
  size_t (*fread)(void*, size_t, size_t, FILE*);
  size_t (*fwrite)(const void*, size_t, size_t, FILE*);
  size_t (*fread_unlocked)(void*, size_t, size_t, FILE*);
  int (*epoll_wait)(int, struct epoll_event*, int, int);
  int (*epoll_pwait)(int, struct epoll_event*, int, int, const sigset_t*);
  size_t (*fwrite_unlocked)(const void*, size_t, size_t, FILE*);
};
extern Next next;
// Resolves `next` on first use; false while dlsym itself is allocating (bootstrap.cpp serves
// those requests).
bool next_ready();

// The region and its parts: [heap_begin, heap_end) is mimalloc's arena (the malloc family),
// [maps_begin, maps_end) holds the program's anonymous mappings (PageRuns).
struct Layout {
  zsm_region* region = nullptr;
  uintptr_t begin = 0, end = 0;
  uintptr_t heap_begin = 0, heap_end = 0;
  uintptr_t maps_begin = 0, maps_end = 0;
  bool self_serve = false;
};
// The layout while the library is on, else null.
const Layout* on();

inline bool in_heap(const Layout& l, const void* p) {
  return reinterpret_cast<uintptr_t>(p) - l.heap_begin < l.heap_end - l.heap_begin;
}
inline bool in_maps(const Layout& l, const void* p) {
  return reinterpret_cast<uintptr_t>(p) - l.maps_begin < l.maps_end - l.maps_begin;
}
inline bool overlaps_region(const Layout& l, const void* p, size_t len) {
  auto a = reinterpret_cast<uintptr_t>(p);
  return a < l.end && a + len > l.begin;
}

// Whether this thread's requests go to the next malloc: inside this library's own calls into
// the region, and on the region's own threads, which must never touch region memory.
bool use_next();

// Set while this thread is inside the library's calls into the region.
class InLibrary {
 public:
  InLibrary();
  ~InLibrary();
  InLibrary(const InLibrary&) = delete;
  InLibrary& operator=(const InLibrary&) = delete;

 private:
  bool was_;
};

// One line on stderr, formatted on the stack (stdio's buffers would call malloc).
__attribute__((format(printf, 1, 2))) void say(const char* fmt, ...);

// maps.cpp: the anonymous mappings' allocator, set up when the library turns on.
bool init_maps(const Layout& l, size_t page_size);

}  // namespace zsm_preload
