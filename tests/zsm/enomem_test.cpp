// tests/zsm/enomem_test.cpp: running out of pages. A page source that fails from (or only at) the
// N-th page makes a burst of stores fail with ENOMEM: earlier objects stay intact, the half-built
// zspage is given back (pages in use == zs_get_total_pages), and the pool works again once pages
// return. The same for the pool's max_pages limit. Destroying a pool returns every page.
#include "test_support.h"

#include <memory>
#include <string>
#include <thread>
#include <tuple>

namespace {

using namespace zsm_test;

// Sizes cycled through by a burst: 1-page (24, 4000 huge), 2-page (1160), 5-page (776) and
// 8-page (3624) zspages, so the failing page lands at every position of a chain.
const size_t kBurstSizes[] = {24, 776, 3624, 4000, 1160, 300, 3624, 2000};

struct Stored {
  unsigned long h;
  std::vector<uint8_t> bytes;
};

// Store until a store fails (or `limit` stores). Returns the errno of the failure, 0 if none.
int store_until_failure(zs_pool* pool, std::vector<Stored>& out, bool use_malloc, size_t limit = 20000) {
  for (size_t i = 0; i < limit; ++i) {
    const size_t size = kBurstSizes[i % (sizeof kBurstSizes / sizeof kBurstSizes[0])];
    std::vector<uint8_t> bytes = make_pattern(size, i * 7919 + size);
    errno = 0;
    unsigned long h;
    if (use_malloc) {
      h = zs_malloc(pool, size);
      if (h != 0) zs_obj_write(pool, h, bytes.data(), size);
    } else {
      h = zs_store(pool, bytes.data(), size);
    }
    if (h == 0) return errno == 0 ? -1 : errno;
    out.push_back({h, std::move(bytes)});
  }
  return 0;
}

::testing::AssertionResult all_intact(zs_pool* pool, const std::vector<Stored>& objs) {
  for (const Stored& s : objs) {
    auto r = check_object(pool, s.h, s.bytes);
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

// A pool of several shards without caches, at its limit: a store finds the free slot another
// thread's free left in that thread's shard. A thread stores into its own shard, given on its
// first call into a pool with caches (and 64 shards give every thread alive at once a shard
// of its own); a thread that never used one stores into shard 0.
class ShardsAtTheLimit : public ::testing::TestWithParam<unsigned> {};

TEST_P(ShardsAtTheLimit, AStoreTakesAFreeSlotOfAnotherShard) {
  zs_pool_config cfg{};
  cfg.nr_shards = GetParam();
  cfg.flags = ZS_POOL_NO_THREAD_CACHE;
  cfg.max_pages = 16;
  PoolPtr pool(zs_create_pool_ex("shards", &cfg));
  ASSERT_NE(pool, nullptr);
  const std::vector<uint8_t> bytes = make_pattern(1000, 1);
  std::vector<unsigned long> hs;
  std::thread([&] {
    PoolPtr cached(zs_create_pool("placement"));
    zs_free(cached.get(), zs_store(cached.get(), bytes.data(), 100));  // a shard of its own
    for (unsigned long h; (h = zs_store(pool.get(), bytes.data(), bytes.size())) != 0;)
      hs.push_back(h);
    zs_free(pool.get(), hs.back());  // a free slot in this thread's shard
    hs.pop_back();
  }).join();
  ASSERT_FALSE(hs.empty());
  unsigned long h = 0;
  int err = 0;
  std::thread([&] {  // on shard 0
    h = zs_store(pool.get(), bytes.data(), bytes.size());
    err = errno;
  }).join();
  EXPECT_NE(h, 0u) << "ENOMEM with a free slot of the class in another shard, errno " << err;
  if (h != 0) hs.push_back(h);
  for (unsigned long x : hs) {
    EXPECT_TRUE(check_object(pool.get(), x, bytes));
    zs_free(pool.get(), x);
  }
  EXPECT_TRUE(compact_and_check_empty(pool.get()));
}

INSTANTIATE_TEST_SUITE_P(Shards, ShardsAtTheLimit, ::testing::Values(2u, 64u));

// A pool on a page source that fails when told to, as `p`; GetParam() is the test's.
template <typename Param>
class OnFailingSource : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(src.ok());
    zs_pool_config cfg{};
    cfg.page_source = src.source();
    pool.reset(zs_create_pool_ex("enomem", &cfg));
    ASSERT_NE(pool, nullptr);
    p = pool.get();
  }

  FailingPageSource src;
  PoolPtr pool;
  zs_pool* p = nullptr;
};

// The N-th page and every later one fail until the source recovers; the stores go through
// zs_store() or through zs_malloc()+zs_obj_write().
class FailNthPageBurst : public OnFailingSource<std::tuple<unsigned, bool>> {};

TEST_P(FailNthPageBurst, FailsCleanlyAndPoolRecovers) {
  const auto [n, use_malloc] = GetParam();
  src.fail_from(n);
  std::vector<Stored> objs;
  int err = store_until_failure(p, objs, use_malloc);
  ASSERT_EQ(err, ENOMEM) << "the burst should end in ENOMEM";
  EXPECT_GE(src.calls(), n);
  EXPECT_EQ(static_cast<unsigned long>(src.in_use()), zs_get_total_pages(p))
      << "pages held by the source != pages the pool accounts for (leak from a half-built zspage?)";
  EXPECT_EQ(src.vm_in_use(), static_cast<size_t>(src.in_use()));
  EXPECT_LE(zs_get_total_pages(p), n - 1u);
  EXPECT_TRUE(all_intact(p, objs));
  EXPECT_TRUE(check_stats_consistent(p, objs.size()));

  // Failing again changes nothing. A huge object always needs a fresh page (nothing was
  // freed, so there is no spare).
  {
    std::vector<uint8_t> buf(4096, 0xab);
    errno = 0;
    EXPECT_EQ(zs_store(p, buf.data(), 4000), 0u);
    EXPECT_EQ(errno, ENOMEM);
    EXPECT_EQ(static_cast<unsigned long>(src.in_use()), zs_get_total_pages(p));
  }

  // Pages come back: the pool works again.
  src.recover();
  const size_t before = objs.size();
  ASSERT_EQ(store_until_failure(p, objs, use_malloc, 64), 0);
  EXPECT_EQ(objs.size(), before + 64);
  EXPECT_TRUE(all_intact(p, objs));
  EXPECT_EQ(static_cast<unsigned long>(src.in_use()), zs_get_total_pages(p));

  // Free half, fail again mid-burst, check, then free everything.
  for (size_t k = 0; k < objs.size(); k += 2) zs_free(p, objs[k].h);
  std::vector<Stored> kept;
  for (size_t k = 1; k < objs.size(); k += 2) kept.push_back(std::move(objs[k]));
  src.fail_from(1 + n % 5);
  std::vector<Stored> more;
  EXPECT_EQ(store_until_failure(p, more, use_malloc), ENOMEM);
  EXPECT_EQ(static_cast<unsigned long>(src.in_use()), zs_get_total_pages(p));
  EXPECT_TRUE(all_intact(p, kept));
  EXPECT_TRUE(all_intact(p, more));
  src.recover();
  for (const Stored& s : kept) zs_free(p, s.h);
  for (const Stored& s : more) zs_free(p, s.h);
  EXPECT_TRUE(compact_and_check_empty(p));
  EXPECT_EQ(src.in_use(), 0);
  pool.reset();
  EXPECT_EQ(src.in_use(), 0) << "pages not returned after zs_destroy_pool";
  EXPECT_EQ(src.vm_in_use(), 0u);
}

INSTANTIATE_TEST_SUITE_P(N, FailNthPageBurst,
                         ::testing::Combine(::testing::Range(1u, 41u), ::testing::Bool()),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_malloc" : "_store");
                         });

