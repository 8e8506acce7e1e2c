// What the preload library's parts share (preload.cpp says what the library is): the functions
// it interposes as the next library has them, the region and its parts, its mode, and when a
// call must not be served from the region.
//
// The parts: preload.cpp (turning on, the malloc family, the statistics at exit), maps.cpp
// (anonymous mappings and what a program does to them), guards.cpp (descriptors, mlock),
// signals.cpp (the SIGBUS mode's handler kept first, signal stacks, threads' start), io.cpp
// (buffers of I/O calls pinned), kernel_args.cpp (other arguments the kernel reads or writes),
// locks.cpp (futex words kept resident while a thread waits on them).
#pragma once

#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <threads.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <utility>

#include <zsm/region.h>

#include "page_runs.h"

namespace zsm_preload {

// The interposed functions, as (name, return type, parameters): the next library's (libc's)
// are found by dlsym(RTLD_NEXT) into `next`.
#define ZSM_PRELOAD_FUNCTIONS(X)                                                                   \
  /* the malloc family (preload.cpp) */                                                             \
  X(malloc, void*, (size_t))                                                                        \
  X(free, void, (void*))                                                                            \
  X(calloc, void*, (size_t, size_t))                                                                \
  X(realloc, void*, (void*, size_t))                                                                \
  X(posix_memalign, int, (void**, size_t, size_t))                                                  \
  X(aligned_alloc, void*, (size_t, size_t))                                                         \
  X(memalign, void*, (size_t, size_t))                                                              \
  X(valloc, void*, (size_t))                                                                        \
  X(pvalloc, void*, (size_t))                                                                       \
  X(malloc_usable_size, size_t, (void*))                                                            \
  /* mappings (maps.cpp) */                                                                         \
  X(mmap, void*, (void*, size_t, int, int, int, off_t))                                             \
  X(munmap, int, (void*, size_t))                                                                   \
  X(mremap, void*, (void*, size_t, size_t, int, ...))                                               \
  X(madvise, int, (void*, size_t, int))                                                             \
  X(mprotect, int, (void*, size_t, int))                                                            \
  /* descriptors, locked memory (guards.cpp) */                                                     \
  X(mlock, int, (const void*, size_t))                                                              \
  X(mlock2, int, (const void*, size_t, unsigned int))                                               \
  X(mlockall, int, (int))                                                                           \
  X(close, int, (int))                                                                              \
  X(close_range, int, (unsigned int, unsigned int, int))                                            \
  X(closefrom, void, (int))                                                                         \
  /* signals and threads (signals.cpp) */                                                           \
  X(sigprocmask, int, (int, const sigset_t*, sigset_t*))                                            \
  X(pthread_sigmask, int, (int, const sigset_t*, sigset_t*))                                        \
  X(sigaction, int, (int, const struct sigaction*, struct sigaction*))                              \
  X(sigaltstack, int, (const stack_t*, stack_t*))                                                   \
  X(sigsuspend, int, (const sigset_t*))                                                             \
  X(signal, sighandler_t, (int, sighandler_t))                                                      \
  X(__sysv_signal, sighandler_t, (int, sighandler_t))                                               \
  X(sigset, sighandler_t, (int, sighandler_t))                                                      \
  X(sigignore, int, (int))                                                                          \
  X(pthread_create, int, (pthread_t*, const pthread_attr_t*, void* (*)(void*), void*))              \
  /* I/O into and out of buffers (io.cpp) */                                                        \
  X(read, ssize_t, (int, void*, size_t))                                                            \
  X(pread64, ssize_t, (int, void*, size_t, off_t))                                                  \
  X(readv, ssize_t, (int, const struct iovec*, int))                                                \
  X(preadv, ssize_t, (int, const struct iovec*, int, off_t))                                        \
  X(preadv2, ssize_t, (int, const struct iovec*, int, off_t, int))                                  \
  X(write, ssize_t, (int, const void*, size_t))                                                     \
  X(pwrite64, ssize_t, (int, const void*, size_t, off_t))                                           \
  X(writev, ssize_t, (int, const struct iovec*, int))                                               \
  X(pwritev, ssize_t, (int, const struct iovec*, int, off_t))                                       \
  X(pwritev2, ssize_t, (int, const struct iovec*, int, off_t, int))                                 \
  X(recv, ssize_t, (int, void*, size_t, int))                                                       \
  X(recvfrom, ssize_t, (int, void*, size_t, int, struct sockaddr*, socklen_t*))                     \
  X(recvmsg, ssize_t, (int, struct msghdr*, int))                                                   \
  X(recvmmsg, int, (int, struct mmsghdr*, unsigned int, int, struct timespec*))                     \
  X(send, ssize_t, (int, const void*, size_t, int))                                                 \
  X(sendto, ssize_t, (int, const void*, size_t, int, const struct sockaddr*, socklen_t))            \
  X(sendmsg, ssize_t, (int, const struct msghdr*, int))                                             \
  X(sendmmsg, int, (int, struct mmsghdr*, unsigned int, int))                                       \
  X(vmsplice, ssize_t, (int, const struct iovec*, unsigned long, unsigned int))                     \
  X(getrandom, ssize_t, (void*, size_t, unsigned int))                                              \
  X(getdents64, ssize_t, (int, void*, size_t))                                                      \
  X(fread, size_t, (void*, size_t, size_t, FILE*))                                                  \
  X(fread_unlocked, size_t, (void*, size_t, size_t, FILE*))                                         \
  X(fwrite, size_t, (const void*, size_t, size_t, FILE*))                                           \
  X(fwrite_unlocked, size_t, (const void*, size_t, size_t, FILE*))                                  \
  X(fputs, int, (const char*, FILE*))                                                               \
  X(fputs_unlocked, int, (const char*, FILE*))                                                      \
  X(puts, int, (const char*))                                                                       \
  X(epoll_wait, int, (int, struct epoll_event*, int, int))                                          \
  X(epoll_pwait, int, (int, struct epoll_event*, int, int, const sigset_t*))                        \
  X(poll, int, (struct pollfd*, nfds_t, int))                                                       \
  X(ppoll, int, (struct pollfd*, nfds_t, const struct timespec*, const sigset_t*))                  \
  /* locks (locks.cpp) */                                                                           \
  X(pthread_mutex_lock, int, (pthread_mutex_t*))                                                    \
  X(pthread_mutex_trylock, int, (pthread_mutex_t*))                                                 \
  X(pthread_mutex_timedlock, int, (pthread_mutex_t*, const struct timespec*))                       \
  X(pthread_mutex_clocklock, int, (pthread_mutex_t*, clockid_t, const struct timespec*))            \
  X(pthread_cond_wait, int, (pthread_cond_t*, pthread_mutex_t*))                                    \
  X(pthread_cond_timedwait, int, (pthread_cond_t*, pthread_mutex_t*, const struct timespec*))       \
  X(pthread_cond_clockwait, int, (pthread_cond_t*, pthread_mutex_t*, clockid_t, const struct timespec*)) \
  X(pthread_rwlock_rdlock, int, (pthread_rwlock_t*))                                                \
  X(pthread_rwlock_wrlock, int, (pthread_rwlock_t*))                                                \
  X(pthread_rwlock_tryrdlock, int, (pthread_rwlock_t*))                                             \
  X(pthread_rwlock_trywrlock, int, (pthread_rwlock_t*))                                             \
  X(pthread_rwlock_timedrdlock, int, (pthread_rwlock_t*, const struct timespec*))                   \
  X(pthread_rwlock_timedwrlock, int, (pthread_rwlock_t*, const struct timespec*))                   \
  X(pthread_rwlock_clockrdlock, int, (pthread_rwlock_t*, clockid_t, const struct timespec*))        \
  X(pthread_rwlock_clockwrlock, int, (pthread_rwlock_t*, clockid_t, const struct timespec*))        \
  X(pthread_barrier_wait, int, (pthread_barrier_t*))                                                \
  X(pthread_join, int, (pthread_t, void**))                                                         \
  X(sem_wait, int, (sem_t*))                                                                        \
  X(sem_trywait, int, (sem_t*))                                                                     \
  X(sem_timedwait, int, (sem_t*, const struct timespec*))                                           \
  X(sem_clockwait, int, (sem_t*, clockid_t, const struct timespec*))                                \
  X(mtx_lock, int, (mtx_t*))                                                                        \
  X(mtx_trylock, int, (mtx_t*))                                                                     \
  X(mtx_timedlock, int, (mtx_t * __restrict, const struct timespec* __restrict))                    \
  X(cnd_wait, int, (cnd_t*, mtx_t*))                                                                \
  X(cnd_timedwait, int, (cnd_t * __restrict, mtx_t * __restrict, const struct timespec* __restrict)) \
  X(syscall, long, (long, ...))

// The calls whose other arguments the kernel reads or writes (kernel_args.cpp).
#define ZSM_PRELOAD_ARG_FUNCTIONS(X)                                                                \
  X(open, int, (const char*, int, ...))                                                             \
  X(open64, int, (const char*, int, ...))                                                           \
  X(openat, int, (int, const char*, int, ...))                                                      \
  X(openat64, int, (int, const char*, int, ...))                                                    \
  X(__open_2, int, (const char*, int))                                                              \
  X(__open64_2, int, (const char*, int))                                                            \
  X(__openat_2, int, (int, const char*, int))                                                       \
  X(__openat64_2, int, (int, const char*, int))                                                     \
  X(creat, int, (const char*, mode_t))                                                              \
  X(creat64, int, (const char*, mode_t))                                                            \
  X(stat, int, (const char*, struct stat*))                                                         \
  X(stat64, int, (const char*, struct stat64*))                                                     \
  X(lstat, int, (const char*, struct stat*))                                                        \
  X(lstat64, int, (const char*, struct stat64*))                                                    \
  X(fstat, int, (int, struct stat*))                                                                \
  X(fstat64, int, (int, struct stat64*))                                                            \
  X(fstatat, int, (int, const char*, struct stat*, int))                                            \
  X(fstatat64, int, (int, const char*, struct stat64*, int))                                        \
  X(statx, int, (int, const char*, int, unsigned int, struct statx*))                               \
  X(__xstat, int, (int, const char*, struct stat*))                                                 \
  X(__lxstat, int, (int, const char*, struct stat*))                                                \
  X(__fxstat, int, (int, int, struct stat*))                                                        \
  X(__fxstatat, int, (int, int, const char*, struct stat*, int))                                    \
  X(statfs, int, (const char*, struct statfs*))                                                     \
  X(fstatfs, int, (int, struct statfs*))                                                            \
  X(statvfs, int, (const char*, struct statvfs*))                                                   \
  X(fstatvfs, int, (int, struct statvfs*))                                                          \
  X(access, int, (const char*, int))                                                                \
  X(faccessat, int, (int, const char*, int, int))                                                   \
  X(mkdir, int, (const char*, mode_t))                                                              \
  X(mkdirat, int, (int, const char*, mode_t))                                                       \
  X(rmdir, int, (const char*))                                                                      \
  X(unlink, int, (const char*))                                                                     \
  X(unlinkat, int, (int, const char*, int))                                                         \
  X(rename, int, (const char*, const char*))                                                        \
  X(renameat, int, (int, const char*, int, const char*))                                            \
  X(renameat2, int, (int, const char*, int, const char*, unsigned int))                             \
  X(link, int, (const char*, const char*))                                                          \
  X(linkat, int, (int, const char*, int, const char*, int))                                         \
  X(symlink, int, (const char*, const char*))                                                       \
  X(symlinkat, int, (const char*, int, const char*))                                                \
  X(readlink, ssize_t, (const char*, char*, size_t))                                                \
  X(readlinkat, ssize_t, (int, const char*, char*, size_t))                                         \
  X(chdir, int, (const char*))                                                                      \
  X(chmod, int, (const char*, mode_t))                                                              \
  X(fchmodat, int, (int, const char*, mode_t, int))                                                 \
  X(chown, int, (const char*, uid_t, gid_t))                                                        \
  X(lchown, int, (const char*, uid_t, gid_t))                                                       \
  X(fchownat, int, (int, const char*, uid_t, gid_t, int))                                           \
  X(truncate, int, (const char*, off_t))                                                            \
  X(utimensat, int, (int, const char*, const struct timespec*, int))                                \
  X(mknod, int, (const char*, mode_t, dev_t))                                                       \
  X(mkfifo, int, (const char*, mode_t))                                                             \
  X(getcwd, char*, (char*, size_t))                                                                 \
  X(execve, int, (const char*, char* const*, char* const*))                                         \
  X(execv, int, (const char*, char* const*))                                                        \
  X(execvp, int, (const char*, char* const*))                                                       \
  X(execvpe, int, (const char*, char* const*, char* const*))                                        \
  X(fexecve, int, (int, char* const*, char* const*))                                                \
  X(posix_spawn, int, (pid_t*, const char*, const posix_spawn_file_actions_t*,                     \
                       const posix_spawnattr_t*, char* const*, char* const*))                       \
  X(posix_spawnp, int, (pid_t*, const char*, const posix_spawn_file_actions_t*,                    \
                        const posix_spawnattr_t*, char* const*, char* const*))                      \
  X(fopen, FILE*, (const char*, const char*))                                                       \
  X(fopen64, FILE*, (const char*, const char*))                                                     \
  X(freopen, FILE*, (const char*, const char*, FILE*))                                              \
  X(opendir, DIR*, (const char*))                                                                   \
  X(connect, int, (int, const struct sockaddr*, socklen_t))                                         \
  X(bind, int, (int, const struct sockaddr*, socklen_t))                                            \
  X(accept, int, (int, struct sockaddr*, socklen_t*))                                               \
  X(accept4, int, (int, struct sockaddr*, socklen_t*, int))                                         \
  X(getsockname, int, (int, struct sockaddr*, socklen_t*))                                          \
  X(getpeername, int, (int, struct sockaddr*, socklen_t*))                                          \
  X(getsockopt, int, (int, int, int, void*, socklen_t*))                                            \
  X(setsockopt, int, (int, int, int, const void*, socklen_t))                                       \
  X(pipe, int, (int*))                                                                              \
  X(pipe2, int, (int*, int))                                                                        \
  X(socketpair, int, (int, int, int, int*))                                                         \
  X(wait, pid_t, (int*))                                                                            \
  X(waitpid, pid_t, (pid_t, int*, int))                                                             \
  X(wait4, pid_t, (pid_t, int*, int, struct rusage*))                                               \
  X(waitid, int, (idtype_t, id_t, siginfo_t*, int))                                                 \
  X(copy_file_range, ssize_t, (int, off64_t*, int, off64_t*, size_t, unsigned int))                 \
  X(splice, ssize_t, (int, off64_t*, int, off64_t*, size_t, unsigned int))                          \
  X(sendfile, ssize_t, (int, int, off_t*, size_t))                                                  \
  X(nanosleep, int, (const struct timespec*, struct timespec*))                                     \
  X(clock_nanosleep, int, (clockid_t, int, const struct timespec*, struct timespec*))

struct Next {
#define ZSM_PRELOAD_NEXT_FIELD(name, ret, params) ret(*name) params;
  ZSM_PRELOAD_FUNCTIONS(ZSM_PRELOAD_NEXT_FIELD)
  ZSM_PRELOAD_ARG_FUNCTIONS(ZSM_PRELOAD_NEXT_FIELD)
#undef ZSM_PRELOAD_NEXT_FIELD
};
extern Next next;
// Resolves `next` on first use; false while dlsym itself is allocating (preload.cpp's bootstrap
// serves those requests).
bool next_ready();

// The region and its parts: [heap_begin, heap_end) is mimalloc's arena (the malloc family),
// [maps_begin, maps_end) holds the program's anonymous mappings (PageRuns).
struct Layout {
  zsm_region* region = nullptr;
  uintptr_t begin = 0, end = 0;
  uintptr_t heap_begin = 0, heap_end = 0;
  uintptr_t maps_begin = 0, maps_end = 0;
  bool self_serve = false;      // the SIGBUS mode
  bool user_mode_only = false;  // the kernel's own accesses are not served (no privilege)
  unsigned cold_age_ms = 0;     // aging (ZSM_REGION_COLD_AGE); 0: off
  unsigned stall_target_ppm = 0;  // its steering (ZSM_REGION_STALL_TARGET); 0: a fixed age
  // Whether a system call may meet a page nobody serves (EFAULT): then the library keeps what
  // libc and the kernel touch out of the region, pins I/O buffers, retries what it can, and
  // keeps futex words resident (docs/region.md, "The pinning modes").
  bool pins() const { return self_serve || user_mode_only; }
};
// The layout while the library is on, else null.
const Layout* on();
// The layout when the library is on in a pinning mode and this thread may use the region.
const Layout* pinning();

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

// Whether `caller` is code of the next malloc, where that is a library of its own (jemalloc,
// tcmalloc): the region's threads allocate from it, so its memory stays outside the region.
bool called_from_the_next_malloc(const void* caller);

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

// The parts of [p, p + len) inside the region pinned (resident and writable) until release():
// take() returns 0, -ENOMEM when the pins would pass what the region allows now (half its
// budget: the caller splits the call, bounces it through its own memory, or lets faults serve
// it), or another -errno. Nothing waits for room: a pin held across a blocking call would make
// every other thread wait on it.
class Pin {
 public:
  Pin() = default;
  ~Pin() { release(); }
  Pin(Pin&& o) noexcept : l_(o.l_), from_(o.from_), to_(o.to_) { o.l_ = nullptr; }
  Pin& operator=(Pin&& o) noexcept {  // what this held released, o's taken over
    if (this != &o) {
      release();
      l_ = std::exchange(o.l_, nullptr);
      from_ = o.from_;
      to_ = o.to_;
    }
    return *this;
  }
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
  int take(const Layout& l, const void* p, size_t len);
  void release();

