// tests/zsm/profiling_test.cpp: allocation profiling (ZSM_PROFILING). The accounting must be
// exact: after a randomized run (a workload, workload.h) of stores, mallocs, overwrites, frees and compactions, each
// call site's counters and each class's equal what the test tracked itself; objects stored
// while profiling was off are never taken off, whenever they are freed; threads updating one
// site add up; the allocinfo report lists the sites, most bytes first, in /proc/allocinfo
// form. (Built without ZSM_PROFILING: profiling_off_test.cpp.)
#include <zsm/zsm.hpp>
#include <zsm/zsmalloc.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"
#include "workload.h"

namespace {

using zsm_test::Check;
using zsm_test::Needs;
using zsm_test::Rng;
using zsm_test::Workload;
using zsm_test::make_pattern;
using zsm_test::seed_of;

// Profiling on for the test's duration; pools with 4 shards so frees cross shards.
class Profiling : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(zs_alloc_profiling_set(1), 0);
    zs_pool_config cfg{};
    cfg.nr_shards = 4;
    pool_ = zs_create_pool_ex("prof", &cfg);
    ASSERT_NE(pool_, nullptr);
  }
  void TearDown() override {
    zs_alloc_profiling_set(0);
    zs_destroy_pool(pool_);
  }

  // Per-class profiled objects and bytes, summed over the distinct classes, by class size.
  std::map<unsigned, std::pair<unsigned long, unsigned long>> class_counters() {
    std::map<unsigned, std::pair<unsigned long, unsigned long>> out;
    for (unsigned i = 0; i < zs_class_count(pool_); i++) {
      struct zs_class_stats st{};
      if (zs_class_stats(pool_, i, &st) != 1) continue;
      if (st.prof_objs != 0 || st.prof_bytes != 0) out[st.size] = {st.prof_objs, st.prof_bytes};
    }
    return out;
  }

  zs_pool* pool_ = nullptr;
};

struct Tracked {
  unsigned long handle;
  size_t size;
  int site;        // index into the test's tags
  bool counted;    // stored while profiling was on
};

// The objects a profiled run stored, at three call sites.
struct ProfiledRun {
  zs_pool* pool;
  zs_alloc_tag* tags;
  std::vector<Tracked> live;

  size_t live_size() const { return live.size(); }

  Check flip_profiling(Rng& rng) {
    zs_alloc_profiling_set(static_cast<int>(rng() % 2));
    return ::testing::AssertionSuccess();
  }
  Check compact(Rng&) {
    zs_compact(pool);
    return ::testing::AssertionSuccess();
  }
  Check free(Rng& rng) {
    const size_t k = rng() % live.size();
    zs_free(pool, live[k].handle);
    live[k] = live.back();
    live.pop_back();
    return ::testing::AssertionSuccess();
  }
  // In place: changes no counter.
  Check overwrite(Rng& rng) {
    const Tracked& t = live[rng() % live.size()];
    std::vector<uint8_t> bytes = make_pattern(t.size, seed_of(t.handle, t.size) + 1);
    zs_obj_write(pool, t.handle, bytes.data(), t.size);
    return ::testing::AssertionSuccess();
  }
  // zs_store_tagged or zs_malloc_tagged of 1..4096 bytes at a random site.
  Check store(Rng& rng) {
    const size_t size = 1 + rng() % 4096;
    const int site = static_cast<int>(rng() % 3);
    const bool on = zs_alloc_profiling_enabled() == 1;
    unsigned long h;
    if (rng() % 2) {
      std::vector<uint8_t> bytes = make_pattern(size, size);
      h = zs_store_tagged(pool, bytes.data(), size, &tags[site]);
    } else {
      h = zs_malloc_tagged(pool, size, &tags[site]);
    }
    if (h == 0) return ::testing::AssertionFailure() << "a tagged store of " << size << " failed";
    live.push_back({h, size, site, on});
    return ::testing::AssertionSuccess();
  }
};