class FailNthPage : public OnFailingSource<unsigned> {};

// Only the N-th page fails: exactly one store fails, the next one succeeds.
TEST_P(FailNthPage, SingleFailureThenSuccess) {
  const unsigned n = GetParam();
  src.fail_once_at(n);
  std::vector<Stored> objs;
  int failures = 0;
  for (size_t i = 0; i < 200; ++i) {
    const size_t size = kBurstSizes[i % (sizeof kBurstSizes / sizeof kBurstSizes[0])];
    std::vector<uint8_t> bytes = make_pattern(size, i + 1000 * n);
    errno = 0;
    unsigned long h = zs_store(p, bytes.data(), size);
    if (h == 0) {
      EXPECT_EQ(errno, ENOMEM);
      ++failures;
      EXPECT_EQ(static_cast<unsigned long>(src.in_use()), zs_get_total_pages(p));
      continue;
    }
    objs.push_back({h, std::move(bytes)});
  }
  EXPECT_EQ(failures, 1);
  EXPECT_EQ(src.failures(), 1u);
  EXPECT_TRUE(all_intact(p, objs));
  EXPECT_EQ(static_cast<unsigned long>(src.in_use()), zs_get_total_pages(p));
  EXPECT_TRUE(check_stats_consistent(p, objs.size()));
  for (const Stored& s : objs) zs_free(p, s.h);
  EXPECT_TRUE(compact_and_check_empty(p));
  EXPECT_EQ(src.in_use(), 0);
}

