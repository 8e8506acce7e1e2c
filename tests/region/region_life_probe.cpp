// region_life_probe: what a whole process does around a region, where the verdict is how the
// process ends (tests/region/region_life_test.cpp runs it):
//   pthread-exit MODE  the main thread ends by pthread_exit() while a worker writes region
//                      memory and prints "worker done"; the process must then exit 0, as it
//                      would without the region (its threads must not keep it alive)
//   cancel MODE        a reader of evicted pages whose copies are on file is cancelled (deferred)
//                      five times, maybe inside its SIGBUS handler; then every page must read
//                      back: a handler unwound by the cancellation would leave a page locked
//   fork-prepare MODE  in a process of its own, a pthread_atfork prepare handler registered
//                      before the region (so run after the region's) reads evicted region
//                      memory, which nothing can serve then: that process must stop at once
//                      (SIGABRT, with a line saying why), not wait for ever
// MODE: threads (handler threads) or sigbus. Exit 0 when every check held, 1 with a line
// naming the first that did not, 2 on bad arguments.
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <zsm/region.h>

#include "region_patterns.h"

namespace {

using zsm_test::fill_page;
using zsm_test::kPage;
using zsm_test::page_mismatch;

constexpr size_t kPages = 512;

zsm_region* make(bool sigbus, const char* file) {
  zsm_region_options o{};
  o.budget_bytes = 32 * kPage;
  o.flags = sigbus ? ZSM_REGION_SELF_SERVE : 0;
  if (file != nullptr) {
    o.backing_file = file;
    o.compressed_budget_bytes = 16 * kPage;
  }
  zsm_region* r = zsm_region_create(kPages * kPage, &o);
  if (r == nullptr) std::fprintf(stderr, "region_life_probe: no region: %s\n", zsm_region_last_error());
  return r;
}

unsigned char* page(zsm_region* r, size_t p) { return static_cast<unsigned char*>(zsm_region_base(r)) + p * kPage; }

zsm_region* shared;

void* worker(void*) {
  usleep(100000);  // after main has gone
  for (size_t p = 0; p < kPages; ++p) fill_page(page(shared, p), p, 7);
  for (size_t p = 0; p < kPages; ++p) {
    if (page_mismatch(page(shared, p), p, 7) != -1) {
      std::printf("page %zu wrong\n", p);
      std::exit(1);
    }
  }
  std::printf("worker done\n");  // buffered: exit()'s flush must print it
  return nullptr;
}

int pthread_exit_ends_the_process(bool sigbus) {
  shared = make(sigbus, nullptr);
  if (shared == nullptr) return 1;
  pthread_t t;
  if (pthread_create(&t, nullptr, worker, nullptr) != 0) return 1;
  pthread_exit(nullptr);
}

void* reader(void*) {
  pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, nullptr);
  for (unsigned round = 0;; ++round) {
    for (size_t p = 0; p < kPages; p += 3) {
      volatile unsigned char c = page(shared, (p * 7 + round) % kPages)[64];
      (void)c;
    }
    pthread_testcancel();
  }
  return nullptr;
}

int cancel_leaves_no_page_locked(bool sigbus) {
  const char* dir = std::getenv("TMPDIR");
  shared = make(sigbus, dir != nullptr && *dir != '\0' ? dir : "/tmp");
  if (shared == nullptr) return 1;
  for (size_t p = 0; p < kPages; ++p) fill_page(page(shared, p), p, 3);
  for (int round = 0; round < 5; ++round) {
    zsm_region_evict(shared, page(shared, 0), kPages * kPage);
    pthread_t t;
    if (pthread_create(&t, nullptr, reader, nullptr) != 0) return 1;
    usleep(20000);
    pthread_cancel(t);
    pthread_join(t, nullptr);
  }
  for (size_t p = 0; p < kPages; ++p) {
    if (page_mismatch(page(shared, p), p, 3) != -1) {
      std::printf("page %zu wrong\n", p);
      return 1;
    }
  }
  zsm_region_destroy(shared);
  std::printf("cancel: every page read back\n");
  return 0;
}

unsigned char* touched_in_prepare = nullptr;
void touch_in_prepare() {
  if (touched_in_prepare != nullptr) (void)*reinterpret_cast<volatile unsigned char*>(touched_in_prepare + 7);
}

void fork_after_a_prepare_that_touches_the_region(bool sigbus) {
  pthread_atfork(touch_in_prepare, nullptr, nullptr);  // before the region's own
  shared = make(sigbus, nullptr);
  if (shared == nullptr) _exit(1);
  for (size_t p = 0; p < kPages; ++p) fill_page(page(shared, p), p, 4);
  zsm_region_evict(shared, page(shared, 0), kPages * kPage);
  touched_in_prepare = page(shared, 100);
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  _exit(0);  // not reached: the fork stops the process
}

int a_touch_in_the_forks_window_stops_the_process(bool sigbus) {
  pid_t pid = fork();
  if (pid == 0) fork_after_a_prepare_that_touches_the_region(sigbus);
  int status = 0;
  for (int i = 0; i < 200 && waitpid(pid, &status, WNOHANG) == 0; ++i) usleep(100000);
  if (waitpid(pid, &status, WNOHANG) == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    std::printf("fork-prepare: the process hung\n");
    return 1;
  }
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT) {
    std::printf("fork-prepare: the process ended otherwise: %d\n", status);
    return 1;
  }
  std::printf("fork-prepare: stopped\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[2], "threads") != 0 && std::strcmp(argv[2], "sigbus") != 0)) {
    std::fprintf(stderr, "usage: region_life_probe pthread-exit|cancel|fork-prepare threads|sigbus\n");
    return 2;
  }
  bool sigbus = std::strcmp(argv[2], "sigbus") == 0;
  if (std::strcmp(argv[1], "pthread-exit") == 0) return pthread_exit_ends_the_process(sigbus);
  if (std::strcmp(argv[1], "cancel") == 0) return cancel_leaves_no_page_locked(sigbus);
  if (std::strcmp(argv[1], "fork-prepare") == 0) return a_touch_in_the_forks_window_stops_the_process(sigbus);
  std::fprintf(stderr, "region_life_probe: unknown case '%s'\n", argv[1]);
  return 2;
}
