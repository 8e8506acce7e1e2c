// I/O into and out of region memory, in the pinning modes (preload.h): the kernel copies a
// buffer in kernel mode, and meets EFAULT at a page nobody serves (evicted, or never touched),
// or stops short there. So the calls that pass a region buffer to the kernel give it one it can
// reach, whole, for the call: read, write and their p-, v-, pv- and pv2 forms (and the _chk
// forms a _FORTIFY_SOURCE build calls), recv and send and their -from, -to, -msg and -mmsg
// forms, getrandom, getdents64, fread, fwrite, fputs and puts, epoll_wait's events, poll's
// descriptors; vmsplice becomes readv or writev (a page spliced by reference could not be
// reached either).
//
// Two ways, by what the call may wait for:
// - the buffer pinned (zsm_region_pin), where the call does not wait on anything but the
//   disk: a regular file's (or a block device's) reads and writes, getrandom. Nothing is
//   copied. A large buffer is pinned a piece (1 MiB) at a time, the next piece a call of its
//   own, as the plain call would have gone on;
// - a bounce buffer of this thread's (outside the region, kept for its next call), copied to
//   or from the region's buffer in user mode, where the call may wait as long as it likes (a
//   socket, a pipe, a terminal; poll and epoll_wait; a message call): a pin held while a call
//   waits would keep its pages from every other call, and enough of them waiting would starve
//   the calls that need a pin, for ever. Also where a pin cannot be had now. A call's datagram
//   or message goes whole; a stream's large buffer a piece (1 MiB) at a time, a read returning
//   what the first piece got (the plain call may return a short count there too), a write, or a
//   read with MSG_WAITALL, going on until done.
// Nothing waits for room, and a call never reaches the kernel with a region buffer it cannot
// reach.
#include "preload.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <type_traits>

extern "C" [[noreturn]] void __chk_fail(void);

