// tests/zsm/hardened_test.cpp: hardened pools (ZS_POOL_HARDENED). Each kind of misuse the mode
// promises to catch dies through the one fatal-report path with its message (death tests):
// a double free, a handle this pool never returned, a handle of another pool, an address
// that is no handle at all, reads and writes past an object's size, with huge objects too.
// Outside the death tests, a hardened pool must behave exactly like a default one (stores,
// reads, compaction; the cache on a hardened pool is tests/cache/cache_test.cpp's), and a
// default pool must keep allowing reads up to the object's capacity.
#include <zsm/zsmalloc.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"
#include "workload.h"

namespace {

using zsm_test::check_object;
using zsm_test::make_pattern;

zs_pool* hardened_pool(const char* name, unsigned shards = 2) {
  zs_pool_config cfg{};
  cfg.flags = ZS_POOL_HARDENED;
  cfg.nr_shards = shards;
  return zs_create_pool_ex(name, &cfg);
}

unsigned long store_pattern(zs_pool* pool, size_t size) {
  std::vector<uint8_t> bytes = make_pattern(size, size);
  return zs_store(pool, bytes.data(), size);
}

class HardenedDeath : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// The checks on a small object (its class is larger than it) and on huge ones (a page of
// their own): `size` is stored and freed twice, or `size + 1` bytes of it are read.
class HardenedDeathBySize : public HardenedDeath,
                            public ::testing::WithParamInterface<size_t> {};

TEST_P(HardenedDeathBySize, DoubleFree) {
  const size_t size = GetParam();
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h");
        unsigned long h = store_pattern(pool, size);
        zs_free(pool, h);
        zs_free(pool, h);
      },
      "zsm: fatal: pool 'h': zs_free\\(handle 0x[0-9a-f]+\\): handle is not allocated");
}

TEST_P(HardenedDeathBySize, ReadPastObjectSize) {
  const size_t size = GetParam();
  const std::string message = "zs_obj_read_begin\\(handle 0x[0-9a-f]+\\): " +
                              std::to_string(size + 1) + " bytes of an object of " +
                              std::to_string(size) + " bytes";
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h");
        unsigned long h = store_pattern(pool, size);
        static char buf[4096];
        zs_obj_read_begin(pool, h, size + 1, buf);
      },
      message);
}

INSTANTIATE_TEST_SUITE_P(Objects, HardenedDeathBySize,
                         ::testing::Values(size_t{100}, size_t{3700}, size_t{4000}),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return "Size" + std::to_string(info.param);
                         });

// A cell next to a live one, in the pool's region, that no store has used yet.
TEST_F(HardenedDeath, HandleNeverReturned) {
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h", 1);
        unsigned long h = store_pattern(pool, 100);
        zs_free(pool, h + 8 * 1000);
      },
      "zs_free\\(handle 0x[0-9a-f]+\\): handle is not allocated");
}

TEST_F(HardenedDeath, HandleOfAnotherPool) {
  EXPECT_DEATH(
      {
        zs_pool* mine = hardened_pool("mine");
        zs_pool* other = hardened_pool("other");
        unsigned long h = store_pattern(other, 100);
        zs_free(mine, h);
      },
      "pool 'mine': zs_free\\(handle 0x[0-9a-f]+\\): not a handle of this pool");
}

TEST_F(HardenedDeath, AddressThatIsNoHandle) {
  static long not_a_handle = 42;
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h");
        zs_free(pool, reinterpret_cast<unsigned long>(&not_a_handle));
      },
      "not a handle of this pool");
}

TEST_F(HardenedDeath, MisalignedHandle) {
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h");
        unsigned long h = store_pattern(pool, 100);
        zs_free(pool, h + 1);
      },
      "not a handle of this pool");
}

TEST_F(HardenedDeath, WritePastObjectSize) {
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h");
        unsigned long h = zs_malloc(pool, 64);
        char buf[72] = {};
        zs_obj_write(pool, h, buf, sizeof(buf));
      },
      "zs_obj_write\\(handle 0x[0-9a-f]+\\): 72 bytes of an object of 64 bytes");
}

TEST_F(HardenedDeath, ReadAfterFree) {
  EXPECT_DEATH(
      {
        zs_pool* pool = hardened_pool("h");
        unsigned long h = store_pattern(pool, 100);
        zs_free(pool, h);
        char buf[100];
        zs_obj_read_begin(pool, h, 10, buf);
      },
      "zs_obj_read_begin\\(handle 0x[0-9a-f]+\\): handle is not allocated");
}

TEST_F(HardenedDeath, CapacityOfForeignHandle) {
  EXPECT_DEATH(
      {
        zs_pool* a = hardened_pool("a");
        zs_pool* b = hardened_pool("b");
        zs_obj_capacity(a, store_pattern(b, 10));
      },
      "pool 'a': zs_obj_capacity\\(handle 0x[0-9a-f]+\\): not a handle of this pool");
}

// Two objects stored one after the other into a fresh one-shard pool share a zspage.
struct TwoObjects {
  zs_pool* pool;
  unsigned long a, b;
};

