// I/O into and out of region memory, in the pinning modes (preload.h): the kernel copies a
// buffer in kernel mode, and meets EFAULT at a page nobody serves (evicted, or never touched),
// or stops short there. So the calls pin the parts of their buffers inside the region for the
// call: read, write and their p-, v-, pv- and pv2 forms (and the _chk forms a _FORTIFY_SOURCE
// build calls), recv and send and their -from, -to, -msg and -mmsg forms, getrandom,
// getdents64, fread and fwrite (stdio reads straight into a large buffer), epoll_wait's
// events, poll's descriptors. vmsplice() of region memory becomes writev(): a page spliced by
// reference could leave the region (and its memory be reused) before the pipe is read.
//
// A pin may hold at most half the budget, with other threads' pins: a large buffer is pinned a
// piece at a time (1 MiB, halved while the pins would pass the limit, down to 64 KiB: a
// datagram's most, so that no datagram is cut), and below that the call waits for other
// threads' calls to end. A call never goes on unpinned. Where a piece fills, the next piece is
// a call of its own: for reads only from a regular file (a socket or a pipe would wait for
// bytes the plain call would not have waited for); writes go on until done, as the plain call
// would; a vectored call that cannot be pinned whole is shortened (a short count, which the
// plain call may return too), but a message call only where the socket is a stream.
#include "preload.h"

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <type_traits>

extern "C" [[noreturn]] void __chk_fail(void);

namespace zsm_preload {
namespace {

constexpr size_t kPiece = 1 << 20;
constexpr size_t kLeastPiece = 64 << 10;
constexpr int kMostVectors = 64;  // vectors pinned at once: a longer call is shortened

bool regular_file(int fd) {
  struct stat st {};
  return next.fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
}

bool stream_socket(int fd) {
  int type = 0;
  socklen_t len = sizeof type;
  return next.getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM;
}

// call(buf, n) over [buf, buf + len) in pinned pieces; after a piece that filled, more() says
// whether the next follows (a call of its own). The bytes done, or the first call's error.
template <typename More, typename Call>
ssize_t with_buffer_pinned(const void* buf, size_t len, More more, Call call) {
  const Layout* l = pinning();
  if (l == nullptr || len == 0 || !overlaps_region(*l, buf, len)) return call(buf, len);
  const auto* p = static_cast<const char*>(buf);
  size_t done = 0, piece = kPiece;
  while (done < len) {
    size_t n = std::min(piece, len - done);
    Pin pin;
    int rc = pin.take(*l, p + done, n);
    if (rc == -ENOMEM && n > kLeastPiece) {
      piece = std::max(n / 2, kLeastPiece);
      continue;
    }
    if (rc == -ENOMEM) pin.take_waiting(*l, p + done, n);
    ssize_t got = call(p + done, n);
    pin.release();
    if (got < 0) return done > 0 ? static_cast<ssize_t>(done) : got;
    done += static_cast<size_t>(got);
    if (static_cast<size_t>(got) < n || done == len || !more()) break;
  }
  return static_cast<ssize_t>(done);
}

bool always() { return true; }
bool never() { return false; }

// A vectored call's buffers, pinned: every vector in the region at once, or the call shortened
// to what can be (when `may_shorten`), else waiting.
class PinnedVectors {
 public:
  PinnedVectors(const Layout& l, const struct iovec* iov, int count, bool may_shorten)
      : l_(l), iov_(iov), count_(std::max(count, 0)) {
    for (size_t most = SIZE_MAX;;) {
      if (pin_all()) return;
      size_t bytes = region_bytes();
      if (may_shorten && bytes > kLeastPiece) {
        most = std::min(most, bytes) / 2;
        shorten_to(std::max(most, kLeastPiece));
      } else {
        usleep(1000);  // other threads' calls end, and their pins with them
      }
    }
  }
  const struct iovec* iov() const { return iov_; }
  int count() const { return count_; }
  size_t bytes() const {
    size_t n = 0;
    for (int i = 0; i < count_; ++i) n += iov_[i].iov_len;
    return n;
  }

