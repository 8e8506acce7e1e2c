// The SIGBUS mode (ZSM_REGION_SELF_SERVE): each faulting thread serves its own fault. Round
// trips at 1/8 budget, a syscall's EFAULT and the pin, a signal handler that touches evicted
// pages, and the SIGBUS handler's chain: a SIGBUS outside the region reaches the program's own
// handler, or stops the process as it would have without the region.
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "region_support.h"

namespace {

using zsm_test::fill_page;
using zsm_test::kPage;
using zsm_test::page_mismatch;
using zsm_test::read_from_pipe_into;
using zsm_test::region_stats;

zsm_region* make_self_serving(size_t pages, size_t budget_pages) {
  zsm_region_options o{};
  o.budget_bytes = budget_pages * kPage;
  o.flags = ZSM_REGION_SELF_SERVE;
  zsm_region* r = zsm_region_create(pages * kPage, &o);
  EXPECT_NE(r, nullptr) << zsm_region_last_error();
  return r;
}

unsigned char* page_at(zsm_region* r, size_t p) { return static_cast<unsigned char*>(zsm_region_base(r)) + p * kPage; }

TEST(RegionSelfServe, RoundTripAtAnEighthOfTheBudget) {
  ZSM_REQUIRE_REGION();
  zsm_region* r = make_self_serving(1024, 128);
  ASSERT_NE(r, nullptr);
  for (size_t p = 0; p < 1024; ++p) fill_page(page_at(r, p), p, 1);
  for (size_t p = 0; p < 1024; ++p) ASSERT_EQ(page_mismatch(page_at(r, p), p, 1), -1) << "page " << p;
  for (size_t p = 0; p < 1024; p += 3) {
    ASSERT_EQ(page_mismatch(page_at(r, p), p, 1), -1);  // a read installs it clean ...
    fill_page(page_at(r, p), p, 2);                      // ... and a write takes a WP fault
  }
  for (size_t p = 0; p < 1024; ++p) ASSERT_EQ(page_mismatch(page_at(r, p), p, p % 3 == 0 ? 2 : 1), -1);
  auto s = region_stats(r);
  EXPECT_LE(s.resident_bytes + s.probation_bytes, s.hard_limit_bytes + zsm_test::kRetiringBytes);
  EXPECT_GE(s.refaults + s.fault_around_pages, 1024u - 128u);
  EXPECT_GT(s.wp_faults, 0u);
  EXPECT_EQ(s.user_mode_only, 1u) << "no handler waits for a syscall's fault";
  zsm_region_destroy(r);
}

TEST(RegionSelfServe, ASyscallGetsEfaultUnlessPinned) {
  ZSM_REQUIRE_REGION();
  zsm_region* r = make_self_serving(64, 16);
  ASSERT_NE(r, nullptr);
  fill_page(page_at(r, 5), 5, 3);
  ASSERT_EQ(zsm_region_evict(r, page_at(r, 5), kPage), 0);
  errno = 0;
  EXPECT_EQ(read_from_pipe_into(page_at(r, 5), 64, 'q'), -1);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(page_mismatch(page_at(r, 5), 5, 3), -1) << "the failed read changed nothing";
  ASSERT_EQ(zsm_region_evict(r, page_at(r, 5), kPage), 0);
  ASSERT_EQ(zsm_region_pin(r, page_at(r, 5), kPage), 0);
  EXPECT_EQ(read_from_pipe_into(page_at(r, 5), 64, 'q'), 64);
  ASSERT_EQ(zsm_region_unpin(r, page_at(r, 5), kPage), 0);
  EXPECT_EQ(page_at(r, 5)[0], 'q');
  zsm_region_destroy(r);
}

zsm_region* in_handler_region = nullptr;
volatile long in_handler_mismatch = -2;

void read_evicted_page(int) { in_handler_mismatch = page_mismatch(page_at(in_handler_region, 7), 7, 4); }

TEST(RegionSelfServe, ASignalHandlerMayTouchEvictedPages) {
  ZSM_REQUIRE_REGION();
#ifdef ZSM_TEST_TSAN
  GTEST_SKIP() << "ThreadSanitizer runs a signal's handler later with every signal blocked, so "
                  "a fault inside it is a blocked SIGBUS, which the kernel makes fatal";
#endif
  in_handler_region = make_self_serving(64, 16);
  ASSERT_NE(in_handler_region, nullptr);
  fill_page(page_at(in_handler_region, 7), 7, 4);
  ASSERT_EQ(zsm_region_evict(in_handler_region, page_at(in_handler_region, 7), kPage), 0);
  struct sigaction sa {}, old {};
  sa.sa_handler = read_evicted_page;
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  raise(SIGUSR1);
  sigaction(SIGUSR1, &old, nullptr);
  EXPECT_EQ(in_handler_mismatch, -1) << "the page read in the handler is the page written";
  zsm_region_destroy(in_handler_region);
}

// A mapping of an empty file: touching it is a SIGBUS no region holds.
volatile unsigned char* truncated_mapping() {
  FILE* f = std::tmpfile();
  if (f == nullptr) std::abort();
  void* m = mmap(nullptr, kPage, PROT_READ, MAP_SHARED, fileno(f), 0);
  if (m == MAP_FAILED) std::abort();
  return static_cast<volatile unsigned char*>(m);
}

sigjmp_buf program_handler_jump;
void program_sigbus_handler(int) { siglongjmp(program_handler_jump, 1); }

// Each in a process of its own (threadsafe death tests re-run the test there): the SIGBUS
// handler is installed once per process, over the disposition it finds.
TEST(RegionSelfServeDeathTest, ASigbusOutsideTheRegionReachesTheProgramsHandler) {
  ZSM_REQUIRE_REGION();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        signal(SIGBUS, program_sigbus_handler);
        zsm_region* r = make_self_serving(64, 16);
        fill_page(page_at(r, 1), 1, 5);
        zsm_region_evict(r, page_at(r, 1), kPage);
        volatile unsigned char* outside = truncated_mapping();
        if (sigsetjmp(program_handler_jump, 1) == 0) (void)outside[0];
        else std::fprintf(stderr, "the program's handler ran; ");
        std::fprintf(stderr, "region page %s\n", page_mismatch(page_at(r, 1), 1, 5) == -1 ? "intact" : "WRONG");
        std::exit(3);
      },
      ::testing::ExitedWithCode(3), "the program's handler ran; region page intact");
}

