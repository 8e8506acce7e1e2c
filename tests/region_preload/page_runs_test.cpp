// PageRuns, the preload library's allocator (tools/region_preload/page_runs.h), on a plain
// mapping: first fit, alignment, merging on release, growing and shrinking in place, pointers
// it did not hand out, and a random model test (no two allocations overlap, every page is
// free or in exactly one allocation); and parse_size (size_text.h), ZSM_REGION_BUDGET's parser.
#include "page_runs.h"
#include "size_text.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <map>
#include <random>
#include <vector>

namespace {

using zsm_preload::PageRuns;
constexpr size_t kPage = 4096;

class PageRunsTest : public ::testing::Test {
 protected:
  static constexpr size_t kPages = 1024;
  void SetUp() override {
    mem_ = mmap(nullptr, kPages * kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mem_, MAP_FAILED);
    ASSERT_TRUE(runs_.init(mem_, kPages, kPage));
  }
  void TearDown() override { munmap(mem_, kPages * kPage); }
  size_t page(const void* p) const {
    return static_cast<size_t>(static_cast<const char*>(p) - static_cast<const char*>(mem_)) / kPage;
  }

  void* mem_ = nullptr;
  PageRuns runs_;
};

TEST_F(PageRunsTest, FirstFitAndMergeOnRelease) {
  void* a = runs_.allocate(10, 1);
  void* b = runs_.allocate(20, 1);
  void* c = runs_.allocate(30, 1);
  EXPECT_EQ(page(a), 0u);
  EXPECT_EQ(page(b), 10u);
  EXPECT_EQ(page(c), 30u);
  EXPECT_EQ(runs_.pages_of(b), 20u);
  EXPECT_EQ(runs_.free_pages(), kPages - 60);
  PageRuns::Run freed = runs_.release(b);
  EXPECT_EQ(freed.first, 10u);
  EXPECT_EQ(freed.pages, 20u);
  EXPECT_EQ(runs_.free_runs(), 2u);
  EXPECT_EQ(page(runs_.allocate(15, 1)), 10u);  // first fit: the hole
  EXPECT_EQ(page(runs_.allocate(15, 1)), 60u);  // the hole has 5 left: after c
  runs_.release(a);
  runs_.release(c);
  EXPECT_EQ(runs_.free_runs(), 3u);  // [0,10) [25,60) [75,1024)
  EXPECT_EQ(runs_.free_pages(), kPages - 30);
}

TEST_F(PageRunsTest, EverythingFreedIsOneRunAgain) {
  std::vector<void*> all;
  while (void* p = runs_.allocate(7, 1)) all.push_back(p);
  EXPECT_EQ(all.size(), kPages / 7);
  for (size_t i = 0; i < all.size(); i += 2) runs_.release(all[i]);
  for (size_t i = 1; i < all.size(); i += 2) runs_.release(all[i]);
  EXPECT_EQ(runs_.free_runs(), 1u);
  EXPECT_EQ(runs_.free_pages(), kPages);
  EXPECT_EQ(page(runs_.allocate(kPages, 1)), 0u);
}

// munmap()'s semantics: a part of an allocation goes, the rest stays allocated.
TEST_F(PageRunsTest, UnmapFreesPartsOfAllocations) {
  void* a = runs_.allocate(10, 1);   // [0, 10)
  void* b = runs_.allocate(10, 1);   // [10, 20)
  runs_.unmap(static_cast<char*>(a) + 4 * kPage, 10);  // [4, 14): a's tail and b's head
  EXPECT_EQ(runs_.pages_of(a), 4u);
  EXPECT_EQ(runs_.pages_of(b), 0u) << "b now starts at page 14";
  EXPECT_EQ(runs_.pages_of(static_cast<char*>(a) + 14 * kPage), 6u);
  EXPECT_EQ(runs_.free_pages(), kPages - 10);
  runs_.unmap(static_cast<char*>(a) + 1 * kPage, 2);  // the middle of what is left of a
  EXPECT_EQ(runs_.pages_of(a), 1u);
  EXPECT_EQ(runs_.pages_of(static_cast<char*>(a) + 3 * kPage), 1u);
  runs_.unmap(a, kPages);  // everything, allocated or not
  EXPECT_EQ(runs_.free_pages(), kPages);
  EXPECT_EQ(runs_.free_runs(), 1u);
}

TEST_F(PageRunsTest, AlignmentLeavesTheGapFree) {
  runs_.allocate(1, 1);
  void* p = runs_.allocate(4, 64);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (64 * kPage), 0u);
  EXPECT_EQ(runs_.free_pages(), kPages - 5);
  EXPECT_NE(runs_.allocate(3, 1), nullptr);  // from the gap before p
}