TwoObjects two_objects_in_one_zspage(const char* name) {
  zs_pool* pool = hardened_pool(name, 1);
  return {pool, store_pattern(pool, 100), store_pattern(pool, 100)};
}

// Each read misuse dies at the faulty call, with its message. Before, an unmatched
// zs_obj_read_end() left the zspage's reader count at -1 ("a writer holds it"): every later
// read of b spun forever. Each case is given two objects a and b stored into one zspage of
// pool 'h' and, where `reading`, the memory of a read of a in progress.
struct ReadMisuse {
  const char* name;
  bool reading;
  void (*misuse)(TwoObjects& t, void* mem);
  const char* message;
};

void PrintTo(const ReadMisuse& m, std::ostream* os) { *os << m.name; }

const ReadMisuse kReadMisuses[] = {
    {"ReadEndWithoutReadBegin", false,
     [](TwoObjects& t, void*) { zs_obj_read_end(t.pool, t.a, 100, nullptr); },
     "pool 'h': zs_obj_read_end\\(handle 0x[0-9a-f]+\\): no read of this handle is in progress"},
    {"ReadEndTwice", true,
     [](TwoObjects& t, void* mem) {
       zs_obj_read_end(t.pool, t.a, 100, mem);
       zs_obj_read_end(t.pool, t.a, 100, mem);
     },
     "zs_obj_read_end\\(handle 0x[0-9a-f]+\\): no read of this handle is in progress"},
    // Ending b's read instead of a's would leave a's zspage pinned for good.
    {"ReadEndOfAnotherHandle", true,
     [](TwoObjects& t, void* mem) { zs_obj_read_end(t.pool, t.b, 100, mem); },
     "zs_obj_read_end\\(handle 0x[0-9a-f]+\\): no read of this handle is in progress"},
    // A read of one pool is not ended through another pool with the same handle value.
    {"ReadEndThroughAnotherPool", true,
     [](TwoObjects& t, void* mem) { zs_obj_read_end(hardened_pool("other", 1), t.a, 100, mem); },
     "pool 'other': zs_obj_read_end\\(handle 0x[0-9a-f]+\\): not a handle of this pool"},
    {"FreeWhileThisThreadReads", true, [](TwoObjects& t, void*) { zs_free(t.pool, t.a); },
     "zs_free\\(handle 0x[0-9a-f]+\\): the object is being read by this thread"},
    // Another thread's free cannot be refused (nothing records which object of a zspage a
    // reader holds); the read's end finds the object gone and says so.
    {"FreedByAnotherThreadDuringARead", true,
     [](TwoObjects& t, void* mem) {
       std::thread([&] { zs_free(t.pool, t.a); }).join();
       zs_obj_read_end(t.pool, t.a, 100, mem);
     },
     "zs_obj_read_end\\(handle 0x[0-9a-f]+\\): the object was freed while this read was in "
     "progress"},
    {"TooManyReadsOnOneThread", false,
     [](TwoObjects& t, void*) {
       char buf[100];
       for (int i = 0; i < 1000; i++) zs_obj_read_begin(t.pool, t.a, 100, buf);
     },
     "zs_obj_read_begin\\(handle 0x[0-9a-f]+\\): more than [0-9]+ reads in progress on this "
     "thread"},
};

class HardenedReadMisuse : public HardenedDeath,
                           public ::testing::WithParamInterface<ReadMisuse> {};

