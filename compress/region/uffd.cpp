// userfaultfd and the page-table calls (uffd.h). The retry rules: EAGAIN means the address
// space was changing (the kernel's mmap_changing): yield and retry; a partial UFFDIO_COPY
// continues from where it stopped.
#include "uffd.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace zsm::region {
namespace {

constexpr uint64_t kNeededIoctls = (1ULL << _UFFDIO_COPY) | (1ULL << _UFFDIO_ZEROPAGE) |
                                   (1ULL << _UFFDIO_WRITEPROTECT) | (1ULL << _UFFDIO_WAKE);

int uffd_syscall(int flags) { return static_cast<int>(syscall(SYS_userfaultfd, flags)); }

int uffd_from_device(int flags) {
  int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (dev < 0) return -1;
  int fd = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
  int saved = errno;
  close(dev);
  errno = saved;
  return fd;
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
  if (force_user_mode_only) {
    *user_mode_only = true;
    int fd = uffd_syscall(base | UFFD_USER_MODE_ONLY);
    if (fd < 0) *why = unavailable_message(errno, errno);
    return fd < 0 ? -errno : fd;
  }
  *user_mode_only = false;
  int fd = uffd_syscall(base);
  if (fd >= 0) return fd;
  int syscall_errno = errno;
  fd = uffd_from_device(base);
  if (fd >= 0) return fd;
  int device_errno = errno;
  *user_mode_only = true;
  fd = uffd_syscall(base | UFFD_USER_MODE_ONLY);
  if (fd >= 0) return fd;
  *why = unavailable_message(syscall_errno, device_errno);
  return syscall_errno == ENOSYS ? -ENOSYS : -EPERM;
}

int handshake(int fd, bool sigbus, std::string* why) {
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_PAGEFAULT_FLAG_WP | (sigbus ? UFFD_FEATURE_SIGBUS : 0);
  if (ioctl(fd, UFFDIO_API, &api) == 0) return 0;
  int e = errno;
  *why = std::string("userfaultfd lacks write-protect faults on anonymous memory "
                     "(UFFD_FEATURE_PAGEFAULT_FLAG_WP, Linux 5.7)") +
         (sigbus ? " or SIGBUS for faults (UFFD_FEATURE_SIGBUS, Linux 4.14)" : "") + ": " +
         std::strerror(e);
  return e == EINVAL ? -ENOSYS : -e;
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

int uffd_open(bool force_user_mode_only, bool sigbus, bool* user_mode_only, std::string* why) {
  int fd = open_fd(force_user_mode_only, user_mode_only, why);
  if (fd < 0) return fd;
  int rc = handshake(fd, sigbus, why);
  if (sigbus) *user_mode_only = true;  // no handler waits: a syscall gets EFAULT
  if (rc == 0) return fd;
  close(fd);
  return rc;
}

int uffd_register(int fd, void* addr, size_t len, std::string* why) {
  uffdio_register reg{};
  reg.range.start = reinterpret_cast<uintptr_t>(addr);
  reg.range.len = len;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP;
  if (ioctl(fd, UFFDIO_REGISTER, &reg) != 0) {
    int e = errno;
    *why = std::string("UFFDIO_REGISTER (missing and write-protect) refused: ") + std::strerror(e);
    return -e;
  }
  if ((reg.ioctls & kNeededIoctls) != kNeededIoctls) {
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

int uffd_zeropage(int fd, uintptr_t addr, size_t len) {
  uffdio_zeropage z{};
  z.range.start = addr;
  z.range.len = len;
  int rc = ioctl_retrying(fd, UFFDIO_ZEROPAGE, &z);
  return rc == -EEXIST ? 0 : rc;
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

int drop_pages(uintptr_t addr, size_t len) {
  return madvise(reinterpret_cast<void*>(addr), len, MADV_DONTNEED) == 0 ? 0 : -errno;
}

}  // namespace zsm::region
