// The region's OS layer: userfaultfd and the page-table calls, one small function each. Every
// ioctl that the kernel may refuse for a passing reason (EAGAIN while the address space is
// changing, a partial copy) is retried here, so callers see only 0 or a final -errno.
// Depends on the kernel's uapi headers only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <linux/userfaultfd.h>

namespace zsm::region {

inline constexpr size_t kPageSize = 4096;

// A userfaultfd (O_CLOEXEC | O_NONBLOCK) with the API handshake done and write-protect faults
// on anonymous memory enabled. Tries the syscall, then /dev/userfaultfd (both serve the
// kernel's own faults too), then the syscall with UFFD_USER_MODE_ONLY, which kernels since
// 5.11 grant unprivileged; force_user_mode_only goes straight to the last.
// *user_mode_only says which was granted.
// Returns the fd, or -errno with `why` set to one line naming what would allow it.
// With `sigbus`, faults are not queued: the faulting thread gets SIGBUS (UFFD_FEATURE_SIGBUS,
// Linux 4.14), and a kernel-mode access fails with EFAULT.
int uffd_open(bool force_user_mode_only, bool sigbus, bool* user_mode_only, std::string* why);

// Registers [addr, addr + len) for MISSING and WP faults; checks that the kernel offers
// COPY, ZEROPAGE, WRITEPROTECT and WAKE on it. 0 or -errno (`why` set).
int uffd_register(int fd, void* addr, size_t len, std::string* why);

// UFFDIO_COPY of `len` bytes from src to dst, write-protected if `write_protect`, waking the
// range's waiters. *copied (may be null) gets the bytes installed, also on error.
// 0, -EEXIST (a page there already), or another -errno.
int uffd_copy(int fd, uintptr_t dst, const void* src, size_t len, bool write_protect,
              size_t* copied);

// UFFDIO_ZEROPAGE of [addr, addr + len): the shared zero page, no memory. 0 or -errno
// (-EEXIST is returned as 0: a page is there, which is what the caller wanted).
int uffd_zeropage(int fd, uintptr_t addr, size_t len);

// Write-protects (or un-protects, waking the range's waiters) [addr, addr + len).
int uffd_write_protect(int fd, uintptr_t addr, size_t len, bool protect);

// Wakes the threads waiting on faults in [addr, addr + len).
int uffd_wake(int fd, uintptr_t addr, size_t len);

// Drops the pages of [addr, addr + len) from the page tables (MADV_DONTNEED).
int drop_pages(uintptr_t addr, size_t len);

}  // namespace zsm::region