 private:
  const Layout* l_ = nullptr;
  uintptr_t from_ = 0, to_ = 0;
};

// Pages of [p, p + len) in the region brought in by a touch from this thread (a read, or an
// atomic write of nothing for memory the kernel will write): for arguments of calls that have
// no effect when they fail with EFAULT, retried after it (kernel_args.cpp, locks.cpp).
void touch_for_read(const Layout& l, const void* p, size_t len);
void touch_for_write(const Layout& l, void* p, size_t len);

// A word of memory the program passed, read without faulting on a bad address (the kernel
// would have said EFAULT there, not SIGSEGV): false when it cannot be read.
template <typename T>
bool read_safely(const T* p, T* out) {
  struct iovec local = {out, sizeof *out}, remote = {const_cast<T*>(p), sizeof *out};
  return ::syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0) == static_cast<long>(sizeof *out);
}

// One line on stderr, formatted on the stack (stdio's buffers would call malloc).
__attribute__((format(printf, 1, 2))) void say(const char* fmt, ...);

// stats.cpp: ZSM_REGION_STATS_INTERVAL's CSV lines set up as the region's report (false, said,
// for a bad value or a file that cannot be written); the region they read, once it is made;
// the aging part of the line at exit.
bool stats_interval_from_env(zsm_region_options* o);
void stats_region_made(zsm_region* r);
int aging_text(char* out, size_t n, const struct zsm_region_stats& s, unsigned stall_target_ppm);

// maps.cpp: the anonymous mappings' allocator, set up when the library turns on.
bool init_maps(const Layout& l, size_t page_size);
// signals.cpp: the SIGBUS mode's signal stack for the thread that turned the library on; and a
// signal mask without SIGBUS (into *copy) where `set` would block it in the SIGBUS mode.
void init_signal_stack();
const sigset_t* without_sigbus(int how, const sigset_t* set, sigset_t* copy);
// syscall(SYS_rt_sigaction or SYS_rt_sigprocmask, ...) in the SIGBUS mode, served as the libc
// calls are: true with *result set; false for any other call (made by the caller).
bool signal_syscall(long number, const long* args, long* result);

}  // namespace zsm_preload