 private:
  size_t region_bytes() const {
    size_t n = 0;
    for (int i = 0; i < count_; ++i) {
      if (overlaps_region(l_, iov_[i].iov_base, iov_[i].iov_len)) n += iov_[i].iov_len;
    }
    return n;
  }
  // The vectors cut where their bytes in the region pass `most`.
  void shorten_to(size_t most) {
    int n = std::min(count_, kMostVectors);
    size_t bytes = 0;
    for (int i = 0; i < n; ++i) {
      own_[i] = iov_[i];
      if (!overlaps_region(l_, own_[i].iov_base, own_[i].iov_len)) continue;
      if (bytes + own_[i].iov_len >= most) {
        own_[i].iov_len = std::max<size_t>(most - bytes, 1);
        n = i + 1;
        break;
      }
      bytes += own_[i].iov_len;
    }
    iov_ = own_;
    count_ = n;
  }
  bool pin_all() {
    int pinned = 0;
    for (int i = 0; i < count_; ++i) {
      if (!overlaps_region(l_, iov_[i].iov_base, iov_[i].iov_len)) continue;
      if (pinned == kMostVectors || pins_[pinned].take(l_, iov_[i].iov_base, iov_[i].iov_len) == -ENOMEM) {
        for (int k = 0; k < pinned; ++k) pins_[k].release();
        return false;
      }
      ++pinned;
    }
    return true;
  }

