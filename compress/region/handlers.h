// The handler threads (the default mode): they read faults from the userfaultfd and serve them
// (fault_server.h). A faulting thread sleeps in the kernel until its fault is served, and
// waking it from another CPU costs a cross-CPU wake-up of a CPU gone idle, 10-60 us on a VM
// (the fault's own work is a few). So there is one handler pinned to each CPU the process may
// run on (at most 8), each blocked in read(2) on the userfaultfd: a fault wakes them, and the
// one on the faulting thread's CPU, which has just gone idle, runs first, takes the message,
// serves it and wakes the faulting thread on its own CPU. The others find nothing and sleep
// on inside the kernel. The descriptor is made blocking only once they all run (until then
// they wait in poll(2), and a program's thread may serve faults itself with a poll(2) and a
// read(2) that must not block: Region::start_threads). A read(2) alone saves the poll(2) of
// each fault: 2-3 us of a 21-25 us round trip on the AMD EPYC VM (docs/region.md). Faults on
// different pages are served in parallel (each takes only its page's lock).
//
// With ZSM_REGION_ONE_HANDLER (or a process allowed one CPU), one unpinned handler serves
// every fault and, after serving, polls for the next without sleeping for spin_us.
//
// Stopping: a handler asleep in read(2) wakes only for a message, so the region rings a
// doorbell: a page of its own, registered with the userfaultfd, that the destroying thread
// touches once per handler; the handler that reads that fault serves it and leaves.
#pragma once

#include <atomic>
#include <string>
#include <memory>
#include <vector>

#include "fault_server.h"
#include "region_thread.h"

namespace zsm::region {

class Handlers {
 public:
  struct Config {
    uintptr_t base = 0;      // the region
    size_t size = 0;
    unsigned fault_around = 16;
    bool one_handler = false;
    unsigned spin_us = 0;
  };
  Handlers(FaultServer& server, PageCalls& calls, const Config& c) : server_(server), calls_(calls), c_(c) {}
  ~Handlers();
  Handlers(const Handlers&) = delete;
  Handlers& operator=(const Handlers&) = delete;

  // The doorbell page, registered with fd. 0 or -errno with *why.
  int init(int uffd, std::string* why);
  // Registers the doorbell again with a new userfaultfd (a child of fork()).
  int reregister(int uffd, std::string* why);
  // Starts the threads; run on the keeper thread, whose descriptor table they share (when it
  // has one of its own: `own_table`).
  void start(bool own_table);
  // Whether every thread started has run its first line.
  bool running() const { return running_.load() == started_.load(); }
  // On a thread of the program's, while the handlers start: serves one fault if the
  // userfaultfd holds one within `wait_ms`. Whether it served one.
  bool serve_one(int wait_ms);
  // Once they run: the pinned handlers wait in read(2), the descriptor made blocking.
  void block_in_read();
  // Rings the doorbell once per thread and joins them.
  void stop();
  // In a child of fork(): the parent's threads are not here; their handles are forgotten.
  void forget_in_child();

 private:
  std::vector<int> cpus() const;
  void main(bool spin, bool own_table);
  void serve_message(int fd, const uffd_msg& msg, ServeBuffers& b);
  bool wait_spinning();  // one handler: polls for spin_us; whether a fault came
  void ring_doorbell();

  FaultServer& server_;
  PageCalls& calls_;
  Config c_;
  uintptr_t doorbell_ = 0;
  std::atomic<bool> stopping_{false}, reads_block_{false};
  std::atomic<size_t> running_{0}, started_{0};
  std::vector<std::unique_ptr<RegionThread>> threads_;
};

}  // namespace zsm::region
