// A thread of the region's own (the evictor, a handler), on a stack the region maps for it. Not
// std::thread: a child of fork() starts its region's threads before fork() returns there, when
// the region cannot serve a fault yet, and glibc would hand a new thread a stack (and TLS) left
// by one of the parent's threads, whose memory may be the region's itself when the program
// keeps its heap there (the preload library). A stack of the region's own touches nothing else.
#pragma once

#include <pthread.h>

#include <functional>
#include <memory>

namespace zsm::region {

class RegionThread {
 public:
  RegionThread() = default;
  ~RegionThread() { join(); }
  RegionThread(const RegionThread&) = delete;
  RegionThread& operator=(const RegionThread&) = delete;

  // Starts `body` on a new thread; false (errno set) when it cannot.
  bool start(std::function<void()> body);
  bool joinable() const { return started_; }
  void join();
  // In a child of fork(): the thread is not there; its stack stays mapped, nothing is freed.
  void forget();

 private:
  static void* run(void* self);
  pthread_t thread_{};
  bool started_ = false;
  void* stack_ = nullptr;
  std::function<void()> body_;
};

}  // namespace zsm::region
