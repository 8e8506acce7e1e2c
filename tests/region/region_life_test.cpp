// What a process does around its region, where ordinary memory never fails it: madvise(2)'s
// checks and advice (zsm_region_advise), fork() with MADV_WIPEONFORK and MADV_DONTFORK, with
// a file system too full for the backing file's copy, with the descriptor table full, from a
// process whose threads were faulting in the SIGBUS mode; a main thread ending by
// pthread_exit(); a thread cancelled inside its SIGBUS handler (region_life_probe). Each case
// that changes the whole process runs in a child of fork() (in_child), whose exit status is
// the verdict.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "region_support.h"

namespace {

using zsm_test::fill_page;
using zsm_test::in_child;
using zsm_test::kPage;
using zsm_test::make;
using zsm_test::Made;
using zsm_test::page_mismatch;
using zsm_test::settled_stats;
using zsm_test::wrong_pages;

constexpr int kSkip = 77;

// --- madvise(2)'s checks and advice. -------------------------------------------------------

TEST(RegionAdvice, AdviceIsCheckedAsTheKernelChecksItAndChangesOnlyTheNamedPages) {
  ZSM_REQUIRE_REGION();
  Made m = make(64, 16);
  ASSERT_NE(m.r, nullptr) << zsm_region_last_error();
  for (size_t p = 0; p < 64; ++p) fill_page(m.base + p * kPage, p, 1);
  // Not page aligned: EINVAL, and nothing changes (the kernel's answer, for every advice).
  for (int advice : {MADV_DONTNEED, MADV_FREE, MADV_WIPEONFORK, MADV_NORMAL}) {
    EXPECT_EQ(zsm_region_advise(m.r, m.base + 8 * kPage + 100, 1000, advice), -EINVAL) << advice;
  }
  EXPECT_EQ(zsm_region_advise(m.r, m.base, kPage, MADV_REMOVE), -EINVAL) << "private memory";
  EXPECT_EQ(zsm_region_advise(m.r, m.base, kPage, 77), -EINVAL) << "no such advice";
  EXPECT_EQ(zsm_region_advise(m.r, m.base, kPage, MADV_HWPOISON), -EPERM);
  EXPECT_EQ(wrong_pages(m.base, 0, 64, 1), 0);
  // Hints change nothing; DONTNEED of 1000 bytes from a page boundary zeroes that page alone.
  for (int advice : {MADV_NORMAL, MADV_RANDOM, MADV_SEQUENTIAL, MADV_HUGEPAGE, MADV_NOHUGEPAGE, MADV_DONTDUMP,
                     MADV_DODUMP, MADV_COLD, MADV_WILLNEED, MADV_PAGEOUT, MADV_POPULATE_READ}) {
    EXPECT_EQ(zsm_region_advise(m.r, m.base, 64 * kPage, advice), 0) << advice;
  }
  EXPECT_EQ(wrong_pages(m.base, 0, 64, 1), 0);
  EXPECT_EQ(zsm_region_advise(m.r, m.base + 8 * kPage, 1000, MADV_DONTNEED), 0);
  for (size_t i = 0; i < kPage; i += 64) ASSERT_EQ(m.base[8 * kPage + i], 0);
  EXPECT_EQ(wrong_pages(m.base, 0, 8, 1) + wrong_pages(m.base, 9, 55, 1), 0);
  EXPECT_EQ(zsm_region_advise(m.r, m.base + 9 * kPage, 0, MADV_DONTNEED), 0) << "len 0: nothing";
  EXPECT_EQ(wrong_pages(m.base, 9, 1, 1), 0);
  zsm_region_destroy(m.r);
}

// --- fork(). --------------------------------------------------------------------------------

// MADV_WIPEONFORK: the child reads zeros there, resident or evicted (the kernel gave the
// child every byte of its parent's before); the parent keeps its bytes; KEEPONFORK undoes it.
TEST(RegionFork, WipeOnForkGivesTheChildZerosAndTheParentItsBytes) {
  ZSM_REQUIRE_REGION();
  Made m = make(256, 32);
  ASSERT_NE(m.r, nullptr) << zsm_region_last_error();
  for (size_t p = 0; p < 256; ++p) fill_page(m.base + p * kPage, p, 5);  // most evicted
  ASSERT_EQ(zsm_region_advise(m.r, m.base + 64 * kPage, 128 * kPage, MADV_WIPEONFORK), 0);
  ASSERT_EQ(zsm_region_advise(m.r, m.base + 160 * kPage, 32 * kPage, MADV_KEEPONFORK), 0);
  EXPECT_EQ(in_child([&] {
              int wrong = wrong_pages(m.base, 0, 64, 5) + wrong_pages(m.base, 160, 96, 5);
              for (size_t p = 64; p < 160; ++p) {
                for (size_t i = 0; i < kPage; i += 512) wrong += m.base[p * kPage + i] != 0;
              }
              return wrong == 0 ? 0 : 1;
            }),
            0);
  EXPECT_EQ(wrong_pages(m.base, 0, 256, 5), 0);
  zsm_region_destroy(m.r);
}

// MADV_DONTFORK: nothing there in the child (a touch is SIGSEGV) until the child maps it again
// (zsm_region_reset: the preload library's munmap then mmap); the rest is the parent's.
TEST(RegionFork, DontForkLeavesNothingInTheChildUntilItIsMappedAgain) {
  ZSM_REQUIRE_REGION();
  Made m = make(128, 32);
  ASSERT_NE(m.r, nullptr) << zsm_region_last_error();
  for (size_t p = 0; p < 128; ++p) fill_page(m.base + p * kPage, p, 6);
  ASSERT_EQ(zsm_region_advise(m.r, m.base + 32 * kPage, 32 * kPage, MADV_DONTFORK), 0);
  EXPECT_EQ(in_child([&] {
              signal(SIGSEGV, SIG_DFL);
              volatile unsigned char c = m.base[40 * kPage];  // absent: the child dies here
              return c == 255 ? 3 : 4;
            }),
            -1)
      << "a touch of a DONTFORK range in the child must be SIGSEGV";
  EXPECT_EQ(in_child([&] {
              int wrong = wrong_pages(m.base, 0, 32, 6) + wrong_pages(m.base, 64, 64, 6);
              if (zsm_region_reset(m.r, m.base + 32 * kPage, 32 * kPage) != 0) return 2;
              for (size_t p = 32; p < 64; ++p) wrong += m.base[p * kPage + 7] != 0;  // mapped again: zeros
              for (size_t p = 32; p < 64; ++p) fill_page(m.base + p * kPage, p, 9);
              return wrong == 0 && wrong_pages(m.base, 32, 32, 9) == 0 ? 0 : 1;
            }),
            0);
  EXPECT_EQ(wrong_pages(m.base, 0, 128, 6), 0) << "the parent keeps every byte";
  ASSERT_EQ(zsm_region_advise(m.r, m.base + 32 * kPage, 32 * kPage, MADV_DOFORK), 0);
  EXPECT_EQ(in_child([&] { return wrong_pages(m.base, 0, 128, 6) == 0 ? 0 : 1; }), 0) << "DOFORK undoes it";
  zsm_region_destroy(m.r);
}

// Incompressible pages of a seed: their copies are whole pages, 4 KiB of the file each.
void fill_random(unsigned char* page, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < kPage; i += 8) {
    uint64_t w = rng();
    std::memcpy(page + i, &w, 8);
  }
}
bool holds_random(const unsigned char* page, uint64_t seed) {
  unsigned char want[kPage];
  fill_random(want, seed);
  return std::memcmp(page, want, kPage) == 0;
}