namespace zsm_preload {
namespace {

constexpr size_t kPiece = 1 << 20;

// A buffer this small is copied, never pinned: the copy costs less than asking what the file
// is (an fstat) and pinning its pages.
constexpr size_t kAlwaysBounced = 16 << 10;

// Whether the call on fd waits for nothing but the disk: its buffer may be pinned.
bool disk_file(int fd) {
  struct stat st {};
  return next.fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
}

// Whether n bytes of a call on fd are pinned rather than copied.
bool pinned_for(int fd, size_t n) { return n > kAlwaysBounced && disk_file(fd); }

// Whether writes to fd are a byte stream (a piece at a time is what the plain call does), not
// datagrams or messages, which must go whole.
bool byte_stream(int fd) {
  struct stat st {};
  if (next.fstat(fd, &st) != 0) return false;
  if (!S_ISSOCK(st.st_mode)) return true;
  int type = 0;
  socklen_t len = sizeof type;
  return next.getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM;
}

// Bounce buffers are mapped by system call: outside the region, and safe in a signal handler
// (read and write may be called there; malloc may not).
char* map_bytes(size_t n) {
  void* p = reinterpret_cast<void*>(
      syscall(SYS_mmap, nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

void unmap_bytes(char* p, size_t n) {
  if (p != nullptr) syscall(SYS_munmap, p, n);
}

size_t whole_pages(size_t n) { return (std::max<size_t>(n, 1) + 4095) & ~size_t{4095}; }

// This thread's bounce buffer, kept between calls (up to a piece) and unmapped at its exit.
struct BounceBuffer {
  char* bytes = nullptr;
  size_t size = 0;
};
__attribute__((tls_model("initial-exec"))) thread_local BounceBuffer bounce_buffer;
pthread_key_t bounce_key;
pthread_once_t bounce_once = PTHREAD_ONCE_INIT;

void unmap_bounce(void* p) {
  auto* b = static_cast<BounceBuffer*>(p);
  unmap_bytes(b->bytes, b->size);
  *b = {};
}

// At least n bytes of this thread's bounce buffer, or nullptr when none can be had.
char* bounce(size_t n) {
  if (bounce_buffer.size >= n && bounce_buffer.bytes != nullptr) return bounce_buffer.bytes;
  size_t size = whole_pages(n);
  char* bigger = map_bytes(size);
  if (bigger == nullptr) return nullptr;
  if (bounce_buffer.bytes == nullptr) {
    pthread_once(&bounce_once, [] { pthread_key_create(&bounce_key, unmap_bounce); });
    pthread_setspecific(bounce_key, &bounce_buffer);
  }
  unmap_bytes(bounce_buffer.bytes, bounce_buffer.size);
  bounce_buffer = {bigger, size};
  return bigger;
}

// The bounce buffer of one call: the thread's own for the outermost call of up to a piece;
// one of its own for a larger datagram or message (not kept), and for a call a signal handler
// makes while the thread's is in use.
class Scratch {
 public:
  explicit Scratch(size_t n) {
    if (!in_use_ && n <= kPiece) {
      in_use_ = true;
      mine_ = true;
      bytes_ = bounce(n);
    } else {
      owned_size_ = whole_pages(n);
      owned_ = map_bytes(owned_size_);
      bytes_ = owned_;
    }
    if (bytes_ == nullptr) errno = ENOMEM;
  }
  ~Scratch() {
    if (mine_) in_use_ = false;
    unmap_bytes(owned_, owned_size_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  char* get() const { return bytes_; }

 private:
  static thread_local bool in_use_ __attribute__((tls_model("initial-exec")));
  char* bytes_ = nullptr;
  char* owned_ = nullptr;
  size_t owned_size_ = 0;
  bool mine_ = false;
};
__attribute__((tls_model("initial-exec"))) thread_local bool Scratch::in_use_ = false;

enum class Way { in, out };  // in: the kernel reads the buffer (a write); out: it writes it (a read)

// One call over [p, p + n) of region memory: pinned where `pin_it` and a pin can be had now,
// else through a bounce buffer. The call's result.
template <typename Call>
ssize_t one_piece(const Layout& l, const char* p, size_t n, Way way, bool pin_it, Call call) {
  if (pin_it) {
    Pin pin;
    if (pin.take(l, p, n) == 0) return call(p, n);
  }
  Scratch scratch(n);
  char* b = scratch.get();
  if (b == nullptr) return -1;
  if (way == Way::in) std::memcpy(b, p, n);
  ssize_t got = call(b, n);
  if (way == Way::out && got > 0) std::memcpy(const_cast<char*>(p), b, static_cast<size_t>(got));
  return got;
}

// call(b, n, at) over [buf, buf + len), b the n bytes from buf + at or their bounce buffer: at
// once where the buffer is outside the region (or no pinning mode), else a piece at a time
// (one_piece); after a piece that filled, more() says whether the next follows, a call of its
// own. The bytes done, or the first call's error.
template <typename More, typename Call>
ssize_t with_buffer(const void* buf, size_t len, Way way, bool pin_it, More more, Call call) {
  const Layout* l = pinning();
  if (l == nullptr || len == 0 || !overlaps_region(*l, buf, len)) return call(buf, len, 0);
  const auto* p = static_cast<const char*>(buf);
  size_t done = 0;
  while (done < len) {
    size_t n = std::min(kPiece, len - done);
    ssize_t got = one_piece(*l, p + done, n, way, pin_it, [&](const void* b, size_t k) { return call(b, k, done); });
    if (got < 0) return done > 0 ? static_cast<ssize_t>(done) : got;
    done += static_cast<size_t>(got);
    if (static_cast<size_t>(got) < n || done == len || !more()) break;
  }
  return static_cast<ssize_t>(done);
}

bool always() { return true; }

bool vectors_touch_region(const Layout& l, const struct iovec* iov, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (overlaps_region(l, iov[i].iov_base, iov[i].iov_len)) return true;
  }
  return false;
}

size_t vectors_bytes(const struct iovec* iov, size_t count) {
  size_t n = 0;
  for (size_t i = 0; i < count; ++i) n += iov[i].iov_len;
  return n;
}

// Bytes [from, from + len) of the vectors gathered into buf, or buf scattered into them.
void copy_vectors(const struct iovec* iov, size_t count, size_t from, char* buf, size_t len, bool gather) {
  size_t at = 0;
  for (size_t i = 0; i < count && at < len; ++i) {
    if (from >= iov[i].iov_len) {
      from -= iov[i].iov_len;
      continue;
    }
    char* part = static_cast<char*>(iov[i].iov_base) + from;
    size_t k = std::min(iov[i].iov_len - from, len - at);
    if (gather) {
      std::memcpy(buf + at, part, k);
    } else {
      std::memcpy(part, buf + at, k);
    }
    at += k;
    from = 0;
  }
}

// Bytes [from, from + len) of a vectored call through one bounce buffer: gathered for the
// kernel to read, or what it wrote scattered back; the call made with one vector (its datagram
// or message whole, its atomicity as it was). call(iov, count, from).
template <typename Call>
ssize_t bounced_vectors(const struct iovec* iov, size_t count, size_t from, size_t len, Way way, Call call) {
  Scratch scratch(len);
  char* b = scratch.get();
  if (b == nullptr && len != 0) return -1;
  if (way == Way::in) copy_vectors(iov, count, from, b, len, true);
  struct iovec one = {b, len};
  ssize_t got = call(&one, 1, from);
  if (way == Way::out && got > 0) copy_vectors(iov, count, from, b, static_cast<size_t>(got), false);
  return got;
}

// The vectors past the first `done` bytes of iov[0..count), at most `most` of them, into out.
size_t vectors_after(const struct iovec* iov, size_t count, size_t done, struct iovec* out, size_t most) {
  size_t n = 0;
  for (size_t i = 0; i < count && n < most; ++i) {
    if (done >= iov[i].iov_len) {
      done -= iov[i].iov_len;
      continue;
    }
    out[n++] = {static_cast<char*>(iov[i].iov_base) + done, iov[i].iov_len - done};
    done = 0;
  }
  return n;
}

constexpr size_t kMostPinned = 64;  // vectors pinned at once (more go through a bounce buffer)

// Pins every vector in the region at once; false (none held) when one cannot be pinned now.
bool pin_vectors(const Layout& l, const struct iovec* iov, size_t count, Pin* pins) {
  size_t pinned = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!overlaps_region(l, iov[i].iov_base, iov[i].iov_len)) continue;
    if (pinned == kMostPinned || pins[pinned].take(l, iov[i].iov_base, iov[i].iov_len) != 0) {
      for (size_t k = 0; k < pinned; ++k) pins[k].release();
      return false;
    }
    ++pinned;
  }
  return true;
}

// call(iov, count, done) for a vectored call of fd (`done`: the bytes before, for the
// positional forms' offset): a datagram or a message bounced whole; a disk file's vectors
// pinned (up to 64 vectors and 1 MiB at a time, else bounced a piece at a time), going on as
// the plain call would have done all; a stream's bounced a piece (1 MiB) at a time, a read
// returning what its piece got, a write going on until done.
template <typename Call>
ssize_t with_vectors(int fd, const struct iovec* iov, int count, Way way, Call call) {
  const Layout* l = pinning();
  if (l == nullptr || count <= 0 || !vectors_touch_region(*l, iov, static_cast<size_t>(count))) {
    return call(iov, count, size_t{0});
  }
  const auto n_vec = static_cast<size_t>(count);
  const size_t total = vectors_bytes(iov, n_vec);
  if (total <= kAlwaysBounced) return bounced_vectors(iov, n_vec, 0, total, way, call);
  const bool disk = disk_file(fd);
  if (!disk && !byte_stream(fd)) return bounced_vectors(iov, n_vec, 0, total, way, call);
  size_t done = 0;
  do {
    struct iovec rest[kMostPinned];
    size_t n = vectors_after(iov, n_vec, done, rest, kMostPinned);
    Pin pins[kMostPinned];
    size_t asked = 0;
    ssize_t got = 0;
    if (disk && vectors_bytes(rest, n) <= kPiece && pin_vectors(*l, rest, n, pins)) {
      asked = vectors_bytes(rest, n);
      got = call(rest, static_cast<int>(n), done);
    } else {
      asked = std::min(total - done, kPiece);
      got = bounced_vectors(iov, n_vec, done, asked, way, call);
    }
    if (got < 0) return done > 0 ? static_cast<ssize_t>(done) : got;
    done += static_cast<size_t>(got);
    if (static_cast<size_t>(got) < asked || (way == Way::out && !disk)) break;
  } while (done < total);
  return static_cast<ssize_t>(done);
}

// A message call (sendmsg, recvmsg) with a region buffer: the whole message through bounce
// buffers, its data, its address and its ancillary data, and what the kernel wrote copied back.
template <typename Msg, typename Call>
ssize_t with_message(Msg* msg, Way way, Call call) {
  const Layout* l = pinning();
  if (l == nullptr || msg == nullptr) return call(msg);
  const bool any = vectors_touch_region(*l, msg->msg_iov, msg->msg_iovlen) ||
                   (msg->msg_name != nullptr && overlaps_region(*l, msg->msg_name, msg->msg_namelen)) ||
                   (msg->msg_control != nullptr && overlaps_region(*l, msg->msg_control, msg->msg_controllen)) ||
                   overlaps_region(*l, msg, sizeof *msg);
  if (!any) return call(msg);
  const size_t len = vectors_bytes(msg->msg_iov, msg->msg_iovlen);
  Scratch scratch(len + msg->msg_namelen + msg->msg_controllen);
  if (scratch.get() == nullptr) return -1;
  char* data = scratch.get();
  char* name = data + len;
  char* control = name + msg->msg_namelen;
  if (way == Way::in) copy_vectors(msg->msg_iov, msg->msg_iovlen, 0, data, len, true);
  struct iovec one = {data, len};
  std::remove_const_t<Msg> copy = *msg;
  copy.msg_iov = &one;
  copy.msg_iovlen = 1;
  if (msg->msg_name != nullptr) {
    std::memcpy(name, msg->msg_name, msg->msg_namelen);
    copy.msg_name = name;
  }
  if (msg->msg_control != nullptr) {
    std::memcpy(control, msg->msg_control, msg->msg_controllen);
    copy.msg_control = control;
  }
  ssize_t got = call(&copy);
  if constexpr (!std::is_const_v<Msg>) {  // recvmsg: what the kernel wrote
    if (got > 0) copy_vectors(msg->msg_iov, msg->msg_iovlen, 0, data, static_cast<size_t>(got), false);
    if (msg->msg_name != nullptr) std::memcpy(msg->msg_name, name, std::min(copy.msg_namelen, msg->msg_namelen));
    if (msg->msg_control != nullptr) std::memcpy(msg->msg_control, control, copy.msg_controllen);
    msg->msg_namelen = copy.msg_namelen;
    msg->msg_controllen = copy.msg_controllen;
    msg->msg_flags = copy.msg_flags;
  }
  return got;
}

// recvmmsg/sendmmsg: where any message touches the region, one message through the single
// call's way (fewer messages done is what the plain call may return too).
template <typename One, typename Call>
int with_messages(struct mmsghdr* msgs, unsigned int count, One one, Call call) {
  const Layout* l = pinning();
  bool any = false;
  for (unsigned m = 0; l != nullptr && m < count && !any; ++m) {
    const struct msghdr& h = msgs[m].msg_hdr;
    any = overlaps_region(*l, &msgs[m], sizeof msgs[m]) || vectors_touch_region(*l, h.msg_iov, h.msg_iovlen) ||
          (h.msg_name != nullptr && overlaps_region(*l, h.msg_name, h.msg_namelen)) ||
          (h.msg_control != nullptr && overlaps_region(*l, h.msg_control, h.msg_controllen));
  }
  if (!any || count == 0) return call();
  ssize_t got = one(&msgs[0].msg_hdr);
  if (got < 0) return -1;
  msgs[0].msg_len = static_cast<unsigned int>(got);
  return 1;
}

// An array the kernel reads and fills (poll's descriptors), or only fills (events, entries):
// through a bounce buffer, as the call may wait. written(result): the bytes the kernel wrote,
// copied back.
template <typename Call, typename Written>
auto with_array(const void* p, size_t len, bool read_too, Call call, Written written) -> decltype(call(p)) {
  const Layout* l = pinning();
  if (l == nullptr || len == 0 || !overlaps_region(*l, p, len)) return call(p);
  Scratch scratch(len);
  char* b = scratch.get();
  if (b == nullptr) return -1;
  if (read_too) std::memcpy(b, p, len);
  auto got = call(b);
  std::memcpy(const_cast<void*>(p), b, std::min(len, written(got)));
  return got;
}

// What epoll_wait wrote: the events it returned.
size_t events_written(int got) { return got > 0 ? static_cast<size_t>(got) * sizeof(struct epoll_event) : 0; }

// What poll wrote: every descriptor's revents, whenever it returned (a timeout's zeros too).
auto poll_written(size_t len) {
  return [len](int got) { return got >= 0 ? len : 0; };
}

// stdio over a region buffer: pinned where the stream's file is a disk's, else bounced, in
// pieces under the stream's lock (another thread's call comes before or after: flockfile is
// what the plain call takes), through the _unlocked call; plain() where nothing is in the
// region.
template <typename Buf, typename Plain, typename Unlocked>
size_t with_stdio(Buf* buf, size_t size, size_t count, FILE* f, Way way, Plain plain, Unlocked unlocked) {
  size_t bytes = 0;
  const Layout* l = pinning();
  if (l == nullptr || size == 0 || __builtin_mul_overflow(size, count, &bytes) || !overlaps_region(*l, buf, bytes)) {
    return plain();
  }
  flockfile(f);
  const bool disk = pinned_for(fileno(f), bytes);
  ssize_t done = with_buffer(buf, bytes, way, disk, always, [&](const void* b, size_t k, size_t) {
    return static_cast<ssize_t>(unlocked(static_cast<Buf*>(const_cast<void*>(b)), k));
  });
  funlockfile(f);
  return static_cast<size_t>(std::max<ssize_t>(done, 0)) / size;
}

}  // namespace
}  // namespace zsm_preload

using zsm_preload::next;
using zsm_preload::Way;
using zsm_preload::with_buffer;
using zsm_preload::with_vectors;

#define EXPORT __attribute__((visibility("default")))

extern "C" {

// --- Reads. -----------------------------------------------------------------------------

// A read from a disk file goes on piece by piece, as the plain call would read it all; from
// anything else it returns what its first piece got.
EXPORT ssize_t read(int fd, void* buf, size_t n) {
  const zsm_preload::Layout* l = zsm_preload::pinning();
  bool disk = l != nullptr && zsm_preload::overlaps_region(*l, buf, n) && zsm_preload::pinned_for(fd, n);
  return with_buffer(buf, n, Way::out, disk, [disk] { return disk; },
                     [&](const void* b, size_t k, size_t) { return next.read(fd, const_cast<void*>(b), k); });
}

EXPORT ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
  if (n > buflen) __chk_fail();
  return read(fd, buf, n);
}

EXPORT ssize_t pread64(int fd, void* buf, size_t n, off_t off) {
  const zsm_preload::Layout* l = zsm_preload::pinning();
  bool disk = l != nullptr && zsm_preload::overlaps_region(*l, buf, n) && zsm_preload::pinned_for(fd, n);
  return with_buffer(buf, n, Way::out, disk, zsm_preload::always, [&](const void* b, size_t k, size_t at) {
    return next.pread64(fd, const_cast<void*>(b), k, off + static_cast<off_t>(at));
  });
}

EXPORT __attribute__((alias("pread64"))) ssize_t pread(int, void*, size_t, off_t);

EXPORT ssize_t __pread64_chk(int fd, void* buf, size_t n, off_t off, size_t buflen) {
  if (n > buflen) __chk_fail();
  return pread64(fd, buf, n, off);
}

EXPORT __attribute__((alias("__pread64_chk"))) ssize_t __pread_chk(int, void*, size_t, off_t, size_t);

EXPORT ssize_t readv(int fd, const struct iovec* iov, int count) {
  return with_vectors(fd, iov, count, Way::out, [&](const struct iovec* v, int c, size_t) { return next.readv(fd, v, c); });
}

EXPORT ssize_t preadv(int fd, const struct iovec* iov, int count, off_t off) {
  return with_vectors(fd, iov, count, Way::out, [&](const struct iovec* v, int c, size_t done) {
    return next.preadv(fd, v, c, off + static_cast<off_t>(done));
  });
}

EXPORT __attribute__((alias("preadv"))) ssize_t preadv64(int, const struct iovec*, int, off_t);

EXPORT ssize_t preadv2(int fd, const struct iovec* iov, int count, off_t off, int flags) {
  return with_vectors(fd, iov, count, Way::out, [&](const struct iovec* v, int c, size_t done) {
    return next.preadv2(fd, v, c, off == -1 ? -1 : off + static_cast<off_t>(done), flags);
  });
}

EXPORT __attribute__((alias("preadv2"))) ssize_t preadv64v2(int, const struct iovec*, int, off_t, int);

// MSG_WAITALL on a stream waits for every byte: the pieces go on as the plain call would.
EXPORT ssize_t recv(int fd, void* buf, size_t n, int flags) {
  return with_buffer(buf, n, Way::out, false, [flags] { return (flags & MSG_WAITALL) != 0 && (flags & MSG_PEEK) == 0; },
                     [&](const void* b, size_t k, size_t) { return next.recv(fd, const_cast<void*>(b), k, flags); });
}

EXPORT ssize_t __recv_chk(int fd, void* buf, size_t n, size_t buflen, int flags) {
  if (n > buflen) __chk_fail();
  return recv(fd, buf, n, flags);
}

EXPORT ssize_t recvfrom(int fd, void* buf, size_t n, int flags, struct sockaddr* from, socklen_t* from_len) {
  const zsm_preload::Layout* l = zsm_preload::pinning();
  socklen_t room = 0;  // read as the kernel would: a bad pointer is its EFAULT, not a crash here
  if (l != nullptr && from != nullptr && from_len != nullptr &&
      (zsm_preload::overlaps_region(*l, from_len, sizeof *from_len) ||
       (zsm_preload::read_safely(from_len, &room) && zsm_preload::overlaps_region(*l, from, room)))) {
    struct iovec one = {buf, n};  // the address in the region too: the message call's way
    struct msghdr msg {};
    msg.msg_name = from;
    msg.msg_namelen = *from_len;
    msg.msg_iov = &one;
    msg.msg_iovlen = 1;
    ssize_t got = recvmsg(fd, &msg, flags);
    if (got >= 0) *from_len = msg.msg_namelen;
    return got;
  }
  return with_buffer(buf, n, Way::out, false, [flags] { return (flags & MSG_WAITALL) != 0 && (flags & MSG_PEEK) == 0; },
                     [&](const void* b, size_t k, size_t) { return next.recvfrom(fd, const_cast<void*>(b), k, flags, from, from_len); });
}

EXPORT ssize_t __recvfrom_chk(int fd, void* buf, size_t n, size_t buflen, int flags, struct sockaddr* from,
                              socklen_t* from_len) {
  if (n > buflen) __chk_fail();
  return recvfrom(fd, buf, n, flags, from, from_len);
}

EXPORT ssize_t recvmsg(int fd, struct msghdr* msg, int flags) {
  return zsm_preload::with_message(msg, Way::out, [&](struct msghdr* m) { return next.recvmsg(fd, m, flags); });
}

EXPORT int recvmmsg(int fd, struct mmsghdr* msgs, unsigned int count, int flags, struct timespec* timeout) {
  return zsm_preload::with_messages(
      msgs, count, [&](struct msghdr* m) { return recvmsg(fd, m, flags & ~MSG_WAITFORONE); },
      [&] { return next.recvmmsg(fd, msgs, count, flags, timeout); });
}

EXPORT ssize_t getrandom(void* buf, size_t n, unsigned int flags) {
  return with_buffer(buf, n, Way::out, true, zsm_preload::always,
                     [&](const void* b, size_t k, size_t) { return next.getrandom(const_cast<void*>(b), k, flags); });
}

EXPORT ssize_t getdents64(int fd, void* buf, size_t n) {
  return zsm_preload::with_array(
      buf, n, false, [&](const void* b) { return next.getdents64(fd, const_cast<void*>(b), n); },
      [](ssize_t got) { return got > 0 ? static_cast<size_t>(got) : 0; });
}

// --- Writes: on until done, as the plain call would write all; a datagram whole. -----------

EXPORT ssize_t write(int fd, const void* buf, size_t n) {
  const zsm_preload::Layout* l = zsm_preload::pinning();
  bool in_region = l != nullptr && zsm_preload::overlaps_region(*l, buf, n);
  bool disk = in_region && zsm_preload::pinned_for(fd, n);
  if (in_region && !disk && n > zsm_preload::kPiece && !zsm_preload::byte_stream(fd)) {
    struct iovec one = {const_cast<void*>(buf), n};  // a datagram or a message: whole
    return writev(fd, &one, 1);
  }
  return with_buffer(buf, n, Way::in, disk, zsm_preload::always, [&](const void* b, size_t k, size_t) { return next.write(fd, b, k); });
}

EXPORT ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
  return with_buffer(buf, n, Way::in, true, zsm_preload::always, [&](const void* b, size_t k, size_t at) {
    return next.pwrite64(fd, b, k, off + static_cast<off_t>(at));
  });
}

EXPORT __attribute__((alias("pwrite64"))) ssize_t pwrite(int, const void*, size_t, off_t);

EXPORT ssize_t writev(int fd, const struct iovec* iov, int count) {
  return with_vectors(fd, iov, count, Way::in, [&](const struct iovec* v, int c, size_t) { return next.writev(fd, v, c); });
}

EXPORT ssize_t pwritev(int fd, const struct iovec* iov, int count, off_t off) {
  return with_vectors(fd, iov, count, Way::in, [&](const struct iovec* v, int c, size_t done) {
    return next.pwritev(fd, v, c, off + static_cast<off_t>(done));
  });
}

EXPORT __attribute__((alias("pwritev"))) ssize_t pwritev64(int, const struct iovec*, int, off_t);

EXPORT ssize_t pwritev2(int fd, const struct iovec* iov, int count, off_t off, int flags) {
  return with_vectors(fd, iov, count, Way::in, [&](const struct iovec* v, int c, size_t done) {
    return next.pwritev2(fd, v, c, off == -1 ? -1 : off + static_cast<off_t>(done), flags);
  });
}

EXPORT __attribute__((alias("pwritev2"))) ssize_t pwritev64v2(int, const struct iovec*, int, off_t, int);

EXPORT ssize_t send(int fd, const void* buf, size_t n, int flags) {
  const zsm_preload::Layout* l = zsm_preload::pinning();
  if (l != nullptr && zsm_preload::overlaps_region(*l, buf, n) && n > zsm_preload::kPiece && !zsm_preload::byte_stream(fd)) {
    struct iovec one = {const_cast<void*>(buf), n};
    struct msghdr msg {};
    msg.msg_iov = &one;
    msg.msg_iovlen = 1;
    return sendmsg(fd, &msg, flags);
  }
  return with_buffer(buf, n, Way::in, false, zsm_preload::always, [&](const void* b, size_t k, size_t) { return next.send(fd, b, k, flags); });
}

EXPORT ssize_t sendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* to, socklen_t to_len) {
  const zsm_preload::Layout* l = zsm_preload::pinning();
  if (l != nullptr && (zsm_preload::overlaps_region(*l, buf, n) || (to != nullptr && zsm_preload::overlaps_region(*l, to, to_len)))) {
    struct iovec one = {const_cast<void*>(buf), n};  // the message call's way: address and data whole
    struct msghdr msg {};
    msg.msg_name = const_cast<struct sockaddr*>(to);
    msg.msg_namelen = to != nullptr ? to_len : 0;
    msg.msg_iov = &one;
    msg.msg_iovlen = 1;
    if (to == nullptr && zsm_preload::byte_stream(fd)) return send(fd, buf, n, flags);
    return sendmsg(fd, &msg, flags);
  }
  return next.sendto(fd, buf, n, flags, to, to_len);
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr* msg, int flags) {
  return zsm_preload::with_message(msg, Way::in, [&](const struct msghdr* m) { return next.sendmsg(fd, m, flags); });
}

