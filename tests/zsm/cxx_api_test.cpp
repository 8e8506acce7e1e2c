// tests/zsm/cxx_api_test.cpp: the C++ wrapper zsm.hpp. zsm::Pool, zsm::Handle and zsm::ReadView:
// RAII frees (the pool ends empty after compaction), move semantics of all three owners, and
// failures surfacing as std::system_error with the errno of the C call (EINVAL, ENOSPC).
#include <zsm/zsm.hpp>

#include "test_support.h"

#include <memory>
#include <string>
#include <type_traits>

namespace {

using namespace zsm_test;

static_assert(!std::is_copy_constructible_v<zsm::Pool>);
static_assert(!std::is_copy_constructible_v<zsm::Handle>);
static_assert(!std::is_copy_constructible_v<zsm::ReadView>);
static_assert(std::is_nothrow_move_constructible_v<zsm::Pool>);
static_assert(std::is_nothrow_move_constructible_v<zsm::Handle>);
static_assert(std::is_nothrow_move_assignable_v<zsm::Handle>);

std::vector<std::byte> bytes_of(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  fill_pattern(v.data(), n, seed);
  return v;
}

std::vector<std::byte> read_all(const zsm::Handle& h, size_t n) {
  std::vector<std::byte> out(n);
  h.read(out);
  return out;
}

// Expect `fn` to throw std::system_error with `code`.
template <typename Fn>
void expect_errc(Fn&& fn, std::errc code, const char* what) {
  try {
    fn();
    ADD_FAILURE() << what << ": no exception";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), std::make_error_code(code)) << what << ": " << e.what();
  } catch (...) {
    ADD_FAILURE() << what << ": not a std::system_error";
  }
}

TEST(CxxApi, StoreReadWriteRoundTrip) {
  zsm::Pool pool("cxx");
  EXPECT_STREQ(zs_pool_name(pool.get()), "cxx");
  EXPECT_EQ(pool.huge_class_size(), 3625u);
  {
    auto data = bytes_of(1000, 1);
    zsm::Handle h = pool.store(data);
    ASSERT_TRUE(h);
    EXPECT_NE(h.value(), 0u);
    EXPECT_EQ(h.capacity(), 1016u);  // 1008 -> index 61, merged into class 62 (1024); 1024 - 8
    EXPECT_EQ(read_all(h, 1000), data);
    auto more = bytes_of(1008, 2);
    h.write(more);
    EXPECT_EQ(read_all(h, 1008), more);
    EXPECT_GT(pool.total_pages(), 0u);

    zsm::Handle a = pool.allocate(3000);
    auto d3 = bytes_of(3000, 3);
    a.write(d3);
    EXPECT_EQ(read_all(a, 3000), d3);
    // ReadView: zero-copy when the bytes lie in one page, scratch otherwise; same bytes.
    std::vector<std::byte> scratch(3000);
    {
      zsm::ReadView v(pool.get(), a.value(), scratch);
      EXPECT_EQ(v.size(), 3000u);
      EXPECT_TRUE(std::equal(v.bytes().begin(), v.bytes().end(), d3.begin()));
    }
  }
  // Both handles went out of scope: nothing is left but spares.
  pool.compact();
  EXPECT_EQ(pool.total_pages(), 0u);
}

TEST(CxxApi, HandlesFreeOnDestruction) {
  zsm::Pool pool;
  {
    std::vector<zsm::Handle> hs;
    for (size_t i = 1; i <= 4096; i += 3) hs.push_back(pool.store(bytes_of(i, i)));
    EXPECT_GT(pool.total_pages(), 100u);
    for (size_t k = 0; k < hs.size(); ++k) {
      size_t n = 1 + 3 * k;
      EXPECT_EQ(read_all(hs[k], n), bytes_of(n, n)) << n;
    }
  }
  pool.compact();
  EXPECT_EQ(pool.total_pages(), 0u);
  EXPECT_TRUE(check_stats_consistent(pool.get(), 0));
}