  const Layout& l_;
  const struct iovec* iov_;
  int count_;
  struct iovec own_[kMostVectors];
  Pin pins_[kMostVectors];
};

// The vectors past the first `done` bytes of iov[0..count), at most kMostVectors of them, into
// `out`; how many.
int vectors_after(const struct iovec* iov, int count, size_t done, struct iovec* out) {
  int n = 0;
  for (int i = 0; i < count && n < kMostVectors; ++i) {
    if (done >= iov[i].iov_len) {
      done -= iov[i].iov_len;
      continue;
    }
    out[n++] = {static_cast<char*>(iov[i].iov_base) + done, iov[i].iov_len - done};
    done = 0;
  }
  return n;
}

// call(iov, count, done) over the vectors in pinned parts: as with_buffer_pinned, after a
// part that filled, more() says whether the next follows (`done`: the bytes before it, for
// the positional forms' offset). A call of more than kMostVectors vectors is such parts too.
template <typename More, typename Call>
ssize_t with_vectors_pinned(const struct iovec* iov, int count, bool may_shorten, More more, Call call) {
  const Layout* l = pinning();
  bool any = false;
  for (int i = 0; l != nullptr && i < count && !any; ++i) any = overlaps_region(*l, iov[i].iov_base, iov[i].iov_len);
  if (!any) return call(iov, count, size_t{0});
  size_t total = 0, done = 0;
  for (int i = 0; i < count; ++i) total += iov[i].iov_len;
  struct iovec rest[kMostVectors];
  do {
    int n = vectors_after(iov, count, done, rest);
    PinnedVectors pinned(*l, rest, n, may_shorten);
    const size_t asked = pinned.bytes();
    ssize_t got = call(pinned.iov(), pinned.count(), done);
    if (got < 0) return done > 0 ? static_cast<ssize_t>(done) : got;
    done += static_cast<size_t>(got);
    if (static_cast<size_t>(got) < asked) break;
  } while (done < total && more());
  return static_cast<ssize_t>(done);
}

// A message call: its vectors (and its name and control buffers, small and pinned whole).
template <typename Msg, typename Call>
ssize_t with_message_pinned(int fd, Msg* msg, Call call) {
  const Layout* l = pinning();
  if (l == nullptr || msg == nullptr) return call(msg);
  Pin name, control;
  if (msg->msg_name != nullptr) name.take_waiting(*l, msg->msg_name, msg->msg_namelen);
  if (msg->msg_control != nullptr) control.take_waiting(*l, msg->msg_control, msg->msg_controllen);
  return with_vectors_pinned(msg->msg_iov, static_cast<int>(msg->msg_iovlen), stream_socket(fd), never,
                             [&](const struct iovec* iov, int count, size_t) {
                               std::remove_const_t<Msg> copy = *msg;
                               copy.msg_iov = const_cast<struct iovec*>(iov);
                               copy.msg_iovlen = static_cast<size_t>(count);
                               ssize_t got = call(&copy);
                               if constexpr (!std::is_const_v<Msg>) {  // what recvmsg reports back
                                 msg->msg_flags = copy.msg_flags;
                                 msg->msg_namelen = copy.msg_namelen;
                                 msg->msg_controllen = copy.msg_controllen;
                               }
                               return got;
                             });
}

// recvmmsg/sendmmsg: where any message's buffers are in the region, one message through the
// single-message call's pins (fewer messages done is what the plain call may return too).
template <typename One, typename Call>
int with_messages_pinned(struct mmsghdr* msgs, unsigned int count, One one, Call call) {
  const Layout* l = pinning();
  bool any = false;
  for (unsigned m = 0; l != nullptr && m < count && !any; ++m) {
    const struct msghdr& h = msgs[m].msg_hdr;
    any = overlaps_region(*l, &msgs[m], sizeof msgs[m]) ||
          (h.msg_name != nullptr && overlaps_region(*l, h.msg_name, h.msg_namelen)) ||
          (h.msg_control != nullptr && overlaps_region(*l, h.msg_control, h.msg_controllen));
    for (size_t i = 0; i < h.msg_iovlen && !any; ++i) any = overlaps_region(*l, h.msg_iov[i].iov_base, h.msg_iov[i].iov_len);
  }
  if (!any || count == 0) return call();
  ssize_t got = one(&msgs[0].msg_hdr);
  if (got < 0) return -1;
  msgs[0].msg_len = static_cast<unsigned int>(got);
  return 1;
}

template <typename Buf, typename Call>
size_t stdio_pinned(Buf* buf, size_t size, size_t count, Call call) {
  size_t bytes = size * count;
  if (size == 0 || bytes / size != count) return call(buf, size, count);
  ssize_t done = with_buffer_pinned(buf, bytes, always, [&](const void* b, size_t k) {
    return static_cast<ssize_t>(call(static_cast<Buf*>(const_cast<void*>(b)), 1, k));
  });
  return static_cast<size_t>(std::max<ssize_t>(done, 0)) / size;
}

// A buffer the kernel fills whole, pinned whole (waiting for room): an event array, poll's.
template <typename Call>
auto with_array_pinned(const void* p, size_t len, Call call) -> decltype(call()) {
  const Layout* l = pinning();
  if (l == nullptr || len == 0 || !overlaps_region(*l, p, len)) return call();
  Pin pin;
  pin.take_waiting(*l, p, len);
  return call();
}

}  // namespace
}  // namespace zsm_preload

using zsm_preload::next;
using zsm_preload::with_buffer_pinned;
using zsm_preload::with_vectors_pinned;

#define EXPORT __attribute__((visibility("default")))

extern "C" {

// --- Reads. -----------------------------------------------------------------------------

EXPORT ssize_t read(int fd, void* buf, size_t n) {
  return with_buffer_pinned(buf, n, [fd] { return zsm_preload::regular_file(fd); },
                            [&](const void* b, size_t k) { return next.read(fd, const_cast<void*>(b), k); });
}

EXPORT ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
  if (n > buflen) __chk_fail();
  return read(fd, buf, n);
}

EXPORT ssize_t pread64(int fd, void* buf, size_t n, off_t off) {
  const auto* start = static_cast<const char*>(buf);
  return with_buffer_pinned(buf, n, zsm_preload::always, [&](const void* b, size_t k) {
    return next.pread64(fd, const_cast<void*>(b), k, off + (static_cast<const char*>(b) - start));
  });
}