// Killed by the SIGBUS, as without the region; under a sanitizer, whose own SIGBUS handler is
// the disposition the region found and chains to, its report and a failing exit.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ZSM_TEST_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ZSM_TEST_SANITIZER 1
#endif
#endif
bool stopped_as_without_the_region(int status) {
#ifdef ZSM_TEST_SANITIZER
  return (WIFEXITED(status) && WEXITSTATUS(status) != 0) || WIFSIGNALED(status);
#else
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS;
#endif
}

TEST(RegionSelfServeDeathTest, ASentSigbusStillStopsTheProcess) {
  ZSM_REQUIRE_REGION();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        zsm_region* r = make_self_serving(64, 16);
        (void)r;
        raise(SIGBUS);
        std::fprintf(stderr, "survived a SIGBUS\n");
        std::exit(0);
      },
      stopped_as_without_the_region, "");
}

TEST(RegionSelfServeDeathTest, ASigbusOutsideTheRegionStillStopsTheProcess) {
  ZSM_REQUIRE_REGION();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        zsm_region* r = make_self_serving(64, 16);
        (void)r;
        volatile unsigned char* outside = truncated_mapping();
        (void)outside[0];
      },
      stopped_as_without_the_region, "");
}

// A fault waits for room for a whole fault-around: with 64 pages of it over a 256-page budget,
// more than the budget's eighth, the evictor must still make that room (it once did not: a
// sequential pass hung).
TEST(RegionSelfServe, AFaultAroundLargerThanTheSlackIsServed) {
  ZSM_REQUIRE_REGION();
  zsm_region_options o{};
  o.budget_bytes = 256 * kPage;
  o.fault_around_pages = 64;
  o.flags = ZSM_REGION_SELF_SERVE;
  zsm_region* r = zsm_region_create(2048 * kPage, &o);
  ASSERT_NE(r, nullptr) << zsm_region_last_error();
  for (size_t p = 0; p < 2048; ++p) fill_page(page_at(r, p), p, 6);
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t p = 0; p < 2048; ++p) ASSERT_EQ(page_mismatch(page_at(r, p), p, 6), -1) << "page " << p;
  }
  EXPECT_GT(region_stats(r).fault_around_pages, 0u);
  zsm_region_destroy(r);
}

TEST(RegionSelfServe, ItExcludesOneHandlerAndZstd) {
  ZSM_REQUIRE_REGION();
  zsm_region_options o{};
  o.flags = ZSM_REGION_SELF_SERVE | ZSM_REGION_ONE_HANDLER;
  errno = 0;
  EXPECT_EQ(zsm_region_create(64 * kPage, &o), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(std::string(zsm_region_last_error()).find("exclude"), std::string::npos);
  o.flags = ZSM_REGION_SELF_SERVE;
  o.codec = ZSM_CODEC_ZSTD;
  errno = 0;
  EXPECT_EQ(zsm_region_create(64 * kPage, &o), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(std::string(zsm_region_last_error()).find("zstd"), std::string::npos);
}

}  // namespace
