// tests/zsm/bad_input_test.cpp: bad arguments at the C API get the answers zsmalloc.h defines, and
// leave stored data alone.
//
// Each test runs on a pool (4, 16 and 64 KiB pages) that already holds a spread of objects:
// tiny ones, ones spanning pages, huge ones, a whole page. It makes bad calls, each of which
// must give the result the header defines for it (0 or NULL or -1 with the errno named there,
// or nothing at all), then checks that every object still holds its bytes and that the pool
// holds the pages it held before; the fixture's teardown frees everything and expects an
// empty pool. Covered: a NULL pool where the header defines it (zs_malloc, zs_store, zs_free,
// zs_destroy_pool), size 0, sizes above a page (page + 1 .. SIZE_MAX), a NULL src, handle 0,
// writes and reads longer than the object's capacity (nothing written; no read left in
// progress, which compaction would trip over), class indices out of range, and pool and page
// source configurations out of range; then NULL for the pool or an out pointer in every other
// call, NULL vm sources and vm source configurations out of range.
#include "test_support.h"

#include <climits>
#include <cstdio>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using namespace zsm_test;

// Request sizes at 4 KiB pages, scaled with the page size: tiny, spanning pages in 2-, 5- and
// 8-page zspages, huge, a whole page.
constexpr size_t kSpread4k[] = {1, 24, 776, 1160, 3624, 4000, 4096};

class BadInput : public PoolFixture, public ::testing::WithParamInterface<size_t> {
 protected:
  void SetUp() override {
    zs_pool_config cfg{};
    cfg.page_size = GetParam();
    create_pool(cfg);
    for (size_t size : kSpread4k) {
      for (uint64_t copy = 0; copy < 3; ++copy)
        ASSERT_NE(store(size * (page_size_ / 4096), size * 10 + copy), 0u) << "errno " << errno;
    }
    pages_before_ = zs_get_total_pages(pool_);
  }

  // Every object holds its bytes, the pool its pages, and the stats agree with both.
  void expect_untouched() {
    for (const auto& [h, bytes] : live_) EXPECT_TRUE(check_object(pool_, h, bytes, page_size_));
    EXPECT_EQ(zs_get_total_pages(pool_), pages_before_);
    EXPECT_TRUE(check_stats_consistent(pool_, live_.size()));
  }

  // Some live object's handle and bytes.
  std::pair<unsigned long, const std::vector<uint8_t>*> any_object() const {
    const auto& [h, bytes] = *live_.begin();
    return {h, &bytes};
  }

  unsigned long pages_before_ = 0;
};

// The sizes that must be refused with ENOSPC: anything above one page.
std::vector<size_t> oversizes(size_t page_size) {
  return {page_size + 1, page_size + 16, 2 * page_size, SIZE_MAX / 2, SIZE_MAX - 7, SIZE_MAX};
}

TEST_P(BadInput, MallocRefusesSizeZeroAndSizesAboveAPage) {
  errno = 0;
  EXPECT_EQ(zs_malloc(pool_, 0), 0u);
  EXPECT_EQ(errno, EINVAL);
  for (size_t size : oversizes(page_size_)) {
    errno = 0;
    EXPECT_EQ(zs_malloc(pool_, size), 0u) << size;
    EXPECT_EQ(errno, ENOSPC) << size;
  }
  expect_untouched();
  // The edges are fine: one byte and one whole page.
  for (size_t size : {size_t{1}, page_size_}) {
    unsigned long h = zs_malloc(pool_, size);
    EXPECT_NE(h, 0u) << size;
    EXPECT_GE(zs_obj_capacity(pool_, h), size);
    zs_free(pool_, h);
  }
}