TEST(CxxApi, HandleMoveSemantics) {
  zsm::Pool pool;
  auto data = bytes_of(500, 9);
  zsm::Handle a = pool.store(data);
  const unsigned long v = a.value();
  zsm::Handle b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(a.value(), 0u);
  EXPECT_EQ(b.value(), v);
  EXPECT_EQ(read_all(b, 500), data);

  // Move-assign over a live handle frees the old object.
  zsm::Handle c = pool.store(bytes_of(500, 10));
  EXPECT_TRUE(check_stats_consistent(pool.get(), 2));
  c = std::move(b);
  EXPECT_EQ(c.value(), v);
  EXPECT_FALSE(b);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(check_stats_consistent(pool.get(), 1));
  EXPECT_EQ(read_all(c, 500), data);

  // Self-move keeps the object.
  zsm::Handle& cref = c;
  c = std::move(cref);
  EXPECT_EQ(c.value(), v);
  EXPECT_EQ(read_all(c, 500), data);

  // reset() frees now; release() hands the raw handle over.
  c.reset();
  EXPECT_FALSE(c);
  EXPECT_TRUE(check_stats_consistent(pool.get(), 0));
  zsm::Handle d = pool.store(data);
  unsigned long raw = d.release();
  EXPECT_FALSE(d);
  EXPECT_TRUE(check_stats_consistent(pool.get(), 1));
  EXPECT_TRUE(check_object(pool.get(), raw, reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  zs_free(pool.get(), raw);
  // A default handle is empty and its destructor is harmless.
  zsm::Handle e;
  EXPECT_FALSE(e);
  e.reset();
  pool.compact();
  EXPECT_EQ(pool.total_pages(), 0u);
}

TEST(CxxApi, PoolMoveSemantics) {
  zsm::Pool a("a");
  zs_pool* raw = a.get();
  zsm::Pool b(std::move(a));
  EXPECT_EQ(a.get(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.get(), raw);
  {
    zsm::Handle h = b.store(bytes_of(64, 1));
    EXPECT_EQ(read_all(h, 64), bytes_of(64, 1));
  }
  // Move-assign destroys the target's pool first.
  zs_pool_config cfg{};
  cfg.chain_size = 4;
  zsm::Pool c("c", cfg);
  EXPECT_EQ(c.huge_class_size(), 3257u);
  c = std::move(b);
  EXPECT_EQ(c.get(), raw);
  EXPECT_EQ(c.huge_class_size(), 3625u);
  c.compact();
  EXPECT_EQ(c.total_pages(), 0u);
}

TEST(CxxApi, ErrorsThrowSystemError) {
  zsm::Pool pool;
  expect_errc([&] { (void)pool.allocate(0); }, std::errc::invalid_argument, "allocate(0)");
  expect_errc([&] { (void)pool.allocate(4097); }, std::errc::no_space_on_device, "allocate(4097)");
  expect_errc([&] { (void)pool.store({}); }, std::errc::invalid_argument, "store(empty)");
  auto big = bytes_of(5000, 1);
  expect_errc([&] { (void)pool.store(big); }, std::errc::no_space_on_device, "store(5000 bytes)");

  zsm::Handle h = pool.store(bytes_of(100, 5));
  const size_t cap = h.capacity();
  EXPECT_EQ(cap, 104u);  // class 112
  auto too_much = bytes_of(cap + 1, 6);
  expect_errc([&] { h.write(too_much); }, std::errc::invalid_argument, "write beyond capacity");
  EXPECT_EQ(read_all(h, 100), bytes_of(100, 5)) << "a refused write changed the object";
  expect_errc([&] { (void)read_all(h, cap + 1); }, std::errc::invalid_argument, "read beyond capacity");
  std::vector<std::byte> scratch(cap + 1);
  expect_errc([&] { zsm::ReadView v(pool.get(), h.value(), scratch); }, std::errc::invalid_argument,
              "ReadView beyond capacity");
  // Reading exactly the capacity is fine.
  std::vector<std::byte> exact(cap);
  h.read(exact);

  zs_pool_config bad{};
  bad.page_size = 8192;
  expect_errc([&] { zsm::Pool p("bad", bad); }, std::errc::invalid_argument, "Pool(page 8192)");
  bad = {};
  bad.chain_size = 17;
  expect_errc([&] { zsm::Pool p("bad", bad); }, std::errc::invalid_argument, "Pool(chain 17)");
  h.reset();
  pool.compact();
  EXPECT_EQ(pool.total_pages(), 0u);
}

TEST(CxxApi, StatsAndCompact) {
  zsm::Pool pool;
  std::vector<zsm::Handle> hs;
  for (int i = 0; i < 5000; ++i) hs.push_back(pool.store(bytes_of(300 + i % 700, i)));
  for (size_t i = 0; i < hs.size(); i += 2) hs[i].reset();
  const unsigned long before = pool.total_pages();
  const unsigned long freed = pool.compact();
  EXPECT_GT(freed, 0u);
  EXPECT_EQ(pool.total_pages(), before - freed);
  EXPECT_EQ(pool.stats().pages_compacted, freed);
  for (size_t i = 1; i < hs.size(); i += 2)
    EXPECT_EQ(read_all(hs[i], 300 + i % 700), bytes_of(300 + i % 700, i)) << i;
  hs.clear();
  pool.compact();
  EXPECT_EQ(pool.total_pages(), 0u);
}

TEST(CxxApi, LargerPages) {
  zs_pool_config cfg{};
  cfg.page_size = 65536;
  zsm::Pool pool("big", cfg);
  auto data = bytes_of(65536, 3);
  {
    zsm::Handle h = pool.store(data);
    EXPECT_EQ(h.capacity(), 65536u);
    EXPECT_EQ(read_all(h, data.size()), data);
    expect_errc([&] { (void)pool.allocate(65537); }, std::errc::no_space_on_device, "allocate(65537)");
  }
  pool.compact();
  EXPECT_EQ(pool.total_pages(), 0u);
}

// version.h is the one place the version is written: the macros agree with each other and
// with the version CMake read from them (project(VERSION), the soname, the package files).
TEST(Version, MacrosAgreeWithTheProject) {
  const std::string spelled = std::to_string(ZSM_VERSION_MAJOR) + "." +
                              std::to_string(ZSM_VERSION_MINOR) + "." +
                              std::to_string(ZSM_VERSION_PATCH);
  EXPECT_EQ(spelled, ZSM_VERSION_STRING);
  EXPECT_EQ(spelled, ZSM_PROJECT_VERSION);
  EXPECT_EQ(ZSM_VERSION, ZSM_VERSION_MAJOR * 10000 + ZSM_VERSION_MINOR * 100 + ZSM_VERSION_PATCH);
}

}  // namespace