EXPORT int sendmmsg(int fd, struct mmsghdr* msgs, unsigned int count, int flags) {
  return zsm_preload::with_messages(msgs, count, [&](struct msghdr* m) { return sendmsg(fd, m, flags); },
                                    [&] { return next.sendmmsg(fd, msgs, count, flags); });
}

// vmsplice of region memory, in the pinning modes: the kernel would take the pages by reference
// from kernel mode. Its effect by copying: readv from the pipe's read end, writev into its write
// end (SPLICE_F_NONBLOCK: a pipe with no room now is EAGAIN).
EXPORT ssize_t vmsplice(int fd, const struct iovec* iov, unsigned long count, unsigned int flags) {
  const zsm_preload::Layout* l = zsm_preload::pinning();
  if (l == nullptr || !zsm_preload::vectors_touch_region(*l, iov, count)) return next.vmsplice(fd, iov, count, flags);
  int mode = fcntl(fd, F_GETFL);
  if (mode < 0) return -1;
  bool reading = (mode & O_ACCMODE) == O_RDONLY;
  if ((flags & SPLICE_F_NONBLOCK) != 0) {
    struct pollfd p = {fd, static_cast<short>(reading ? POLLIN : POLLOUT), 0};
    if (next.poll(&p, 1, 0) == 0) {
      errno = EAGAIN;
      return -1;
    }
  }
  return reading ? readv(fd, iov, static_cast<int>(count)) : writev(fd, iov, static_cast<int>(count));
}