TEST_F(Profiling, RandomizedAccountingIsExact) {
  static zs_alloc_tag tags[3] = {{__FILE__, "site0", 1, 0, 0, 0, nullptr},
                                 {__FILE__, "site1", 2, 0, 0, 0, nullptr},
                                 {__FILE__, "site2", 3, 0, 0, 0, nullptr}};
  ProfiledRun run{pool_, tags, {}};
  Workload<ProfiledRun> mix(run, 11);
  mix.op("flip profiling", 2, &ProfiledRun::flip_profiling)  // mid-run
      .op("compact", 1, &ProfiledRun::compact)
      .op("free", 37, &ProfiledRun::free, Needs::a_live_object)
      .op("overwrite", 5, &ProfiledRun::overwrite, Needs::a_live_object)
      .op("store", 55, &ProfiledRun::store, Needs::room);
  ASSERT_TRUE(mix.run(30000));
  const std::vector<Tracked>& live = run.live;
  zs_compact(pool_);
  unsigned long bytes[3] = {}, calls[3] = {};
  std::map<unsigned, std::pair<unsigned long, unsigned long>> by_class;
  for (const Tracked& t : live) {
    if (!t.counted) continue;
    bytes[t.site] += t.size;
    calls[t.site]++;
    struct zs_class_stats st{};
    // The class serving a request holds its header too (none for huge objects).
    unsigned slot = static_cast<unsigned>(std::min<size_t>(t.size + ZS_HANDLE_SIZE, 4096));
    zs_class_stats(pool_, zs_lookup_class_index(pool_, slot), &st);
    by_class[st.size].first++;
    by_class[st.size].second += t.size;
  }
  for (int s = 0; s < 3; s++) {
    EXPECT_EQ(tags[s].bytes, bytes[s]) << "site " << s;
    EXPECT_EQ(tags[s].calls, calls[s]) << "site " << s;
  }
  EXPECT_EQ(class_counters(), by_class);
  EXPECT_EQ(zs_check_pool(pool_, stderr), 0);
  for (const Tracked& t : live) zs_free(pool_, t.handle);
  for (int s = 0; s < 3; s++) {
    EXPECT_EQ(tags[s].bytes, 0u);
    EXPECT_EQ(tags[s].calls, 0u);
  }
  EXPECT_TRUE(class_counters().empty());
}

// Stored while off, freed while on: not taken off (the counters would wrap below zero).
TEST_F(Profiling, ObjectsStoredWhileOffAreNotTakenOff) {
  static zs_alloc_tag tag = {__FILE__, "off_then_on", 1, 0, 0, 0, nullptr};
  zs_alloc_profiling_set(0);
  unsigned long quiet = zs_malloc_tagged(pool_, 500, &tag);
  zs_alloc_profiling_set(1);
  unsigned long counted = zs_malloc_tagged(pool_, 300, &tag);
  EXPECT_EQ(tag.bytes, 300u);
  EXPECT_EQ(tag.calls, 1u);
  zs_free(pool_, quiet);
  EXPECT_EQ(tag.bytes, 300u);
  zs_alloc_profiling_set(0);
  zs_free(pool_, counted);  // stored while on, freed while off: taken off all the same
  EXPECT_EQ(tag.bytes, 0u);
  EXPECT_EQ(tag.calls, 0u);
}

// Per-thread caches: while profiling is on, stores and frees of counted objects take the
// locked path, where the counters are kept, even when the thread's cache holds slots; what
// the cache holds stays as it was.
TEST_F(Profiling, CountsStayExactBesideThreadCaches) {
  static zs_alloc_tag tag = {__FILE__, "cached", 1, 0, 0, 0, nullptr};
  auto cached_objs = [&] {
    struct zs_pool_stats s{};
    zs_pool_stats(pool_, &s);
    return s.cached_objs;
  };
  zs_alloc_profiling_set(0);
  std::vector<unsigned long> quiet;
  for (int i = 0; i < 100; i++) quiet.push_back(zs_malloc_tagged(pool_, 300, &tag));
  for (unsigned long h : quiet) zs_free(pool_, h);
  const unsigned long reserved = cached_objs();
  ASSERT_GT(reserved, 0u);
  zs_alloc_profiling_set(1);
  std::vector<unsigned long> counted;
  for (int i = 0; i < 50; i++) counted.push_back(zs_malloc_tagged(pool_, 300, &tag));
  EXPECT_EQ(tag.calls, 50u);
  EXPECT_EQ(tag.bytes, 50u * 300u);
  EXPECT_EQ(cached_objs(), reserved);  // not one store took a reserved slot
  for (unsigned long h : counted) zs_free(pool_, h);
  EXPECT_EQ(tag.calls, 0u);
  EXPECT_EQ(tag.bytes, 0u);
  EXPECT_EQ(cached_objs(), reserved);  // counted objects are not cached
  EXPECT_TRUE(class_counters().empty());
  EXPECT_EQ(zs_check_pool(pool_, stderr), 0);
}

// Objects keep their site when compaction moves them, across shards too.
TEST_F(Profiling, CompactionKeepsOwners) {
  static zs_alloc_tag a = {__FILE__, "a", 1, 0, 0, 0, nullptr};
  static zs_alloc_tag b = {__FILE__, "b", 2, 0, 0, 0, nullptr};
  std::vector<unsigned long> handles;
  for (int i = 0; i < 4000; i++) handles.push_back(zs_malloc_tagged(pool_, 200, i % 2 ? &a : &b));
  for (size_t i = 0; i < handles.size(); i += 4) zs_free(pool_, handles[i]);  // all from b
  for (size_t i = 2; i < handles.size(); i += 4) zs_free(pool_, handles[i]);  // all from b
  EXPECT_GT(zs_compact(pool_), 0u);
  EXPECT_EQ(a.calls, 2000u);
  EXPECT_EQ(b.calls, 0u);
  for (size_t i = 1; i < handles.size(); i += 2) zs_free(pool_, handles[i]);
  EXPECT_EQ(a.calls, 0u);
  EXPECT_EQ(a.bytes, 0u);
}