TEST_P(HardenedReadMisuse, Dies) {
  EXPECT_DEATH(
      {
        TwoObjects t = two_objects_in_one_zspage("h");
        char buf[100];
        void* mem = GetParam().reading ? zs_obj_read_begin(t.pool, t.a, 100, buf) : nullptr;
        GetParam().misuse(t, mem);
      },
      GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(HardenedDeath, HardenedReadMisuse, ::testing::ValuesIn(kReadMisuses),
                         [](const ::testing::TestParamInfo<ReadMisuse>& info) {
                           return std::string(info.param.name);
                         });

// A's old handle, given to B, which was created after A was destroyed. B reuses A's cell
// region, so before, the stale handle equalled one of B's and freed B's object.
TEST_F(HardenedDeath, HandleOfADestroyedPool) {
  EXPECT_DEATH(
      {
        zs_pool* a = hardened_pool("a");
        unsigned long stale = store_pattern(a, 100);
        zs_destroy_pool(a);
        zs_pool* b = hardened_pool("b");
        store_pattern(b, 100);
        zs_free(b, stale);
      },
      "pool 'b': zs_free\\(handle 0x[0-9a-f]+\\): not a handle of this pool");
}

// Reads nest: several at once, of one handle twice, over two pools, ended in any order.
// Frees of other objects of the zspage go on meanwhile, and afterwards nothing is pinned.
TEST(Hardened, NestedReadsOverTwoPools) {
  TwoObjects t = two_objects_in_one_zspage("h");
  TwoObjects u = two_objects_in_one_zspage("u");
  unsigned long c = store_pattern(t.pool, 100);
  std::vector<uint8_t> expected = make_pattern(100, 100);
  char buf[4][100];
  void* a1 = zs_obj_read_begin(t.pool, t.a, 100, buf[0]);
  void* a2 = zs_obj_read_begin(t.pool, t.a, 100, buf[1]);
  void* ua = zs_obj_read_begin(u.pool, u.a, 100, buf[2]);
  void* b = zs_obj_read_begin(t.pool, t.b, 100, buf[3]);
  zs_free(t.pool, c);  // same zspage, not being read
  zs_obj_read_end(t.pool, t.a, 100, a1);
  EXPECT_EQ(std::memcmp(a2, expected.data(), 100), 0);
  zs_obj_read_end(t.pool, t.b, 100, b);
  zs_obj_read_end(u.pool, u.a, 100, ua);
  zs_obj_read_end(t.pool, t.a, 100, a2);
  EXPECT_EQ(zs_check_pool(t.pool, stderr), 0);
  EXPECT_EQ(zs_check_pool(u.pool, stderr), 0);
  for (TwoObjects* p : {&t, &u}) {
    zs_free(p->pool, p->a);
    EXPECT_TRUE(check_object(p->pool, p->b, expected));
    zs_free(p->pool, p->b);
    zs_compact(p->pool);
    EXPECT_EQ(zs_get_total_pages(p->pool), 0u);
    zs_destroy_pool(p->pool);
  }
}

// Handles of successive hardened pools differ, though their cells are at the same address.
TEST(Hardened, APoolDoesNotReuseADestroyedPoolsHandles) {
  zs_pool* a = hardened_pool("a");
  unsigned long stale = store_pattern(a, 100);
  zs_destroy_pool(a);
  zs_pool* b = hardened_pool("b");
  EXPECT_NE(store_pattern(b, 100), stale);
  zs_destroy_pool(b);
}

// Hardened handles go through everything that takes or rewrites one: profiling's tag slot,
// compaction's moves, the capacity and the check.
TEST(Hardened, ProfilingAndCompactionWithHardenedHandles) {
  int was = zs_alloc_profiling_set(1);
  zs_pool* pool = hardened_pool("h", 1);
  std::vector<unsigned long> handles;
  for (int i = 0; i < 2000; i++) handles.push_back(store_pattern(pool, 200));
  for (size_t i = 0; i < handles.size(); i++)
    if (i % 4 != 0) zs_free(pool, handles[i]);
  EXPECT_GT(zs_compact(pool), 0u);
  EXPECT_EQ(zs_check_pool(pool, stderr), 0);
  std::vector<uint8_t> expected = make_pattern(200, 200);
  for (size_t i = 0; i < handles.size(); i += 4) {
    ASSERT_TRUE(check_object(pool, handles[i], expected));
    EXPECT_GE(zs_obj_capacity(pool, handles[i]), 200u);
    zs_free(pool, handles[i]);
  }
  EXPECT_EQ(zs_check_pool(pool, stderr), 0);
  zs_destroy_pool(pool);
  if (was >= 0) zs_alloc_profiling_set(was);
}

// Under a valid workload a hardened pool behaves like a default one: no false report.
TEST(Hardened, BehavesLikeADefaultPool) {
  zsm_test::PoolPtr pool(hardened_pool("h", 4));
  ASSERT_NE(pool, nullptr);
  zsm_test::PoolTarget target(pool.get(), 4096, /*hardened=*/true);
  target.sizes = zsm_test::uniform_sizes(1, 4096);
  zsm_test::Workload<zsm_test::PoolTarget> mix(target, 7);
  mix.op("free", 1, &zsm_test::PoolTarget::free, zsm_test::Needs::a_live_object)
      .op("malloc+write", 2, &zsm_test::PoolTarget::malloc_write, zsm_test::Needs::room);
  ASSERT_TRUE(mix.run(20000));
  zsm_test::Rng unused;
  EXPECT_TRUE(target.compact(unused));
  EXPECT_TRUE(target.check_pool(unused));
  EXPECT_TRUE(target.finish());  // every object checked, its capacity at least its size
}

// Without the flag a read may cover the object's whole capacity (the kernel's contract);
// past the capacity it fails with EINVAL.
TEST(Hardened, DefaultPoolReadsUpToCapacity) {
  zs_pool* pool = zs_create_pool("d");
  unsigned long h = store_pattern(pool, 100);
  size_t capacity = zs_obj_capacity(pool, h);
  ASSERT_GT(capacity, 100u);
  std::vector<char> buf(capacity + 1);
  void* mem = zs_obj_read_begin(pool, h, capacity, buf.data());
  ASSERT_NE(mem, nullptr);
  zs_obj_read_end(pool, h, capacity, mem);
  errno = 0;
  EXPECT_EQ(zs_obj_read_begin(pool, h, capacity + 1, buf.data()), nullptr);
  EXPECT_EQ(errno, EINVAL);
  zs_free(pool, h);
  zs_destroy_pool(pool);
}

TEST(Hardened, UnknownFlagIsRejected) {
  zs_pool_config cfg{};
  cfg.flags = 0x80;
  errno = 0;
  EXPECT_EQ(zs_create_pool_ex("x", &cfg), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