// --- stdio: the items done are the bytes done over the item's size. ------------------------

EXPORT size_t fread(void* buf, size_t size, size_t count, FILE* f) {
  return zsm_preload::with_stdio(
      buf, size, count, f, Way::out, [&] { return next.fread(buf, size, count, f); },
      [&](void* b, size_t k) { return next.fread_unlocked(b, 1, k, f); });
}

EXPORT size_t __fread_chk(void* buf, size_t buflen, size_t size, size_t count, FILE* f) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(size, count, &bytes) || bytes > buflen) __chk_fail();
  return fread(buf, size, count, f);
}

EXPORT size_t fread_unlocked(void* buf, size_t size, size_t count, FILE* f) {
  return zsm_preload::with_stdio(
      buf, size, count, f, Way::out, [&] { return next.fread_unlocked(buf, size, count, f); },
      [&](void* b, size_t k) { return next.fread_unlocked(b, 1, k, f); });
}

EXPORT size_t __fread_unlocked_chk(void* buf, size_t buflen, size_t size, size_t count, FILE* f) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(size, count, &bytes) || bytes > buflen) __chk_fail();
  return fread_unlocked(buf, size, count, f);
}

EXPORT size_t fwrite(const void* buf, size_t size, size_t count, FILE* f) {
  return zsm_preload::with_stdio(
      buf, size, count, f, Way::in, [&] { return next.fwrite(buf, size, count, f); },
      [&](const void* b, size_t k) { return next.fwrite_unlocked(b, 1, k, f); });
}