// A file system with too little room for the child's copy of the backing file (a 512 KiB
// tmpfs, the file 320 KiB): the child gets what fits and the rest in the pool, and reads every
// byte while the parent rewrites everything (reusing the file's sectors). Until 9a93f81 the
// child read its parent's file and stopped ("cannot be read back from the backing file").
int full_file_system_leaves_the_child_every_byte(const std::string& dir) {
  if (unshare(CLONE_NEWNS) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return kSkip;
  if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      mount("zsm-test", dir.c_str(), "tmpfs", 0, "size=512k") != 0) {
    return kSkip;
  }
  zsm_region_options o{};
  o.backing_file = dir.c_str();
  o.backing_file_capacity = 320 << 10;
  o.compressed_budget_bytes = 16 * kPage;
  Made m = make(256, 32, o);
  if (m.r == nullptr) return 10;
  for (size_t p = 0; p < 256; ++p) fill_random(m.base + p * kPage, p);
  if (zsm_region_evict(m.r, m.base, 256 * kPage) != 0) return 11;
  if (settled_stats(m.r).bd_bytes_on_file < (256u << 10)) return 12;  // the file holds most
  int go[2];
  if (pipe(go) != 0) return 13;
  pid_t pid = fork();
  if (pid == 0) {
    char c;
    if (read(go[0], &c, 1) != 1) _exit(3);
    int wrong = 0;
    for (size_t p = 0; p < 256; ++p) wrong += !holds_random(m.base + p * kPage, p);
    _exit(wrong == 0 ? 0 : 1);
  }
  for (size_t p = 0; p < 256; ++p) fill_random(m.base + p * kPage, 1000 + p);
  zsm_region_evict(m.r, m.base, 256 * kPage);
  if (write(go[1], "g", 1) != 1) return 14;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 15;
  for (size_t p = 0; p < 256; ++p) {
    if (!holds_random(m.base + p * kPage, 1000 + p)) return 16;
  }
  zsm_region_destroy(m.r);
  return 0;
}

