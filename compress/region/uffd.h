// The region's OS layer: userfaultfd and the page-table calls, one small function each. Every
// ioctl that the kernel may refuse for a passing reason (EAGAIN while the address space is
// changing, a partial copy or move) is retried here, so callers see only a final result.
// Depends on the kernel's uapi headers only (and defines what Debian 12's 6.1 headers lack:
// UFFDIO_MOVE, Linux 6.8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <linux/userfaultfd.h>

namespace zsm::region {

inline constexpr size_t kPageSize = 4096;

// What the userfaultfd was opened with and what its kernel offers.
struct UffdInfo {
  int fd = -1;
  bool user_mode_only = false;  // a kernel-mode access to a missing page fails with EFAULT
  bool can_move = false;        // UFFDIO_MOVE (Linux 6.8)
  bool thread_ids = false;      // fault messages name the faulting thread (Linux 4.14)
};

struct UffdRequest {
  bool force_user_mode_only = false;
  bool sigbus = false;   // faults are SIGBUS to the faulting thread, not queued (Linux 4.14)
  bool want_move = true;  // ask for UFFDIO_MOVE where the kernel has it
};

// A userfaultfd (O_CLOEXEC | O_NONBLOCK; pinned handler threads make it blocking: handlers.h) with the API handshake
// done and write-protect faults on anonymous memory enabled. Tries the syscall, then
// /dev/userfaultfd (both serve the kernel's own faults too), then the syscall with
// UFFD_USER_MODE_ONLY, which kernels since 5.11 grant unprivileged. Returns 0 with *out
// filled, or -errno with `why` set to one line: what would allow userfaultfd (EPERM, ENOSYS),
// or the shortage itself (EMFILE, ENFILE, ENOMEM), which is not a missing permission.
int uffd_open(const UffdRequest& req, UffdInfo* out, std::string* why);

// Registers [addr, addr + len) for MISSING faults, and WP faults too when `write_protect`;
// checks that the kernel offers what the region uses there. 0 or -errno (`why` set).
int uffd_register(int fd, void* addr, size_t len, bool write_protect, std::string* why);

// UFFDIO_COPY of `len` bytes from src to dst, write-protected if `write_protect`, waking the
// range's waiters. *copied (may be null) gets the bytes installed, also on error.
// 0, -EEXIST (a page there already), or another -errno.
int uffd_copy(int fd, uintptr_t dst, const void* src, size_t len, bool write_protect,
              size_t* copied);

// UFFDIO_MOVE of [src, src + len) to dst (both registered with fd): the pages themselves change
// place, nothing is allocated or copied, and the range's old entries are flushed from the TLBs
// once. Waiters at dst are woken unless `dont_wake`; with `allow_holes` a missing source page
// is passed over (it stays missing at dst). *moved gets the bytes done, holes included, also
// on error. 0, -EBUSY (a page pinned for I/O or shared with a child of fork), -EEXIST (dst not
// empty), -ENOENT (a hole at src without allow_holes), or another -errno.
int uffd_move(int fd, uintptr_t dst, uintptr_t src, size_t len, bool dont_wake, bool allow_holes,
              size_t* moved);

// UFFDIO_ZEROPAGE of [addr, addr + len): the shared zero page, no memory. 0, -EEXIST (a page
// is there), or another -errno.
int uffd_zeropage(int fd, uintptr_t addr, size_t len);

// Write-protects (or un-protects, waking the range's waiters) [addr, addr + len).
int uffd_write_protect(int fd, uintptr_t addr, size_t len, bool protect);

// Wakes the threads waiting on faults in [addr, addr + len).
int uffd_wake(int fd, uintptr_t addr, size_t len);

// Drops the pages of [addr, addr + len) from the page tables (MADV_DONTNEED). A range the
// program mlock()ed (mlockall() after the region was made) is unlocked first: the region's
// ranges are never locked (region.h).
int drop_pages(uintptr_t addr, size_t len);
// Whether the page at addr is mapped now (mincore(2): anonymous memory present in the page
// tables).
bool page_present(uintptr_t addr);

// An anonymous private mapping of `len` bytes (MAP_NORESERVE, no huge pages) that no
// mlockall(MCL_FUTURE) locks or populates: mapped PROT_NONE, unlocked, then made read-write.
// nullptr with errno on failure.
void* map_unlocked(size_t len);

// The memory and descriptor calls the region makes on its own memory and descriptors. They are
// system calls, not libc's functions: a library that interposes those (the preload library
// serves munmap, madvise and close of region memory and descriptors itself) must not see the
// region's own calls, or it would serve them with the region. 0 or -errno.
int unmap(void* addr, size_t len);
int protect(void* addr, size_t len, int prot);
int unlock(void* addr, size_t len);
int close_fd(int fd);

}  // namespace zsm::region
