// The region's threads (region_thread.h).
#include "region_thread.h"

#include <cerrno>

#include <sys/syscall.h>
#include <unistd.h>

#include "exit_watcher.h"
#include "uffd.h"

namespace zsm::region {
namespace {

constexpr size_t kStackBytes = 512 << 10;

}  // namespace

void* RegionThread::run(void* self) {
  auto tid = static_cast<pid_t>(syscall(SYS_gettid));
  register_region_thread(tid);  // the exit watcher passes over it
  static_cast<RegionThread*>(self)->body_();
  unregister_region_thread(tid);
  return nullptr;
}

bool RegionThread::start(std::function<void()> body) {
  stack_ = map_unlocked(kStackBytes);
  if (stack_ == nullptr) return false;
  body_ = std::move(body);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstack(&attr, stack_, kStackBytes);
  int rc = pthread_create(&thread_, &attr, run, this);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    unmap(stack_, kStackBytes);
    stack_ = nullptr;
    errno = rc;
    return false;
  }
  started_ = true;
  return true;
}

void RegionThread::join() {
  if (!started_) return;
  pthread_join(thread_, nullptr);
  started_ = false;
  unmap(stack_, kStackBytes);
  stack_ = nullptr;
}

void RegionThread::forget() {
  started_ = false;
  stack_ = nullptr;
  new std::function<void()>(std::move(body_));  // its captures may be the parent's: never destroyed
}

}  // namespace zsm::region
