// tests/zsm/bookkeeping_test.cpp: zs_pool_bookkeeping_bytes() against what the pool really
// allocates, and the bound on what one thread's cache may reserve for every geometry. The
// heap part of a pool's bookkeeping (its structures) is counted by replacing the global
// operator new in this binary, which the library's allocations go through, for the time of
// one zs_create_pool_ex(); the rest (records carved from chunks) is zero until an object is
// stored. A binary of its own, so that the replaced operator new counts nothing else.
#include <gtest/gtest.h>
#include <zsm/zsmalloc.h>

#include <cstdlib>
#include <new>

#include "test_support.h"

namespace {

thread_local bool counting = false;
thread_local size_t counted_bytes = 0;

void* counted_alloc(size_t size, size_t align) {
  if (counting) counted_bytes += size;
  if (align <= alignof(std::max_align_t)) return std::malloc(size == 0 ? 1 : size);
  return std::aligned_alloc(align, (size + align - 1) / align * align);
}

}  // namespace

void* operator new(size_t size) {
  if (void* p = counted_alloc(size, 0)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept { return counted_alloc(size, 0); }
void* operator new[](size_t size, const std::nothrow_t&) noexcept { return counted_alloc(size, 0); }
void* operator new(size_t size, std::align_val_t align) {
  if (void* p = counted_alloc(size, static_cast<size_t>(align))) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size, std::align_val_t align) { return operator new(size, align); }
void* operator new(size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  return counted_alloc(size, static_cast<size_t>(align));
}
void* operator new[](size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  return counted_alloc(size, static_cast<size_t>(align));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

struct Geometry {
  size_t page_size;
  unsigned chain;
  unsigned shards;
};

// zs_pool_bookkeeping_bytes() of a new pool is what its creation allocated.
TEST(Bookkeeping, ANewPoolCountsWhatItsCreationAllocated) {
  zsm_test::FailingPageSource source;  // a source of the caller's: the pool makes none
  ASSERT_TRUE(source.ok());
  for (Geometry g : {Geometry{4096, 8, 1}, {4096, 16, 4}, {16384, 4, 2}, {65536, 8, 1}}) {
    SCOPED_TRACE(testing::Message() << g.page_size << " B pages, chain " << g.chain << ", "
                                    << g.shards << " shards");
    zs_pool_config cfg{};
    cfg.page_size = g.page_size;
    cfg.chain_size = g.chain;
    cfg.nr_shards = g.shards;
    cfg.page_source = source.source();
    zs_destroy_pool(zs_create_pool_ex("", &cfg));  // process-wide set-up happens once
    counted_bytes = 0;
    counting = true;
    zs_pool* pool = zs_create_pool_ex("", &cfg);
    counting = false;
    ASSERT_NE(pool, nullptr);
    EXPECT_EQ(zs_pool_bookkeeping_bytes(pool), counted_bytes);
    // Records add what their chunks have carved, and no heap allocation.
    unsigned long h = zs_malloc(pool, 100);
    EXPECT_GT(zs_pool_bookkeeping_bytes(pool), counted_bytes);
    zs_free(pool, h);
    zs_destroy_pool(pool);
  }
}

// What one thread's cache may reserve in a pool, for every geometry, is the figure docs/design.md
// and zsm/src/tcache/thread_cache.h state: min(32, 4096 / size) slots of every class up to 4 KiB.
TEST(Bookkeeping, TheCacheBoundOfEveryGeometryIsTheDocumentedOne) {
  const unsigned long k4[] = {244208, 301424, 327648, 379008, 408000, 463088, 478032,
                              515104, 533232, 576704, 593760, 616096, 635248};
  const unsigned long k16[] = {171808, 194240, 200064, 204000, 204000, 207296, 207296,
                               211296, 211296, 211296, 211296, 211296, 211296};
  for (size_t page_size : {4096, 16384, 65536}) {
    for (unsigned chain = 4; chain <= 16; chain++) {
      zs_pool_config cfg{};
      cfg.page_size = page_size;
      cfg.chain_size = chain;
      zsm_test::PoolPtr pool(zs_create_pool_ex("bound", &cfg));
      ASSERT_NE(pool, nullptr);
      struct zs_pool_stats s{};
      zs_pool_stats(pool.get(), &s);
      unsigned long want = page_size == 4096    ? k4[chain - 4]
                           : page_size == 16384 ? k16[chain - 4]
                                                : 50560;
      EXPECT_EQ(s.cached_bytes_per_thread, want) << page_size << " B pages, chain " << chain;
      EXPECT_LE(s.cached_bytes_per_thread, 635248u);
    }
  }
}

}  // namespace
