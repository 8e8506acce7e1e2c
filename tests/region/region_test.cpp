// The region's C API and C++ class: round trips at 1/8 budget, zero, same-filled and
// incompressible pages, the range calls, clean re-eviction, statistics, bad input, fork, the
// user-mode-only edge and the message when userfaultfd is refused.
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zsm/region.hpp>

#include "region_support.h"

namespace {

using zsm_test::fill_page;
using zsm_test::kPage;
using zsm_test::kRetiringBytes;
using zsm_test::page_mismatch;
using zsm_test::read_from_pipe_into;
using zsm_test::region_stats;
using zsm_test::settled_stats;

struct RegionFixture : ::testing::Test {
  void SetUp() override { ZSM_REQUIRE_REGION(); }
  void TearDown() override { zsm_region_destroy(r); }
  void make(size_t pages, size_t budget_pages, zsm_region_options o = {}) {
    o.budget_bytes = budget_pages * kPage;
    o.flags |= mode_flags;
    r = zsm_region_create(pages * kPage, &o);
    ASSERT_NE(r, nullptr) << zsm_region_last_error();
    base = static_cast<unsigned char*>(zsm_region_base(r));
  }
  // Every page written with `version`, then evicted: all stored, none resident.
  void make_stored(size_t pages, size_t budget_pages, uint64_t version, zsm_region_options o = {}) {
    ASSERT_NO_FATAL_FAILURE(make(pages, budget_pages, o));
    for (size_t p = 0; p < pages; ++p) fill_page(at(p), p, version);
    ASSERT_EQ(zsm_region_evict(r, base, pages * kPage), 0);
  }
  unsigned char* at(size_t p) const { return base + p * kPage; }
  zsm_region* r = nullptr;
  unsigned char* base = nullptr;
  unsigned mode_flags = 0;  // RegionModes': how faults are served
};

// The fixture's tests in every way faults are served: handler threads (one pinned to each
// CPU), one handler, the SIGBUS mode, and user-mode faults only (what a user without
// privileges gets where vm.unprivileged_userfaultfd is 0).
struct RegionModes : RegionFixture, ::testing::WithParamInterface<unsigned> {
  void SetUp() override {
    RegionFixture::SetUp();
    mode_flags = GetParam();
  }
};

INSTANTIATE_TEST_SUITE_P(, RegionModes,
                         ::testing::Values(0u, unsigned{ZSM_REGION_ONE_HANDLER}, unsigned{ZSM_REGION_SELF_SERVE},
                                           unsigned{ZSM_REGION_USER_MODE_ONLY}),
                         [](const ::testing::TestParamInfo<unsigned>& info) {
                           switch (info.param) {
                             case ZSM_REGION_ONE_HANDLER: return std::string("OneHandler");
                             case ZSM_REGION_SELF_SERVE: return std::string("Sigbus");
                             case ZSM_REGION_USER_MODE_ONLY: return std::string("UserModeOnly");
                             default: return std::string("HandlerThreads");
                           }
                         });

TEST_P(RegionModes, RoundTripAtAnEighthOfTheBudget) {
  make(1024, 128);
  for (size_t p = 0; p < 1024; ++p) fill_page(at(p), p, 1);
  auto s = region_stats(r);
  EXPECT_LE(s.resident_bytes + s.probation_bytes, s.hard_limit_bytes + kRetiringBytes);
  s = settled_stats(r);
  EXPECT_LE(s.resident_bytes + s.probation_bytes, s.budget_bytes);
  EXPECT_GE(s.evictions, 1024u - 128u - s.hard_limit_bytes / kPage + s.budget_bytes / kPage);
  for (size_t p = 0; p < 1024; ++p) ASSERT_EQ(page_mismatch(at(p), p, 1), -1) << "page " << p;
  s = settled_stats(r);
  EXPECT_LE(s.resident_bytes + s.probation_bytes, s.budget_bytes);
  EXPECT_GE(s.refaults + s.fault_around_pages, 1024u - 128u);
  EXPECT_LT(s.compr_data_size, s.orig_data_size / 2) << "fill_page's pages compress well";
}

TEST_F(RegionFixture, OneHandlerServesEveryFaultToo) {
  zsm_region_options o{};
  o.flags = ZSM_REGION_ONE_HANDLER;
  make(1024, 128, o);
  for (size_t p = 0; p < 1024; ++p) fill_page(at(p), p, 2);
  for (size_t p = 0; p < 1024; ++p) ASSERT_EQ(page_mismatch(at(p), p, 2), -1) << "page " << p;
  auto s = settled_stats(r);
  EXPECT_GE(s.refaults + s.fault_around_pages + s.probation_faults, 1024u - 128u);
  EXPECT_LE(s.resident_bytes + s.probation_bytes, s.budget_bytes);
}

TEST_P(RegionModes, NeverWrittenPagesReadAsZerosAndCostNothing) {
  make(256, 16);
  for (size_t p = 0; p < 256; ++p) {
    for (size_t i = 0; i < kPage; i += 512) ASSERT_EQ(at(p)[i], 0);
  }
  // The evictor may be storing a page as this reads: evict the rest under each page's lock,
  // so every store has finished and counted before the statistics are read.
  ASSERT_EQ(zsm_region_evict(r, base, 256 * kPage), 0);
  auto s = region_stats(r);
  EXPECT_EQ(s.zero_faults, 256u);
  EXPECT_EQ(s.stored_pages, 256u);
  EXPECT_EQ(s.same_pages, 256u) << "only zero pages, kept as one word each";
  EXPECT_EQ(s.compr_data_size, 0u);
  EXPECT_EQ(s.mem_used_total, 0u);
}

TEST_P(RegionModes, SameFilledPagesAreOneWord) {
  make(64, 16);
  for (size_t p = 0; p < 64; ++p) {
    auto* w = reinterpret_cast<uint64_t*>(at(p));
    for (size_t i = 0; i < kPage / 8; ++i) w[i] = 0x0101010101010101ull * (p + 1);
  }
  ASSERT_EQ(zsm_region_evict(r, base, 64 * kPage), 0);
  auto s = region_stats(r);
  EXPECT_EQ(s.resident_bytes, 0u);
  EXPECT_EQ(s.same_pages, 64u);
  EXPECT_EQ(s.compr_data_size, 0u);
  for (size_t p = 0; p < 64; ++p) {
    auto* w = reinterpret_cast<uint64_t*>(at(p));
    for (size_t i = 0; i < kPage / 8; ++i) ASSERT_EQ(w[i], 0x0101010101010101ull * (p + 1));
  }
}

TEST_P(RegionModes, IncompressiblePagesAreKeptWhole) {
  make(64, 16);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> want(64 * kPage / 8);
  for (auto& w : want) w = rng();
  std::memcpy(base, want.data(), 64 * kPage);
  ASSERT_EQ(zsm_region_evict(r, base, 64 * kPage), 0);
  auto s = region_stats(r);
  EXPECT_EQ(s.huge_pages, 64u);
  EXPECT_EQ(s.compr_data_size, 64u * kPage);
  EXPECT_EQ(std::memcmp(base, want.data(), 64 * kPage), 0);
}

// At a budget the pages never press on: the evictor never runs, and only the calls move pages.
TEST_P(RegionModes, EvictKeepsContentsAndPrefetchAvoidsFaults) {
  make(64, 64);
  for (size_t p = 0; p < 32; ++p) fill_page(at(p), p, 2);
  ASSERT_EQ(zsm_region_evict(r, at(0), 32 * kPage), 0);
  EXPECT_EQ(region_stats(r).resident_bytes, 0u);
  ASSERT_EQ(zsm_region_prefetch(r, at(0), 16 * kPage), 0);
  auto before = region_stats(r);
  EXPECT_EQ(before.resident_bytes, 16u * kPage);
  for (size_t p = 0; p < 16; ++p) ASSERT_EQ(page_mismatch(at(p), p, 2), -1);
  EXPECT_EQ(region_stats(r).faults, before.faults) << "prefetched pages do not fault";
  for (size_t p = 16; p < 32; ++p) ASSERT_EQ(page_mismatch(at(p), p, 2), -1);
}

TEST_P(RegionModes, CleanPagesAreDroppedWithoutRecompressing) {
  make(64, 32);
  for (size_t p = 0; p < 8; ++p) fill_page(at(p), p, 3);
  ASSERT_EQ(zsm_region_evict(r, at(0), 8 * kPage), 0);
  for (size_t p = 0; p < 8; ++p) ASSERT_EQ(page_mismatch(at(p), p, 3), -1);  // read: clean
  auto before = region_stats(r);
  ASSERT_EQ(zsm_region_evict(r, at(0), 8 * kPage), 0);
  auto after = region_stats(r);
  EXPECT_EQ(after.clean_evictions - before.clean_evictions, 8u);
  EXPECT_EQ(after.evictions, before.evictions);
  // A write to a clean page takes a WP fault and makes it dirty: evicted by compressing again.
  for (size_t p = 0; p < 8; ++p) ASSERT_EQ(page_mismatch(at(p), p, 3), -1);
  fill_page(at(5), 5, 4);
  EXPECT_GE(region_stats(r).wp_faults, 1u);
  ASSERT_EQ(zsm_region_evict(r, at(0), 8 * kPage), 0);
  auto last = region_stats(r);
  EXPECT_EQ(last.evictions - after.evictions, 1u);
  EXPECT_EQ(last.clean_evictions - after.clean_evictions, 7u);
  EXPECT_EQ(page_mismatch(at(5), 5, 4), -1);
  EXPECT_EQ(page_mismatch(at(4), 4, 3), -1);
}

TEST_P(RegionModes, DiscardGivesZeros) {
  make(64, 16);
  for (size_t p = 0; p < 32; ++p) fill_page(at(p), p, 5);
  ASSERT_EQ(zsm_region_discard(r, at(0), 32 * kPage), 0);
  auto s = region_stats(r);
  EXPECT_EQ(s.resident_bytes, 0u);
  EXPECT_EQ(s.stored_pages, 0u);
  for (size_t p = 0; p < 32; ++p) {
    for (size_t i = 0; i < kPage; i += 256) ASSERT_EQ(at(p)[i], 0);
  }
}

TEST_P(RegionModes, PinnedPagesStayResidentAndNest) {
  make(256, 32);
  for (size_t p = 0; p < 8; ++p) fill_page(at(p), p, 6);
  ASSERT_EQ(zsm_region_pin(r, at(0), 8 * kPage), 0);
  ASSERT_EQ(zsm_region_pin(r, at(0), 4 * kPage), 0);
  EXPECT_EQ(region_stats(r).pinned_pages, 8u);
  ASSERT_EQ(zsm_region_evict(r, at(0), 8 * kPage), 0);
  for (size_t p = 8; p < 256; ++p) fill_page(at(p), p, 6);  // pressure: 8 x the budget
  auto before = region_stats(r);
  for (size_t p = 0; p < 8; ++p) ASSERT_EQ(page_mismatch(at(p), p, 6), -1);
  EXPECT_EQ(region_stats(r).faults, before.faults) << "pinned pages never fault";
  ASSERT_EQ(zsm_region_unpin(r, at(0), 8 * kPage), 0);
  EXPECT_EQ(region_stats(r).pinned_pages, 4u);
  ASSERT_EQ(zsm_region_unpin(r, at(0), 4 * kPage), 0);
  EXPECT_EQ(zsm_region_unpin(r, at(0), kPage), -EINVAL) << "not pinned";
  EXPECT_EQ(zsm_region_pin(r, at(0), 17 * kPage), -ENOMEM) << "more than half the budget";
  EXPECT_EQ(region_stats(r).pinned_pages, 0u);
  ASSERT_EQ(zsm_region_pin(r, at(0), 16 * kPage), 0) << "half the budget";
  EXPECT_EQ(zsm_region_pin(r, at(16), 2 * kPage), -ENOMEM) << "past half the budget";
  for (size_t p = 16; p < 31; ++p) {
    ASSERT_EQ(zsm_region_pin(r, at(p), 1), 0) << "a single page (a futex word) past half, page " << p;
  }
  EXPECT_EQ(zsm_region_pin(r, at(31), 1), -ENOMEM) << "one page stays for faults";
  EXPECT_EQ(region_stats(r).pinned_pages, 31u);
  for (size_t p = 40; p < 48; ++p) ASSERT_EQ(page_mismatch(at(p), p, 6), -1) << "faults served in the page left";
  for (size_t p = 16; p < 31; ++p) ASSERT_EQ(zsm_region_unpin(r, at(p), 1), 0);
  ASSERT_EQ(zsm_region_unpin(r, at(0), 16 * kPage), 0);
  EXPECT_EQ(region_stats(r).pinned_pages, 0u);
  for (size_t p = 0; p < 256; ++p) ASSERT_EQ(page_mismatch(at(p), p, 6), -1);
}

TEST_P(RegionModes, StatisticsAddUp) {
  make(512, 64);
  for (size_t p = 0; p < 512; p += 2) fill_page(at(p), p, 7);
  for (size_t p = 0; p < 512; p += 2) ASSERT_EQ(page_mismatch(at(p), p, 7), -1);
  auto s = region_stats(r);
  EXPECT_EQ(s.size_bytes, 512u * kPage);
  EXPECT_EQ(s.budget_bytes, 64u * kPage);
  EXPECT_LE(s.resident_bytes + s.probation_bytes, s.hard_limit_bytes + kRetiringBytes);
  EXPECT_EQ(s.orig_data_size, s.stored_pages * kPage);
  EXPECT_EQ(s.faults, s.zero_faults + s.refaults + s.probation_faults);
  EXPECT_EQ(s.zero_faults, 256u) << "each written page faulted once as never written";
  EXPECT_GE(s.mem_used_total, s.compr_data_size);
  EXPECT_GE(s.stored_pages, s.same_pages + s.huge_pages);
  EXPECT_EQ(s.written_back, 0u);
  EXPECT_EQ(s.io_pinned_skips, 0u);
  EXPECT_EQ(s.pages_move, s.pages_move == 1 ? 1u : 0u);
}

// Counters a fault changes are counted before the faulting thread runs again: resident and
// faults as it installs, stored as a write frees the copy.
TEST_P(RegionModes, AThreadsOwnFaultsAreCountedWhenItRunsAgain) {
  zsm_region_options o{};
  o.fault_around_pages = 1;
  for (int round = 0; round < 20; ++round) {  // a new region's first faults showed the lag most
    zsm_region_destroy(r);
    make(64, 64, o);  // the evictor never runs: every change below is this thread's
    for (size_t p = 0; p < 32; ++p) {
      fill_page(at(p), p, 18);
      auto s = region_stats(r);
      ASSERT_EQ(s.resident_bytes, (p + 1) * kPage) << "round " << round << ", page " << p;
      ASSERT_EQ(s.faults, p + 1);
    }
  }
  ASSERT_EQ(zsm_region_evict(r, base, 32 * kPage), 0);
  for (size_t p = 0; p < 32; ++p) {
    fill_page(at(p), p, 19);  // a write fault: the copy is freed
    auto s = region_stats(r);
    ASSERT_EQ(s.resident_bytes, (p + 1) * kPage) << "page " << p;
    ASSERT_EQ(s.stored_pages, 31 - p) << "page " << p;
  }
  for (size_t p = 0; p < 32; ++p) ASSERT_EQ(page_mismatch(at(p), p, 19), -1);
}

// Once the evictor sleeps with nothing owed, the counters stand still.
TEST_P(RegionModes, AnIdleEvictorsCountersStandStill) {
  make(256, 16);
  for (size_t p = 0; p < 256; ++p) fill_page(at(p), p, 20);
  auto s = settled_stats(r);
  ASSERT_EQ(s.evictor_idle, 1u);
  EXPECT_LE(s.resident_bytes + s.probation_bytes, s.budget_bytes);
  usleep(20'000);
  auto later = region_stats(r);
  EXPECT_EQ(later.evictor_idle, 1u);
  EXPECT_EQ(later.evictor_runs, s.evictor_runs);
  EXPECT_EQ(later.evictions, s.evictions);
  EXPECT_EQ(later.stored_pages, s.stored_pages);
  EXPECT_EQ(later.compr_data_size, s.compr_data_size);
  EXPECT_EQ(later.resident_bytes, s.resident_bytes);
  EXPECT_EQ(later.probation_bytes, s.probation_bytes);
  for (size_t p = 0; p < 256; ++p) ASSERT_EQ(page_mismatch(at(p), p, 20), -1);
}

TEST_P(RegionModes, FaultAroundInstallsTheNextPagesInOneBatch) {
  zsm_region_options o{};
  o.fault_around_pages = 8;
  make_stored(256, 64, 8, o);
  auto before = region_stats(r);
  for (size_t p = 0; p < 64; ++p) ASSERT_EQ(page_mismatch(at(p), p, 8), -1);
  auto after = region_stats(r);
  EXPECT_GT(after.fault_around_pages, before.fault_around_pages);
  EXPECT_LT(after.faults - before.faults, 64u / 2) << "most pages came in ahead of a fault";
}

// Under pressure a clean victim (read since its eviction: its copy is valid) is only dropped,
// a span of them in one call: it never enters probation, and it comes back from its copy.
TEST_P(RegionModes, CleanVictimsAreDroppedWithoutEnteringProbation) {
  make_stored(256, 64, 15);
  auto before = settled_stats(r);
  for (size_t p = 0; p < 256; ++p) ASSERT_EQ(page_mismatch(at(p), p, 15), -1);  // reads only
  auto s = settled_stats(r);
  EXPECT_EQ(s.probation_bytes, 0u);
  EXPECT_LE(s.resident_bytes, s.budget_bytes);
  EXPECT_GE(s.clean_evictions - before.clean_evictions, 256u - 64u);
  EXPECT_EQ(s.evictions, before.evictions) << "nothing compressed again";
  for (size_t p = 0; p < 256; ++p) ASSERT_EQ(page_mismatch(at(p), p, 15), -1) << "page " << p;
  EXPECT_EQ(region_stats(r).probation_faults, before.probation_faults);
}

// A batch takes its need in clean victims (victims past it refill probation, and a clean one
// would only be dropped): reads past the budget leave it between the high watermark and one
// batch below. Budget 64 pages: high watermark 60, a batch 4.
TEST_P(RegionModes, CleanVictimsAreDroppedOnlyAsFarAsTheBudgetNeeds) {
  zsm_region_options o{};
  o.fault_around_pages = 1;
  make_stored(256, 64, 17, o);
  for (size_t p = 0; p < 256; ++p) ASSERT_EQ(page_mismatch(at(p), p, 17), -1);
  auto s = settled_stats(r);
  EXPECT_GE(s.resident_bytes, 56u * kPage);
  EXPECT_LE(s.resident_bytes, 62u * kPage);
}

// Against the contract, the program unmaps pages inside the region: a drop of clean victims
// spanning one of them fails there, and the victims around it must keep their bytes.
TEST_P(RegionModes, PagesTheProgramUnmapsCostNoOtherPageItsBytes) {
  zsm_region_options o{};
  o.fault_around_pages = 1;  // a run would be installed into the unmapped page
  make_stored(1024, 256, 16, o);
  auto unmapped = [](size_t p) { return p % 37 == 10; };
  for (size_t p = 0; p < 1024; ++p) {
    if (unmapped(p)) {
      ASSERT_EQ(munmap(at(p), kPage), 0);
    }
  }
  for (int round = 0; round < 3; ++round) {
    for (size_t p = 0; p < 1024; ++p) {
      if (!unmapped(p)) {
        ASSERT_EQ(page_mismatch(at(p), p, 16), -1) << "page " << p << ", round " << round;
      }
    }
  }
  EXPECT_GT(region_stats(r).clean_evictions, 0u);
}

// Pressure moves CLOCK's victims to probation (unmapped, decompressed); a touch there is a
// minor fault, not a refault from the copy. Pages leave probation compressed.
TEST_P(RegionModes, ProbationServesRecentVictimsWithoutDecompressing) {
  make(256, 64);  // probation: 64 / 8 = 8 pages
  for (size_t p = 0; p < 100; ++p) fill_page(at(p), p, 14);
  auto s = settled_stats(r);
  EXPECT_GE(s.probation_bytes, 4u * kPage);
  EXPECT_LE(s.resident_bytes + s.probation_bytes, s.budget_bytes);
  // The hand took the lowest pages first: the last victims, in probation, are just below the
  // mapped ones, and a walk down meets them before any page it brings in pushes them out.
  for (size_t p = 100; p-- > 0;) ASSERT_EQ(page_mismatch(at(p), p, 14), -1);
  auto after = region_stats(r);
  EXPECT_GE(after.probation_faults, 4u);
  for (size_t p = 100; p < 256; ++p) fill_page(at(p), p, 14);
  for (size_t p = 0; p < 256; ++p) ASSERT_EQ(page_mismatch(at(p), p, 14), -1) << "page " << p;
  s = settled_stats(r);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_GT(s.refaults, 0u);
  EXPECT_LE(s.resident_bytes + s.probation_bytes, s.budget_bytes);
  ASSERT_EQ(zsm_region_discard(r, base, 256 * kPage), 0);
  s = region_stats(r);
  EXPECT_EQ(s.probation_bytes + s.resident_bytes + s.stored_pages, 0u);
}

// Aging: with a budget as large as the region, nothing is compressed for room; pages left
// untouched for the cold age are compressed anyway, pages read every few milliseconds stay,
// and every page keeps its bytes.
TEST_P(RegionModes, PagesLeftUntouchedForTheColdAgeAreCompressedWithinTheBudget) {
  zsm_region_options o{};
  o.cold_age_ms = 400;
  make(256, 256, o);
  constexpr size_t kWritten = 128, kHot = 16;
  for (size_t p = 0; p < kWritten; ++p) fill_page(at(p), p, 21);
  auto start = std::chrono::steady_clock::now();
  struct zsm_region_stats s = region_stats(r);
  while (s.cold_evictions < kWritten - kHot && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    for (size_t p = 0; p < kHot; ++p) ASSERT_EQ(page_mismatch(at(p), p, 21), -1) << "hot page " << p;
    usleep(5000);
    s = region_stats(r);
  }
  EXPECT_GE(s.cold_evictions, kWritten - kHot) << "in 20 s, of " << s.aged_pages << " pages aged";
  EXPECT_GE(s.stored_pages, kWritten - kHot);
  EXPECT_GT(s.aged_pages, 0u);
  EXPECT_EQ(s.budget_waits, 0u);
  // The hot pages were taken out to be aged, and came back at each touch: most are mapped.
  for (size_t p = 0; p < kHot; ++p) ASSERT_EQ(page_mismatch(at(p), p, 21), -1) << "hot page " << p;
  s = region_stats(r);
  EXPECT_GE(s.resident_bytes + s.probation_bytes, kHot * kPage / 2);
  const uint64_t stalled = s.stall_ns;
  for (size_t p = 0; p < kWritten; ++p) ASSERT_EQ(page_mismatch(at(p), p, 21), -1) << "page " << p;
  EXPECT_GT(region_stats(r).stall_ns, stalled) << "bringing the cold pages back is the program's stall";
}

// Aging's hand takes a page that keeps coming back out less and less often (on one turn in
// 2^heat): over a steady hot set, its faults in the second half of a run are a fraction of
// the first half's (without the heat, each hot page would come back every other turn), while
// the pages left alone are still found cold.
TEST_P(RegionModes, PagesThatKeepComingBackAreTakenOutLessAndLessOften) {
  zsm_region_options o{};
  o.cold_age_ms = 800;
  make(256, 256, o);
  constexpr size_t kHot = 32, kWritten = 128;
  for (size_t p = 0; p < kWritten; ++p) fill_page(at(p), p, 24);
  auto touch_hot_for = [&](std::chrono::milliseconds d) {
    const auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) {
      for (size_t p = 0; p < kHot; ++p) ASSERT_EQ(page_mismatch(at(p), p, 24), -1) << "hot page " << p;
      usleep(2000);
    }
  };
  touch_hot_for(std::chrono::seconds(3));
  const struct zsm_region_stats half = region_stats(r);
  touch_hot_for(std::chrono::seconds(3));
  const struct zsm_region_stats end = region_stats(r);
  const uint64_t first = half.probation_faults, second = end.probation_faults - half.probation_faults;
  EXPECT_GT(first, kHot) << "each hot page was taken out and came back";
  EXPECT_LE(2 * second, first) << "aged " << end.aged_pages << " pages";
  EXPECT_GE(end.cold_evictions, kWritten - kHot) << "the pages left alone are cold";
  for (size_t p = 0; p < kWritten; ++p) ASSERT_EQ(page_mismatch(at(p), p, 24), -1) << "page " << p;
}

// The steering: with the program reading its cold pages back again and again, promotions pass
// any target, and the cold age doubles away from them; left alone, the age shrinks toward
// its floor (min(start, 1 s)). The report runs on its own at its interval meanwhile.
TEST_P(RegionModes, TheColdAgeBacksOffWhilePromotionsPassTheTargetAndShrinksWhenThereAreNone) {
  static std::atomic<int> reports{0};
  zsm_region_options o{};
  o.cold_age_ms = 400;
  o.stall_target_ppm = 1;  // a millionth of the time: any promotion passes it
  o.report = [](void*) { reports.fetch_add(1); };
  o.report_every_ms = 100;
  reports = 0;
  make(256, 256, o);
  constexpr size_t kPages = 128;
  for (size_t p = 0; p < kPages; ++p) fill_page(at(p), p, 22);
  auto start = std::chrono::steady_clock::now();
  struct zsm_region_stats s = region_stats(r);
  uint64_t most_age = 0;
  while (most_age <= 400 && std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
    usleep(1'000'000);  // the pages go cold, then come back
    for (size_t p = 0; p < kPages; ++p) ASSERT_EQ(page_mismatch(at(p), p, 22), -1) << "page " << p;
    usleep(200'000);  // a steering period (a quarter of the age) sees the promotions
    s = region_stats(r);
    most_age = std::max(most_age, s.cold_age_ms);
  }
  EXPECT_GT(most_age, 400u) << "promotions " << s.promotion_stall_ns << " ns in " << s.refaults << " refaults";
  EXPECT_GT(s.promotion_stall_ns, 0u);
  EXPECT_LE(s.promotion_stall_ns, s.stall_ns);
  EXPECT_GE(reports.load(), 3) << "a report every 100 ms";
  zsm_region_destroy(r);

  o.cold_age_ms = 2000;
  o.stall_target_ppm = 100000;  // 10 %: nothing here reaches it
  make(256, 256, o);
  for (size_t p = 0; p < kPages; ++p) fill_page(at(p), p, 23);
  start = std::chrono::steady_clock::now();
  s = region_stats(r);
  while (s.cold_age_ms > 1000 && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    usleep(20000);
    s = region_stats(r);
  }
  EXPECT_EQ(s.cold_age_ms, 1000u) << "the floor: min(start, 1 s)";
  EXPECT_GT(s.held_byte_seconds, s.saved_byte_seconds);
  for (size_t p = 0; p < kPages; ++p) ASSERT_EQ(page_mismatch(at(p), p, 23), -1) << "page " << p;
}

// Aging puts a cold page that does not compress back in the region (g-swap stores nothing
// above about 73 % of a page): storing it would save little and cost a decompression at each
// touch. Pages that compress are stored as before, and every page keeps its bytes.
TEST_P(RegionModes, ColdPagesThatDoNotCompressStayResident) {
  zsm_region_options o{};
  o.cold_age_ms = 400;
  make(256, 256, o);
  constexpr size_t kRandom = 32, kPlain = 32;
  std::mt19937_64 rng(56);
  std::vector<uint64_t> noise(kRandom * kPage / sizeof(uint64_t));
  for (uint64_t& w : noise) w = rng();
  std::memcpy(at(0), noise.data(), kRandom * kPage);
  for (size_t p = kRandom; p < kRandom + kPlain; ++p) fill_page(at(p), p, 24);
  auto start = std::chrono::steady_clock::now();
  struct zsm_region_stats s = region_stats(r);
  while ((s.kept_incompressible < kRandom || s.cold_evictions < kPlain) &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    usleep(20000);
    s = region_stats(r);
  }
  EXPECT_GE(s.kept_incompressible, kRandom);
  EXPECT_GE(s.cold_evictions, kPlain);
  EXPECT_LE(s.stored_pages, kPlain) << "a page of noise was stored";
  EXPECT_EQ(std::memcmp(at(0), noise.data(), kRandom * kPage), 0);
  for (size_t p = kRandom; p < kRandom + kPlain; ++p) ASSERT_EQ(page_mismatch(at(p), p, 24), -1) << "page " << p;
}

// Without probation a victim passes through a slot only while the evictor compresses it.
TEST_P(RegionModes, WithoutProbationVictimsAreCompressedAtOnce) {
  zsm_region_options o{};
  o.probation_divisor = -1;
  make(128, 32, o);
  for (size_t p = 0; p < 64; ++p) fill_page(at(p), p, 15);
  auto s = settled_stats(r);
  EXPECT_LE(s.probation_bytes, 32u * kPage) << "at most one batch on its way to the pool";
  EXPECT_GE(s.evictions, 32u);
  for (size_t p = 0; p < 64; ++p) ASSERT_EQ(page_mismatch(at(p), p, 15), -1);
  s = region_stats(r);
  EXPECT_GT(s.refaults, s.probation_faults) << "pages come back from their copies";
}

TEST_P(RegionModes, ShrinkingTheBudgetEvictsAndKeepsContents) {
  make(512, 256);
  for (size_t p = 0; p < 256; ++p) fill_page(at(p), p, 16);
  ASSERT_EQ(zsm_region_set_budget(r, 32 * kPage), 0);
  auto s = settled_stats(r);
  EXPECT_EQ(s.budget_bytes, 32u * kPage);
  EXPECT_LE(s.resident_bytes + s.probation_bytes, s.budget_bytes);
  for (size_t p = 0; p < 256; ++p) ASSERT_EQ(page_mismatch(at(p), p, 16), -1);
  ASSERT_EQ(zsm_region_set_budget(r, 1024 * kPage), 0);
  EXPECT_EQ(region_stats(r).budget_bytes, 512u * kPage) << "at most the region";
}

// Resident memory between the evictor's stopping point and its wake point is within the budget:
// the evictor sleeps there, and setting the budget it has must not wait for it (it waited 100 s).
TEST_P(RegionModes, SettingTheBudgetReturnsWhereverResidentMemoryStands) {
  zsm_region_options o{};
  o.fault_around_pages = 1;
  make(256, 64, o);
  for (size_t p = 0; p < 96; ++p) {
    fill_page(at(p), p, 17);
    auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(zsm_region_set_budget(r, 64 * kPage), 0);
    ASSERT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "a hang at page " << p;
    EXPECT_LE(region_stats(r).resident_bytes, 64u * kPage);
  }
  for (size_t p = 0; p < 96; ++p) ASSERT_EQ(page_mismatch(at(p), p, 17), -1);
}

TEST(RegionBadInput, NullAndOutOfRangeAreEinvalAndChangeNothing) {
  ZSM_REQUIRE_REGION();
  EXPECT_EQ(zsm_region_base(nullptr), nullptr);
  EXPECT_EQ(zsm_region_size(nullptr), 0u);
  struct zsm_region_stats s {};
  EXPECT_EQ(zsm_region_stats(nullptr, &s), -EINVAL);
  int x = 0;
  EXPECT_EQ(zsm_region_evict(nullptr, &x, 1), -EINVAL);
  EXPECT_EQ(zsm_region_set_budget(nullptr, 1 << 20), -EINVAL);
  zsm_region_destroy(nullptr);

  zsm_region_options o{};
  o.budget_bytes = 16 * kPage;
  zsm_region* r = zsm_region_create(64 * kPage, &o);
  ASSERT_NE(r, nullptr);
  auto* base = static_cast<unsigned char*>(zsm_region_base(r));
  for (size_t p = 0; p < 64; ++p) fill_page(base + p * kPage, p, 9);
  EXPECT_EQ(zsm_region_stats(r, nullptr), -EINVAL);
  for (auto call : {zsm_region_prefetch, zsm_region_evict, zsm_region_discard, zsm_region_pin,
                    zsm_region_unpin}) {
    EXPECT_EQ(call(r, base - 1, 2), -EINVAL);
    EXPECT_EQ(call(r, base, 65 * kPage), -EINVAL);
    EXPECT_EQ(call(r, base + 64 * kPage, 1), -EINVAL);
    EXPECT_EQ(call(r, nullptr, kPage), -EINVAL);
    EXPECT_EQ(call(r, base + kPage, SIZE_MAX), -EINVAL);
    EXPECT_EQ(call(r, &x, 4), -EINVAL);
  }
  EXPECT_EQ(zsm_region_set_budget(r, 15 * kPage), -EINVAL);
  for (size_t p = 0; p < 64; ++p) ASSERT_EQ(page_mismatch(base + p * kPage, p, 9), -1);
  zsm_region_destroy(r);
}

// Each options struct is refused with EINVAL and a message.
TEST(RegionBadInput, BadOptionsAreRefusedWithAReason) {
  ZSM_REQUIRE_REGION();
  auto refused = [](size_t size, zsm_region_options o, int err) {
    errno = 0;
    zsm_region* r = zsm_region_create(size, &o);
    EXPECT_EQ(r, nullptr);
    EXPECT_EQ(errno, err);
    EXPECT_STRNE(zsm_region_last_error(), "");
    zsm_region_destroy(r);
  };
  zsm_region_options o{};
  refused(0, o, EINVAL);
  o.budget_bytes = 15 * kPage;
  refused(1 << 20, o, EINVAL);
  o = {};
  int bad_codec = 99;  // as C would store it: the C++ enum cannot hold it
  std::memcpy(&o.codec, &bad_codec, sizeof bad_codec);
  refused(1 << 20, o, EINVAL);
  o = {};
  o.codec = ZSM_CODEC_LZ4HC;
  o.level = 99;
  refused(1 << 20, o, EINVAL);
  o = {};
  o.fault_around_pages = 65;
  refused(1 << 20, o, EINVAL);
  o = {};
  o.flags = 0x80;
  refused(1 << 20, o, EINVAL);
  o = {};
  o.handler_spin_us = -2;
  refused(1 << 20, o, EINVAL);
  o = {};
  o.probation_divisor = 1;
  refused(1 << 20, o, EINVAL);
  o = {};
  o.cold_age_ms = 99;  // below a tick's least
  refused(1 << 20, o, EINVAL);
  o.cold_age_ms = 604800001;  // past a week
  refused(1 << 20, o, EINVAL);
  o.cold_age_ms = 1000;
  o.probation_divisor = -1;  // aging moves pages out through probation
  refused(1 << 20, o, EINVAL);
  o = {};
  o.stall_target_ppm = 2000;  // steers a cold age there is not
  refused(1 << 20, o, EINVAL);
  o.cold_age_ms = 1000;
  o.stall_target_ppm = 100001;  // past 10 %
  refused(1 << 20, o, EINVAL);
  o = {};
  o.report_every_ms = 1000;  // without a function
  refused(1 << 20, o, EINVAL);
  o.report = [](void*) {};
  o.report_every_ms = 99;
  refused(1 << 20, o, EINVAL);
  o = {};
  o.pool.chain_size = 99;
  refused(1 << 20, o, EINVAL);
  o = {};
  o.compressed_budget_bytes = 100;
  refused(1 << 20, o, EINVAL);
  o = {};
  o.backing_file = "/tmp";  // without the pool's budget past which pages go there
  refused(1 << 20, o, EINVAL);
  o.compressed_budget_bytes = 1 << 20;
  o.backing_file = "";
  refused(1 << 20, o, EINVAL);
  o.backing_file = "/tmp";
  o.backing_file_capacity = 100;
  refused(1 << 20, o, EINVAL);
  o = {};
  o.backing_file_capacity = 1 << 20;  // a capacity for no file
  refused(1 << 20, o, EINVAL);
  zsm_region* ok = zsm_region_create(1 << 20, nullptr);
  ASSERT_NE(ok, nullptr);
  EXPECT_STREQ(zsm_region_last_error(), "");
  zsm_region_destroy(ok);
}

TEST(RegionCpp, ThrowsWithTheReasonAndPinsForItsLifetime) {
  ZSM_REQUIRE_REGION();
  zsm_region_options bad{};
  bad.budget_bytes = 1;
  try {
    zsm::Region region(1 << 20, bad);
    FAIL() << "a budget of 1 byte was accepted";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), std::errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("budget_bytes"), std::string::npos) << e.what();
  }
  zsm::Region region(64 * kPage);
  auto* base = reinterpret_cast<unsigned char*>(region.data());
  fill_page(base, 0, 10);
  {
    zsm::Region::Pin pin(region, base, kPage);
    EXPECT_EQ(region.stats().pinned_pages, 1u);
  }
  EXPECT_EQ(region.stats().pinned_pages, 0u);
  region.evict(base, kPage);
  EXPECT_EQ(region.stats().resident_bytes, 0u);
  EXPECT_THROW(region.evict(base + 64 * kPage, 1), std::system_error);
  zsm::Region moved = std::move(region);
  EXPECT_EQ(page_mismatch(reinterpret_cast<unsigned char*>(moved.data()), 0, 10), -1);
}

