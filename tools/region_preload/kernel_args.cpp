// The other arguments the kernel reads or writes in the pinning modes (preload.h): paths,
// struct stat and its kin, socket addresses and options, argument vectors, the descriptors
// pipe() returns, a child's exit status. In those modes only blocks of 64 KiB or more (and
// mappings) are region memory, but such a block may hold them: a program's array of struct
// stat, a string in Python's object arenas (1 MiB mappings); where the page is evicted, or was
// never touched, the kernel's access fails with EFAULT.
//
// Two ways, by what a failed call leaves behind:
// - a call that does nothing when it fails with EFAULT (the kernel reads or writes its
//   arguments before, or instead of, any effect: every path call, stat, getcwd, connect) is
//   made as it is and, if it fails with EFAULT while an argument lies in the region, made again
//   after this thread touched the arguments' pages (a read, or an atomic write of nothing for
//   what the kernel writes), up to kRetries times: a touched page would have to be evicted
//   again before the kernel reads it, that many times in a row;
// - a call whose effect comes before the kernel writes its result (accept's address, pipe's
//   descriptors, wait's status, the offsets of copy_file_range, splice and sendfile) writes it
//   to a copy on the thread's stack, copied into the region after: its effect must never be
//   lost to an EFAULT.
// Calls that libc makes for the program (fopen, opendir, execvp's search) are covered where
// the program's call is; libc's own allocations are outside the region in these modes.
#include "preload.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <initializer_list>

namespace zsm_preload {
namespace {

constexpr int kRetries = 8;

bool failed_with_efault(long rc) { return rc == -1 && errno == EFAULT; }
bool failed_with_efault(const void* p) { return p == nullptr && errno == EFAULT; }

// call() made again after touch(layout) while it fails with EFAULT in a pinning mode; errno as
// the call that succeeded left it (a touch does not change it).
template <typename Call, typename Touch>
auto retried(Call call, Touch touch) -> decltype(call()) {
  auto rc = call();
  const Layout* l = nullptr;
  for (int i = 0; i < kRetries && failed_with_efault(rc) && (l = pinning()) != nullptr; ++i) {
    touch(*l);
    rc = call();
  }
  return rc;
}

void touch_string(const Layout& l, const char* s) {
  if (s == nullptr || !overlaps_region(l, s, 1)) return;
  touch_for_read(l, s, std::strlen(s) + 1);  // strlen itself touches it, a page at a time
}

// An argument vector's array and strings, where they are region memory; a vector outside it
// is read without faulting (it may be the call's bad address).
void touch_strings(const Layout& l, char* const* v) {
  for (size_t i = 0; v != nullptr; ++i) {
    char* s = nullptr;
    if (overlaps_region(l, &v[i], sizeof *v)) {
      touch_for_read(l, &v[i], sizeof *v);
      s = v[i];
    } else if (!read_safely(&v[i], &s)) {
      return;
    }
    if (s == nullptr) return;
    touch_string(l, s);
  }
}

template <typename T>
void touch_out(const Layout& l, T* p) {
  if (p != nullptr) touch_for_write(l, p, sizeof *p);
}

// The bytes of an address the kernel writes (getsockname, getpeername, getsockopt's value):
// *len of them, len read without faulting where it is not region memory.
void touch_address(const Layout& l, void* addr, socklen_t* len) {
  socklen_t n = 0;
  if (len == nullptr || !(overlaps_region(l, len, sizeof *len) || read_safely(len, &n))) return;
  if (overlaps_region(l, len, sizeof *len)) {
    touch_for_write(l, len, sizeof *len);
    n = *len;
  }
  if (addr != nullptr) touch_for_write(l, addr, n);
}

// What a call with an effect writes (a connection's address, a pipe's descriptors, a child's
// status, offsets): where it is region memory the call writes a copy on this thread's stack,
// copied back after it in user mode (a fault there served), so that no EFAULT can come after
// the effect. Outside the region (or no pinning mode) the call gets the program's own.
template <typename T>
class Out {
 public:
  explicit Out(T* user) : user_(user) {
    const Layout* l = pinning();
    copied_ = l != nullptr && user != nullptr && overlaps_region(*l, user, sizeof *user);
    if (copied_) std::memcpy(&value_, user, sizeof value_);
  }
  ~Out() {
    if (copied_) std::memcpy(user_, &value_, sizeof value_);
  }
  Out(const Out&) = delete;
  Out& operator=(const Out&) = delete;
  T* get() { return copied_ ? &value_ : user_; }