TEST_P(BadInput, StoreRefusesSizeZeroSizesAboveAPageAndNullSource) {
  std::vector<uint8_t> src(page_size_ + 16, 0x5a);
  errno = 0;
  EXPECT_EQ(zs_store(pool_, src.data(), 0), 0u);
  EXPECT_EQ(errno, EINVAL);
  // src only has to be readable for `size` bytes when the store would go ahead.
  for (size_t size : oversizes(page_size_)) {
    errno = 0;
    EXPECT_EQ(zs_store(pool_, src.data(), size), 0u) << size;
    EXPECT_EQ(errno, ENOSPC) << size;
  }
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, page_size_, page_size_ + 1}) {
    errno = 0;
    EXPECT_EQ(zs_store(pool_, nullptr, size), 0u) << size;
    EXPECT_EQ(errno, EINVAL) << "NULL src, size " << size;
  }
  expect_untouched();
}

TEST_P(BadInput, NullPoolWhereTheHeaderDefinesIt) {
  const uint8_t src[16] = {1, 2, 3};
  for (size_t size : {size_t{0}, size_t{1}, size_t{16}, page_size_ + 1}) {
    errno = 0;
    EXPECT_EQ(zs_malloc(nullptr, size), 0u) << size;
    EXPECT_EQ(errno, EINVAL) << "zs_malloc(NULL, " << size << ")";
  }
  errno = 0;
  EXPECT_EQ(zs_store(nullptr, src, sizeof src), 0u);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(zs_store(nullptr, nullptr, sizeof src), 0u);
  EXPECT_EQ(errno, EINVAL);
  // A NULL pool makes zs_free a no-op even with a live handle of another pool in hand.
  zs_free(nullptr, any_object().first);
  zs_destroy_pool(nullptr);
  expect_untouched();
}

TEST_P(BadInput, FreeOfHandleZeroIsANoOp) {
  zs_free(pool_, 0);
  zs_free(pool_, 0);
  expect_untouched();
}

// Longer than the capacity: nothing is written, errno is EINVAL; the capacity itself is fine.
TEST_P(BadInput, WritePastTheCapacityWritesNothing) {
  std::vector<uint8_t> junk(2 * page_size_, 0xee);
  for (const auto& [h, bytes] : live_) {
    const size_t capacity = zs_obj_capacity(pool_, h);
    ASSERT_GE(capacity, bytes.size());
    for (size_t size : {capacity + 1, capacity + 8, 2 * page_size_, SIZE_MAX}) {
      errno = 0;
      zs_obj_write(pool_, h, junk.data(), size);
      EXPECT_EQ(errno, EINVAL) << "write of " << size << " into capacity " << capacity;
    }
  }
  expect_untouched();
  // A write of zero bytes changes nothing either, and is no error, with or without a source.
  auto [h, bytes] = any_object();
  errno = 0;
  zs_obj_write(pool_, h, junk.data(), 0);
  zs_obj_write(pool_, h, nullptr, 0);
  EXPECT_EQ(errno, 0);
  EXPECT_TRUE(check_object(pool_, h, *bytes, page_size_));
}

TEST_P(BadInput, ReadPastTheCapacityIsNullAndBeginsNoRead) {
  std::vector<uint8_t> local(2 * page_size_);
  for (const auto& [h, bytes] : live_) {
    const size_t capacity = zs_obj_capacity(pool_, h);
    for (size_t len : {capacity + 1, 2 * page_size_, SIZE_MAX}) {
      errno = 0;
      EXPECT_EQ(zs_obj_read_begin(pool_, h, len, local.data()), nullptr) << len << " > " << capacity;
      EXPECT_EQ(errno, EINVAL);
    }
    // Reads of the whole capacity and of nothing are fine.
    for (size_t len : {capacity, size_t{0}}) {
      void* mem = zs_obj_read_begin(pool_, h, len, local.data());
      EXPECT_NE(mem, nullptr) << len;
      zs_obj_read_end(pool_, h, len, mem);
    }
  }
  expect_untouched();
}

