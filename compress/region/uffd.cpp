// userfaultfd and the page-table calls (uffd.h). The retry rules: EAGAIN means the address
// space was changing (the kernel's mmap_changing): yield and retry; a partial UFFDIO_COPY or
// UFFDIO_MOVE continues from where it stopped.
#include "uffd.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

// Linux 6.8's UFFDIO_MOVE, which Debian 12's 6.1 headers do not have.
#ifndef UFFDIO_MOVE
struct uffdio_move {
  __u64 dst;
  __u64 src;
  __u64 len;
  __u64 mode;
  __s64 move;
};
#define _UFFDIO_MOVE (0x05)
#define UFFDIO_MOVE _IOWR(UFFDIO, _UFFDIO_MOVE, struct uffdio_move)
#define UFFDIO_MOVE_MODE_DONTWAKE ((__u64)1 << 0)
#define UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES ((__u64)1 << 1)
#endif
#ifndef UFFD_FEATURE_MOVE
#define UFFD_FEATURE_MOVE (1 << 16)
#endif

namespace zsm::region {
namespace {

constexpr uint64_t kNeededIoctls = (1ULL << _UFFDIO_COPY) | (1ULL << _UFFDIO_ZEROPAGE) |
                                   (1ULL << _UFFDIO_WAKE);

int uffd_syscall(int flags) { return static_cast<int>(syscall(SYS_userfaultfd, flags)); }

int uffd_from_device(int flags) {
  int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (dev < 0) return -1;
  int fd = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
  int saved = errno;
  close_fd(dev);
  errno = saved;
  return fd;
}

// A shortage the process or the machine has now, not a refusal: reported as itself.
bool is_shortage(int e) { return e == EMFILE || e == ENFILE || e == ENOMEM; }

std::string shortage_message(int e) {
  return std::string("userfaultfd(2) failed: ") + std::strerror(e) +
         (e == ENOMEM ? "" : " (the process or the system is out of file descriptors)");
}

std::string unavailable_message(int syscall_errno, int device_errno) {
  return std::string("userfaultfd is not available: userfaultfd(2) failed (") +
         std::strerror(syscall_errno) + ") and /dev/userfaultfd could not be used (" +
         std::strerror(device_errno) +
         "); allow it with sysctl vm.unprivileged_userfaultfd=1, CAP_SYS_PTRACE, read-write "
         "access to /dev/userfaultfd, or a seccomp profile that permits userfaultfd";
}

// Opens the fd: kernel-mode handling first (syscall, then the device), user-mode-only last.
int open_fd(bool force_user_mode_only, bool* user_mode_only, std::string* why) {
  const int base = O_CLOEXEC | O_NONBLOCK;
  if (!force_user_mode_only) {
    *user_mode_only = false;
    int fd = uffd_syscall(base);
    if (fd >= 0) return fd;
    int syscall_errno = errno;
    if (is_shortage(syscall_errno)) {
      *why = shortage_message(syscall_errno);
      return -syscall_errno;
    }
    fd = uffd_from_device(base);
    if (fd >= 0) return fd;
    int device_errno = errno;
    *user_mode_only = true;
    fd = uffd_syscall(base | UFFD_USER_MODE_ONLY);
    if (fd >= 0) return fd;
    if (is_shortage(errno)) {
      *why = shortage_message(errno);
      return -errno;
    }
    *why = unavailable_message(syscall_errno, device_errno);
    return syscall_errno == ENOSYS ? -ENOSYS : -EPERM;
  }
  *user_mode_only = true;
  int fd = uffd_syscall(base | UFFD_USER_MODE_ONLY);
  if (fd >= 0) return fd;
  int e = errno;
  *why = is_shortage(e) ? shortage_message(e) : unavailable_message(e, e);
  return is_shortage(e) ? -e : e == ENOSYS ? -ENOSYS : -EPERM;
}

uint64_t features_for(const UffdRequest& req, bool with_move) {
  return UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_THREAD_ID |
         (req.sigbus ? UFFD_FEATURE_SIGBUS : 0) | (with_move ? UFFD_FEATURE_MOVE : 0);
}

// The handshake with `features`; the features granted, or -errno.
int handshake(int fd, uint64_t features, uint64_t* granted) {
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = features;
  if (ioctl(fd, UFFDIO_API, &api) != 0) return -errno;
  *granted = api.features;
  return 0;
}

// Runs an ioctl until it stops failing with EAGAIN.
template <typename Arg>
int ioctl_retrying(int fd, unsigned long request, Arg* arg) {
  while (ioctl(fd, request, arg) != 0) {
    if (errno != EAGAIN) return -errno;
    sched_yield();
  }
  return 0;
}

}  // namespace

int uffd_open(const UffdRequest& req, UffdInfo* out, std::string* why) {
  // A kernel without UFFDIO_MOVE refuses the whole handshake; the fd is opened again without.
  for (bool with_move : {req.want_move, false}) {
    bool user_mode_only = false;
    int fd = open_fd(req.force_user_mode_only, &user_mode_only, why);
    if (fd < 0) return fd;
    uint64_t granted = 0;
    int rc = handshake(fd, features_for(req, with_move), &granted);
    if (rc == 0) {
      out->fd = fd;
      out->user_mode_only = user_mode_only || req.sigbus;  // SIGBUS: no handler waits
      out->can_move = with_move && (granted & UFFD_FEATURE_MOVE) != 0;
      out->thread_ids = (granted & UFFD_FEATURE_THREAD_ID) != 0;
      return 0;
    }
    close_fd(fd);
    if (rc == -EINVAL && with_move) continue;
    *why = std::string("userfaultfd lacks write-protect faults on anonymous memory "
                       "(UFFD_FEATURE_PAGEFAULT_FLAG_WP, Linux 5.7)") +
           (req.sigbus ? " or SIGBUS for faults (UFFD_FEATURE_SIGBUS, Linux 4.14)" : "") + ": " +
           std::strerror(-rc);
    return rc == -EINVAL ? -ENOSYS : rc;
  }
  return -ENOSYS;
}

int uffd_register(int fd, void* addr, size_t len, bool write_protect, std::string* why) {
  uffdio_register reg{};
  reg.range.start = reinterpret_cast<uintptr_t>(addr);
  reg.range.len = len;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING | (write_protect ? UFFDIO_REGISTER_MODE_WP : 0);
  if (ioctl(fd, UFFDIO_REGISTER, &reg) != 0) {
    int e = errno;
    *why = std::string("UFFDIO_REGISTER refused: ") + std::strerror(e);
    return -e;
  }
  uint64_t needed = kNeededIoctls | (write_protect ? 1ULL << _UFFDIO_WRITEPROTECT : 0);
  if ((reg.ioctls & needed) != needed) {
    *why = "userfaultfd offers no COPY, ZEROPAGE, WRITEPROTECT and WAKE on anonymous memory";
    return -ENOSYS;
  }
  return 0;
}

int uffd_copy(int fd, uintptr_t dst, const void* src, size_t len, bool write_protect,
              size_t* copied) {
  size_t done = 0;
  int rc = 0;
  while (done < len) {
    uffdio_copy c{};
    c.dst = dst + done;
    c.src = reinterpret_cast<uintptr_t>(src) + done;
    c.len = len - done;
    c.mode = write_protect ? UFFDIO_COPY_MODE_WP : 0;
    if (ioctl(fd, UFFDIO_COPY, &c) == 0) {
      done = len;
      break;
    }
    int e = errno;
    if (c.copy > 0) done += static_cast<size_t>(c.copy);
    if (e != EAGAIN) {
      rc = -e;
      break;
    }
    sched_yield();
  }
  if (copied != nullptr) *copied = done;
  return rc;
}

int uffd_move(int fd, uintptr_t dst, uintptr_t src, size_t len, bool dont_wake, bool allow_holes,
              size_t* moved) {
  size_t done = 0;
  int rc = 0;
  while (done < len) {
    uffdio_move m{};
    m.dst = dst + done;
    m.src = src + done;
    m.len = len - done;
    m.mode = (dont_wake ? UFFDIO_MOVE_MODE_DONTWAKE : 0) | (allow_holes ? UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES : 0);
    if (ioctl(fd, UFFDIO_MOVE, &m) == 0) {
      done = len;
      break;
    }
    int e = errno;
    if (m.move > 0) done += static_cast<size_t>(m.move);
    if (e != EAGAIN) {
      rc = -e;
      break;
    }
    sched_yield();
  }
  if (moved != nullptr) *moved = done;
  return rc;
}

int uffd_zeropage(int fd, uintptr_t addr, size_t len) {
  uffdio_zeropage z{};
  z.range.start = addr;
  z.range.len = len;
  return ioctl_retrying(fd, UFFDIO_ZEROPAGE, &z);
}

int uffd_write_protect(int fd, uintptr_t addr, size_t len, bool protect) {
  uffdio_writeprotect w{};
  w.range.start = addr;
  w.range.len = len;
  w.mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP : 0;
  return ioctl_retrying(fd, UFFDIO_WRITEPROTECT, &w);
}

int uffd_wake(int fd, uintptr_t addr, size_t len) {
  uffdio_range r{};
  r.start = addr;
  r.len = len;
  return ioctl_retrying(fd, UFFDIO_WAKE, &r);
}

namespace {

long sys(long rc) { return rc < 0 ? -errno : rc; }
int advise(void* addr, size_t len, int advice) { return static_cast<int>(sys(syscall(SYS_madvise, addr, len, advice))); }

}  // namespace

int unmap(void* addr, size_t len) { return static_cast<int>(sys(syscall(SYS_munmap, addr, len))); }
int protect(void* addr, size_t len, int prot) {
  return static_cast<int>(sys(syscall(SYS_mprotect, addr, len, prot)));
}
int unlock(void* addr, size_t len) { return static_cast<int>(sys(syscall(SYS_munlock, addr, len))); }
int close_fd(int fd) { return static_cast<int>(sys(syscall(SYS_close, fd))); }

int drop_pages(uintptr_t addr, size_t len) {
  void* a = reinterpret_cast<void*>(addr);
  int rc = advise(a, len, MADV_DONTNEED);
  if (rc != -EINVAL) return rc;
  if (int u = unlock(a, len); u != 0) return u;
  return advise(a, len, MADV_DONTNEED);
}

bool page_present(uintptr_t addr) {
  unsigned char v = 0;
  return syscall(SYS_mincore, reinterpret_cast<void*>(addr), size_t{4096}, &v) == 0 && (v & 1) != 0;
}

void* map_unlocked(size_t len) {
  void* m = reinterpret_cast<void*>(
      syscall(SYS_mmap, nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  if (m == MAP_FAILED) return nullptr;
  if (unlock(m, len) != 0 || syscall(SYS_mprotect, m, len, PROT_READ | PROT_WRITE) != 0) {
    int e = errno;
    unmap(m, len);
    errno = e;
    return nullptr;
  }
  advise(m, len, MADV_NOHUGEPAGE);
  return m;
}

}  // namespace zsm::region
