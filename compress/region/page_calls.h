// The region's page-table calls on its userfaultfd (uffd.h), made by whichever thread serves:
// one of the region's own (its private descriptor table) or one of the program's (a SIGBUS
// handler, a range call), through KeptFd (descriptors.h), so that a program that closed the
// region's descriptor does not turn them into calls on another file.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "descriptors.h"
#include "uffd.h"

namespace zsm::region {

class PageCalls {
 public:
  PageCalls() = default;
  explicit PageCalls(const UffdInfo& info) : info_(info), fd_(info.fd, 0) {}

  const UffdInfo& info() const { return info_; }
  bool can_move() const { return info_.can_move; }
  int number() const { return fd_.number(); }
  void set_keeper(pid_t tid) { fd_.set_keeper(tid); }
  bool lost() const { return fd_.lost(); }

  int copy(uintptr_t dst, const void* src, size_t len, bool write_protect, size_t* copied) {
    return fd_.call([&](int fd) { return uffd_copy(fd, dst, src, len, write_protect, copied); },
                    KeptFd::suspect_ioctl);
  }
  int move(uintptr_t dst, uintptr_t src, size_t len, bool dont_wake, size_t* moved, bool allow_holes = false) {
    return fd_.call([&](int fd) { return uffd_move(fd, dst, src, len, dont_wake, allow_holes, moved); },
                    KeptFd::suspect_ioctl);
  }
  int zeropage(uintptr_t addr, size_t len) {
    return fd_.call([&](int fd) { return uffd_zeropage(fd, addr, len); }, KeptFd::suspect_ioctl);
  }
  int write_protect(uintptr_t addr, size_t len, bool protect) {
    return fd_.call([&](int fd) { return uffd_write_protect(fd, addr, len, protect); },
                    KeptFd::suspect_ioctl);
  }
  int wake(uintptr_t addr, size_t len) {
    return fd_.call([&](int fd) { return uffd_wake(fd, addr, len); }, KeptFd::suspect_ioctl);
  }

 private:
  UffdInfo info_;
  KeptFd fd_;
};

// A call that only a bug, or the process's memory being torn down, can make fail: the fault
// cannot be served. One line on stderr and abort (signal-safe: no allocation).
inline void check(int rc, const char* what) {
  if (rc == 0) return;
  char line[200];
  int n = std::snprintf(line, sizeof line, "zsm region: %s failed: %s\n", what, std::strerror(-rc));
  if (n > 0) write_to_program_stderr(line, n < static_cast<int>(sizeof line) ? static_cast<size_t>(n) : sizeof line - 1);
  std::abort();
}

}  // namespace zsm::region
