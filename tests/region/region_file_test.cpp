// The region's backing file: the pool's overflow goes there and comes back intact, the path
// is the user's (the cold tier's rules), a full file keeps pages in the pool, a discarded or
// rewritten page gives its sectors back, and a copy changed on disk is never served.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "region_support.h"

namespace {

namespace fs = std::filesystem;
using zsm_test::fill_page;
using zsm_test::kPage;
using zsm_test::page_mismatch;
using zsm_test::region_stats;
using zsm_test::settled_stats;

constexpr size_t kPages = 2048;           // 8 MiB of region
constexpr size_t kBudgetPages = 64;       // 256 KiB resident
constexpr size_t kPoolBudget = 64 << 10;  // 64 KiB of pool: the rest must go to the file


struct RegionFile : ::testing::Test {
  void SetUp() override { ZSM_REQUIRE_REGION(); }
  void TearDown() override { zsm_region_destroy(r); }
  void make(const std::string& file, uint64_t capacity = 0) {
    zsm_region_options o{};
    o.budget_bytes = kBudgetPages * kPage;
    o.compressed_budget_bytes = kPoolBudget;
    o.backing_file = file.c_str();
    o.backing_file_capacity = capacity;
    r = zsm_region_create(kPages * kPage, &o);
    ASSERT_NE(r, nullptr) << zsm_region_last_error();
    base = static_cast<unsigned char*>(zsm_region_base(r));
  }
  unsigned char* at(size_t p) const { return base + p * kPage; }
  void fill_all(uint64_t version) {
    for (size_t p = 0; p < kPages; ++p) fill_page(at(p), p, version);
  }
  void expect_all(uint64_t version) {
    for (size_t p = 0; p < kPages; ++p) ASSERT_EQ(page_mismatch(at(p), p, version), -1) << "page " << p;
  }
  zsm_region* r = nullptr;
  unsigned char* base = nullptr;
  zsm_test::TempDir dir{"zsm-region-file"};
};

TEST_F(RegionFile, ThePoolsOverflowGoesToTheFileAndComesBack) {
  make(dir.path);
  fill_all(1);
  auto s = region_stats(r);
  EXPECT_GT(s.written_back, kPages / 2) << "8 MiB of pages, 64 KiB of pool";
  EXPECT_LE(s.mem_used_total, kPoolBudget);
  EXPECT_GT(s.bd_bytes_on_file, 0u);
  EXPECT_LT(s.bd_bytes_on_file, kPages * kPage / 2) << "copies are kept compressed on file";
  expect_all(1);
  s = region_stats(r);
  EXPECT_GT(s.read_back, kPages / 2);
  EXPECT_LE(s.mem_used_total, kPoolBudget);
  fill_all(2);  // every copy on file is stale now, and its sectors reused
  expect_all(2);
  s = region_stats(r);
  EXPECT_LE(s.bd_bytes_on_file, s.stored_pages * kPage);
  EXPECT_EQ(dir.entries(), 0u) << "a directory gets an unnamed file";
}

TEST_F(RegionFile, IncompressiblePagesGoWholeAndComeBack) {
  make(dir.path);
  std::mt19937_64 rng(11);
  std::vector<uint64_t> want(kPages * kPage / 8);
  for (auto& w : want) w = rng();
  std::memcpy(base, want.data(), want.size() * 8);
  ASSERT_EQ(zsm_region_evict(r, base, kPages * kPage), 0);
  auto s = settled_stats(r);  // a page the evictor retired is counted in probation until its batch ends
  // Each page went whole to the pool or the file, but for a few a full pool left waiting in
  // probation for the evictor.
  EXPECT_EQ(s.huge_pages + s.probation_bytes / kPage, kPages);
  EXPECT_GT(s.written_back, kPages / 2);
  EXPECT_EQ(std::memcmp(base, want.data(), want.size() * 8), 0);
}

TEST_F(RegionFile, DiscardGivesTheFilesSectorsBack) {
  make(dir.path);
  fill_all(1);
  ASSERT_GT(region_stats(r).bd_bytes_on_file, 0u);
  ASSERT_EQ(zsm_region_discard(r, base, kPages * kPage), 0);
  auto s = region_stats(r);
  EXPECT_EQ(s.bd_bytes_on_file, 0u);
  EXPECT_EQ(s.stored_pages, 0u);
  for (size_t p = 0; p < kPages; p += 97) EXPECT_EQ(at(p)[100], 0);
}

// The pool holds what a full file cannot take, past its budget: the decompressed pages stay
// within theirs (until 9a93f81 the pool refused and the evictor stalled: resident memory grew
// past the budget, counted in over_budget_pages).
TEST_F(RegionFile, AFullFileKeepsPagesInThePoolAndLosesNothing) {
  make(dir.path, 64 << 10);  // room for about 64 KiB of copies
  fill_all(3);
  auto s = settled_stats(r);
  EXPECT_LE(s.bd_bytes_on_file, uint64_t{64} << 10);
  EXPECT_GT(s.bd_bytes_on_file, 0u);
  EXPECT_GT(s.mem_used_total, kPoolBudget) << "the pool holds the overflow";
  EXPECT_EQ(s.over_budget_pages, 0u);
  EXPECT_LE(s.resident_bytes + s.probation_bytes, s.budget_bytes);
  expect_all(3);
  s = settled_stats(r);
  EXPECT_EQ(s.over_budget_pages, 0u);
  EXPECT_LE(s.resident_bytes + s.probation_bytes, s.budget_bytes);
}

TEST_F(RegionFile, ANamedFileIsRemovedAtDestroyAndAnExistingOneIsRefused) {
  std::string path = dir.path + "/pages";
  make(path);
  fill_all(4);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  errno = 0;
  zsm_region_options o{};
  o.compressed_budget_bytes = kPoolBudget;
  o.backing_file = path.c_str();
  EXPECT_EQ(zsm_region_create(kPages * kPage, &o), nullptr) << "a second region on the same path";
  EXPECT_EQ(errno, EEXIST);
  EXPECT_NE(std::string(zsm_region_last_error()).find(path), std::string::npos) << zsm_region_last_error();
  expect_all(4);  // the first region's pages are untouched by the refusal
  zsm_region_destroy(r);
  r = nullptr;
  EXPECT_NE(::stat(path.c_str(), &st), 0) << "removed at destroy";

  std::string theirs = dir.path + "/theirs";
  int fd = ::open(theirs.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "keep", 4), 4);
  ::close(fd);
  o.backing_file = theirs.c_str();
  errno = 0;
  EXPECT_EQ(zsm_region_create(kPages * kPage, &o), nullptr);
  EXPECT_EQ(errno, EEXIST);
  ASSERT_EQ(::stat(theirs.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 4) << "an existing file is left as it was";
}

// A child of fork() that destroys its copy of the region (a C++ object's destructor at exit,
// say) closes its descriptors only: the parent's file keeps its name and its pages.
TEST_F(RegionFile, AChildOfForkLeavesTheParentsFile) {
  std::string path = dir.path + "/pages";
  make(path);
  fill_all(8);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    zsm_region_destroy(r);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << "the child removed the parent's file";
  expect_all(8);
}

// A copy changed on disk is never installed as the page: the checksum stops the process, with
// a message, as the kernel kills a process whose swapped-out page cannot be read.
TEST_F(RegionFile, ACopyChangedOnDiskIsNeverServed) {
  // The default ("fast") style forks here, with no region made yet: the child makes its own
  // in this test's directory, which the parent removes after.
  std::string path = dir.path + "/pages";
  EXPECT_DEATH(
      {
        make(path);
        fill_all(5);
        int fd = ::open(path.c_str(), O_WRONLY);
        if (fd < 0) std::abort();
        std::vector<char> junk(1 << 20, 'x');
        if (::pwrite(fd, junk.data(), junk.size(), 0) != static_cast<ssize_t>(junk.size())) std::abort();
        ::close(fd);
        for (size_t p = 0; p < kPages; ++p) fill_page(at(p), p, page_mismatch(at(p), p, 5) == -1 ? 6 : 7);
      },
      "cannot be read back from the backing file");
}

}  // namespace
