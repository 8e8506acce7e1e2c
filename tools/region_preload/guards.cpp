// What keeps a program from undoing its region by accident (preload.cpp):
// - descriptors: close(), close_range() and closefrom() leave the region's own descriptors
//   open (zsm_region_descriptors(); closing one reports success). The region would survive
//   anyway (its threads keep copies), but its calls would then have to borrow them.
// - mlockall() locks the program's pages as they fault (MCL_ONFAULT added): populating every
//   page at once would fault in the whole region; the region's range is then unlocked again.
//   mlock() and mlock2() lock what they are asked outside the region, and nothing inside.
// - the SIGBUS mode, where the kernel kills a thread that blocks a fault's SIGBUS: SIGBUS stays
//   unblocked in every thread (sigprocmask, pthread_sigmask and sigaction's sa_mask drop it),
//   and the program's own SIGBUS handler (sigaction, signal) becomes the one the region's
//   handler passes other SIGBUSes to. A system call that meets an evicted page there fails
//   with EFAULT, so the common I/O calls (read, write, their p-, v- and pv- forms, recv and
//   send and their -from, -to and -msg forms, fread and fwrite, epoll_wait's events) pin the parts of their buffers
//   inside the region for the call (the plain calls in pieces a pin can hold). libc's internal
//   calls (stdio's reads into its own buffer, stat into a struct) are not covered: the SIGBUS
//   mode takes only allocations of 64 KiB or more (preload.cpp), and docs/region.md says what
//   else stays outside.
// - vmsplice() of region memory becomes writev(): a page spliced by reference could be moved
//   out of the region (and its memory reused) before the pipe is read.
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

constexpr size_t kPinPiece = 1 << 20;  // what one pinned piece of a large call holds

// The region's descriptors (at most 4) into fds; how many.
int region_fds(const Layout& l, int* fds) { return std::clamp(zsm_region_descriptors(l.region, fds, 4), 0, 4); }

bool is_region_fd(const Layout& l, int fd) {
  int fds[4];
  int n = region_fds(l, fds);
  for (int i = 0; i < n; ++i) {
    if (fds[i] == fd) return true;
  }
  return false;
}