TEST_F(PageRunsTest, TooLargeOrZeroIsNull) {
  EXPECT_EQ(runs_.allocate(kPages + 1, 1), nullptr);
  EXPECT_EQ(runs_.allocate(0, 1), nullptr);
  EXPECT_EQ(runs_.allocate(1, 0), nullptr);
  EXPECT_EQ(runs_.allocate(SIZE_MAX, 1), nullptr);  // no wrap-around past the range's end
  EXPECT_EQ(runs_.allocate(1, SIZE_MAX), nullptr);
  void* a = runs_.allocate(1, 1);
  EXPECT_FALSE(runs_.grow(a, SIZE_MAX));
  runs_.release(a);
  EXPECT_NE(runs_.allocate(kPages, 1), nullptr);
  EXPECT_EQ(runs_.allocate(1, 1), nullptr);
}

TEST_F(PageRunsTest, GrowInPlaceOnlyIntoFreePages) {
  void* a = runs_.allocate(10, 1);
  void* b = runs_.allocate(10, 1);
  EXPECT_FALSE(runs_.grow(a, 11));  // b follows
  EXPECT_TRUE(runs_.grow(b, 100));
  EXPECT_EQ(runs_.pages_of(b), 100u);
  EXPECT_EQ(page(runs_.allocate(1, 1)), 110u);
  EXPECT_TRUE(runs_.grow(b, 100));   // the same size: nothing to do
  EXPECT_FALSE(runs_.grow(b, 50));   // smaller is shrink()
}

TEST_F(PageRunsTest, ShrinkFreesTheTail) {
  void* a = runs_.allocate(100, 1);
  PageRuns::Run tail = runs_.shrink(a, 40);
  EXPECT_EQ(tail.first, 40u);
  EXPECT_EQ(tail.pages, 60u);
  EXPECT_EQ(runs_.pages_of(a), 40u);
  EXPECT_EQ(runs_.free_runs(), 1u);  // merged with the rest
  EXPECT_EQ(runs_.shrink(a, 40).pages, 0u);
  EXPECT_EQ(runs_.shrink(a, 0).pages, 0u);
}

// mapped(): every page in some allocation (munmap's and madvise's ENOMEM where not).
TEST_F(PageRunsTest, MappedIsEveryPageInAnAllocation) {
  char* a = static_cast<char*>(runs_.allocate(10, 1));
  char* b = static_cast<char*>(runs_.allocate(10, 1));
  EXPECT_TRUE(runs_.mapped(a, 20)) << "two allocations side by side";
  EXPECT_TRUE(runs_.mapped(a + 3 * kPage, 4)) << "inside one";
  EXPECT_TRUE(runs_.mapped(b + 9 * kPage, 1));
  EXPECT_FALSE(runs_.mapped(a, 21)) << "a free page after them";
  runs_.unmap(a + 4 * kPage, 2);
  EXPECT_FALSE(runs_.mapped(a, 10)) << "a hole unmapped inside";
  EXPECT_TRUE(runs_.mapped(a + 6 * kPage, 14));
  EXPECT_FALSE(runs_.mapped(b + 20 * kPage, 1));
}

// take_at(): MAP_FIXED's allocation at an exact place, over what was there.
TEST_F(PageRunsTest, TakeAtMapsAnExactPlaceOverWhatWasThere) {
  char* a = static_cast<char*>(runs_.allocate(10, 1));
  ASSERT_TRUE(runs_.take_at(a + 5 * kPage, 10));  // half over a, half over free pages
  EXPECT_EQ(runs_.pages_of(a), 5u) << "what stays of a";
  EXPECT_EQ(runs_.pages_of(a + 5 * kPage), 10u);
  EXPECT_TRUE(runs_.mapped(a, 15));
  EXPECT_EQ(runs_.free_pages(), kPages - 15);
  EXPECT_EQ(page(runs_.allocate(3, 1)), 15u) << "first fit after it";
  EXPECT_FALSE(runs_.take_at(a + (kPages - 2) * kPage, 5)) << "past the range";
}