// fork(): the child sees the parent's contents at the fork, evicted pages too, reads and writes
// them, and neither sees the other's later writes; the child's faults are served in the child.
TEST_P(RegionModes, ForkedChildHasItsOwnCopy) {
  make(256, 32);
  for (size_t p = 0; p < 256; ++p) fill_page(at(p), p, 11);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int bad = 0;
    for (size_t p = 0; p < 256; ++p) bad += page_mismatch(at(p), p, 11) != -1;
    for (size_t p = 0; p < 256; ++p) fill_page(at(p), p, 12);
    for (size_t p = 0; p < 256; ++p) bad += page_mismatch(at(p), p, 12) != -1;
    _exit(bad == 0 ? 0 : 1);
  }
  for (size_t p = 0; p < 256; p += 2) fill_page(at(p), p, 13);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child saw wrong bytes: " << status;
  for (size_t p = 0; p < 256; ++p) ASSERT_EQ(page_mismatch(at(p), p, p % 2 == 0 ? 13 : 11), -1) << "page " << p;
}

// A syscall's access to an evicted page: EFAULT with user-mode-only faults, served with
// pinning; served in kernel mode where the kernel grants it.
TEST_F(RegionFixture, UserModeOnlySyscallsGetEfaultUnlessPinned) {
  zsm_region_options o{};
  o.flags = ZSM_REGION_USER_MODE_ONLY;
  make(64, 16, o);
  EXPECT_EQ(region_stats(r).user_mode_only, 1u);
  fill_page(at(3), 3, 12);
  ASSERT_EQ(zsm_region_evict(r, at(3), kPage), 0);
  errno = 0;
  EXPECT_EQ(read_from_pipe_into(at(3), 100, 'z'), -1);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(page_mismatch(at(3), 3, 12), -1) << "the failed read changed nothing";
  ASSERT_EQ(zsm_region_evict(r, at(3), kPage), 0);
  ASSERT_EQ(zsm_region_pin(r, at(3), kPage), 0);
  EXPECT_EQ(read_from_pipe_into(at(3), 100, 'z'), 100);
  ASSERT_EQ(zsm_region_unpin(r, at(3), kPage), 0);
  EXPECT_EQ(at(3)[0], 'z');
  EXPECT_EQ(at(3)[99], 'z');
}