TEST_F(Profiling, ThreadsAddUp) {
  static zs_alloc_tag tag = {__FILE__, "threads", 1, 0, 0, 0, nullptr};
  constexpr int kThreads = 4, kObjects = 5000;
  std::vector<std::thread> threads;
  std::vector<std::vector<unsigned long>> kept(kThreads);
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kObjects; i++) {
        unsigned long h = zs_malloc_tagged(pool_, 64 + t, &tag);
        if (i % 2) kept[t].push_back(h);
        else zs_free(pool_, h);
      }
    });
  }
  std::thread compactor([&] {
    for (int i = 0; i < 50; i++) zs_compact(pool_);
  });
  for (auto& th : threads) th.join();
  compactor.join();
  unsigned long want_bytes = 0;
  for (int t = 0; t < kThreads; t++) want_bytes += kept[t].size() * (64 + t);
  EXPECT_EQ(tag.calls, static_cast<unsigned long>(kThreads * kObjects / 2));
  EXPECT_EQ(tag.bytes, want_bytes);
  for (auto& v : kept)
    for (unsigned long h : v) zs_free(pool_, h);
  EXPECT_EQ(tag.calls, 0u);
}

// The call-site macros: zs_store()/zs_malloc() tag the line they are written on.
TEST_F(Profiling, MacrosTagTheCallSite) {
  char data[100] = {};
  const unsigned line = __LINE__ + 1;
  unsigned long h = zs_store(pool_, data, sizeof(data));
  std::vector<zs_alloc_info> sites(zs_alloc_info_read(nullptr, 0) + 8);
  sites.resize(zs_alloc_info_read(sites.data(), sites.size()));
  bool found = false;
  for (const zs_alloc_info& s : sites) {
    if (s.line == line && std::string(s.file).find("profiling_test.cpp") != std::string::npos) {
      found = true;
      EXPECT_EQ(s.bytes, 100u);
      EXPECT_EQ(s.calls, 1u);
      EXPECT_STREQ(s.func, "TestBody");
    }
  }
  EXPECT_TRUE(found);
  for (size_t i = 1; i < sites.size(); i++) EXPECT_GE(sites[i - 1].bytes, sites[i].bytes);
  zs_free(pool_, h);
}

// The C++ API names a call site when given ZS_ALLOC_TAG_HERE(), and counts "<untagged>"
// otherwise.
TEST_F(Profiling, CxxApiTagsWhereAsked) {
  zsm::Pool pool("cxx");
  std::vector<std::byte> bytes(777);
  zs_alloc_info before[64];
  auto untagged_bytes = [&] {
    size_t n = std::min<size_t>(zs_alloc_info_read(before, 64), 64);
    for (size_t i = 0; i < n; i++)
      if (std::string(before[i].file) == "<untagged>") return before[i].bytes;
    return 0UL;
  };
  unsigned long untagged = untagged_bytes();
  zsm::Handle plain = pool.store(bytes);
  EXPECT_EQ(untagged_bytes(), untagged + 777);
  zsm::Handle named = pool.store(bytes, ZS_ALLOC_TAG_HERE());
  bool found = false;
  size_t n = std::min<size_t>(zs_alloc_info_read(before, 64), 64);
  for (size_t i = 0; i < n; i++)
    found |= std::string(before[i].file).ends_with("profiling_test.cpp") && before[i].bytes == 777;
  EXPECT_TRUE(found);
}

TEST_F(Profiling, AllocinfoReport) {
  static zs_alloc_tag tag = {"cache.c", "put_value", 42, 0, 0, 0, nullptr};
  unsigned long h = zs_malloc_tagged(pool_, 3000, &tag);
  char* text = nullptr;
  size_t len = 0;
  FILE* out = open_memstream(&text, &len);
  ASSERT_EQ(zs_print_allocinfo(out, 0), 0);
  std::fclose(out);
  std::string report(text, len);
  std::free(text);
  EXPECT_EQ(report.rfind("allocinfo - version: 1.0\n#     <size>  <calls> <tag info>\n", 0), 0u);
  EXPECT_NE(report.find("        3000        1 cache.c:42 func:put_value\n"), std::string::npos)
      << report;
  zs_free(pool_, h);
  EXPECT_EQ(zs_print_allocinfo(nullptr, 0), -1);
}

}  // namespace