 private:
  T* user_;
  T value_{};
  bool copied_ = false;
};

// An address buffer of *len bytes (accept's), copied the same way, and back only where the
// call succeeded (a failed accept writes nothing).
class OutAddress {
 public:
  OutAddress(struct sockaddr* addr, socklen_t* len) : addr_(addr), len_(len) {
    const Layout* l = pinning();
    if (l == nullptr || len == nullptr) return;
    socklen_t room = 0;  // read as the kernel would: a bad pointer is its EFAULT, not a crash here
    copied_ = overlaps_region(*l, len, sizeof *len) ||
              (addr != nullptr && read_safely(len, &room) && overlaps_region(*l, addr, room));
    if (copied_) {
      given_ = *len;
      local_len_ = std::min<socklen_t>(given_, sizeof local_);
    }
  }
  OutAddress(const OutAddress&) = delete;
  OutAddress& operator=(const OutAddress&) = delete;
  struct sockaddr* addr() { return copied_ && addr_ != nullptr ? reinterpret_cast<struct sockaddr*>(&local_) : addr_; }
  socklen_t* len() { return copied_ ? &local_len_ : len_; }

  // The call's result, what it wrote copied back where it succeeded.
  int done(int rc) {
    if (copied_ && rc >= 0) {
      if (addr_ != nullptr) std::memcpy(addr_, &local_, std::min(local_len_, given_));
      *len_ = local_len_;
    }
    return rc;
  }

 private:
  struct sockaddr* addr_;
  socklen_t* len_;
  struct sockaddr_storage local_ {};
  socklen_t given_ = 0, local_len_ = 0;
  bool copied_ = false;
};

// posix_spawn's child makes its execve after the call returned (the error comes back as the
// result): the strings are touched first, and the spawn made again if it failed with EFAULT.
template <typename Spawn>
int spawned(const char* file, char* const argv[], char* const envp[], Spawn spawn) {
  if (const Layout* l = pinning()) {
    touch_string(*l, file);
    touch_strings(*l, argv);
    touch_strings(*l, envp);
  }
  int rc = spawn();
  for (int i = 0; rc == EFAULT && i < kRetries; ++i) rc = spawn();
  return rc;
}

mode_t mode_argument(int flags, va_list args) {
  return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE ? static_cast<mode_t>(va_arg(args, int)) : 0;
}

}  // namespace
}  // namespace zsm_preload

using zsm_preload::next;
using zsm_preload::retried;
using zsm_preload::touch_out;
using zsm_preload::touch_string;
using zsm_preload::touch_strings;
using Layout = zsm_preload::Layout;

#define EXPORT __attribute__((visibility("default")))
// A call whose only region arguments are paths, made again after they are touched.
#define PATHS_RETRIED(call, ...) \
  retried([&] { return call; }, [&](const Layout& l) { for (const char* s : {__VA_ARGS__}) touch_string(l, s); })

