// The exit watcher (exit_watcher.h). It reads /proc with system calls into buffers on its own
// stack: it allocates nothing, so it touches no region memory while it watches (in the SIGBUS
// mode it blocks SIGBUS then, as every signal).
#include "exit_watcher.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
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

// The state letter of /proc/self/task/TID/stat (R, S, D, Z, ...), or 0 when the thread is gone.
char thread_state(pid_t tid) {
  char path[64], text[512];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(tid));
  int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC));
  if (fd < 0) return 0;
  ssize_t n = syscall(SYS_read, fd, text, sizeof text - 1);
  close_fd(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  const char* paren = std::strrchr(text, ')');  // the name may hold anything but ends there
  return paren != nullptr && paren[1] == ' ' ? paren[2] : 0;
}

bool gone(char state) { return state == 0 || state == 'Z' || state == 'X'; }

// Whether a thread that is neither the region's nor gone is still in the process.
bool program_thread_left() {
  int dir = static_cast<int>(syscall(SYS_openat, AT_FDCWD, "/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir < 0) return true;  // cannot tell: keep watching
  alignas(8) char buf[4096];
  bool left = false;
  for (long n; !left && (n = syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0;) {
    for (long off = 0; off < n && !left;) {
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
      left = tid > 0 && !is_region_thread(tid) && !gone(thread_state(tid));
    }
  }
  close_fd(dir);
  return left;
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
      if (stop_.load() != 0 || !gone(thread_state(leader)) || program_thread_left()) continue;
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