TEST_F(PageRunsTest, PointersItDidNotHandOut) {
  char* a = static_cast<char*>(runs_.allocate(10, 1));
  EXPECT_EQ(runs_.pages_of(a + 1), 0u);
  EXPECT_EQ(runs_.pages_of(a + kPage), 0u);
  EXPECT_EQ(runs_.release(a + kPage).pages, 0u);
  EXPECT_EQ(runs_.release(a + 11 * kPage).pages, 0u);  // a free page
  int outside = 0;
  EXPECT_FALSE(runs_.contains(&outside));
  EXPECT_EQ(runs_.pages_of(&outside), 0u);
  EXPECT_EQ(runs_.release(&outside).pages, 0u);
  EXPECT_EQ(runs_.release(a).pages, 10u);
  EXPECT_EQ(runs_.release(a).pages, 0u);  // a second free
}

TEST(PageRunsInit, BadArguments) {
  PageRuns runs;
  EXPECT_FALSE(runs.init(reinterpret_cast<void*>(4097), 10, kPage));
  EXPECT_FALSE(runs.init(reinterpret_cast<void*>(8192), 10, 3000));
  EXPECT_FALSE(runs.init(reinterpret_cast<void*>(8192), 0, kPage));
}

// Random allocations, frees, grows and shrinks against a map of what is handed out.
TEST_F(PageRunsTest, ModelOfRandomCalls) {
  std::mt19937_64 rng(7);
  std::map<size_t, size_t> live;  // first page -> pages
  for (int step = 0; step < 20000; step++) {
    const unsigned op = rng() % 4;
    if (op == 0 || live.empty()) {
      const size_t pages = 1 + rng() % 40, align = size_t{1} << (rng() % 4);
      if (void* p = runs_.allocate(pages, align)) {
        ASSERT_EQ(page(p) % align, 0u);
        live[page(p)] = pages;
      }
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      void* p = runs_.address(it->first);
      if (op == 1) {
        ASSERT_EQ(runs_.release(p).pages, it->second);
        live.erase(it);
      } else if (op == 2) {
        const size_t want = it->second + rng() % 8;
        if (runs_.grow(p, want)) it->second = want;
      } else if (it->second > 1) {
        const size_t want = 1 + rng() % (it->second - 1);
        ASSERT_EQ(runs_.shrink(p, want).pages, it->second - want);
        it->second = want;
      }
    }
    size_t used = 0, end = 0;
    for (auto [first, pages] : live) {
      ASSERT_GE(first, end) << "allocations overlap at step " << step;
      ASSERT_EQ(runs_.pages_of(runs_.address(first)), pages);
      end = first + pages;
      used += pages;
    }
    ASSERT_EQ(runs_.free_pages() + used, kPages);
  }
}

TEST(ParseSize, Accepts) {
  size_t v = 0;
  EXPECT_TRUE(zsm_preload::parse_size("0", &v));
  EXPECT_EQ(v, 0u);
  EXPECT_TRUE(zsm_preload::parse_size("4096", &v));
  EXPECT_EQ(v, 4096u);
  EXPECT_TRUE(zsm_preload::parse_size("4K", &v));
  EXPECT_EQ(v, 4096u);
  EXPECT_TRUE(zsm_preload::parse_size("64m", &v));
  EXPECT_EQ(v, size_t{64} << 20);
  EXPECT_TRUE(zsm_preload::parse_size("2G", &v));
  EXPECT_EQ(v, size_t{2} << 30);
}

TEST(ParseSize, Rejects) {
  size_t v = 123;
  for (const char* bad : {"", "M", "-1", "+5", " 5", "5 ", "5MB", "5T", "1.5G", "abc",
                          "99999999999999999999", "17179869184G"}) {
    EXPECT_FALSE(zsm_preload::parse_size(bad, &v)) << bad;
    EXPECT_EQ(v, 123u) << bad;
  }
  EXPECT_FALSE(zsm_preload::parse_size(nullptr, &v));
}

}  // namespace