EXPORT __attribute__((alias("pread64"))) ssize_t pread(int, void*, size_t, off_t);

EXPORT ssize_t __pread64_chk(int fd, void* buf, size_t n, off_t off, size_t buflen) {
  if (n > buflen) __chk_fail();
  return pread64(fd, buf, n, off);
}

EXPORT __attribute__((alias("__pread64_chk"))) ssize_t __pread_chk(int, void*, size_t, off_t, size_t);

EXPORT ssize_t readv(int fd, const struct iovec* iov, int count) {
  return with_vectors_pinned(iov, count, true, [fd] { return zsm_preload::regular_file(fd); },
                             [&](const struct iovec* v, int c, size_t) { return next.readv(fd, v, c); });
}

EXPORT ssize_t preadv(int fd, const struct iovec* iov, int count, off_t off) {
  return with_vectors_pinned(iov, count, true, zsm_preload::always, [&](const struct iovec* v, int c, size_t done) {
    return next.preadv(fd, v, c, off + static_cast<off_t>(done));
  });
}

EXPORT __attribute__((alias("preadv"))) ssize_t preadv64(int, const struct iovec*, int, off_t);

// preadv2 at the file's position (off -1) goes on as readv does; with RWF_NOWAIT it stops
// where the page cache does.
EXPORT ssize_t preadv2(int fd, const struct iovec* iov, int count, off_t off, int flags) {
  return with_vectors_pinned(
      iov, count, true, [&] { return (flags & RWF_NOWAIT) == 0 && (off != -1 || zsm_preload::regular_file(fd)); },
      [&](const struct iovec* v, int c, size_t done) {
        return next.preadv2(fd, v, c, off == -1 ? -1 : off + static_cast<off_t>(done), flags);
      });
}

EXPORT __attribute__((alias("preadv2"))) ssize_t preadv64v2(int, const struct iovec*, int, off_t, int);

EXPORT ssize_t recv(int fd, void* buf, size_t n, int flags) {
  return with_buffer_pinned(buf, n, zsm_preload::never,
                            [&](const void* b, size_t k) { return next.recv(fd, const_cast<void*>(b), k, flags); });
}

EXPORT ssize_t __recv_chk(int fd, void* buf, size_t n, size_t buflen, int flags) {
  if (n > buflen) __chk_fail();
  return recv(fd, buf, n, flags);
}

EXPORT ssize_t recvfrom(int fd, void* buf, size_t n, int flags, struct sockaddr* from, socklen_t* from_len) {
  const zsm_preload::Layout* l = zsm_preload::pinning();
  zsm_preload::Pin name, name_len;
  if (l != nullptr && from != nullptr && from_len != nullptr) {
    name.take_waiting(*l, from, *from_len);
    name_len.take_waiting(*l, from_len, sizeof *from_len);
  }
  return with_buffer_pinned(buf, n, zsm_preload::never, [&](const void* b, size_t k) {
    return next.recvfrom(fd, const_cast<void*>(b), k, flags, from, from_len);
  });
}

EXPORT ssize_t __recvfrom_chk(int fd, void* buf, size_t n, size_t buflen, int flags, struct sockaddr* from,
                              socklen_t* from_len) {
  if (n > buflen) __chk_fail();
  return recvfrom(fd, buf, n, flags, from, from_len);
}

EXPORT ssize_t recvmsg(int fd, struct msghdr* msg, int flags) {
  return zsm_preload::with_message_pinned(fd, msg, [&](struct msghdr* m) { return next.recvmsg(fd, m, flags); });
}

EXPORT int recvmmsg(int fd, struct mmsghdr* msgs, unsigned int count, int flags, struct timespec* timeout) {
  return zsm_preload::with_messages_pinned(
      msgs, count, [&](struct msghdr* m) { return recvmsg(fd, m, flags & ~MSG_WAITFORONE); },
      [&] { return next.recvmmsg(fd, msgs, count, flags, timeout); });
}