TEST(RegionFork, AFileSystemTooFullForTheFilesCopyLeavesTheChildEveryByte) {
  ZSM_REQUIRE_REGION();
  zsm_test::TempDir dir("zsm-region-fullfs");
  int rc = in_child([&] { return full_file_system_leaves_the_child_every_byte(dir.path); });
  if (rc == kSkip) GTEST_SKIP() << "no mount namespace here for a small tmpfs";
  EXPECT_EQ(rc, 0);
}

// The program filled its descriptor table (RLIMIT_NOFILE reached) before fork(): the child
// still gets a region of its own (its userfaultfd takes a descriptor the region reserved),
// reads every byte, and forks again. Until 9a93f81 the child stopped ("userfaultfd(2)
// failed: Too many open files").
int full_descriptor_table_still_forks() {
  rlimit lim{64, 64};
  if (setrlimit(RLIMIT_NOFILE, &lim) != 0) return 10;
  Made m = make(512, 32);
  if (m.r == nullptr) return 11;
  for (size_t p = 0; p < 512; ++p) fill_page(m.base + p * kPage, p, 8);
  while (open("/dev/null", O_RDONLY) >= 0) {
  }
  if (errno != EMFILE) return 12;
  for (int generation = 0; generation < 2; ++generation) {
    pid_t pid = fork();
    if (pid == 0) {
      int wrong = wrong_pages(m.base, 0, 512, 8 + generation);
      for (size_t p = 0; p < 512; ++p) fill_page(m.base + p * kPage, p, 9 + generation);
      wrong += wrong_pages(m.base, 0, 512, 9 + generation);
      if (wrong != 0) _exit(1);
      continue;  // this child forks the next generation
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) _exit(13);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 14);
  }
  _exit(0);
}

TEST(RegionFork, AFullDescriptorTableStillGivesTheChildItsRegion) {
  ZSM_REQUIRE_REGION();
  EXPECT_EQ(in_child(full_descriptor_table_still_forks), 0);
}