TEST_F(RegionFixture, KernelModeFaultsAreServedWhereGranted) {
  make(64, 16);
  if (region_stats(r).user_mode_only) GTEST_SKIP() << "the kernel grants user-mode faults only";
  fill_page(at(3), 3, 13);
  ASSERT_EQ(zsm_region_evict(r, at(3), kPage), 0);
  EXPECT_EQ(read_from_pipe_into(at(3) + 16, 100, 'z'), 100) << std::strerror(errno);
  EXPECT_EQ(at(3)[16], 'z');
  unsigned char want[kPage];
  fill_page(want, 3, 13);
  EXPECT_EQ(std::memcmp(at(3), want, 16), 0);
  EXPECT_EQ(std::memcmp(at(3) + 116, want + 116, kPage - 116), 0);
}

// With userfaultfd refused (a seccomp filter in a child: the syscall and every open fail
// with EPERM), creation fails with one line naming the sysctl and the device.
TEST(RegionUnavailable, CreationNamesTheSysctlAndTheDevice) {
  ZSM_REQUIRE_REGION();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_userfaultfd, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
    };
    sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) _exit(2);
    errno = 0;
    zsm_region* r = zsm_region_create(1 << 20, nullptr);
    std::string line = std::to_string(errno) + " " + zsm_region_last_error();
    ssize_t n = write(fds[1], line.data(), line.size());
    _exit(r == nullptr && n > 0 ? 0 : 1);
  }
  close(fds[1]);
  char buf[1024] = {};
  ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << " " << buf;
  ASSERT_GT(n, 0);
  std::string line(buf);
  EXPECT_EQ(line.rfind(std::to_string(EPERM) + " ", 0), 0u) << line;
  EXPECT_NE(line.find("vm.unprivileged_userfaultfd"), std::string::npos) << line;
  EXPECT_NE(line.find("/dev/userfaultfd"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line";
}

}  // namespace
