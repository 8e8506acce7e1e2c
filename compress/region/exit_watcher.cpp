// The exit watcher (exit_watcher.h). It reads /proc with system calls into buffers on its own
// stack: it allocates nothing, so it touches no region memory while it watches (in the SIGBUS
// mode it blocks SIGBUS then, as every signal).
#include "exit_watcher.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "futex.h"
#include "region_thread.h"
#include "uffd.h"

namespace zsm::region {
namespace {

constexpr long kPeriodNs = 100'000'000;  // how often it looks once the leader has exited
constexpr size_t kMostRegionThreads = 1024;

std::atomic<pid_t> region_threads[kMostRegionThreads];

bool is_region_thread(pid_t tid) {
  for (const auto& slot : region_threads) {
    if (slot.load(std::memory_order_acquire) == tid) return true;
  }
  return false;
}

// A file of /proc opened on the program's descriptor table, where the program may close any
// number and reuse it meanwhile: closed only if the number still names what was opened.
class ProcFile {
 public:
  explicit ProcFile(const char* path, int flags = O_RDONLY) {
    fd_ = static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, flags | O_CLOEXEC));
    error_ = fd_ < 0 ? errno : 0;
    if (fd_ >= 0 && syscall(SYS_fstat, fd_, &opened_) != 0) opened_.st_ino = 0;
  }
  ~ProcFile() {
    struct stat now {};
    if (fd_ >= 0 && syscall(SYS_fstat, fd_, &now) == 0 && now.st_ino == opened_.st_ino && now.st_dev == opened_.st_dev) {
      close_fd(fd_);
    }
  }
  ProcFile(const ProcFile&) = delete;
  ProcFile& operator=(const ProcFile&) = delete;
  int fd() const { return fd_; }
  // Whether the path named nothing (the thread has gone): any other failure says nothing.
  bool missing() const { return fd_ < 0 && (error_ == ENOENT || error_ == ESRCH); }

 private:
  int fd_ = -1;
  int error_ = 0;
  struct stat opened_ {};
};

enum class ThreadIs { gone, alive };

// What /proc/self/task/TID/stat says of the thread: gone (no such task, a zombie, dead), else
// alive, also when it cannot be read or parsed (the watcher errs towards waiting).
ThreadIs thread_state(pid_t tid) {
  char path[64], text[512];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(tid));
  ProcFile f(path);
  if (f.missing()) return ThreadIs::gone;
  if (f.fd() < 0) return ThreadIs::alive;
  ssize_t n = syscall(SYS_read, f.fd(), text, sizeof text - 1);
  if (n <= 0) return n < 0 && errno == ESRCH ? ThreadIs::gone : ThreadIs::alive;
  text[n] = '\0';
  const char* paren = std::strrchr(text, ')');  // the name may hold anything but ends there
  if (paren == nullptr || paren[1] != ' ') return ThreadIs::alive;
  return paren[2] == 'Z' || paren[2] == 'X' ? ThreadIs::gone : ThreadIs::alive;
}

// Whether a thread that is neither the region's nor gone is still in the process; true when
// /proc cannot be read.
bool program_thread_left() {
  ProcFile dir("/proc/self/task", O_RDONLY | O_DIRECTORY);
  if (dir.fd() < 0) return true;
  alignas(8) char buf[4096];
  long n = 0;
  while ((n = syscall(SYS_getdents64, dir.fd(), buf, sizeof buf)) > 0) {
    for (long off = 0; off < n;) {
      struct Entry {
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[1];
      };
      const auto* e = reinterpret_cast<const Entry*>(buf + off);
      off += e->reclen;
      auto tid = static_cast<pid_t>(std::atol(e->name));
      if (tid > 0 && !is_region_thread(tid) && thread_state(tid) == ThreadIs::alive) return true;
    }
  }
  return n < 0;
}

// Every program thread has ended: two looks in a row find none (a thread that starts another
// and exits between a look's listing and its checks fools one look, not the next, which lists
// after them).
bool program_ended(pid_t leader) {
  return thread_state(leader) == ThreadIs::gone && !program_thread_left() && !program_thread_left();
}

class Watcher {
 public:
  void start() {
    stop_.store(0);
    thread_ = std::make_unique<RegionThread>();
    if (!thread_->start([this] { main(); })) thread_.reset();  // without it, as before: no worse
  }
  void stop() {
    if (!thread_) return;
    stop_.store(1);
    futex_wake_all(&stop_);
    if (syscall(SYS_gettid) == tid_.load()) {  // exit() on the watcher destroyed the last region
      thread_.release()->forget();
      return;
    }
    thread_->join();
    thread_.reset();
  }
  void forget_in_child() {
    if (thread_) thread_.release()->forget();
  }

 private:
  void main() {
    auto tid = static_cast<pid_t>(syscall(SYS_gettid));  // registered by RegionThread
    tid_.store(tid);
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);  // the program's signals go to its own threads
    const pid_t leader = getpid();
    while (stop_.load() == 0) {
      futex_wait(&stop_, 0, kPeriodNs);
      if (stop_.load() != 0 || !program_ended(leader)) continue;
      // Every program thread has ended: what the last one's exit would have done.
      unregister_region_thread(tid);
      sigset_t bus;
      sigemptyset(&bus);
      sigaddset(&bus, SIGBUS);
      pthread_sigmask(SIG_UNBLOCK, &bus, nullptr);  // exit's handlers may fault (the SIGBUS mode)
      std::exit(0);
    }
  }

  std::unique_ptr<RegionThread> thread_;
  std::atomic<uint32_t> stop_{0};
  std::atomic<pid_t> tid_{0};
};

// Guarded by the callers' lock (fork.cpp's list of regions). Never destroyed: exit() may come
// while it runs.
Watcher& watcher() {
  static auto* w = new Watcher;
  return *w;
}
int regions_alive = 0;

}  // namespace

void register_region_thread(pid_t tid) {
  for (auto& slot : region_threads) {
    pid_t none = 0;
    if (slot.compare_exchange_strong(none, tid, std::memory_order_acq_rel)) return;
  }
}

void unregister_region_thread(pid_t tid) {
  for (auto& slot : region_threads) {
    pid_t mine = tid;
    if (slot.compare_exchange_strong(mine, 0, std::memory_order_acq_rel)) return;
  }
}

void watcher_region_made() {
  if (regions_alive++ == 0) watcher().start();
}

void watcher_region_gone() {
  if (--regions_alive == 0) watcher().stop();
}

void watcher_forget_in_child() {
  for (auto& slot : region_threads) slot.store(0, std::memory_order_relaxed);  // the parent's
  watcher().forget_in_child();
}

void watcher_start_in_child() {
  if (regions_alive > 0) watcher().start();
}

}  // namespace zsm::region