EXPORT size_t fwrite_unlocked(const void* buf, size_t size, size_t count, FILE* f) {
  return zsm_preload::with_stdio(
      buf, size, count, f, Way::in, [&] { return next.fwrite_unlocked(buf, size, count, f); },
      [&](const void* b, size_t k) { return next.fwrite_unlocked(b, 1, k, f); });
}

// fputs and puts of a string in the region: stdio writes a long one straight from it.
EXPORT int fputs(const char* s, FILE* f) {
  const zsm_preload::Layout* l = zsm_preload::pinning();
  if (l == nullptr || !zsm_preload::overlaps_region(*l, s, 1)) return next.fputs(s, f);
  size_t n = std::strlen(s);
  return fwrite(s, 1, n, f) == n ? 1 : EOF;
}

EXPORT int fputs_unlocked(const char* s, FILE* f) {
  const zsm_preload::Layout* l = zsm_preload::pinning();
  if (l == nullptr || !zsm_preload::overlaps_region(*l, s, 1)) return next.fputs_unlocked(s, f);
  size_t n = std::strlen(s);
  return fwrite_unlocked(s, 1, n, f) == n ? 1 : EOF;
}

EXPORT int puts(const char* s) {
  const zsm_preload::Layout* l = zsm_preload::pinning();
  if (l == nullptr || !zsm_preload::overlaps_region(*l, s, 1)) return next.puts(s);
  flockfile(stdout);
  int rc = fputs_unlocked(s, stdout) == EOF || putc_unlocked('\n', stdout) == EOF ? EOF : 1;
  funlockfile(stdout);
  return rc;
}