// close_range() of [first, last], around the region's descriptors.
int close_around(const Layout& l, unsigned first, unsigned last, int flags) {
  int fds[4];
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

bool self_serving() {
  const Layout* l = on();
  return l != nullptr && l->self_serve;
}

// `set` without SIGBUS, into `copy`, when it blocks SIGBUS in the SIGBUS mode.
// (The region's own calls and threads block what they block: they never touch region memory.)
const sigset_t* without_sigbus(int how, const sigset_t* set, sigset_t* copy) {
  if (set == nullptr || how == SIG_UNBLOCK || !self_serving() || use_next() || sigismember(set, SIGBUS) != 1) {
    return set;
  }
  *copy = *set;
  sigdelset(copy, SIGBUS);
  return copy;
}

// The parts of [p, p + len) inside the region, pinned for a scope (the SIGBUS mode).
class Pin {
 public:
  Pin(const Layout& l, const void* p, size_t len) : l_(l) {
    auto a = reinterpret_cast<uintptr_t>(p);
    from_ = std::max(a, l.begin);
    to_ = std::min(a + len, l.end);
    if (from_ >= to_ || len == 0) return;
    InLibrary guard;
    ok_ = zsm_region_pin(l.region, reinterpret_cast<void*>(from_), to_ - from_) == 0;
  }
  ~Pin() {
    if (!ok_) return;
    InLibrary guard;
    zsm_region_unpin(l_.region, reinterpret_cast<void*>(from_), to_ - from_);
  }
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;

 private:
  const Layout& l_;
  uintptr_t from_ = 0, to_ = 0;
  bool ok_ = false;
};

// call(buf, n) over [buf, buf + len): at once when the buffer is outside the region (or not
// the SIGBUS mode), else in pinned pieces until one comes back short.
template <typename Call>
ssize_t with_buffer_pinned(const void* buf, size_t len, Call call) {
  const Layout* l = on();
  if (l == nullptr || !l->self_serve || use_next() || !overlaps_region(*l, buf, len)) return call(buf, len);
  const auto* p = static_cast<const char*>(buf);
  size_t done = 0;
  while (done < len || len == 0) {
    size_t n = std::min(kPinPiece, len - done);
    Pin pin(*l, p + done, n);
    ssize_t got = call(p + done, n);
    if (got < 0) return done > 0 ? static_cast<ssize_t>(done) : got;
    done += static_cast<size_t>(got);
    if (static_cast<size_t>(got) < n || len == 0) break;
  }
  return static_cast<ssize_t>(done);
}

// The same for a vectored call: every vector's part in the region pinned at once (as far as a
// pin may hold: beyond, the call goes unpinned and may meet EFAULT).
template <typename Call>
ssize_t with_vectors_pinned(const struct iovec* iov, int count, Call call) {
  const Layout* l = on();
  if (l == nullptr || !l->self_serve || use_next()) return call();
  bool any = false;
  for (int i = 0; i < count && !any; ++i) any = overlaps_region(*l, iov[i].iov_base, iov[i].iov_len);
  if (!any) return call();
  constexpr int kMostPinned = 64;
  alignas(Pin) unsigned char storage[kMostPinned][sizeof(Pin)];
  int pinned = 0;
  for (int i = 0; i < count && pinned < kMostPinned; ++i) {
    if (overlaps_region(*l, iov[i].iov_base, iov[i].iov_len)) new (storage[pinned++]) Pin(*l, iov[i].iov_base, iov[i].iov_len);
  }
  ssize_t got = call();
  int e = errno;
  while (pinned > 0) reinterpret_cast<Pin*>(storage[--pinned])->~Pin();
  errno = e;
  return got;
}

template <typename Buf, typename Call>
size_t stdio_pinned(Buf* buf, size_t size, size_t count, Call call) {
  size_t bytes = size * count;
  if (size == 0 || bytes / size != count) return call(buf, size, count);
  ssize_t done = with_buffer_pinned(buf, bytes, [&](const void* b, size_t k) {
    return static_cast<ssize_t>(call(static_cast<Buf*>(const_cast<void*>(b)), 1, k));
  });
  return static_cast<size_t>(std::max<ssize_t>(done, 0)) / size;
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

// --- Signals (the SIGBUS mode). -----------------------------------------------------------

__attribute__((visibility("default"))) int sigprocmask(int how, const sigset_t* set, sigset_t* old) {
  sigset_t copy;
  return next.sigprocmask(how, zsm_preload::without_sigbus(how, set, &copy), old);
}

__attribute__((visibility("default"))) int pthread_sigmask(int how, const sigset_t* set, sigset_t* old) {
  sigset_t copy;
  return next.pthread_sigmask(how, zsm_preload::without_sigbus(how, set, &copy), old);
}

__attribute__((visibility("default"))) int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  if (!zsm_preload::self_serving() || zsm_preload::use_next() || act == nullptr) {
    if (sig == SIGBUS && zsm_preload::self_serving()) return zsm_region_sigbus_action(nullptr, old) == 0 ? 0 : -1;
    return next.sigaction(sig, act, old);
  }
  struct sigaction copy = *act;
  sigdelset(&copy.sa_mask, SIGBUS);
  if (sig == SIGBUS) return zsm_region_sigbus_action(&copy, old) == 0 ? 0 : -1;
  return next.sigaction(sig, &copy, old);
}

__attribute__((visibility("default"))) sighandler_t signal(int sig, sighandler_t handler) {
  if (sig != SIGBUS || !zsm_preload::self_serving()) return next.signal(sig, handler);
  struct sigaction act {}, old {};  // signal()'s semantics, as glibc's: restarting, sig blocked
  act.sa_handler = handler;
  act.sa_flags = SA_RESTART;
  sigemptyset(&act.sa_mask);
  sigaddset(&act.sa_mask, sig);
  return sigaction(sig, &act, &old) == 0 ? old.sa_handler : SIG_ERR;
}

// --- I/O into and out of region memory (the SIGBUS mode). ---------------------------------

__attribute__((visibility("default"))) ssize_t read(int fd, void* buf, size_t n) {
  return zsm_preload::with_buffer_pinned(buf, n, [&](const void* b, size_t k) { return next.read(fd, const_cast<void*>(b), k); });
}

__attribute__((visibility("default"))) ssize_t pread64(int fd, void* buf, size_t n, off_t off) {
  const auto* start = static_cast<const char*>(buf);
  return zsm_preload::with_buffer_pinned(buf, n, [&](const void* b, size_t k) {
    return next.pread64(fd, const_cast<void*>(b), k, off + (static_cast<const char*>(b) - start));
  });
}

__attribute__((visibility("default"), alias("pread64"))) ssize_t pread(int, void*, size_t, off_t);

__attribute__((visibility("default"))) ssize_t write(int fd, const void* buf, size_t n) {
  return zsm_preload::with_buffer_pinned(buf, n, [&](const void* b, size_t k) { return next.write(fd, b, k); });
}

__attribute__((visibility("default"))) ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
  const auto* start = static_cast<const char*>(buf);
  return zsm_preload::with_buffer_pinned(buf, n, [&](const void* b, size_t k) {
    return next.pwrite64(fd, b, k, off + (static_cast<const char*>(b) - start));
  });
}