// A read left in progress would pin its zspage: compaction could not empty it. Three zspages
// of a class the fixture left empty each keep one object, read past its capacity; compaction
// must still gather the three into one zspage. (One thread fills a class's zspages one after
// the other, so objects i * objs_per_zspage are in different zspages.)
TEST_P(BadInput, RefusedReadsDoNotPinObjectsAgainstCompaction) {
  const size_t size = 300 * (page_size_ / 4096);
  const struct zs_class_stats cls = class_for_request(pool_, size);
  ASSERT_EQ(cls.obj_allocated, 0u);
  ASSERT_GE(cls.objs_per_zspage, 3u);
  std::vector<unsigned long> filled;
  for (unsigned i = 0; i < 3 * cls.objs_per_zspage; ++i) filled.push_back(store(size, 1000 + i));
  std::vector<unsigned long> kept;
  for (unsigned i = 0; i < filled.size(); ++i) {
    if (i % cls.objs_per_zspage == 0)
      kept.push_back(filled[i]);
    else
      free_tracked(filled[i]);
  }
  std::vector<uint8_t> local(2 * page_size_);
  for (unsigned long h : kept) {
    errno = 0;
    EXPECT_EQ(zs_obj_read_begin(pool_, h, zs_obj_capacity(pool_, h) + 1, local.data()), nullptr);
    EXPECT_EQ(errno, EINVAL);
  }
  zs_compact(pool_);
  const struct zs_class_stats after = class_for_request(pool_, size);
  EXPECT_EQ(after.obj_allocated, after.objs_per_zspage)
      << "the three kept objects should share one zspage after compaction";
  for (unsigned long h : kept) EXPECT_TRUE(check_object(pool_, h, live_[h], page_size_));
}

TEST_P(BadInput, ClassIndexOutOfRange) {
  struct zs_class_stats st{};
  for (unsigned index : {zs_class_count(pool_), zs_class_count(pool_) + 1, UINT_MAX}) {
    errno = 0;
    EXPECT_EQ(zs_class_stats(pool_, index, &st), -1) << index;
    EXPECT_EQ(errno, EINVAL) << index;
  }
  expect_untouched();
}

// Configurations out of range create nothing (EINVAL) and leave the existing pool alone.
TEST_P(BadInput, PoolConfigurationsOutOfRange) {
  auto expect_refused = [](const zs_pool_config& cfg, const std::string& what) {
    errno = 0;
    zs_pool* p = zs_create_pool_ex("bad", &cfg);
    EXPECT_EQ(p, nullptr) << what;
    EXPECT_EQ(errno, EINVAL) << what;
    zs_destroy_pool(p);
  };
  for (size_t page : {size_t{1}, size_t{2048}, size_t{8192}, size_t{32768}, size_t{131072}, SIZE_MAX}) {
    zs_pool_config cfg{};
    cfg.page_size = page;
    expect_refused(cfg, "page size " + std::to_string(page));
  }
  for (unsigned chain : {1u, 3u, 17u, 100u, UINT_MAX}) {
    zs_pool_config cfg{};
    cfg.chain_size = chain;
    expect_refused(cfg, "chain " + std::to_string(chain));
  }
  for (unsigned shards : {3u, 6u, 96u, 128u, UINT_MAX}) {
    zs_pool_config cfg{};
    cfg.nr_shards = shards;
    expect_refused(cfg, "shards " + std::to_string(shards));
  }
  // The edges of each range are accepted.
  for (auto [chain, shards] : {std::pair{4u, 1u}, std::pair{16u, 64u}}) {
    zs_pool_config cfg{};
    cfg.page_size = page_size_;
    cfg.chain_size = chain;
    cfg.nr_shards = shards;
    zs_pool* p = zs_create_pool_ex(nullptr, &cfg);
    ASSERT_NE(p, nullptr) << "chain " << chain << ", shards " << shards << ": errno " << errno;
    EXPECT_STREQ(zs_pool_name(p), "") << "a NULL name is treated as \"\"";
    zs_destroy_pool(p);
  }
  for (size_t page : {size_t{0}, size_t{2048}, size_t{3000}, size_t{4097}}) {
    errno = 0;
    EXPECT_EQ(zs_vm_source_create(page, 0, 0), nullptr) << "vm source page size " << page;
    EXPECT_EQ(errno, EINVAL) << "vm source page size " << page;
  }
  expect_untouched();
}

