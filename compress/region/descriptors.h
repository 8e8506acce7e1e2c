// The region's descriptors, out of the program's reach. A program may close every descriptor
// it did not open (close_range(3, ~0U), closefrom(), Python's os.closerange()), and closing a
// userfaultfd unregisters its ranges: every evicted page would then read as zeros. So the
// region's own threads run on a descriptor table of their own (unshare(CLONE_FILES) by the
// first of them, the *keeper*, which then closes everything there but the region's
// descriptors; the threads it starts share its table): while the keeper lives, the
// userfaultfd and the backing file stay open whatever the program closes.
//
// The program's threads still use the numbers in the program's table: a SIGBUS-mode fault is
// served by the faulting thread, and the range calls run on the caller's. If such a call finds
// the number closed (EBADF), or another file behind it (ENOTTY and the other errors a uffd
// ioctl cannot give on a good range), it borrows the keeper's descriptor
// (pidfd_getfd(2) on the keeper thread: Linux 6.9 for PIDFD_THREAD), retries, and from then on
// always borrows. Where it cannot, the process stops with a message naming the cause: never
// zeros.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <cerrno>
#include <initializer_list>

namespace zsm::region {

// Run by the keeper thread first: a descriptor table of its own holding only `keep`.
// False (nothing changed) when unshare(2) is refused.
bool make_files_private(std::initializer_list<int> keep);

// One line to the program's standard error as it is now, from any thread: the region's own
// threads have none in their table, and borrow the program's (pidfd_getfd). Signal-safe.
void write_to_program_stderr(const char* line, size_t n);

// Whether the calling thread is one of the region's; and whether its table is the keeper's.
bool on_region_thread();
bool on_private_files();
void mark_region_thread();
void mark_private_files();

// Descriptors held in the program's table for a child of fork(): the child's userfaultfd (and
// /dev/userfaultfd, which making one may open) needs numbers even when the program has filled
// its table (RLIMIT_NOFILE), as ordinary memory needs none. A memfd of nothing and a duplicate,
// released in the child just before it opens its own userfaultfd, and taken again after. A
// number is closed only while it still names that memfd: a program that closed it and reused
// the number keeps its own file.
class ReservedFds {
 public:
  static constexpr int kCount = 2;
  ReservedFds() = default;
  ReservedFds(const ReservedFds&) = delete;
  ReservedFds& operator=(const ReservedFds&) = delete;
  ~ReservedFds() { release(); }
  // Holds kCount descriptors; false (errno set) when the table has no room for them.
  bool take();
  void release();
  // The numbers held, into fds (up to n); how many.
  int numbers(int* fds, int n) const;

 private:
  bool still_ours(int fd) const;
  int fds_[kCount] = {-1, -1};
  uint64_t device_ = 0, inode_ = 0;  // the memfd's
};

// Whether `fd` names a userfaultfd (a program may have closed the region's and reused the
// number); where /proc is not mounted, whether it is open.
bool names_a_userfaultfd(int fd);

// One of the region's descriptors: its number, which is the same in the program's table and
// the keeper's, and how to borrow the keeper's.
class KeptFd {
 public:
  KeptFd() = default;
  KeptFd(int number, pid_t keeper) : number_(number), keeper_(keeper) {}
  KeptFd(const KeptFd& o) : number_(o.number_), keeper_(o.keeper_), lost_(o.lost_.load()) {}
  KeptFd& operator=(const KeptFd& o) {
    number_ = o.number_;
    keeper_ = o.keeper_;
    lost_.store(o.lost_.load());
    return *this;
  }

  int number() const { return number_; }
  void set_keeper(pid_t tid) { keeper_ = tid; }
  bool lost() const { return lost_.load(std::memory_order_relaxed); }

  // op(int fd) -> 0 or -errno, run with a descriptor that is really this one. `suspect(rc)`
  // says when a result may come from another file behind the number.
  template <typename Op, typename Suspect>
  int call(Op op, Suspect suspect) {
    if (on_private_files()) return op(number_);
    int first = 0;
    if (!lost()) {
      first = op(number_);
      if (!suspect(first)) return first;
    }
    int borrowed = borrow();
    int rc = op(borrowed);
    give_back(borrowed);
    if (lost() || rc != first) lost_.store(true, std::memory_order_relaxed);  // another file was behind the number
    return rc;
  }

  // For userfaultfd ioctls: a closed number, or a file that is not ours behind it.
  static bool suspect_ioctl(int rc) { return rc == -EBADF || rc == -ENOTTY || rc == -EINVAL || rc == -ENOENT; }

 private:
  int borrow() const;  // the keeper's descriptor, or the process stops
  static void give_back(int fd);

  int number_ = -1;
  pid_t keeper_ = 0;
  std::atomic<bool> lost_{false};
};

}  // namespace zsm::region