EXPORT ssize_t getrandom(void* buf, size_t n, unsigned int flags) {
  return with_buffer_pinned(buf, n, zsm_preload::always,
                            [&](const void* b, size_t k) { return next.getrandom(const_cast<void*>(b), k, flags); });
}

EXPORT ssize_t getdents64(int fd, void* buf, size_t n) {
  return zsm_preload::with_array_pinned(buf, n, [&] { return next.getdents64(fd, buf, n); });
}

// --- Writes. ----------------------------------------------------------------------------

EXPORT ssize_t write(int fd, const void* buf, size_t n) {
  return with_buffer_pinned(buf, n, zsm_preload::always, [&](const void* b, size_t k) { return next.write(fd, b, k); });
}

EXPORT ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
  const auto* start = static_cast<const char*>(buf);
  return with_buffer_pinned(buf, n, zsm_preload::always, [&](const void* b, size_t k) {
    return next.pwrite64(fd, b, k, off + (static_cast<const char*>(b) - start));
  });
}

EXPORT __attribute__((alias("pwrite64"))) ssize_t pwrite(int, const void*, size_t, off_t);

EXPORT ssize_t writev(int fd, const struct iovec* iov, int count) {
  return with_vectors_pinned(iov, count, true, zsm_preload::always,
                             [&](const struct iovec* v, int c, size_t) { return next.writev(fd, v, c); });
}

EXPORT ssize_t pwritev(int fd, const struct iovec* iov, int count, off_t off) {
  return with_vectors_pinned(iov, count, true, zsm_preload::always, [&](const struct iovec* v, int c, size_t done) {
    return next.pwritev(fd, v, c, off + static_cast<off_t>(done));
  });
}

EXPORT __attribute__((alias("pwritev"))) ssize_t pwritev64(int, const struct iovec*, int, off_t);

EXPORT ssize_t pwritev2(int fd, const struct iovec* iov, int count, off_t off, int flags) {
  return with_vectors_pinned(iov, count, true, [&] { return (flags & RWF_NOWAIT) == 0; },
                             [&](const struct iovec* v, int c, size_t done) {
                               return next.pwritev2(fd, v, c, off == -1 ? -1 : off + static_cast<off_t>(done), flags);
                             });
}

EXPORT __attribute__((alias("pwritev2"))) ssize_t pwritev64v2(int, const struct iovec*, int, off_t, int);

EXPORT ssize_t send(int fd, const void* buf, size_t n, int flags) {
  return with_buffer_pinned(buf, n, zsm_preload::always, [&](const void* b, size_t k) { return next.send(fd, b, k, flags); });
}

EXPORT ssize_t sendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* to, socklen_t to_len) {
  const zsm_preload::Layout* l = zsm_preload::pinning();
  zsm_preload::Pin name;
  if (l != nullptr && to != nullptr) name.take_waiting(*l, to, to_len);
  // Addressed: a datagram, sent whole (its size is within a piece's least).
  return with_buffer_pinned(buf, n, [to] { return to == nullptr; },
                            [&](const void* b, size_t k) { return next.sendto(fd, b, k, flags, to, to_len); });
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr* msg, int flags) {
  return zsm_preload::with_message_pinned(fd, msg, [&](const struct msghdr* m) { return next.sendmsg(fd, m, flags); });
}

EXPORT int sendmmsg(int fd, struct mmsghdr* msgs, unsigned int count, int flags) {
  return zsm_preload::with_messages_pinned(msgs, count, [&](struct msghdr* m) { return sendmsg(fd, m, flags); },
                                           [&] { return next.sendmmsg(fd, msgs, count, flags); });
}