// --- Arrays the kernel fills: an event loop's events (Redis's is 120 KB), poll's descriptors. ---

EXPORT int epoll_wait(int epfd, struct epoll_event* events, int most, int timeout) {
  size_t len = most > 0 ? sizeof(struct epoll_event) * static_cast<size_t>(most) : 0;
  return zsm_preload::with_array(events, len, false, [&](const void* b) {
    return next.epoll_wait(epfd, static_cast<struct epoll_event*>(const_cast<void*>(b)), most, timeout);
  }, zsm_preload::events_written);
}

EXPORT int epoll_pwait(int epfd, struct epoll_event* events, int most, int timeout, const sigset_t* mask) {
  size_t len = most > 0 ? sizeof(struct epoll_event) * static_cast<size_t>(most) : 0;
  sigset_t copy;
  const sigset_t* m = zsm_preload::without_sigbus(SIG_SETMASK, mask, &copy);
  return zsm_preload::with_array(events, len, false, [&](const void* b) {
    return next.epoll_pwait(epfd, static_cast<struct epoll_event*>(const_cast<void*>(b)), most, timeout, m);
  }, zsm_preload::events_written);
}

EXPORT int poll(struct pollfd* fds, nfds_t n, int timeout) {
  return zsm_preload::with_array(fds, n * sizeof *fds, true, [&](const void* b) {
    return next.poll(static_cast<struct pollfd*>(const_cast<void*>(b)), n, timeout);
  }, zsm_preload::poll_written(n * sizeof *fds));
}

EXPORT int __poll_chk(struct pollfd* fds, nfds_t n, int timeout, size_t fdslen) {
  if (fdslen / sizeof *fds < n) __chk_fail();
  return poll(fds, n, timeout);
}

EXPORT int ppoll(struct pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* mask) {
  sigset_t copy;
  const sigset_t* m = zsm_preload::without_sigbus(SIG_SETMASK, mask, &copy);
  return zsm_preload::with_array(fds, n * sizeof *fds, true, [&](const void* b) {
    return next.ppoll(static_cast<struct pollfd*>(const_cast<void*>(b)), n, timeout, m);
  }, zsm_preload::poll_written(n * sizeof *fds));
}

EXPORT int __ppoll_chk(struct pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* mask,
                       size_t fdslen) {
  if (fdslen / sizeof *fds < n) __chk_fail();
  return ppoll(fds, n, timeout, mask);
}

}  // extern "C"