extern "C" {

// --- Opening. ---------------------------------------------------------------------------

EXPORT int open(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  mode_t mode = zsm_preload::mode_argument(flags, args);
  va_end(args);
  return PATHS_RETRIED(next.open(path, flags, mode), path);
}

EXPORT int open64(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  mode_t mode = zsm_preload::mode_argument(flags, args);
  va_end(args);
  return PATHS_RETRIED(next.open64(path, flags, mode), path);
}

EXPORT int openat(int dir, const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  mode_t mode = zsm_preload::mode_argument(flags, args);
  va_end(args);
  return PATHS_RETRIED(next.openat(dir, path, flags, mode), path);
}

EXPORT int openat64(int dir, const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  mode_t mode = zsm_preload::mode_argument(flags, args);
  va_end(args);
  return PATHS_RETRIED(next.openat64(dir, path, flags, mode), path);
}

EXPORT int __open_2(const char* path, int flags) { return PATHS_RETRIED(next.__open_2(path, flags), path); }
EXPORT int __open64_2(const char* path, int flags) { return PATHS_RETRIED(next.__open64_2(path, flags), path); }
EXPORT int __openat_2(int dir, const char* path, int flags) {
  return PATHS_RETRIED(next.__openat_2(dir, path, flags), path);
}
EXPORT int __openat64_2(int dir, const char* path, int flags) {
  return PATHS_RETRIED(next.__openat64_2(dir, path, flags), path);
}
EXPORT int creat(const char* path, mode_t mode) { return PATHS_RETRIED(next.creat(path, mode), path); }
EXPORT int creat64(const char* path, mode_t mode) { return PATHS_RETRIED(next.creat64(path, mode), path); }

EXPORT FILE* fopen(const char* path, const char* mode) { return PATHS_RETRIED(next.fopen(path, mode), path, mode); }
EXPORT FILE* fopen64(const char* path, const char* mode) {
  return PATHS_RETRIED(next.fopen64(path, mode), path, mode);
}
// freopen closes the stream's descriptor before it opens the path: its arguments are touched
// first, not retried (a second try would open under another number).
EXPORT FILE* freopen(const char* path, const char* mode, FILE* f) {
  if (const Layout* l = zsm_preload::pinning()) {
    touch_string(*l, path);
    touch_string(*l, mode);
  }
  return next.freopen(path, mode, f);
}
EXPORT DIR* opendir(const char* path) { return PATHS_RETRIED(next.opendir(path), path); }

// --- Status. ----------------------------------------------------------------------------

#define STAT_RETRIED(call, path, out) \
  retried([&] { return call; }, [&](const Layout& l) { touch_string(l, path); touch_out(l, out); })

EXPORT int stat(const char* path, struct stat* st) { return STAT_RETRIED(next.stat(path, st), path, st); }
EXPORT int stat64(const char* path, struct stat64* st) { return STAT_RETRIED(next.stat64(path, st), path, st); }
EXPORT int lstat(const char* path, struct stat* st) { return STAT_RETRIED(next.lstat(path, st), path, st); }
EXPORT int lstat64(const char* path, struct stat64* st) { return STAT_RETRIED(next.lstat64(path, st), path, st); }
EXPORT int fstat(int fd, struct stat* st) { return STAT_RETRIED(next.fstat(fd, st), nullptr, st); }
EXPORT int fstat64(int fd, struct stat64* st) { return STAT_RETRIED(next.fstat64(fd, st), nullptr, st); }
EXPORT int fstatat(int dir, const char* path, struct stat* st, int flags) {
  return STAT_RETRIED(next.fstatat(dir, path, st, flags), path, st);
}
EXPORT int fstatat64(int dir, const char* path, struct stat64* st, int flags) {
  return STAT_RETRIED(next.fstatat64(dir, path, st, flags), path, st);
}
EXPORT int statx(int dir, const char* path, int flags, unsigned int mask, struct statx* st) {
  return STAT_RETRIED(next.statx(dir, path, flags, mask, st), path, st);
}
EXPORT int __xstat(int ver, const char* path, struct stat* st) {
  return STAT_RETRIED(next.__xstat(ver, path, st), path, st);
}
EXPORT int __lxstat(int ver, const char* path, struct stat* st) {
  return STAT_RETRIED(next.__lxstat(ver, path, st), path, st);
}
EXPORT int __fxstat(int ver, int fd, struct stat* st) { return STAT_RETRIED(next.__fxstat(ver, fd, st), nullptr, st); }
EXPORT int __fxstatat(int ver, int dir, const char* path, struct stat* st, int flags) {
  return STAT_RETRIED(next.__fxstatat(ver, dir, path, st, flags), path, st);
}
EXPORT int statfs(const char* path, struct statfs* st) { return STAT_RETRIED(next.statfs(path, st), path, st); }
EXPORT int fstatfs(int fd, struct statfs* st) { return STAT_RETRIED(next.fstatfs(fd, st), nullptr, st); }
EXPORT int statvfs(const char* path, struct statvfs* st) { return STAT_RETRIED(next.statvfs(path, st), path, st); }
EXPORT int fstatvfs(int fd, struct statvfs* st) { return STAT_RETRIED(next.fstatvfs(fd, st), nullptr, st); }

EXPORT int access(const char* path, int mode) { return PATHS_RETRIED(next.access(path, mode), path); }
EXPORT int faccessat(int dir, const char* path, int mode, int flags) {
  return PATHS_RETRIED(next.faccessat(dir, path, mode, flags), path);
}

EXPORT ssize_t readlink(const char* path, char* buf, size_t n) {
  return retried([&] { return next.readlink(path, buf, n); }, [&](const Layout& l) {
    touch_string(l, path);
    zsm_preload::touch_for_write(l, buf, n);
  });
}
EXPORT ssize_t readlinkat(int dir, const char* path, char* buf, size_t n) {
  return retried([&] { return next.readlinkat(dir, path, buf, n); }, [&](const Layout& l) {
    touch_string(l, path);
    zsm_preload::touch_for_write(l, buf, n);
  });
}
EXPORT char* getcwd(char* buf, size_t n) {
  return retried([&] { return next.getcwd(buf, n); }, [&](const Layout& l) {
    if (buf != nullptr) zsm_preload::touch_for_write(l, buf, n);
  });
}

extern "C" [[noreturn]] void __chk_fail(void);

EXPORT ssize_t __readlink_chk(const char* path, char* buf, size_t n, size_t buflen) {
  if (n > buflen) __chk_fail();
  return readlink(path, buf, n);
}
EXPORT ssize_t __readlinkat_chk(int dir, const char* path, char* buf, size_t n, size_t buflen) {
  if (n > buflen) __chk_fail();
  return readlinkat(dir, path, buf, n);
}
EXPORT char* __getcwd_chk(char* buf, size_t n, size_t buflen) {
  if (n > buflen) __chk_fail();
  return getcwd(buf, n);
}

// --- Changing the file system: the kernel reads the paths before anything changes. ---------

EXPORT int mkdir(const char* path, mode_t mode) { return PATHS_RETRIED(next.mkdir(path, mode), path); }
EXPORT int mkdirat(int dir, const char* path, mode_t mode) { return PATHS_RETRIED(next.mkdirat(dir, path, mode), path); }
EXPORT int rmdir(const char* path) { return PATHS_RETRIED(next.rmdir(path), path); }
EXPORT int unlink(const char* path) { return PATHS_RETRIED(next.unlink(path), path); }
EXPORT int unlinkat(int dir, const char* path, int flags) { return PATHS_RETRIED(next.unlinkat(dir, path, flags), path); }
EXPORT int rename(const char* from, const char* to) { return PATHS_RETRIED(next.rename(from, to), from, to); }
EXPORT int renameat(int fd, const char* from, int td, const char* to) {
  return PATHS_RETRIED(next.renameat(fd, from, td, to), from, to);
}
EXPORT int renameat2(int fd, const char* from, int td, const char* to, unsigned int flags) {
  return PATHS_RETRIED(next.renameat2(fd, from, td, to, flags), from, to);
}
EXPORT int link(const char* from, const char* to) { return PATHS_RETRIED(next.link(from, to), from, to); }
EXPORT int linkat(int fd, const char* from, int td, const char* to, int flags) {
  return PATHS_RETRIED(next.linkat(fd, from, td, to, flags), from, to);
}
EXPORT int symlink(const char* target, const char* path) {
  return PATHS_RETRIED(next.symlink(target, path), target, path);
}
EXPORT int symlinkat(const char* target, int dir, const char* path) {
  return PATHS_RETRIED(next.symlinkat(target, dir, path), target, path);
}
EXPORT int chdir(const char* path) { return PATHS_RETRIED(next.chdir(path), path); }
EXPORT int chmod(const char* path, mode_t mode) { return PATHS_RETRIED(next.chmod(path, mode), path); }
EXPORT int fchmodat(int dir, const char* path, mode_t mode, int flags) {
  return PATHS_RETRIED(next.fchmodat(dir, path, mode, flags), path);
}
EXPORT int chown(const char* path, uid_t u, gid_t g) { return PATHS_RETRIED(next.chown(path, u, g), path); }
EXPORT int lchown(const char* path, uid_t u, gid_t g) { return PATHS_RETRIED(next.lchown(path, u, g), path); }
EXPORT int fchownat(int dir, const char* path, uid_t u, gid_t g, int flags) {
  return PATHS_RETRIED(next.fchownat(dir, path, u, g, flags), path);
}
EXPORT int truncate(const char* path, off_t len) { return PATHS_RETRIED(next.truncate(path, len), path); }
EXPORT int utimensat(int dir, const char* path, const struct timespec* times, int flags) {
  return retried([&] { return next.utimensat(dir, path, times, flags); }, [&](const Layout& l) {
    touch_string(l, path);
    if (times != nullptr) zsm_preload::touch_for_read(l, times, 2 * sizeof *times);
  });
}
EXPORT int mknod(const char* path, mode_t mode, dev_t dev) { return PATHS_RETRIED(next.mknod(path, mode, dev), path); }
EXPORT int mkfifo(const char* path, mode_t mode) { return PATHS_RETRIED(next.mkfifo(path, mode), path); }

// --- Programs: execve reads the path, the arguments and the environment before it replaces
// the process (an EFAULT leaves it as it was). ---------------------------------------------

#define EXEC_RETRIED(call, path, argv, envp)            \
  retried([&] { return call; }, [&](const Layout& l) { \
    touch_string(l, path);                             \
    touch_strings(l, argv);                            \
    touch_strings(l, envp);                            \
  })

EXPORT int execve(const char* path, char* const argv[], char* const envp[]) {
  return EXEC_RETRIED(next.execve(path, argv, envp), path, argv, envp);
}
EXPORT int execv(const char* path, char* const argv[]) { return EXEC_RETRIED(next.execv(path, argv), path, argv, nullptr); }
EXPORT int execvp(const char* file, char* const argv[]) { return EXEC_RETRIED(next.execvp(file, argv), file, argv, nullptr); }
EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) {
  return EXEC_RETRIED(next.execvpe(file, argv, envp), file, argv, envp);
}
EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) {
  return EXEC_RETRIED(next.fexecve(fd, argv, envp), nullptr, argv, envp);
}

