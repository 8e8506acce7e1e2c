// tests/zsm/vm_source_runs_test.cpp: the default page source's runs (zsm/src/memory/vm_source.h),
// from which each zspage of a pool on it takes its pages, contiguous. Called directly through
// the core variant zsm::noprof (as copy_test does): a run's pages are adjacent, aligned and
// distinct from every other run's; a freed run serves the next run of its length and no
// other; a reservation's tail too short for a run is handed out as single pages, not lost;
// reservations smaller than a run refuse runs (without errno) but not pages; at the limit a
// single page comes out of a longer free run, whose rest serves as a shorter one; freed runs
// beyond `retain` go back to the OS and are reused before new pages.
#define ZSM_VARIANT_NS noprof
#include "memory/vm_source.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

namespace {

using zsm::noprof::VmSource;

constexpr size_t kPage = 4096;

struct VmDeleter {
  void operator()(VmSource* vm) const { delete vm; }
};
using VmPtr = std::unique_ptr<VmSource, VmDeleter>;

VmPtr make_source(size_t reserve, size_t limit, size_t retain) {
  return VmPtr(VmSource::create(kPage, reserve, limit, retain));
}

char* take_run(VmSource* vm, size_t n) { return static_cast<char*>(vm->alloc_run(n)); }

TEST(VmSourceRuns, ARunsPagesAreAdjacentAlignedAndItsOwn) {
  VmPtr vm = make_source(0, 0, 64);
  ASSERT_NE(vm, nullptr);
  std::vector<char*> runs;
  size_t pages = 0;
  for (size_t n = 1; n <= VmSource::kMaxRun; n++) {
    char* run = take_run(vm.get(), n);
    ASSERT_NE(run, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(run) % kPage, 0u) << n;
    std::memset(run, static_cast<int>(n), n * kPage);  // every page of the run is writable
    runs.push_back(run);
    pages += n;
  }
  for (size_t n = 1; n <= VmSource::kMaxRun; n++) {
    const char* run = runs[n - 1];
    for (size_t i = 0; i < n * kPage; i += 512)
      ASSERT_EQ(run[i], static_cast<char>(n)) << "run " << n << " byte " << i;
  }
  EXPECT_EQ(vm->pages_in_use(), pages);
  for (size_t n = 1; n <= VmSource::kMaxRun; n++) vm->free_run(runs[n - 1], n);
  EXPECT_EQ(vm->pages_in_use(), 0u);
  EXPECT_EQ(take_run(vm.get(), 0), nullptr);
  EXPECT_EQ(take_run(vm.get(), VmSource::kMaxRun + 1), nullptr);
}

TEST(VmSourceRuns, AFreedRunServesTheNextRunOfItsLengthOnly) {
  VmPtr vm = make_source(0, 0, 64);
  ASSERT_NE(vm, nullptr);
  char* four = take_run(vm.get(), 4);
  ASSERT_NE(four, nullptr);
  vm->free_run(four, 4);
  char* three = take_run(vm.get(), 3);
  ASSERT_NE(three, nullptr);
  EXPECT_NE(three, four) << "a run of 4 is not split for a run of 3";
  EXPECT_EQ(take_run(vm.get(), 4), four);
  vm->free_run(three, 3);
  vm->free_run(four, 4);
}

TEST(VmSourceRuns, ATailTooShortForARunIsHandedOutAsSinglePages) {
  VmPtr vm = make_source(10 * kPage, 0, 64);  // reservations of 10 pages
  ASSERT_NE(vm, nullptr);
  char* a = take_run(vm.get(), 4);
  char* b = take_run(vm.get(), 4);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(b, a + 4 * kPage);
  char* c = take_run(vm.get(), 4);  // two pages left: a new reservation
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c < a || c >= a + 10 * kPage);
  std::set<char*> singles = {static_cast<char*>(vm->alloc_page()),
                             static_cast<char*>(vm->alloc_page())};
  EXPECT_EQ(singles, (std::set<char*>{a + 8 * kPage, a + 9 * kPage}));
  EXPECT_EQ(vm->pages_in_use(), 14u);
  for (char* p : singles) vm->free_page(p);
  for (char* run : {a, b, c}) vm->free_run(run, 4);
  EXPECT_EQ(vm->pages_in_use(), 0u);
}

TEST(VmSourceRuns, ReservationsSmallerThanARunRefuseRunsButNotPages) {
  VmPtr vm = make_source(kPage, 0, 4);  // one-page reservations
  ASSERT_NE(vm, nullptr);
  errno = 0;
  EXPECT_EQ(take_run(vm.get(), 2), nullptr);
  EXPECT_EQ(errno, 0) << "a refused run is no error: the pool takes pages one by one";
  void* page = vm->alloc_page();
  ASSERT_NE(page, nullptr);
  vm->free_page(page);
}

TEST(VmSourceRuns, AtTheLimitASinglePageComesOutOfALongerFreeRun) {
  VmPtr vm = make_source(0, 8 * kPage, 16);
  ASSERT_NE(vm, nullptr);
  char* run = take_run(vm.get(), 8);
  ASSERT_NE(run, nullptr);
  errno = 0;
  EXPECT_EQ(vm->alloc_page(), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  vm->free_run(run, 8);
  EXPECT_EQ(vm->alloc_page(), run);
  EXPECT_EQ(take_run(vm.get(), 7), run + kPage) << "the rest serves as a run of 7";
  EXPECT_EQ(take_run(vm.get(), 8), nullptr);
  vm->free_page(run);
  vm->free_run(run + kPage, 7);
  EXPECT_EQ(vm->pages_in_use(), 0u);
}

TEST(VmSourceRuns, FreedRunsPastRetainGoBackToTheOSAndServeFirst) {
  VmPtr vm = make_source(0, 0, 8);
  ASSERT_NE(vm, nullptr);
  std::vector<char*> runs;
  for (int i = 0; i < 10; i++) {
    runs.push_back(take_run(vm.get(), 4));
    ASSERT_NE(runs.back(), nullptr);
    std::memset(runs.back(), 0x5a, 4 * kPage);
  }
  for (char* run : runs) vm->free_run(run, 4);
  EXPECT_LE(vm->pages_resident(), 8u);
  std::set<char*> again;
  for (int i = 0; i < 10; i++) again.insert(take_run(vm.get(), 4));
  EXPECT_EQ(again, std::set<char*>(runs.begin(), runs.end()))
      << "freed runs, released or not, serve before new pages";
  for (char* run : again) vm->free_run(run, 4);
}

}  // namespace
