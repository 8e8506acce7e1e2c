// tests/zsm/vm_source_test.cpp: the default page source (zs_vm_source) past one reservation. With a
// small reservation unit a source hands out many units' worth of pages, reuses pages freed
// from any of them, and a pool on it stores, frees and compacts as on one range. A limit on
// the source ends in ENOMEM, for the source's own calls and for a pool's stores.
#include "test_support.h"

#include <iterator>
#include <cstdint>
#include <set>

namespace {

using namespace zsm_test;

constexpr size_t kPage = 4096;

// Takes `n` pages from the source; stops at the first failure.
std::vector<void*> take_pages(const zs_page_source& ops, size_t n) {
  std::vector<void*> pages;
  for (size_t i = 0; i < n; i++) {
    void* p = ops.alloc_page(ops.ctx);
    if (p == nullptr) break;
    pages.push_back(p);
  }
  return pages;
}

void give_back(const zs_page_source& ops, const std::vector<void*>& pages) {
  for (void* p : pages) ops.free_page(ops.ctx, p);
}

class OnePageReservations : public ::testing::TestWithParam<size_t> {};

// Pages of one-page reservations: distinct, aligned, writable, and reused once freed.
TEST_P(OnePageReservations, PagesAreDistinctWritableAndReused) {
  const size_t page = GetParam(), n = 300;
  zs_vm_source* vm = zs_vm_source_create(page, 1, 4);  // 1 byte: rounded up to one page
  ASSERT_NE(vm, nullptr) << "errno " << errno;
  zs_page_source ops = zs_vm_source_ops(vm);
  std::vector<void*> pages = take_pages(ops, n);
  ASSERT_EQ(pages.size(), n) << "errno " << errno;
  for (size_t i = 0; i < n; i++) {
    ASSERT_EQ(reinterpret_cast<uintptr_t>(pages[i]) % page, 0u);
    fill_pattern(pages[i], page, i);
  }
  for (size_t i = 0; i < n; i++)
    ASSERT_EQ(std::memcmp(pages[i], make_pattern(page, i).data(), page), 0) << "page " << i;
  std::set<void*> first(pages.begin(), pages.end());
  EXPECT_EQ(first.size(), n) << "every page is handed out once";
  EXPECT_EQ(zs_vm_source_pages_in_use(vm), n);

  give_back(ops, pages);
  EXPECT_EQ(zs_vm_source_pages_in_use(vm), 0u);
  EXPECT_LE(zs_vm_source_pages_resident(vm), 4u) << "beyond retain, pages go back to the OS";
  std::vector<void*> again = take_pages(ops, n);
  ASSERT_EQ(again.size(), n);
  EXPECT_EQ(std::set<void*>(again.begin(), again.end()), first)
      << "pages freed from every reservation are reused before a new one is made";
  give_back(ops, again);
  zs_vm_source_destroy(vm);
}

INSTANTIATE_TEST_SUITE_P(PageSizes, OnePageReservations,
                         ::testing::Values(size_t{4096}, size_t{65536}),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return "page" + std::to_string(info.param / 1024) + "k";
                         });