EXPORT int posix_spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* actions,
                       const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) {
  return zsm_preload::spawned(path, argv, envp, [&] { return next.posix_spawn(pid, path, actions, attr, argv, envp); });
}
EXPORT int posix_spawnp(pid_t* pid, const char* file, const posix_spawn_file_actions_t* actions,
                        const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) {
  return zsm_preload::spawned(file, argv, envp, [&] { return next.posix_spawnp(pid, file, actions, attr, argv, envp); });
}

// --- Sockets. -----------------------------------------------------------------------------

EXPORT int connect(int fd, const struct sockaddr* addr, socklen_t len) {
  return retried([&] { return next.connect(fd, addr, len); },
                 [&](const Layout& l) { zsm_preload::touch_for_read(l, addr, len); });
}
EXPORT int bind(int fd, const struct sockaddr* addr, socklen_t len) {
  return retried([&] { return next.bind(fd, addr, len); },
                 [&](const Layout& l) { zsm_preload::touch_for_read(l, addr, len); });
}
EXPORT int getsockname(int fd, struct sockaddr* addr, socklen_t* len) {
  return retried([&] { return next.getsockname(fd, addr, len); },
                 [&](const Layout& l) { zsm_preload::touch_address(l, addr, len); });
}
EXPORT int getpeername(int fd, struct sockaddr* addr, socklen_t* len) {
  return retried([&] { return next.getpeername(fd, addr, len); },
                 [&](const Layout& l) { zsm_preload::touch_address(l, addr, len); });
}
EXPORT int getsockopt(int fd, int level, int name, void* value, socklen_t* len) {
  return retried([&] { return next.getsockopt(fd, level, name, value, len); },
                 [&](const Layout& l) { zsm_preload::touch_address(l, value, len); });
}
EXPORT int setsockopt(int fd, int level, int name, const void* value, socklen_t len) {
  return retried([&] { return next.setsockopt(fd, level, name, value, len); },
                 [&](const Layout& l) { zsm_preload::touch_for_read(l, value, len); });
}

