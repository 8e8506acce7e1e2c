// tests/zsm/class_table_test.cpp: the size-class table (spec §2, §3.1, §4). A model of the kernel
// rule, written here independently of zsm/src, is compared with every class index of a pool
// for chain sizes 4..16 and 4K/16K/64K pages; the spec's published figures are checked as
// hard numbers; zs_malloc lands in the expected class; bad configurations are refused.
#include "test_support.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <tuple>

namespace {

using namespace zsm_test;

// ---- independent model of mm/zsmalloc.c's class table --------------------------------------

struct RefClass {
  unsigned size = 0;
  unsigned pages = 0;
  unsigned objs = 0;
};

struct RefTable {
  size_t page_size = 0;
  unsigned chain = 0;
  unsigned delta = 0;
  unsigned count = 0;               // ZS_SIZE_CLASSES
  std::vector<RefClass> own;        // per index: what the kernel computes at that index
  std::vector<unsigned> resolve;    // per index: the index of the class it resolves to
  unsigned distinct = 0;
  size_t huge_class_size = 0;
  unsigned largest_nonhuge = 0;     // index of the largest class with pages != 1 && objs != 1

  // get_size_class_index()
  unsigned index_for(size_t size) const {
    if (size <= 32) return 0;
    size_t idx = (size - 32 + delta - 1) / delta;
    return static_cast<unsigned>(std::min<size_t>(count - 1, idx));
  }
  const RefClass& cls(unsigned idx) const { return own[resolve[idx]]; }
};

bool is_pow2(unsigned x) { return x != 0 && (x & (x - 1)) == 0; }

// calculate_zspage_chain_size(): min tail waste over 1..chain pages, ties to fewer pages.
unsigned chain_pages(unsigned size, size_t page_size, unsigned chain) {
  if (is_pow2(size)) return 1;
  unsigned best = 1;
  size_t min_waste = SIZE_MAX;
  for (unsigned i = 1; i <= chain; ++i) {
    size_t waste = (i * page_size) % size;
    if (waste < min_waste) {
      min_waste = waste;
      best = i;
    }
  }
  return best;
}

RefTable build_ref(size_t page_size, unsigned chain) {
  RefTable t;
  t.page_size = page_size;
  t.chain = chain;
  t.delta = static_cast<unsigned>(page_size >> 8);
  t.count = static_cast<unsigned>((page_size - 32 + t.delta - 1) / t.delta + 1);
  t.own.resize(t.count);
  t.resolve.resize(t.count);
  int prev = -1;
  for (int i = static_cast<int>(t.count) - 1; i >= 0; --i) {
    unsigned size = static_cast<unsigned>(std::min<size_t>(32 + size_t(i) * t.delta, page_size));
    unsigned pages = chain_pages(size, page_size, chain);
    unsigned objs = static_cast<unsigned>(pages * page_size / size);
    t.own[i] = {size, pages, objs};
    if (pages != 1 && objs != 1 && t.huge_class_size == 0) {
      t.huge_class_size = size - (ZS_HANDLE_SIZE - 1);
      t.largest_nonhuge = static_cast<unsigned>(i);
    }
    if (prev >= 0 && t.own[prev].pages == pages && t.own[prev].objs == objs) {
      t.resolve[i] = static_cast<unsigned>(prev);
      continue;
    }
    t.resolve[i] = static_cast<unsigned>(i);
    prev = i;
    ++t.distinct;
  }
  return t;
}

// The kernel's design (no per-thread cache): these tests follow each free into the class's
// figures and fullness groups.
zs_pool* make_pool(size_t page_size, unsigned chain) {
  zs_pool_config cfg{};
  cfg.page_size = page_size;
  cfg.chain_size = chain;
  cfg.flags = ZS_POOL_NO_THREAD_CACHE;
  return zs_create_pool_ex("class_table", &cfg);
}

// ---- model vs pool, every index, every config ------------------------------------------------

class ClassTableModel : public ::testing::TestWithParam<std::tuple<size_t, unsigned>> {
 protected:
  void SetUp() override {
    page_size_ = std::get<0>(GetParam());
    chain_ = std::get<1>(GetParam());
    ref_ = build_ref(page_size_, chain_);
    pool_.reset(make_pool(page_size_, chain_));
    ASSERT_NE(pool_, nullptr) << "zs_create_pool_ex(page " << page_size_ << ", chain " << chain_
                              << ") failed, errno " << errno;
  }
  void TearDown() override {
    if (pool_) {
      EXPECT_TRUE(compact_and_check_empty(pool_.get()));
    }
  }
  size_t page_size_ = 0;
  unsigned chain_ = 0;
  RefTable ref_;
  PoolPtr pool_;
};

TEST_P(ClassTableModel, EveryIndexMatchesModel) {
  zs_pool* pool = pool_.get();
  ASSERT_EQ(zs_class_count(pool), ref_.count);
  EXPECT_EQ(zs_huge_class_size(pool), ref_.huge_class_size);
  unsigned distinct = 0;
  for (unsigned i = 0; i < ref_.count; ++i) {
    SCOPED_TRACE("index " + std::to_string(i));
    struct zs_class_stats st{};
    int rc = zs_class_stats(pool, i, &st);
    const unsigned r = ref_.resolve[i];
    const RefClass& c = ref_.own[r];
    EXPECT_EQ(rc, r == i ? 1 : 0);
    if (rc == 1) ++distinct;
    EXPECT_EQ(st.index, r);
    EXPECT_EQ(st.size, c.size);
    EXPECT_EQ(st.pages_per_zspage, c.pages);
    EXPECT_EQ(st.objs_per_zspage, c.objs);
    // A fresh pool: nothing allocated anywhere.
    EXPECT_EQ(st.obj_allocated, 0u);
    EXPECT_EQ(st.obj_used, 0u);
    EXPECT_EQ(st.pages_used, 0u);
    EXPECT_EQ(st.freeable, 0u);
    for (unsigned long z : st.zspages) EXPECT_EQ(z, 0u);
  }
  EXPECT_EQ(distinct, ref_.distinct);
  EXPECT_EQ(zs_get_total_pages(pool), 0u);
}

TEST_P(ClassTableModel, OutOfRangeIndexIsEinval) {
  struct zs_class_stats st{};
  errno = 0;
  EXPECT_EQ(zs_class_stats(pool_.get(), ref_.count, &st), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(zs_class_stats(pool_.get(), 100000, &st), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_P(ClassTableModel, LookupClassIndexMatchesModel) {
  zs_pool* pool = pool_.get();
  unsigned bad = 0;
  for (size_t size = 0; size <= page_size_ + 64; ++size) {
    unsigned want = ref_.resolve[ref_.index_for(size)];
    unsigned got = zs_lookup_class_index(pool, static_cast<unsigned>(size));
    if (got != want && ++bad <= 5) ADD_FAILURE() << "zs_lookup_class_index(" << size << ") = " << got << ", want " << want;
  }
  EXPECT_EQ(bad, 0u);
}

// One object in each distinct class: it lands in that class, uses one zspage of the model's
// shape, and its zspage sits in the right fullness group.
TEST_P(ClassTableModel, MallocLandsInModelClass) {
  zs_pool* pool = pool_.get();
  for (unsigned i = 0; i < ref_.count; ++i) {
    if (ref_.resolve[i] != i) continue;
    const RefClass& c = ref_.own[i];
    const bool huge = c.pages == 1 && c.objs == 1;
    if (huge && i != ref_.count - 1) continue;  // every 1/1 class merges into the top one
    SCOPED_TRACE("class " + std::to_string(i) + " size " + std::to_string(c.size));
    const size_t req = huge ? page_size_ : c.size - ZS_HANDLE_SIZE;
    unsigned long h = zs_malloc(pool, req);
    ASSERT_NE(h, 0u) << "errno " << errno;
    EXPECT_EQ(zs_obj_capacity(pool, h), huge ? page_size_ : c.size - ZS_HANDLE_SIZE);
    EXPECT_EQ(zs_get_total_pages(pool), c.pages);
    struct zs_class_stats st{};
    ASSERT_EQ(zs_class_stats(pool, i, &st), 1);
    EXPECT_EQ(st.obj_used, 1u);
    EXPECT_EQ(st.obj_allocated, c.objs);
    EXPECT_EQ(st.pages_used, c.pages);
    const int g = fullness_group(1, c.objs);
    for (int k = 0; k < ZS_NR_FULLNESS_GROUPS; ++k) EXPECT_EQ(st.zspages[k], k == g ? 1u : 0u) << "group " << k;
    zs_free(pool, h);
    // The emptied zspage may stay as the class's one spare; compaction releases it.
    unsigned long after_free = zs_get_total_pages(pool);
    EXPECT_TRUE(after_free == 0 || after_free == c.pages) << after_free;
    ASSERT_EQ(zs_class_stats(pool, i, &st), 1);
    EXPECT_EQ(st.obj_used, 0u);
    EXPECT_EQ(zs_compact(pool), after_free);
    EXPECT_EQ(zs_get_total_pages(pool), 0u);
  }
}

// Requests just below zs_huge_class_size() go to the largest non-huge class; from it up, to
// the one-object one-page class.
TEST_P(ClassTableModel, HugeBoundary) {
  zs_pool* pool = pool_.get();
  const size_t huge = zs_huge_class_size(pool);
  ASSERT_EQ(huge, ref_.huge_class_size);
  const RefClass& big = ref_.own[ref_.largest_nonhuge];
  unsigned long below = zs_malloc(pool, huge - 1);
  unsigned long at = zs_malloc(pool, huge);
  unsigned long top = zs_malloc(pool, page_size_);
  ASSERT_NE(below, 0u);
  ASSERT_NE(at, 0u);
  ASSERT_NE(top, 0u);
  EXPECT_EQ(zs_obj_capacity(pool, below), big.size - ZS_HANDLE_SIZE);
  EXPECT_EQ(zs_obj_capacity(pool, at), page_size_);
  EXPECT_EQ(zs_obj_capacity(pool, top), page_size_);
  EXPECT_EQ(zs_get_total_pages(pool), big.pages + 2u);
  EXPECT_EQ(zs_lookup_class_index(pool, static_cast<unsigned>(huge - 1 + ZS_HANDLE_SIZE)), ref_.largest_nonhuge);
  EXPECT_EQ(zs_lookup_class_index(pool, static_cast<unsigned>(huge + ZS_HANDLE_SIZE)), ref_.count - 1);
  zs_free(pool, below);
  zs_free(pool, at);
  zs_free(pool, top);
}

std::string config_name(const ::testing::TestParamInfo<std::tuple<size_t, unsigned>>& info) {
  return "page" + std::to_string(std::get<0>(info.param) / 1024) + "k_chain" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllConfigs, ClassTableModel,
                         ::testing::Combine(::testing::Values(size_t{4096}, size_t{16384}, size_t{65536}),
                                            ::testing::Range(4u, 17u)),
                         config_name);

// ---- the spec's published figures, as hard numbers -----------------------------------------

struct Published {
  unsigned chain;
  unsigned distinct;
  unsigned largest_nonhuge_size;
};

// §3.1 "Pitfall": min-waste rule, 4K pages.
const Published kPublished4k[] = {
    {4, 69, 3264},   {5, 86, 3408},   {6, 94, 3504},   {7, 110, 3584},  {8, 119, 3632},
    {9, 136, 3680},  {10, 141, 3712}, {11, 153, 3744}, {12, 159, 3776}, {13, 173, 3792},
    {14, 179, 3808}, {15, 186, 3840}, {16, 192, 3840},
};

TEST(ClassTablePublished, DistinctCountsAndWatermarks4k) {
  for (const Published& p : kPublished4k) {
    SCOPED_TRACE("chain " + std::to_string(p.chain));
    RefTable ref = build_ref(4096, p.chain);
    EXPECT_EQ(ref.distinct, p.distinct);
    EXPECT_EQ(ref.own[ref.largest_nonhuge].size, p.largest_nonhuge_size);
    PoolPtr pool(make_pool(4096, p.chain));
    ASSERT_NE(pool, nullptr);
    unsigned distinct = 0;
    for (unsigned i = 0; i < zs_class_count(pool.get()); ++i) {
      struct zs_class_stats st{};
      if (zs_class_stats(pool.get(), i, &st) == 1) ++distinct;
    }
    EXPECT_EQ(distinct, p.distinct);
    EXPECT_EQ(zs_huge_class_size(pool.get()), p.largest_nonhuge_size - 7u);
  }
}

TEST(ClassTablePublished, HeadlineFigures) {
  struct Row {
    size_t page;
    unsigned chain;
    unsigned count;
    unsigned distinct;
    size_t huge;
  };
  const Row rows[] = {
      {4096, 8, 255, 119, 3625}, {4096, 4, 255, 69, 3257},
      {16384, 8, 257, 121, 14553}, {65536, 8, 257, 123, 58137},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE("page " + std::to_string(r.page) + " chain " + std::to_string(r.chain));
    RefTable ref = build_ref(r.page, r.chain);
    EXPECT_EQ(ref.count, r.count);
    EXPECT_EQ(ref.distinct, r.distinct);
    EXPECT_EQ(ref.huge_class_size, r.huge);
    PoolPtr pool(make_pool(r.page, r.chain));
    ASSERT_NE(pool, nullptr);
    EXPECT_EQ(zs_class_count(pool.get()), r.count);
    EXPECT_EQ(zs_huge_class_size(pool.get()), r.huge);
    unsigned distinct = 0;
    for (unsigned i = 0; i < r.count; ++i) {
      struct zs_class_stats st{};
      if (zs_class_stats(pool.get(), i, &st) == 1) ++distinct;
    }
    EXPECT_EQ(distinct, r.distinct);
  }
}

TEST(ClassTablePublished, DefaultPoolIs4kChain8) {
  PoolPtr pool(zs_create_pool("default"));
  ASSERT_NE(pool, nullptr);
  EXPECT_STREQ(zs_pool_name(pool.get()), "default");
  EXPECT_EQ(zs_class_count(pool.get()), 255u);
  EXPECT_EQ(zs_huge_class_size(pool.get()), 3625u);
  // A zero-filled config asks for the same.
  zs_pool_config cfg{};
  PoolPtr pool2(zs_create_pool_ex("zeroed", &cfg));
  ASSERT_NE(pool2, nullptr);
  EXPECT_EQ(zs_class_count(pool2.get()), 255u);
  EXPECT_EQ(zs_huge_class_size(pool2.get()), 3625u);
  PoolPtr pool3(zs_create_pool_ex("nullcfg", nullptr));
  ASSERT_NE(pool3, nullptr);
  EXPECT_EQ(zs_huge_class_size(pool3.get()), 3625u);
}

// zs_huge_class_size() is per pool (the kernel keeps one global, set by the first pool).
TEST(ClassTablePublished, HugeClassSizeIsPerPool) {
  PoolPtr p8(make_pool(4096, 8));
  PoolPtr p4(make_pool(4096, 4));
  PoolPtr p16k(make_pool(16384, 8));
  ASSERT_TRUE(p8 && p4 && p16k);
  EXPECT_EQ(zs_huge_class_size(p8.get()), 3625u);
  EXPECT_EQ(zs_huge_class_size(p4.get()), 3257u);
  EXPECT_EQ(zs_huge_class_size(p16k.get()), 14553u);
}

// One class of the table at one chain size: its zspage, the class a size resolves to (a
// merged size resolves to a larger class), that class's size and the waste per zspage.
struct ClassRow {
  unsigned pages, objs, cls_index, cls_size, waste;
};

// Sample rows of the published tables, chain 8 and chain 4 side by side.
struct SampleRow {
  unsigned index, size;
  ClassRow chain8, chain4;
};

const SampleRow kSampleRows[] = {
    // index, size, {pages, objs, class, class size, waste} at chain 8, then at chain 4
    {0, 32, {1, 128, 0, 32, 0}, {1, 128, 0, 32, 0}},
    {22, 384, {3, 32, 22, 384, 0}, {3, 32, 22, 384, 0}},
    {47, 784, {5, 26, 47, 784, 96}, {1, 5, 49, 816, 16}},
    {71, 1168, {2, 7, 71, 1168, 16}, {2, 7, 71, 1168, 16}},
    {96, 1568, {5, 13, 96, 1568, 96}, {2, 5, 100, 1632, 32}},
    {120, 1952, {1, 2, 126, 2048, 0}, {1, 2, 126, 2048, 0}},
    {145, 2352, {7, 12, 147, 2384, 64}, {3, 5, 151, 2448, 48}},
    {169, 2736, {7, 10, 177, 2864, 32}, {3, 4, 190, 3072, 0}},
    {194, 3136, {7, 9, 197, 3184, 16}, {4, 5, 202, 3264, 64}},
    {254, 4096, {1, 1, 254, 4096, 0}, {1, 1, 254, 4096, 0}},
};

class ClassTableSampleRows : public ::testing::TestWithParam<unsigned> {};

// The pool's table and the model's agree with the published rows, at each chain size.
TEST_P(ClassTableSampleRows, PoolAndModelAgree) {
  const unsigned chain = GetParam();
  PoolPtr pool(make_pool(4096, chain));
  ASSERT_NE(pool, nullptr);
  RefTable ref = build_ref(4096, chain);
  for (const SampleRow& row : kSampleRows) {
    const ClassRow& r = chain == 8 ? row.chain8 : row.chain4;
    SCOPED_TRACE("chain " + std::to_string(chain) + " index " + std::to_string(row.index));
    EXPECT_EQ(row.size, 32 + 16 * row.index);
    EXPECT_EQ(r.waste, r.pages * 4096 - r.objs * r.cls_size);
    struct zs_class_stats st{};
    int rc = zs_class_stats(pool.get(), row.index, &st);
    EXPECT_EQ(rc, row.index == r.cls_index ? 1 : 0);
    EXPECT_EQ(st.index, r.cls_index);
    EXPECT_EQ(st.size, r.cls_size);
    EXPECT_EQ(st.pages_per_zspage, r.pages);
    EXPECT_EQ(st.objs_per_zspage, r.objs);
    // And the model agrees.
    EXPECT_EQ(ref.resolve[row.index], r.cls_index);
    EXPECT_EQ(ref.cls(row.index).size, r.cls_size);
    EXPECT_EQ(ref.cls(row.index).pages, r.pages);
    EXPECT_EQ(ref.cls(row.index).objs, r.objs);
  }
}

INSTANTIATE_TEST_SUITE_P(ClassTablePublished, ClassTableSampleRows, ::testing::Values(8u, 4u),
                         [](const ::testing::TestParamInfo<unsigned>& info) {
                           return "Chain" + std::to_string(info.param);
                         });

// §4: the 119 distinct chain-8 classes, size:pages/objs, exactly as published.
const char kDistinctChain8[] =
    "32:1/128 48:3/256 64:1/64 80:5/256 96:3/128 112:7/256 128:1/32 144:7/199 160:5/128 176:4/93 192:3/64 "
    "208:3/59 224:7/128 240:1/17 256:1/16 272:1/15 288:5/71 304:7/94 320:5/64 336:6/73 352:8/93 368:8/89 "
    "384:3/32 400:5/51 416:6/59 432:7/66 448:7/64 464:5/44 480:2/17 496:4/33 512:1/8 528:4/31 544:2/15 "
    "560:7/51 576:1/7 592:8/55 608:7/47 624:2/13 640:5/32 656:5/31 672:1/6 688:8/47 704:5/29 720:3/17 "
    "736:2/11 752:7/38 768:3/16 784:5/26 816:1/5 832:8/39 848:5/24 864:7/33 880:8/37 896:7/32 912:7/31 "
    "928:5/22 944:3/13 960:4/17 976:6/25 992:8/33 1024:1/4 1056:8/31 1072:5/19 1088:4/15 1104:3/11 "
    "1120:8/29 1136:5/18 1168:2/7 1184:7/24 1200:5/17 1216:3/10 1232:7/23 1248:4/13 1280:5/16 1296:7/22 "
    "1360:1/3 1424:8/23 1440:6/17 1456:5/14 1488:4/11 1504:7/19 1536:3/8 1552:8/21 1568:5/13 1584:7/18 "
    "1632:2/5 1680:7/17 1696:5/12 1712:8/19 1744:3/7 1792:7/16 1808:4/9 1856:5/11 1888:6/13 1904:7/15 "
    "1920:8/17 2048:1/2 2176:8/15 2192:7/13 2224:6/11 2272:5/9 2336:4/7 2384:7/12 2448:3/5 2512:8/13 "
    "2560:5/8 2592:7/11 2720:2/3 2864:7/10 2912:5/7 2976:8/11 3072:3/4 3184:7/9 3264:4/5 3408:5/6 "
    "3504:6/7 3584:7/8 3632:8/9 4096:1/1";

TEST(ClassTablePublished, DistinctClassListChain8) {
  std::vector<RefClass> want;
  {
    std::istringstream in(kDistinctChain8);
    std::string tok;
    while (in >> tok) {
      RefClass c;
      ASSERT_EQ(std::sscanf(tok.c_str(), "%u:%u/%u", &c.size, &c.pages, &c.objs), 3) << tok;
      want.push_back(c);
    }
  }
  ASSERT_EQ(want.size(), 119u);
  PoolPtr pool(make_pool(4096, 8));
  ASSERT_NE(pool, nullptr);
  std::vector<RefClass> got;
  for (unsigned i = 0; i < zs_class_count(pool.get()); ++i) {
    struct zs_class_stats st{};
    if (zs_class_stats(pool.get(), i, &st) == 1) {
      EXPECT_EQ(st.index, i);
      EXPECT_EQ(st.size, 32 + 16 * i);
      got.push_back({st.size, st.pages_per_zspage, st.objs_per_zspage});
    }
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(got[k].size, want[k].size) << "distinct class #" << k;
    EXPECT_EQ(got[k].pages, want[k].pages) << "class " << want[k].size;
    EXPECT_EQ(got[k].objs, want[k].objs) << "class " << want[k].size;
  }
  // The §3.1/§6 chain-selection example: class 208 takes 3 pages (waste 16), not 2.
  EXPECT_EQ(chain_pages(208, 4096, 8), 3u);
}

// §4: merged index ranges (chain 8). Every index not listed is its own class.
const char kMergedChain8[] =
    "48-49->49 61-62->62 63-64->64 70-71->71 77-78->78 80-83->83 84-87->87 90-91->91 93-94->94 "
    "98-100->100 101-103->103 106-107->107 108-110->110 112-114->114 115-116->116 119-126->126 "
    "127-134->134 136-137->137 138-140->140 141-144->144 145-147->147 148-151->151 152-155->155 "
    "156-158->158 159-160->160 161-168->168 169-177->177 178-180->180 181-184->184 185-190->190 "
    "191-197->197 198-202->202 203-211->211 212-217->217 218-222->222 223-225->225 226-254->254";

TEST(ClassTablePublished, MergedRangesChain8) {
  std::vector<unsigned> want(255);
  for (unsigned i = 0; i < 255; ++i) want[i] = i;
  std::istringstream in(kMergedChain8);
  std::string tok;
  while (in >> tok) {
    unsigned lo, hi, to;
    ASSERT_EQ(std::sscanf(tok.c_str(), "%u-%u->%u", &lo, &hi, &to), 3) << tok;
    for (unsigned i = lo; i <= hi; ++i) want[i] = to;
  }
  PoolPtr pool(make_pool(4096, 8));
  ASSERT_NE(pool, nullptr);
  RefTable ref = build_ref(4096, 8);
  for (unsigned i = 0; i < 255; ++i) {
    struct zs_class_stats st{};
    int rc = zs_class_stats(pool.get(), i, &st);
    EXPECT_EQ(st.index, want[i]) << "index " << i;
    EXPECT_EQ(rc, want[i] == i ? 1 : 0) << "index " << i;
    EXPECT_EQ(ref.resolve[i], want[i]) << "model, index " << i;
  }
  // §3.1: index 48 (800) serves from class 49 (816).
  struct zs_class_stats st{};
  EXPECT_EQ(zs_class_stats(pool.get(), 48, &st), 0);
  EXPECT_EQ(st.size, 816u);
}

// §4 zs_malloc lookups (chain 8). zs_lookup_class_index() takes the size as given; zs_malloc()
// adds the 8-byte header first.
TEST(ClassTablePublished, LookupExamplesChain8) {
  PoolPtr pool(make_pool(4096, 8));
  ASSERT_NE(pool, nullptr);
  zs_pool* p = pool.get();
  for (unsigned s = 1; s <= 24; ++s) EXPECT_EQ(zs_lookup_class_index(p, s + ZS_HANDLE_SIZE), 0u) << s;
  EXPECT_EQ(zs_lookup_class_index(p, 25 + ZS_HANDLE_SIZE), 1u);
  EXPECT_EQ(zs_lookup_class_index(p, 3624 + ZS_HANDLE_SIZE), 225u);
  for (unsigned s = 3625; s <= 4096; ++s) EXPECT_EQ(zs_lookup_class_index(p, s + ZS_HANDLE_SIZE), 254u) << s;
  // Without the header.
  EXPECT_EQ(zs_lookup_class_index(p, 0), 0u);
  EXPECT_EQ(zs_lookup_class_index(p, 32), 0u);
  EXPECT_EQ(zs_lookup_class_index(p, 33), 1u);
  EXPECT_EQ(zs_lookup_class_index(p, 48), 1u);
  EXPECT_EQ(zs_lookup_class_index(p, 800), 49u);  // merged index 48 -> class 49
  EXPECT_EQ(zs_lookup_class_index(p, 3632), 225u);
  EXPECT_EQ(zs_lookup_class_index(p, 3633), 254u);
  EXPECT_EQ(zs_lookup_class_index(p, 4096), 254u);

  // The same through zs_malloc: capacity tells the class (class size - 8, or a page when huge).
  struct Case {
    size_t req;
    size_t capacity;
    unsigned cls;
  };
  const Case cases[] = {{1, 24, 0}, {24, 24, 0}, {25, 40, 1}, {3624, 3624, 225}, {3625, 4096, 254}, {4096, 4096, 254}};
  for (const Case& c : cases) {
    SCOPED_TRACE("zs_malloc(" + std::to_string(c.req) + ")");
    unsigned long h = zs_malloc(p, c.req);
    ASSERT_NE(h, 0u);
    EXPECT_EQ(zs_obj_capacity(p, h), c.capacity);
    struct zs_class_stats st{};
    ASSERT_EQ(zs_class_stats(p, c.cls, &st), 1);
    EXPECT_EQ(st.obj_used, 1u);
    zs_free(p, h);
  }
  errno = 0;
  EXPECT_EQ(zs_malloc(p, 0), 0u);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(zs_malloc(p, 4097), 0u);
  EXPECT_EQ(errno, ENOSPC);
  EXPECT_TRUE(compact_and_check_empty(p));
}

// ---- fullness groups (§2) and allocation order (§3.3) ------------------------------------------

// One zspage filled object by object, then emptied: its fullness group follows
// get_fullness_group() at every step.
TEST(ClassStats, FullnessGroupFollowsInuse) {
  PoolPtr pool(make_pool(4096, 8));
  ASSERT_NE(pool, nullptr);
  zs_pool* p = pool.get();
  for (unsigned cls_size : {32u, 144u, 784u, 1168u, 2384u, 3632u}) {
    SCOPED_TRACE("class " + std::to_string(cls_size));
    struct zs_class_stats st = class_for_request(p, cls_size - ZS_HANDLE_SIZE);
    ASSERT_EQ(st.size, cls_size);
    std::vector<unsigned long> hs;
    auto expect_group = [&](unsigned inuse) {
      struct zs_class_stats now{};
      ASSERT_EQ(zs_class_stats(p, st.index, &now), 1);
      EXPECT_EQ(now.obj_used, inuse);
      const int g = fullness_group(inuse, st.objs_per_zspage);
      for (int k = 0; k < ZS_NR_FULLNESS_GROUPS; ++k) {
        // An emptied zspage may be kept (group 0) or released.
        unsigned long want = k == g ? 1u : 0u;
        if (inuse == 0 && k == 0) {
          EXPECT_LE(now.zspages[0], 1u) << "inuse " << inuse;
          continue;
        }
        EXPECT_EQ(now.zspages[k], want) << "inuse " << inuse << " group " << k;
      }
    };
    for (unsigned k = 0; k < st.objs_per_zspage; ++k) {
      unsigned long h = zs_malloc(p, cls_size - ZS_HANDLE_SIZE);
      ASSERT_NE(h, 0u);
      hs.push_back(h);
      expect_group(k + 1);
    }
    while (!hs.empty()) {
      zs_free(p, hs.back());
      hs.pop_back();
      expect_group(static_cast<unsigned>(hs.size()));
    }
  }
  EXPECT_TRUE(compact_and_check_empty(p));
}

// zs_malloc takes a slot from the fullest non-full zspage of the class (find_get_zspage).
TEST(ClassStats, AllocationPrefersFullestZspage) {
  PoolPtr pool(make_pool(4096, 8));
  ASSERT_NE(pool, nullptr);
  zs_pool* p = pool.get();
  const size_t req = 784 - ZS_HANDLE_SIZE;  // class 784: 5 pages, 26 objects
  struct zs_class_stats st = class_for_request(p, req);
  ASSERT_EQ(st.objs_per_zspage, 26u);
  std::vector<unsigned long> a, b;  // the first zspage's objects, the second's
  for (unsigned k = 0; k < 26; ++k) a.push_back(zs_malloc(p, req));
  for (unsigned k = 0; k < 26; ++k) b.push_back(zs_malloc(p, req));
  EXPECT_EQ(zs_get_total_pages(p), 10u);
  // A keeps 20 of 26 (76 %: group 8), B keeps 2 of 26 (7 %: group 1).
  for (unsigned k = 20; k < 26; ++k) zs_free(p, a[k]);
  for (unsigned k = 2; k < 26; ++k) zs_free(p, b[k]);
  struct zs_class_stats now{};
  zs_class_stats(p, st.index, &now);
  EXPECT_EQ(now.zspages[8], 1u);
  EXPECT_EQ(now.zspages[1], 1u);
  // The next object goes to A: 21 of 26 (80 %: group 9); B stays in group 1.
  unsigned long h = zs_malloc(p, req);
  ASSERT_NE(h, 0u);
  zs_class_stats(p, st.index, &now);
  EXPECT_EQ(now.zspages[8], 0u);
  EXPECT_EQ(now.zspages[9], 1u);
  EXPECT_EQ(now.zspages[1], 1u);
  EXPECT_EQ(now.zspages[2], 0u);
  EXPECT_EQ(zs_get_total_pages(p), 10u);
  zs_free(p, h);
  for (unsigned k = 0; k < 20; ++k) zs_free(p, a[k]);
  for (unsigned k = 0; k < 2; ++k) zs_free(p, b[k]);
  EXPECT_TRUE(compact_and_check_empty(p));
}

// ---- bad configurations ----------------------------------------------------------------------

TEST(ClassTableConfig, BadConfigsAreEinval) {
  struct Bad {
    size_t page;
    unsigned chain;
  };
  const Bad bad[] = {{8192, 8}, {2048, 8}, {1000, 8}, {32768, 8}, {131072, 8}, {4096, 3}, {4096, 17}, {4096, 1}, {16384, 100}};
  for (const Bad& b : bad) {
    SCOPED_TRACE("page " + std::to_string(b.page) + " chain " + std::to_string(b.chain));
    zs_pool_config cfg{};
    cfg.page_size = b.page;
    cfg.chain_size = b.chain;
    errno = 0;
    zs_pool* p = zs_create_pool_ex("bad", &cfg);
    EXPECT_EQ(p, nullptr);
    EXPECT_EQ(errno, EINVAL);
    zs_destroy_pool(p);
  }
  // The limits themselves are fine.
  for (unsigned chain : {4u, 16u}) {
    PoolPtr p(make_pool(4096, chain));
    EXPECT_NE(p, nullptr) << "chain " << chain;
  }
}

TEST(ClassTableConfig, DestroyNullIsNoop) {
  zs_destroy_pool(nullptr);
  SUCCEED();
}

}  // namespace
