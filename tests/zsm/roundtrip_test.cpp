// tests/zsm/roundtrip_test.cpp: store and read back. Every size 1..4096 through zs_store() and
// through zs_malloc()+zs_obj_write(), byte-exact, including objects that span two pages (read
// into local_copy) and huge ones; the zspage layout decides which reads are copies: on every
// pool configuration of pool_configs.h. 16K and 64K page pools on a subset of sizes;
// zs_memcpy(), the public face of the pool's copy. Bad arguments, the error contract, are
// bad_input_test.cpp's.
#include "pool_configs.h"
#include "test_support.h"

#include <algorithm>

namespace {

using namespace zsm_test;

// Capacity the spec promises for a zs_malloc(size): class size - 8, or the page when huge.
size_t expected_capacity(zs_pool* pool, size_t size, size_t page_size) {
  if (size >= zs_huge_class_size(pool)) return page_size;
  return class_for_request(pool, size).size - ZS_HANDLE_SIZE;
}

// Each RoundTrip test runs on every pool configuration of pool_configs.h.
class RoundTrip : public PoolConfigFixture {};

TEST_P(RoundTrip, EverySizeThroughStore) {
  const size_t huge = zs_huge_class_size(pool_);
  ASSERT_EQ(huge, 3625u);
  std::vector<unsigned long> handles;
  size_t copied = 0, direct = 0;
  for (size_t size = 1; size <= 4096; ++size) {
    unsigned long h = store(size, size);
    ASSERT_NE(h, 0u) << "zs_store(" << size << ") failed, errno " << errno;
    handles.push_back(h);
    EXPECT_EQ(zs_obj_capacity(pool_, h), expected_capacity(pool_, size, 4096)) << size;
    ReadInfo info;
    ASSERT_TRUE(check_object(pool_, h, live_[h], 4096, &info)) << "size " << size;
    (info.copied ? copied : direct)++;
    if (size >= huge) {
      EXPECT_FALSE(info.copied) << "huge object of " << size << " bytes starts a page";
    }
  }
  std::cout << "[          ] 4096 sizes: " << copied << " reads copied (spanning), " << direct << " direct\n";
  EXPECT_GT(copied, 0u);
  EXPECT_GT(direct, 0u);
  EXPECT_TRUE(check_stats_consistent(pool_, live_.size()));

  // Every object again, now that all are stored; then overwrite each in place with a pattern
  // derived from its handle and size, and check them all once more.
  for (unsigned long h : handles) ASSERT_TRUE(check_object(pool_, h, live_[h]));
  for (unsigned long h : handles) {
    std::vector<uint8_t>& bytes = live_[h];
    fill_pattern(bytes.data(), bytes.size(), seed_of(h, bytes.size()));
    errno = 0;
    zs_obj_write(pool_, h, bytes.data(), bytes.size());
    EXPECT_EQ(errno, 0);
  }
  for (unsigned long h : handles) ASSERT_TRUE(check_object(pool_, h, live_[h]));
  // Free in an interleaved order so zspages empty out of order.
  for (size_t k = 0; k < handles.size(); k += 2) free_tracked(handles[k]);
  for (auto& [h, bytes] : live_) ASSERT_TRUE(check_object(pool_, h, bytes));
  EXPECT_TRUE(check_stats_consistent(pool_, live_.size()));
}

TEST_P(RoundTrip, EverySizeThroughMallocAndWrite) {
  size_t copied = 0, direct = 0;
  for (size_t size = 1; size <= 4096; ++size) {
    unsigned long h = zs_malloc(pool_, size);
    ASSERT_NE(h, 0u) << "zs_malloc(" << size << ") failed, errno " << errno;
    ASSERT_EQ(live_.count(h), 0u) << "handle handed out twice";
    std::vector<uint8_t> bytes = make_pattern(size, seed_of(h, size));
    errno = 0;
    zs_obj_write(pool_, h, bytes.data(), size);
    EXPECT_EQ(errno, 0);
    ReadInfo info;
    ASSERT_TRUE(check_object(pool_, h, bytes, 4096, &info)) << "size " << size;
    (info.copied ? copied : direct)++;
    live_[h] = std::move(bytes);
  }
  EXPECT_GT(copied, 0u);
  EXPECT_GT(direct, 0u);
  for (auto& [h, bytes] : live_) ASSERT_TRUE(check_object(pool_, h, bytes));
  // The whole capacity is writable and readable, not just the requested size (a hardened
  // pool takes only the size, and dies past it: hardened_test.cpp).
  for (auto& [h, bytes] : live_) {
    size_t cap = zs_obj_capacity(pool_, h);
    ASSERT_GE(cap, bytes.size());
    const size_t writable = hardened(GetParam()) ? bytes.size() : cap;
    bytes = make_pattern(writable, seed_of(h, writable));
    zs_obj_write(pool_, h, bytes.data(), writable);
  }
  for (auto& [h, bytes] : live_) ASSERT_TRUE(check_object(pool_, h, bytes));
}

// Objects sit back to back in a zspage (§3.2) and a fresh zspage hands out indices 0, 1, 2...
// (§3.3), so the payload of object k starts at k*size + 8. Its read is a copy exactly when it
// crosses a page boundary; a 1-byte read never is.
TEST_P(RoundTrip, SpanningFollowsZspageLayout) {
  const unsigned sizes[] = {48, 144, 784, 1168, 2384, 3184, 3632};
  for (unsigned cls : sizes) {
    SCOPED_TRACE("class " + std::to_string(cls));
    struct zs_class_stats st = class_for_request(pool_, cls - ZS_HANDLE_SIZE);
    ASSERT_EQ(st.size, cls);
    const size_t cap = cls - ZS_HANDLE_SIZE;
    std::vector<unsigned long> hs;
    for (unsigned k = 0; k < st.objs_per_zspage; ++k) {
      unsigned long h = store(cap, cls * 1000 + k);
      ASSERT_NE(h, 0u);
      hs.push_back(h);
    }
    unsigned spanning = 0;
    for (unsigned k = 0; k < hs.size(); ++k) {
      const size_t start = size_t(k) * cls + ZS_HANDLE_SIZE;
      const bool spans = start / 4096 != (start + cap - 1) / 4096;
      spanning += spans;
      ReadInfo info;
      ASSERT_TRUE(check_object(pool_, hs[k], live_[hs[k]], 4096, &info));
      EXPECT_EQ(info.copied, spans) << "object " << k << " payload at zspage offset " << start;
      ASSERT_TRUE(check_object(pool_, hs[k], live_[hs[k]].data(), 1, 4096, &info));
      EXPECT_FALSE(info.copied) << "1-byte read of object " << k;
    }
    if (st.pages_per_zspage > 1) {
      EXPECT_GT(spanning, 0u);
    }
    struct zs_class_stats after{};
    ASSERT_EQ(zs_class_stats(pool_, st.index, &after), 1);
    EXPECT_EQ(after.obj_used, st.objs_per_zspage);
    EXPECT_EQ(after.zspages[ZS_NR_FULLNESS_GROUPS - 1], 1u) << "one full zspage";
    for (unsigned long h : hs) free_tracked(h);
  }
}

TEST_P(RoundTrip, PartialReadsAndWrites) {
  const size_t sizes[] = {1, 7, 8, 9, 100, 777, 2000, 3624, 3625, 4096};
  for (size_t size : sizes) {
    unsigned long h = store(size, size * 31);
    ASSERT_NE(h, 0u);
    const std::vector<uint8_t>& bytes = live_[h];
    // Prefix reads of every length up to the size (coarse steps for big objects).
    for (size_t len = 1; len <= size; len += (size > 64 ? 37 : 1))
      ASSERT_TRUE(check_object(pool_, h, bytes.data(), len)) << "size " << size << " len " << len;
  }
  // A short write changes only the prefix.
  for (auto& [h, bytes] : live_) {
    if (bytes.size() < 2) continue;
    size_t n = bytes.size() / 2;
    std::vector<uint8_t> head = make_pattern(n, h + 99);
    zs_obj_write(pool_, h, head.data(), n);
    std::copy(head.begin(), head.end(), bytes.begin());
    ASSERT_TRUE(check_object(pool_, h, bytes));
  }
}

TEST_P(RoundTrip, HugeObjects) {
  const size_t huge = zs_huge_class_size(pool_);
  unsigned long before = zs_get_total_pages(pool_);
  std::vector<unsigned long> hs;
  for (size_t size = huge; size <= 4096; size += 59) {
    unsigned long h = store(size, size);
    ASSERT_NE(h, 0u);
    EXPECT_EQ(zs_obj_capacity(pool_, h), 4096u);
    ReadInfo info;
    ASSERT_TRUE(check_object(pool_, h, live_[h], 4096, &info));
    EXPECT_FALSE(info.copied);
    hs.push_back(h);
  }
  // One page per huge object.
  EXPECT_EQ(zs_get_total_pages(pool_), before + hs.size());
  // A huge object holds a full page, header-less.
  unsigned long h = zs_malloc(pool_, 4096);
  ASSERT_NE(h, 0u);
  std::vector<uint8_t> page = make_pattern(4096, seed_of(h, 4096));
  zs_obj_write(pool_, h, page.data(), page.size());
  live_[h] = page;
  ReadInfo info;
  ASSERT_TRUE(check_object(pool_, h, page, 4096, &info));
  EXPECT_FALSE(info.copied);
}

INSTANTIATE_TEST_SUITE_P(Pools, RoundTrip, ::testing::ValuesIn(kPoolConfigs), config_name);

// ---- other page sizes --------------------------------------------------------------------------
// On the default configuration only: these are about the page size, which the configurations
// do not vary (their scattered source serves 4 KiB pages).

class RoundTripPageSize : public PoolFixture, public ::testing::WithParamInterface<size_t> {
 protected:
  void SetUp() override {
    zs_pool_config cfg{};
    cfg.page_size = GetParam();
    create_pool(cfg);
  }
};

TEST_P(RoundTripPageSize, SubsetOfSizes) {
  const size_t page = GetParam();
  const size_t huge = zs_huge_class_size(pool_);
  std::vector<size_t> sizes;
  const size_t step = page == 16384 ? 37 : 251;
  for (size_t s = 1; s <= page; s += step) sizes.push_back(s);
  for (size_t s : {size_t{24}, size_t{25}, huge - 1, huge, page - 1, page}) sizes.push_back(s);
  size_t copied = 0, direct = 0;
  for (size_t size : sizes) {
    unsigned long h = store(size, size ^ page);
    ASSERT_NE(h, 0u) << "size " << size << " errno " << errno;
    EXPECT_EQ(zs_obj_capacity(pool_, h), expected_capacity(pool_, size, page)) << size;
    ReadInfo info;
    ASSERT_TRUE(check_object(pool_, h, live_[h], page, &info)) << size;
    (info.copied ? copied : direct)++;
    if (size >= huge) {
      EXPECT_FALSE(info.copied);
    }
  }
  EXPECT_GT(copied, 0u);
  EXPECT_GT(direct, 0u);
  for (auto& [h, bytes] : live_) ASSERT_TRUE(check_object(pool_, h, bytes, page));
  // malloc + write path on the same subset.
  for (size_t size : sizes) {
    unsigned long h = zs_malloc(pool_, size);
    ASSERT_NE(h, 0u);
    std::vector<uint8_t> bytes = make_pattern(size, seed_of(h, size));
    zs_obj_write(pool_, h, bytes.data(), size);
    ASSERT_TRUE(check_object(pool_, h, bytes, page));
    live_[h] = std::move(bytes);
  }
  EXPECT_TRUE(check_stats_consistent(pool_, live_.size()));
}

INSTANTIATE_TEST_SUITE_P(Pages, RoundTripPageSize, ::testing::Values(size_t{16384}, size_t{65536}),
                         [](const auto& info) { return "page" + std::to_string(info.param / 1024) + "k"; });

// zs_memcpy() copies as memcpy does, at every length 0..4200 (all of the copy's thresholds
// and a page and more) with src and dst alignments cycling through 0..63, without touching
// the bytes around dst (copy_test checks the copy itself exhaustively).
TEST(ZsMemcpy, CopiesAsMemcpy) {
  std::vector<uint8_t> src(4200 + 64), dst(4200 + 64 + 2), want(dst.size());
  for (size_t i = 0; i < src.size(); i++) src[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t n = 0; n <= 4200; n++) {
    size_t sa = n % 64, da = (n * 7) % 64;
    std::fill(dst.begin(), dst.end(), uint8_t{0xEE});
    want = dst;
    std::memcpy(want.data() + 1 + da, src.data() + sa, n);
    zs_memcpy(dst.data() + 1 + da, src.data() + sa, n);
    ASSERT_EQ(dst, want) << "n=" << n << " src%64=" << sa << " dst%64=" << (1 + da) % 64;
  }
}

}  // namespace