EXPORT ssize_t vmsplice(int fd, const struct iovec* iov, unsigned long count, unsigned int flags) {
  const zsm_preload::Layout* l = zsm_preload::on();
  bool in_region = false;
  for (unsigned long i = 0; l != nullptr && i < count && !in_region; ++i) {
    in_region = zsm_preload::overlaps_region(*l, iov[i].iov_base, iov[i].iov_len);
  }
  if (in_region) return writev(fd, iov, static_cast<int>(count));
  return next.vmsplice(fd, iov, count, flags);
}

// --- stdio: in pinned pieces too; the items done are the bytes done over the item's size. ---

EXPORT size_t fread(void* buf, size_t size, size_t count, FILE* f) {
  return zsm_preload::stdio_pinned(buf, size, count, [&](void* b, size_t s, size_t c) { return next.fread(b, s, c, f); });
}

EXPORT size_t __fread_chk(void* buf, size_t buflen, size_t size, size_t count, FILE* f) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(size, count, &bytes) || bytes > buflen) __chk_fail();
  return fread(buf, size, count, f);
}

EXPORT size_t fread_unlocked(void* buf, size_t size, size_t count, FILE* f) {
  return zsm_preload::stdio_pinned(buf, size, count,
                                   [&](void* b, size_t s, size_t c) { return next.fread_unlocked(b, s, c, f); });
}

EXPORT size_t __fread_unlocked_chk(void* buf, size_t buflen, size_t size, size_t count, FILE* f) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(size, count, &bytes) || bytes > buflen) __chk_fail();
  return fread_unlocked(buf, size, count, f);
}

EXPORT size_t fwrite(const void* buf, size_t size, size_t count, FILE* f) {
  return zsm_preload::stdio_pinned(buf, size, count,
                                   [&](const void* b, size_t s, size_t c) { return next.fwrite(b, s, c, f); });
}

EXPORT size_t fwrite_unlocked(const void* buf, size_t size, size_t count, FILE* f) {
  return zsm_preload::stdio_pinned(buf, size, count,
                                   [&](const void* b, size_t s, size_t c) { return next.fwrite_unlocked(b, s, c, f); });
}

// --- Arrays the kernel fills: an event loop's events (Redis's is 120 KB), poll's descriptors. ---

EXPORT int epoll_wait(int epfd, struct epoll_event* events, int most, int timeout) {
  size_t len = most > 0 ? sizeof(struct epoll_event) * static_cast<size_t>(most) : 0;
  return zsm_preload::with_array_pinned(events, len, [&] { return next.epoll_wait(epfd, events, most, timeout); });
}

EXPORT int epoll_pwait(int epfd, struct epoll_event* events, int most, int timeout, const sigset_t* mask) {
  size_t len = most > 0 ? sizeof(struct epoll_event) * static_cast<size_t>(most) : 0;
  sigset_t copy;
  const sigset_t* m = zsm_preload::without_sigbus(SIG_SETMASK, mask, &copy);
  return zsm_preload::with_array_pinned(events, len, [&] { return next.epoll_pwait(epfd, events, most, timeout, m); });
}

EXPORT int poll(struct pollfd* fds, nfds_t n, int timeout) {
  return zsm_preload::with_array_pinned(fds, n * sizeof *fds, [&] { return next.poll(fds, n, timeout); });
}

EXPORT int __poll_chk(struct pollfd* fds, nfds_t n, int timeout, size_t fdslen) {
  if (fdslen / sizeof *fds < n) __chk_fail();
  return poll(fds, n, timeout);
}

EXPORT int ppoll(struct pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* mask) {
  sigset_t copy;
  const sigset_t* m = zsm_preload::without_sigbus(SIG_SETMASK, mask, &copy);
  return zsm_preload::with_array_pinned(fds, n * sizeof *fds, [&] { return next.ppoll(fds, n, timeout, m); });
}

EXPORT int __ppoll_chk(struct pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* mask,
                       size_t fdslen) {
  if (fdslen / sizeof *fds < n) __chk_fail();
  return ppoll(fds, n, timeout, mask);
}

}  // extern "C"
