// The keeper's own descriptor table, and borrowing from it (descriptors.h).
#include "descriptors.h"
#include "uffd.h"

#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL  // Linux 6.9: a pidfd for one thread, not its process
#endif
#include <fcntl.h>

namespace zsm::region {
namespace {

__attribute__((tls_model("initial-exec"))) thread_local bool private_files = false;
__attribute__((tls_model("initial-exec"))) thread_local bool region_thread = false;

// Closes [from, to] (to may be UINT_MAX); close_range(2) where the kernel has it (5.9).
void close_between(unsigned from, unsigned to) {
  if (from > to) return;
  if (syscall(SYS_close_range, from, to, 0) == 0) return;
  long most = sysconf(_SC_OPEN_MAX);
  for (long fd = from; fd <= std::min<long>(to, most); ++fd) close_fd(static_cast<int>(fd));
}

[[noreturn]] void stop_process(const char* what, int e) {
  // One line, formatted on the stack: this may run in a SIGBUS handler.
  char line[400];
  int n = std::snprintf(line, sizeof line,
                        "zsm region: the program closed the region's %s, and the region's own "
                        "copy cannot be borrowed back (%s; pidfd_getfd of a thread needs Linux "
                        "6.9): stopping rather than serve zeros\n",
                        what, std::strerror(e));
  if (n > 0) write_to_program_stderr(line, std::min<size_t>(static_cast<size_t>(n), sizeof line - 1));
  std::abort();
}

}  // namespace

void write_to_program_stderr(const char* line, size_t n) {
  if (!on_private_files()) {
    (void)!write(STDERR_FILENO, line, n);
    return;
  }
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0));
  int fd = pidfd < 0 ? -1 : static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, STDERR_FILENO, 0));
  if (fd >= 0) {
    (void)!write(fd, line, n);
    close_fd(fd);
  }
  if (pidfd >= 0) close_fd(pidfd);
}

bool on_private_files() { return private_files; }
bool on_region_thread() { return region_thread; }
void mark_region_thread() { region_thread = true; }
void mark_private_files() { private_files = true; }

bool make_files_private(std::initializer_list<int> keep) {
  if (unshare(CLONE_FILES) != 0) return false;
  std::vector<unsigned> kept;
  for (int fd : keep) {
    if (fd >= 0) kept.push_back(static_cast<unsigned>(fd));
  }
  std::sort(kept.begin(), kept.end());
  unsigned from = 0;
  for (unsigned fd : kept) {
    if (fd > from) close_between(from, fd - 1);
    from = fd + 1;
  }
  close_between(from, UINT_MAX);
  return true;
}

bool ReservedFds::take() {
  for (int& held : fds_) {
    if (held >= 0) continue;
    int other = fds_[0] >= 0 ? fds_[0] : fds_[1];
    held = other >= 0 ? fcntl(other, F_DUPFD_CLOEXEC, 3)
                      : static_cast<int>(syscall(SYS_memfd_create, "zsm-region-reserve", MFD_CLOEXEC));
    if (held < 0) return false;
    struct stat st {};
    if (other < 0 && fstat(held, &st) == 0) {
      device_ = st.st_dev;
      inode_ = st.st_ino;
    }
  }
  return true;
}

bool ReservedFds::still_ours(int fd) const {
  struct stat st {};
  return fstat(fd, &st) == 0 && st.st_dev == device_ && st.st_ino == inode_;
}

void ReservedFds::release() {
  for (int& held : fds_) {
    if (held >= 0 && still_ours(held)) close_fd(held);
    held = -1;
  }
}

int ReservedFds::numbers(int* fds, int n) const {
  int count = 0;
  for (int held : fds_) {
    if (held < 0) continue;
    if (count < n) fds[count] = held;
    ++count;
  }
  return count;
}

bool names_a_userfaultfd(int fd) {
  char path[64], target[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, target, sizeof target - 1);
  // Closed; or /proc cannot say (not mounted: a chroot, a sandbox), and an open number is
  // taken for the region's.
  if (n <= 0) return access("/proc/self/fd", F_OK) != 0 && fcntl(fd, F_GETFD) != -1;
  target[n] = '\0';
  return std::strcmp(target, "anon_inode:[userfaultfd]") == 0;
}

int KeptFd::borrow() const {
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, keeper_, PIDFD_THREAD));
  if (pidfd < 0) stop_process("descriptor", errno);
  int fd = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, number_, 0));
  int e = errno;
  close_fd(pidfd);
  if (fd < 0) stop_process("descriptor", e);
  return fd;
}

void KeptFd::give_back(int fd) { close_fd(fd); }

}  // namespace zsm::region