// The SIGBUS mode: fork() while three threads of the parent serve their own faults at a
// 16-page budget; each child uses its region and destroys it. Until 9a93f81 destroy waited for
// the parent's handlers, copied into the child as running, for ever.
TEST(RegionFork, TheSigbusModesChildDestroysItsRegionWhateverTheParentsThreadsWereDoing) {
  ZSM_REQUIRE_REGION();
#if defined(__SANITIZE_ADDRESS__) && !defined(__clang__)
  GTEST_SKIP() << "GCC's ASan allocator is not fork-safe with threads running (region_promise_test.cpp)";
#endif
  zsm_region_options o{};
  o.flags = ZSM_REGION_SELF_SERVE;
  Made m = make(1024, 16, o);
  ASSERT_NE(m.r, nullptr) << zsm_region_last_error();
  for (size_t p = 0; p < 1024; ++p) fill_page(m.base + p * kPage, p, 1);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (unsigned t = 0; t < 3; ++t) {
    writers.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      while (!stop.load()) {
        size_t p = (rng() % (1024 / 3)) * 3 + t;
        volatile unsigned char c = m.base[p * kPage + 64];
        (void)c;
      }
    });
  }
  int failed = 0;
  for (int child = 0; child < 6; ++child) {
    failed += in_child(
                  [&] {
                    int wrong = wrong_pages(m.base, 0, 1024, 1);
                    zsm_region_destroy(m.r);
                    return wrong == 0 ? 0 : 1;
                  },
                  20) != 0;
    usleep(10000);
  }
  stop.store(true);
  for (auto& w : writers) w.join();
  EXPECT_EQ(failed, 0);
  zsm_region_destroy(m.r);
}

// --- The process's end. ---------------------------------------------------------------------

// The probe's exit status (-1: killed, as by the watchdog) and its standard output. Its
// regions live until the process ends, as a program's do: LeakSanitizer is told so.
int run_probe(const std::string& args, std::string* out) {
  std::string cmd = std::string("ASAN_OPTIONS=detect_leaks=0 timeout -s KILL 30 ") + ZSM_REGION_LIFE_PROBE + " " + args;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return -1;
  char buf[256];
  while (fgets(buf, sizeof buf, f) != nullptr) *out += buf;
  int status = pclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// int main(void) { pthread_create(...); pthread_exit(NULL); }: the process ends when its
// worker does, with status 0 and its buffered output flushed. Until 9a93f81 the region's
// threads kept it alive (a zombie leader) until SIGKILL: timeout's KILL here, status 137.
TEST(RegionExit, AMainThreadsPthreadExitEndsTheProcessWhenItsLastThreadEnds) {
  ZSM_REQUIRE_REGION();
#ifdef ZSM_TEST_TSAN
  // ThreadSanitizer's runtime keeps a thread of its own, which glibc does not count and the
  // watcher cannot tell from the program's: the process lives on (release and ASan: passes).
  GTEST_SKIP() << "ThreadSanitizer's own thread is one the exit watcher counts as the program's";
#endif
  for (const char* mode : {"threads", "sigbus"}) {
    std::string out;
    EXPECT_EQ(run_probe(std::string("pthread-exit ") + mode, &out), 0) << mode << ": " << out;
    EXPECT_EQ(out, "worker done\n") << mode;
  }
}

// A prepare handler registered before the region runs after the region's (they run in reverse
// order); if it touches evicted region memory, nothing can serve that fault (the pool's own
// fork handler holds its locks, the evictor waits at the gate): the process stops at once with
// a line saying why. Until this test's commit it waited for ever on the gate its own thread had
// closed (CPython's test_os under zsm-run hung the same way, on glibc's own state, now kept out
// of the region).
TEST(RegionFork, ATouchOfTheRegionInForksWindowStopsTheProcessRatherThanHang) {
  ZSM_REQUIRE_REGION();
  for (const char* mode : {"threads", "sigbus"}) {
    std::string out;
    EXPECT_EQ(run_probe(std::string("fork-prepare ") + mode, &out), 0) << mode << ": " << out;
  }
}

// A deferred cancellation reaching a thread inside its SIGBUS handler, which reads a copy back
// from the backing file: the handler holds a page's lock, and a cancellation point there (libc's
// pread, until 9a93f81) unwound the thread out of it, leaving the page locked for ever.
TEST(RegionExit, ACancelledThreadLeavesNoPageLocked) {
  ZSM_REQUIRE_REGION();
  for (const char* mode : {"sigbus", "threads"}) {
    std::string out;
    EXPECT_EQ(run_probe(std::string("cancel ") + mode, &out), 0) << mode << ": " << out;
  }
}

}  // namespace