// A limit that is not a multiple of the unit cuts the last reservation: exactly the pages
// below the limit are handed out, then ENOMEM, and freed pages serve again.
TEST(VmSource, LimitEndsInENOMEMAndFreedPagesServeAgain) {
  zs_vm_source_config cfg{};
  cfg.page_size = kPage;
  cfg.reserve_bytes = 3 * kPage;
  cfg.limit_bytes = 10 * kPage + 100;  // rounded down to 10 pages
  cfg.retain_pages = 2;
  zs_vm_source* vm = zs_vm_source_create_ex(&cfg);
  ASSERT_NE(vm, nullptr) << "errno " << errno;
  zs_page_source ops = zs_vm_source_ops(vm);
  std::vector<void*> pages = take_pages(ops, 10);
  ASSERT_EQ(pages.size(), 10u) << "errno " << errno;
  for (size_t i = 0; i < pages.size(); i++) fill_pattern(pages[i], kPage, i);
  errno = 0;
  EXPECT_EQ(ops.alloc_page(ops.ctx), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(zs_vm_source_pages_in_use(vm), 10u);

  std::vector<void*> some(pages.end() - 3, pages.end());
  pages.resize(pages.size() - 3);
  give_back(ops, some);
  std::vector<void*> again = take_pages(ops, 5);
  EXPECT_EQ(std::set<void*>(again.begin(), again.end()), std::set<void*>(some.begin(), some.end()));
  for (size_t i = 0; i < pages.size(); i++)
    EXPECT_EQ(std::memcmp(pages[i], make_pattern(kPage, i).data(), kPage), 0) << "page " << i;
  give_back(ops, pages);
  give_back(ops, again);
  EXPECT_EQ(zs_vm_source_pages_in_use(vm), 0u);
  zs_vm_source_destroy(vm);
}

// The objects a pool test stored, each pattern-filled from its number.
class StoredObjects {
 public:
  // Stores the next object of a fixed cycle of sizes; false, with errno, when the pool
  // refuses it.
  bool store_next(zs_pool* pool) {
    static constexpr size_t kSizes[] = {3000, 776, 100, 4000, 1160};
    size_t size = kSizes[objs_.size() % std::size(kSizes)];
    fill_pattern(buf_.data(), size, objs_.size());
    errno = 0;
    unsigned long h = zs_store(pool, buf_.data(), size);
    if (h == 0) return false;
    objs_.push_back({h, size});
    return true;
  }
  // Every object reads back as it was stored.
  ::testing::AssertionResult intact(zs_pool* pool) const {
    for (size_t i = 0; i < objs_.size(); i++) {
      ::testing::AssertionResult r = check_object(pool, objs_[i].h, make_pattern(objs_[i].size, i));
      if (!r) return r << " (object " << i << ")";
    }
    return ::testing::AssertionSuccess();
  }
  // Frees every `stride`-th object, from the first.
  void free_every(zs_pool* pool, size_t stride) const {
    for (size_t i = 0; i < objs_.size(); i += stride) zs_free(pool, objs_[i].h);
  }
  [[nodiscard]] size_t count() const { return objs_.size(); }

 private:
  struct Stored {
    unsigned long h;
    size_t size;
  };
  std::vector<Stored> objs_;
  std::vector<uint8_t> buf_ = std::vector<uint8_t>(kPage);
};

// A one-shard pool on `ops`.
zs_pool* pool_on(const zs_page_source* ops, const char* name) {
  zs_pool_config cfg{};
  cfg.page_source = ops;
  cfg.nr_shards = 1;
  return zs_create_pool_ex(name, &cfg);
}

// A pool on a source of 1 MiB reservations stores 24 MiB of pages: every object reads back,
// and freeing everything and compacting returns every page to the source.
TEST(VmSource, PoolGrowsAcrossReservations) {
  const size_t unit = size_t{1} << 20, target_pages = 24 * unit / kPage;
  zs_vm_source* vm = zs_vm_source_create(kPage, unit, 16);
  ASSERT_NE(vm, nullptr) << "errno " << errno;
  zs_page_source ops = zs_vm_source_ops(vm);
  zs_pool* pool = pool_on(&ops, "vm-grow");
  ASSERT_NE(pool, nullptr) << "errno " << errno;

  StoredObjects objs;
  while (zs_get_total_pages(pool) < target_pages)
    ASSERT_TRUE(objs.store_next(pool)) << "store " << objs.count() << " at "
                                       << zs_get_total_pages(pool) << " pages: errno " << errno;
  EXPECT_EQ(zs_vm_source_pages_in_use(vm), zs_get_total_pages(pool));
  ASSERT_TRUE(objs.intact(pool));

  objs.free_every(pool, 1);
  zs_compact(pool);
  EXPECT_EQ(zs_get_total_pages(pool), 0u);
  EXPECT_EQ(zs_vm_source_pages_in_use(vm), 0u);
  EXPECT_LE(zs_vm_source_pages_resident(vm), 16u);
  zs_destroy_pool(pool);
  zs_vm_source_destroy(vm);
}

// A pool on a source limited to 8 MiB of 1 MiB reservations: stores end in ENOMEM with every
// earlier object intact, and the pool stores again once objects are freed.
TEST(VmSource, PoolAtTheSourceLimitFailsCleanly) {
  zs_vm_source_config vcfg{};
  vcfg.page_size = kPage;
  vcfg.reserve_bytes = size_t{1} << 20;
  vcfg.limit_bytes = size_t{8} << 20;
  vcfg.retain_pages = 16;
  zs_vm_source* vm = zs_vm_source_create_ex(&vcfg);
  ASSERT_NE(vm, nullptr) << "errno " << errno;
  zs_page_source ops = zs_vm_source_ops(vm);
  zs_pool* pool = pool_on(&ops, "vm-limit");
  ASSERT_NE(pool, nullptr) << "errno " << errno;

  StoredObjects objs;
  while (objs.store_next(pool)) {
  }
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_LE(zs_get_total_pages(pool), vcfg.limit_bytes / kPage);
  EXPECT_GT(zs_get_total_pages(pool), vcfg.limit_bytes / kPage * 9 / 10);
  EXPECT_EQ(zs_vm_source_pages_in_use(vm), zs_get_total_pages(pool));
  ASSERT_TRUE(objs.intact(pool));

  objs.free_every(pool, 2);
  zs_compact(pool);
  std::vector<uint8_t> bytes(3000);
  EXPECT_NE(zs_store(pool, bytes.data(), bytes.size()), 0u) << "errno " << errno;
  zs_destroy_pool(pool);  // with live objects
  EXPECT_EQ(zs_vm_source_pages_in_use(vm), 0u);
  zs_vm_source_destroy(vm);
}

}  // namespace