INSTANTIATE_TEST_SUITE_P(N, FailNthPage, ::testing::Range(1u, 41u));

TEST(Enomem, FirstPageFailsOnEmptyPool) {
  FailingPageSource src;
  zs_pool_config cfg{};
  cfg.page_source = src.source();
  PoolPtr pool(zs_create_pool_ex("enomem", &cfg));
  ASSERT_NE(pool, nullptr);
  src.fail_from(1);
  uint8_t buf[4096] = {};
  for (size_t size : {size_t{1}, size_t{776}, size_t{3624}, size_t{4096}}) {
    errno = 0;
    EXPECT_EQ(zs_store(pool.get(), buf, size), 0u) << size;
    EXPECT_EQ(errno, ENOMEM) << size;
    errno = 0;
    EXPECT_EQ(zs_malloc(pool.get(), size), 0u) << size;
    EXPECT_EQ(errno, ENOMEM) << size;
  }
  EXPECT_EQ(zs_get_total_pages(pool.get()), 0u);
  EXPECT_EQ(src.in_use(), 0);
  EXPECT_TRUE(check_stats_consistent(pool.get(), 0));
}

// A pool destroyed with live objects gives every page back to its source.
TEST(Enomem, DestroyWithLiveObjectsReturnsEveryPage) {
  FailingPageSource src;
  zs_pool_config cfg{};
  cfg.page_source = src.source();
  zs_pool* p = zs_create_pool_ex("enomem", &cfg);
  ASSERT_NE(p, nullptr);
  std::vector<Stored> objs;
  ASSERT_EQ(store_until_failure(p, objs, false, 3000), 0);
  for (size_t k = 0; k < objs.size(); k += 3) zs_free(p, objs[k].h);  // leave spares and partial zspages
  EXPECT_GT(src.in_use(), 0);
  EXPECT_EQ(static_cast<unsigned long>(src.in_use()), zs_get_total_pages(p));
  zs_destroy_pool(p);
  EXPECT_EQ(src.in_use(), 0);
  EXPECT_EQ(src.vm_in_use(), 0u);
}

// ---- the pool's own memory limit ---------------------------------------------------------------

class MaxPages : public ::testing::TestWithParam<unsigned long> {};

TEST_P(MaxPages, LimitIsEnforced) {
  const unsigned long limit = GetParam();
  FailingPageSource src;
  zs_pool_config cfg{};
  cfg.max_pages = limit;
  cfg.page_source = src.source();
  PoolPtr pool(zs_create_pool_ex("limit", &cfg));
  ASSERT_NE(pool, nullptr);
  zs_pool* p = pool.get();
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<Stored> objs;
    // Record which size failed so the limit arithmetic can be checked.
    size_t failed_size = 0;
    int err = 0;
    for (size_t i = 0; i < 100000; ++i) {
      const size_t size = kBurstSizes[(i + round) % (sizeof kBurstSizes / sizeof kBurstSizes[0])];
      std::vector<uint8_t> bytes = make_pattern(size, i + 77 * round);
      errno = 0;
      unsigned long h = zs_store(p, bytes.data(), size);
      if (h == 0) {
        err = errno;
        failed_size = size;
        break;
      }
      objs.push_back({h, std::move(bytes)});
      ASSERT_LE(zs_get_total_pages(p), limit);
    }
    ASSERT_EQ(err, ENOMEM);
    const unsigned long total = zs_get_total_pages(p);
    EXPECT_LE(total, limit);
    // The failed store needed a new zspage that would not fit under the limit.
    EXPECT_GT(total + class_for_request(p, failed_size).pages_per_zspage, limit)
        << "store of " << failed_size << " refused with " << total << " of " << limit << " pages used";
    EXPECT_EQ(static_cast<unsigned long>(src.in_use()), total);
    EXPECT_TRUE(all_intact(p, objs));
    EXPECT_TRUE(check_stats_consistent(p, objs.size()));
    // Room again after freeing: the 1-page class fits as soon as a page is free.
    for (const Stored& s : objs) zs_free(p, s.h);
    zs_compact(p);
    EXPECT_EQ(zs_get_total_pages(p), 0u);
    unsigned long h = zs_malloc(p, 24);
    ASSERT_NE(h, 0u);
    zs_free(p, h);
  }
  EXPECT_TRUE(compact_and_check_empty(p));
}