__attribute__((visibility("default"), alias("pwrite64"))) ssize_t pwrite(int, const void*, size_t, off_t);

__attribute__((visibility("default"))) ssize_t readv(int fd, const struct iovec* iov, int count) {
  return zsm_preload::with_vectors_pinned(iov, count, [&] { return next.readv(fd, iov, count); });
}

__attribute__((visibility("default"))) ssize_t preadv(int fd, const struct iovec* iov, int count, off_t off) {
  return zsm_preload::with_vectors_pinned(iov, count, [&] { return next.preadv(fd, iov, count, off); });
}

__attribute__((visibility("default"))) ssize_t writev(int fd, const struct iovec* iov, int count) {
  return zsm_preload::with_vectors_pinned(iov, count, [&] { return next.writev(fd, iov, count); });
}

__attribute__((visibility("default"))) ssize_t pwritev(int fd, const struct iovec* iov, int count, off_t off) {
  return zsm_preload::with_vectors_pinned(iov, count, [&] { return next.pwritev(fd, iov, count, off); });
}

__attribute__((visibility("default"))) ssize_t recv(int fd, void* buf, size_t n, int flags) {
  return zsm_preload::with_buffer_pinned(buf, n, [&](const void* b, size_t k) { return next.recv(fd, const_cast<void*>(b), k, flags); });
}

__attribute__((visibility("default"))) ssize_t recvfrom(int fd, void* buf, size_t n, int flags, struct sockaddr* from,
                                                        socklen_t* from_len) {
  return zsm_preload::with_buffer_pinned(
      buf, n, [&](const void* b, size_t k) { return next.recvfrom(fd, const_cast<void*>(b), k, flags, from, from_len); });
}

__attribute__((visibility("default"))) ssize_t recvmsg(int fd, struct msghdr* msg, int flags) {
  return zsm_preload::with_vectors_pinned(msg->msg_iov, static_cast<int>(msg->msg_iovlen),
                                          [&] { return next.recvmsg(fd, msg, flags); });
}

__attribute__((visibility("default"))) ssize_t send(int fd, const void* buf, size_t n, int flags) {
  return zsm_preload::with_buffer_pinned(buf, n, [&](const void* b, size_t k) { return next.send(fd, b, k, flags); });
}