// accept takes a connection before it writes the peer's address: that goes to a copy.
EXPORT int accept(int fd, struct sockaddr* addr, socklen_t* len) {
  zsm_preload::OutAddress out(addr, len);
  return out.done(next.accept(fd, out.addr(), out.len()));
}
EXPORT int accept4(int fd, struct sockaddr* addr, socklen_t* len, int flags) {
  zsm_preload::OutAddress out(addr, len);
  return out.done(next.accept4(fd, out.addr(), out.len(), flags));
}

// --- Calls whose result comes after their effect: written to a copy, copied back after. -----

EXPORT int pipe(int fds[2]) {
  zsm_preload::Out<int[2]> out(reinterpret_cast<int(*)[2]>(fds));
  return next.pipe(*out.get());
}
EXPORT int pipe2(int fds[2], int flags) {
  zsm_preload::Out<int[2]> out(reinterpret_cast<int(*)[2]>(fds));
  return next.pipe2(*out.get(), flags);
}
EXPORT int socketpair(int domain, int type, int protocol, int fds[2]) {
  zsm_preload::Out<int[2]> out(reinterpret_cast<int(*)[2]>(fds));
  return next.socketpair(domain, type, protocol, *out.get());
}
EXPORT pid_t wait(int* status) {
  zsm_preload::Out<int> out(status);
  return next.wait(out.get());
}
EXPORT pid_t waitpid(pid_t pid, int* status, int options) {
  zsm_preload::Out<int> out(status);
  return next.waitpid(pid, out.get(), options);
}
EXPORT pid_t wait4(pid_t pid, int* status, int options, struct rusage* usage) {
  zsm_preload::Out<int> out_status(status);
  zsm_preload::Out<struct rusage> out_usage(usage);
  return next.wait4(pid, out_status.get(), options, out_usage.get());
}
EXPORT int waitid(idtype_t type, id_t id, siginfo_t* info, int options) {
  zsm_preload::Out<siginfo_t> out(info);
  return next.waitid(type, id, out.get(), options);
}
EXPORT ssize_t copy_file_range(int in, off64_t* in_off, int out_fd, off64_t* out_off, size_t n, unsigned int flags) {
  zsm_preload::Out<off64_t> a(in_off), b(out_off);
  return next.copy_file_range(in, a.get(), out_fd, b.get(), n, flags);
}
EXPORT ssize_t splice(int in, off64_t* in_off, int out_fd, off64_t* out_off, size_t n, unsigned int flags) {
  zsm_preload::Out<off64_t> a(in_off), b(out_off);
  return next.splice(in, a.get(), out_fd, b.get(), n, flags);
}
EXPORT ssize_t sendfile(int out_fd, int in, off_t* off, size_t n) {
  zsm_preload::Out<off_t> o(off);
  return next.sendfile(out_fd, in, o.get(), n);
}
EXPORT __attribute__((alias("sendfile"))) ssize_t sendfile64(int, int, off_t*, size_t);
// The time asked for is read first (retried); the time left is written after the sleep.
EXPORT int nanosleep(const struct timespec* req, struct timespec* rem) {
  zsm_preload::Out<struct timespec> left(rem);
  return retried([&] { return next.nanosleep(req, left.get()); },
                 [&](const Layout& l) { zsm_preload::touch_for_read(l, req, sizeof *req); });
}
EXPORT int clock_nanosleep(clockid_t clock, int flags, const struct timespec* req, struct timespec* rem) {
  zsm_preload::Out<struct timespec> left(rem);
  int rc = next.clock_nanosleep(clock, flags, req, left.get());  // its error is its result
  const Layout* l = nullptr;
  for (int i = 0; rc == EFAULT && i < zsm_preload::kRetries && (l = zsm_preload::pinning()) != nullptr; ++i) {
    zsm_preload::touch_for_read(*l, req, sizeof *req);
    rc = next.clock_nanosleep(clock, flags, req, left.get());
  }
  return rc;
}

}  // extern "C"