INSTANTIATE_TEST_SUITE_P(PageSizes, BadInput, ::testing::Values(size_t{4096}, size_t{16384}, size_t{65536}),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return "page" + std::to_string(info.param / 1024) + "k";
                         });

// NULL for the pool or an out pointer in the calls that return no handle, on a 4 KiB pool.
class NullArguments : public PoolFixture {
 protected:
  void SetUp() override {
    create_pool();
    for (size_t size : {size_t{24}, size_t{776}, size_t{4000}}) ASSERT_NE(store(size, size), 0u);
    pages_before_ = zs_get_total_pages(pool_);
  }
  void expect_untouched() {
    for (const auto& [h, bytes] : live_) EXPECT_TRUE(check_object(pool_, h, bytes, page_size_));
    EXPECT_EQ(zs_get_total_pages(pool_), pages_before_);
  }
  unsigned long any_handle() const { return live_.begin()->first; }
  unsigned long pages_before_ = 0;
};

// zs_obj_write with a NULL pool, handle 0 or a NULL src (size > 0) writes nothing and
// sets errno EINVAL.
TEST_F(NullArguments, ObjWriteNullPoolHandleZeroNullSrc) {
  std::vector<uint8_t> junk(4096, 0xee);
  errno = 0;
  zs_obj_write(nullptr, any_handle(), junk.data(), 16);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  zs_obj_write(pool_, 0, junk.data(), 16);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  zs_obj_write(pool_, any_handle(), nullptr, 16);
  EXPECT_EQ(errno, EINVAL);
  expect_untouched();
}