__attribute__((visibility("default"))) ssize_t sendto(int fd, const void* buf, size_t n, int flags,
                                                      const struct sockaddr* to, socklen_t to_len) {
  return zsm_preload::with_buffer_pinned(buf, n, [&](const void* b, size_t k) { return next.sendto(fd, b, k, flags, to, to_len); });
}

__attribute__((visibility("default"))) ssize_t sendmsg(int fd, const struct msghdr* msg, int flags) {
  return zsm_preload::with_vectors_pinned(msg->msg_iov, static_cast<int>(msg->msg_iovlen),
                                          [&] { return next.sendmsg(fd, msg, flags); });
}

// fread and fwrite (and their _unlocked forms): in pinned pieces too (stdio reads straight into
// a large buffer); the items done are the bytes done over the item's size.

__attribute__((visibility("default"))) size_t fread(void* buf, size_t size, size_t count, FILE* f) {
  return zsm_preload::stdio_pinned(buf, size, count, [&](void* b, size_t s, size_t c) { return next.fread(b, s, c, f); });
}

__attribute__((visibility("default"))) size_t fread_unlocked(void* buf, size_t size, size_t count, FILE* f) {
  return zsm_preload::stdio_pinned(buf, size, count,
                                   [&](void* b, size_t s, size_t c) { return next.fread_unlocked(b, s, c, f); });
}

__attribute__((visibility("default"))) size_t fwrite(const void* buf, size_t size, size_t count, FILE* f) {
  return zsm_preload::stdio_pinned(buf, size, count,
                                   [&](const void* b, size_t s, size_t c) { return next.fwrite(b, s, c, f); });
}

__attribute__((visibility("default"))) size_t fwrite_unlocked(const void* buf, size_t size, size_t count, FILE* f) {
  return zsm_preload::stdio_pinned(buf, size, count,
                                   [&](const void* b, size_t s, size_t c) { return next.fwrite_unlocked(b, s, c, f); });
}

// epoll_wait's events array: an event loop's (Redis's is 120 KB) may be region memory.
__attribute__((visibility("default"))) int epoll_wait(int epfd, struct epoll_event* events, int most, int timeout) {
  return static_cast<int>(zsm_preload::with_buffer_pinned(
      events, most > 0 ? sizeof(struct epoll_event) * static_cast<size_t>(most) : 0,
      [&](const void* b, size_t k) {
        return static_cast<ssize_t>(next.epoll_wait(epfd, static_cast<struct epoll_event*>(const_cast<void*>(b)),
                                                    static_cast<int>(k / sizeof(struct epoll_event)), timeout));
      }));
}

__attribute__((visibility("default"))) int epoll_pwait(int epfd, struct epoll_event* events, int most, int timeout,
                                                       const sigset_t* mask) {
  sigset_t copy;
  const sigset_t* m = zsm_preload::without_sigbus(SIG_SETMASK, mask, &copy);
  return static_cast<int>(zsm_preload::with_buffer_pinned(
      events, most > 0 ? sizeof(struct epoll_event) * static_cast<size_t>(most) : 0,
      [&](const void* b, size_t k) {
        return static_cast<ssize_t>(next.epoll_pwait(epfd, static_cast<struct epoll_event*>(const_cast<void*>(b)),
                                                     static_cast<int>(k / sizeof(struct epoll_event)), timeout, m));
      }));
}

__attribute__((visibility("default"))) ssize_t vmsplice(int fd, const struct iovec* iov, unsigned long count,
                                                        unsigned int flags) {
  const Layout* l = on();
  bool in_region = false;
  for (unsigned long i = 0; l != nullptr && i < count && !in_region; ++i) {
    in_region = zsm_preload::overlaps_region(*l, iov[i].iov_base, iov[i].iov_len);
  }
  if (in_region) return writev(fd, iov, static_cast<int>(count));
  return next.vmsplice(fd, iov, count, flags);
}

}  // extern "C"