INSTANTIATE_TEST_SUITE_P(Limits, MaxPages, ::testing::Values(1ul, 2ul, 5ul, 7ul, 8ul, 13ul, 64ul, 300ul));

// A class whose zspage is larger than the limit can never allocate.
TEST(MaxPagesLimit, ZspageLargerThanLimit) {
  zs_pool_config cfg{};
  cfg.max_pages = 4;
  PoolPtr pool(zs_create_pool_ex("limit", &cfg));
  ASSERT_NE(pool, nullptr);
  ASSERT_EQ(class_for_request(pool.get(), 3624).pages_per_zspage, 8u);
  errno = 0;
  EXPECT_EQ(zs_malloc(pool.get(), 3624), 0u);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(zs_get_total_pages(pool.get()), 0u);
  // Smaller zspages still fit.
  unsigned long h = zs_malloc(pool.get(), 4000);  // huge: 1 page
  EXPECT_NE(h, 0u);
  zs_free(pool.get(), h);
  EXPECT_TRUE(compact_and_check_empty(pool.get()));
}

// Spare empty zspages do not count against the limit when it bites: a pool at its limit
// frees them and allocates instead of failing.
TEST(MaxPagesLimit, SparesAreFreedBeforeFailing) {
  zs_pool_config cfg{};
  cfg.max_pages = 8;
  PoolPtr pool(zs_create_pool_ex("limit", &cfg));
  ASSERT_NE(pool, nullptr);
  // Class 3624 has 8-page zspages: one fills the limit, and stays as a spare when emptied.
  unsigned long h = zs_malloc(pool.get(), 3624);
  ASSERT_NE(h, 0u);
  zs_free(pool.get(), h);
  ASSERT_EQ(zs_get_total_pages(pool.get()), 8u) << "the emptied zspage should be kept as a spare";
  // A 1-page huge object needs a page the spare holds.
  std::vector<uint8_t> bytes = make_pattern(4000, 17);
  errno = 0;
  h = zs_store(pool.get(), bytes.data(), bytes.size());
  ASSERT_NE(h, 0u) << "errno " << errno;
  EXPECT_EQ(zs_get_total_pages(pool.get()), 1u);
  EXPECT_TRUE(check_object(pool.get(), h, bytes));
  zs_free(pool.get(), h);
  EXPECT_TRUE(compact_and_check_empty(pool.get()));
}

// A limit far above anything reachable behaves as no limit, whatever its value (the pool's
// own page source must not size itself from an overflowing max_pages * page_size).
TEST(MaxPagesLimit, UnreachableLimitIsNoLimit) {
  for (unsigned long limit : {~0ul, (1ul << 52) + 1, (1ul << 50) + 3, 1ul << 40}) {
    SCOPED_TRACE("max_pages " + std::to_string(limit));
    zs_pool_config cfg{};
    cfg.max_pages = limit;
    PoolPtr pool(zs_create_pool_ex("limit", &cfg));
    ASSERT_NE(pool, nullptr);
    std::vector<unsigned long> hs;
    for (int i = 0; i < 200; ++i) {
      errno = 0;
      unsigned long h = zs_malloc(pool.get(), 1 + (i * 613) % 4096);
      ASSERT_NE(h, 0u) << "zs_malloc #" << i << " failed, errno " << errno << ", "
                       << zs_get_total_pages(pool.get()) << " pages held";
      hs.push_back(h);
    }
    for (unsigned long h : hs) zs_free(pool.get(), h);
    EXPECT_TRUE(compact_and_check_empty(pool.get()));
  }
}

}  // namespace