// zs_obj_read_begin with a NULL pool or handle 0 returns NULL with errno EINVAL (no
// read in progress); zs_obj_read_end with either is a no-op.
TEST_F(NullArguments, ReadBeginEndNullPoolAndHandleZero) {
  std::vector<uint8_t> local(4096);
  errno = 0;
  EXPECT_EQ(zs_obj_read_begin(nullptr, any_handle(), 16, local.data()), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(zs_obj_read_begin(pool_, 0, 16, local.data()), nullptr);
  EXPECT_EQ(errno, EINVAL);
  zs_obj_read_end(nullptr, any_handle(), 16, local.data());
  zs_obj_read_end(pool_, 0, 16, local.data());
  expect_untouched();
}

// 0 from the queries with a NULL pool (zs_obj_capacity also for handle 0), "" for
// the name, and 0 from zs_compact(NULL).
TEST_F(NullArguments, QueriesOnNullPool) {
  EXPECT_EQ(zs_obj_capacity(nullptr, any_handle()), 0u);
  EXPECT_EQ(zs_obj_capacity(pool_, 0), 0u);
  EXPECT_EQ(zs_compact(nullptr), 0u);
  EXPECT_EQ(zs_get_total_pages(nullptr), 0u);
  EXPECT_EQ(zs_pool_bookkeeping_bytes(nullptr), 0u);
  EXPECT_EQ(zs_huge_class_size(nullptr), 0u);
  EXPECT_EQ(zs_lookup_class_index(nullptr, 100), 0u);
  EXPECT_EQ(zs_class_count(nullptr), 0u);
  EXPECT_STREQ(zs_pool_name(nullptr), "");
  expect_untouched();
}

// zs_pool_stats with a NULL pool or NULL stats is a no-op (stats left as they were).
TEST_F(NullArguments, PoolStatsNullArguments) {
  struct zs_pool_stats s{};
  s.pages_compacted = 12345;
  zs_pool_stats(nullptr, &s);
  EXPECT_EQ(s.pages_compacted, 12345u);
  zs_pool_stats(pool_, nullptr);
  expect_untouched();
}

// zs_class_stats and zs_print_classes with a NULL pool or a NULL out return -1 with
// errno EINVAL.
TEST_F(NullArguments, ClassStatsAndPrintNullArguments) {
  struct zs_class_stats st{};
  errno = 0;
  EXPECT_EQ(zs_class_stats(nullptr, 0, &st), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(zs_class_stats(pool_, 0, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  errno = 0;
  EXPECT_EQ(zs_print_classes(nullptr, f), -1);
  EXPECT_EQ(errno, EINVAL);
  std::fclose(f);
  errno = 0;
  EXPECT_EQ(zs_print_classes(pool_, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  expect_untouched();
}

// a size above a page maps to the largest (huge) class, as a page does.
TEST_F(NullArguments, LookupClassIndexAboveAPage) {
  const unsigned page_class = zs_lookup_class_index(pool_, 4096);
  for (unsigned size : {4097u, 8192u, UINT_MAX})
    EXPECT_EQ(zs_lookup_class_index(pool_, size), page_class) << size;
}

// a page source whose alloc_page or free_page is NULL is refused with EINVAL.
TEST_F(NullArguments, PageSourceWithNullCallbacks) {
  FailingPageSource real;
  zs_page_source half = *real.source();
  half.alloc_page = nullptr;
  zs_pool_config cfg{};
  cfg.page_source = &half;
  errno = 0;
  EXPECT_EQ(zs_create_pool_ex("bad", &cfg), nullptr);
  EXPECT_EQ(errno, EINVAL);
  half = *real.source();
  half.free_page = nullptr;
  errno = 0;
  EXPECT_EQ(zs_create_pool_ex("bad", &cfg), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// the vm source calls take NULL as nothing: 0 pages, destroy a no-op, and ops with
// NULL callbacks (so a pool given them is refused with EINVAL).
TEST(VmSourceBadInput, NullVmSource) {
  EXPECT_EQ(zs_vm_source_pages_in_use(nullptr), 0u);
  EXPECT_EQ(zs_vm_source_pages_resident(nullptr), 0u);
  zs_vm_source_destroy(nullptr);
  zs_page_source ops = zs_vm_source_ops(nullptr);
  EXPECT_EQ(ops.alloc_page, nullptr);
  EXPECT_EQ(ops.free_page, nullptr);
  zs_pool_config cfg{};
  cfg.page_source = &ops;
  errno = 0;
  zs_pool* p = zs_create_pool_ex("bad", &cfg);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(errno, EINVAL);
  zs_destroy_pool(p);
}

// zs_vm_source_create_ex refuses a NULL config, a bad page size and a limit below one page
// (EINVAL); a limit of one page or more than ZS_VM_SOURCE_MAX_BYTES is taken.
TEST(VmSourceBadInput, ConfigOutOfRange) {
  errno = 0;
  EXPECT_EQ(zs_vm_source_create_ex(nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  for (size_t page : {size_t{0}, size_t{2048}, size_t{3000}, size_t{4097}}) {
    zs_vm_source_config cfg{page, 0, 0, 0};
    errno = 0;
    EXPECT_EQ(zs_vm_source_create_ex(&cfg), nullptr) << "page size " << page;
    EXPECT_EQ(errno, EINVAL) << "page size " << page;
  }
  for (size_t limit : {size_t{1}, size_t{16383}}) {
    zs_vm_source_config cfg{16384, 0, limit, 0};
    errno = 0;
    EXPECT_EQ(zs_vm_source_create_ex(&cfg), nullptr) << "limit " << limit;
    EXPECT_EQ(errno, EINVAL) << "limit " << limit;
  }
  for (size_t limit : {size_t{16384}, ZS_VM_SOURCE_MAX_BYTES + 1, SIZE_MAX}) {
    zs_vm_source_config cfg{16384, SIZE_MAX, limit, 0};
    zs_vm_source* vm = zs_vm_source_create_ex(&cfg);
    EXPECT_NE(vm, nullptr) << "limit " << limit << ": errno " << errno;
    zs_vm_source_destroy(vm);
  }
}

}  // namespace
