// The differential test of zsm against the kernel's own code: Debian's linux-source-6.1
// mm/zsmalloc.c, compiled unchanged in userspace (kernel/kernel.cmake, with
// CONFIG_ZSMALLOC_STAT so that the kernel's debugfs "classes" table can be read), and zsm's
// locked path (ZS_POOL_NO_THREAD_CACHE, one shard, chain 4 as 6.1's ZS_MAX_PAGES_PER_ZSPAGE)
// run the same operation streams: fills at every size, random frees, zs_compact(), random
// mixes, compaction again, everything freed. After each phase the class table (size, pages and
// objects per zspage, which indices are merged), zs_get_total_pages(), each class's objects
// allocated and used and pages used, and pages_compacted are compared, and every live object's
// bytes are checked on both sides. Where the two may differ, the test asserts exactly what the
// docs/ab.md's section "The differential test against the kernel's code" says and why.
#include <gtest/gtest.h>
#include <zsm/zsmalloc.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kapi.h"

namespace {

using Kernel = kzs::kernel;

struct ClassRow {
  unsigned size = 0, pages_per_zspage = 0, objs_per_zspage = 0;
  unsigned long obj_allocated = 0, obj_used = 0, pages_used = 0;
  unsigned long empty_zspages = 0;  // zsm's spare (the kernel frees a zspage that empties)
};

struct Snapshot {
  std::map<unsigned, ClassRow> classes;  // by class index, merged indices left out
  unsigned long total_pages = 0;
  unsigned long pages_compacted = 0;
};

// The kernel's debugfs table: " class size <fullness columns...> obj_allocated obj_used
// pages_used pages_per_zspage freeable", one line per class that is not merged.
Snapshot kernel_snapshot(void* pool) {
  std::vector<char> buf(1 << 20);
  long n = kshim_debugfs_show("classes", pool, buf.data(), buf.size());
  EXPECT_GT(n, 0) << "no debugfs classes file: is CONFIG_ZSMALLOC_STAT set?";
  Snapshot snap;
  std::istringstream in(std::string(buf.data(), n > 0 ? static_cast<size_t>(n) : 0));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::vector<unsigned long> v;
    unsigned long x;
    while (fields >> x) v.push_back(x);
    if (v.size() < 7 || !fields.eof()) continue;  // the header and the Total line
    ClassRow row;
    row.size = static_cast<unsigned>(v[1]);
    row.obj_allocated = v[v.size() - 5];
    row.obj_used = v[v.size() - 4];
    row.pages_used = v[v.size() - 3];
    row.pages_per_zspage = static_cast<unsigned>(v[v.size() - 2]);
    row.objs_per_zspage = row.pages_per_zspage * 4096 / row.size;
    snap.classes[static_cast<unsigned>(v[0])] = row;
  }
  snap.total_pages = Kernel::total_pages(pool);
  snap.pages_compacted = static_cast<unsigned long>(Kernel::pages_compacted(pool));
  return snap;
}

Snapshot zsm_snapshot(zs_pool* pool) {
  Snapshot snap;
  for (unsigned i = 0; i < zs_class_count(pool); i++) {
    struct zs_class_stats st{};
    int distinct = zs_class_stats(pool, i, &st);
    EXPECT_GE(distinct, 0);
    if (distinct != 1) continue;  // merged into a larger class
    snap.classes[i] = {st.size, st.pages_per_zspage, st.objs_per_zspage, st.obj_allocated,
                       st.obj_used, st.pages_used, st.zspages[0]};
  }
  struct zs_pool_stats stats{};
  zs_pool_stats(pool, &stats);
  snap.total_pages = zs_get_total_pages(pool);
  snap.pages_compacted = stats.pages_compacted;
  return snap;
}

// The bytes object `id` of `size` holds.
void fill(std::vector<unsigned char>& buf, unsigned long id, size_t size) {
  buf.resize(size);
  for (size_t i = 0; i < size; i++) buf[i] = static_cast<unsigned char>(id * 131 + i * 7 + 1);
}

struct Object {
  unsigned long id;
  size_t size;
  unsigned long kernel, zsm;  // the handle on each side
};

class KernelDiff : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(kzs::init_all()) << "the shimmed kernel's set-up failed";
  }

  void SetUp() override {
    kpool = Kernel::create();
    ASSERT_NE(kpool, nullptr);
    zs_pool_config cfg{};
    cfg.chain_size = 4;  // 6.1: ZS_MAX_ZSPAGE_ORDER 2
    cfg.nr_shards = 1;
    cfg.flags = ZS_POOL_NO_THREAD_CACHE;
    zpool = zs_create_pool_ex("diff", &cfg);
    ASSERT_NE(zpool, nullptr);
  }

  void TearDown() override {
    for (const Object& o : live) {
      Kernel::free(kpool, o.kernel);
      zs_free(zpool, o.zsm);
    }
    live.clear();
    Kernel::destroy(kpool);
    zs_destroy_pool(zpool);
    EXPECT_TRUE(kzs::all_memory_back())
        << kshim_pages_in_use() << " pages and " << kshim_slab_objects() << " slab objects";
    EXPECT_EQ(kshim_warnings(), 0u);
  }

  void alloc(size_t size) {
    unsigned long id = next_id++;
    fill(buf, id, size);
    unsigned long kh = Kernel::malloc(kpool, size);
    unsigned long zh = zs_malloc(zpool, size);
    ASSERT_NE(kh, 0u) << "kernel zs_malloc(" << size << ")";
    ASSERT_NE(zh, 0u) << "zsm zs_malloc(" << size << ")";
    Kernel::write(kpool, kh, buf.data(), size);
    zs_obj_write(zpool, zh, buf.data(), size);
    live.push_back({id, size, kh, zh});
  }

  void free_at(size_t k) {
    Kernel::free(kpool, live[k].kernel);
    zs_free(zpool, live[k].zsm);
    live[k] = live.back();
    live.pop_back();
  }

  // Every live object reads back as written, on both sides.
  void check_bytes() {
    std::vector<unsigned char> copy(4096);
    size_t bad_kernel = 0, bad_zsm = 0;
    for (const Object& o : live) {
      fill(buf, o.id, o.size);
      void* km = Kernel::read_begin(kpool, o.kernel, o.size, copy.data());
      bad_kernel += std::memcmp(km, buf.data(), o.size) != 0;
      Kernel::read_end(kpool, o.kernel, o.size, km);
      void* zm = zs_obj_read_begin(zpool, o.zsm, o.size, copy.data());
      bad_zsm += std::memcmp(zm, buf.data(), o.size) != 0;
      zs_obj_read_end(zpool, o.zsm, o.size, zm);
    }
    EXPECT_EQ(bad_kernel, 0u) << "kernel objects that read back wrong";
    EXPECT_EQ(bad_zsm, 0u) << "zsm objects that read back wrong";
  }

  // Compares the two sides after `phase`: the class table, objects in use and the bytes. The
  // placement figures (compare_placement) are left to the caller.
  std::pair<Snapshot, Snapshot> compare(const char* phase) {
    check_bytes();
    Snapshot k = kernel_snapshot(kpool), z = zsm_snapshot(zpool);
    EXPECT_EQ(k.classes.size(), z.classes.size()) << phase << ": merged classes differ";
    for (const auto& [index, kr] : k.classes) {
      auto it = z.classes.find(index);
      if (it == z.classes.end()) {
        ADD_FAILURE() << phase << ": class " << index << " is merged in zsm only";
        continue;
      }
      const ClassRow& zr = it->second;
      EXPECT_EQ(kr.size, zr.size) << phase << ", class " << index;
      if (chain_rules_differ(kr.size)) {
        // 6.1 sizes a zspage by the first chain with the highest whole percentage used; zsm
        // by the least waste, as kernels since 6.3 do (docs/ab.md: the differential test).
        EXPECT_EQ(kr.pages_per_zspage, chain_6_1(kr.size)) << phase << ", class " << index;
        EXPECT_EQ(zr.pages_per_zspage, chain_least_waste(zr.size)) << phase << ", class " << index;
      } else {
        EXPECT_EQ(kr.pages_per_zspage, zr.pages_per_zspage) << phase << ", class " << index;
        EXPECT_EQ(kr.objs_per_zspage, zr.objs_per_zspage) << phase << ", class " << index;
      }
      EXPECT_EQ(kr.obj_used, zr.obj_used) << phase << ", class " << index;
      EXPECT_EQ(kr.pages_used, kr.obj_allocated / kr.objs_per_zspage * kr.pages_per_zspage);
      EXPECT_LE(zr.empty_zspages, 1u) << phase << ": one spare per class (one shard)";
    }
    EXPECT_EQ(k.total_pages, pages_of(k, false)) << phase << ": kernel pages by class";
    EXPECT_EQ(z.total_pages, pages_of(z, false)) << phase << ": zsm pages by class";
    return {k, z};
  }

  // 6.1's get_pages_per_zspage(): the first chain of 1..4 pages with the most whole percent used.
  static unsigned chain_6_1(unsigned size) {
    unsigned best = 1, best_pc = 0;
    for (unsigned i = 1; i <= 4; i++) {
      unsigned zspage = i * 4096, pc = (zspage - zspage % size) * 100 / zspage;
      if (pc > best_pc) best_pc = pc, best = i;
    }
    return best;
  }
  // The newer kernels' calculate_zspage_chain_size(), which zsm follows: the least waste.
  static unsigned chain_least_waste(unsigned size) {
    if ((size & (size - 1)) == 0) return 1;
    unsigned best = 1, least = ~0u;
    for (unsigned i = 1; i <= 4; i++)
      if (i * 4096 % size < least) least = i * 4096 % size, best = i;
    return best;
  }
  static bool chain_rules_differ(unsigned size) { return chain_6_1(size) != chain_least_waste(size); }

  // Pages of every class; with `comparable`, of the classes whose zspages have the same size on
  // both sides, spares left out (zsm keeps one empty zspage per class; the kernel frees it).
  static unsigned long pages_of(const Snapshot& s, bool comparable) {
    unsigned long pages = 0;
    for (const auto& [index, r] : s.classes) {
      if (comparable && chain_rules_differ(r.size)) continue;
      unsigned long zspages = r.obj_allocated / r.objs_per_zspage;
      pages += (zspages - (comparable ? r.empty_zspages : 0)) * r.pages_per_zspage;
    }
    return pages;
  }

  // The placement: in every class of the same geometry the kernel holds the zspages zsm holds
  // less its spare, so the pages of those classes agree too.
  static void compare_placement(const std::pair<Snapshot, Snapshot>& s, const char* phase) {
    const auto& [k, z] = s;
    for (const auto& [index, kr] : k.classes) {
      const ClassRow& zr = z.classes.at(index);
      if (chain_rules_differ(kr.size)) continue;
      EXPECT_EQ(kr.obj_allocated, zr.obj_allocated - zr.empty_zspages * zr.objs_per_zspage)
          << phase << ", class " << index << " (size " << kr.size << ")";
    }
    EXPECT_EQ(pages_of(k, true), pages_of(z, true)) << phase;
  }

  // Within a random mix, 6.1 chooses among its four fullness groups (empty, up to 3/4, above
  // 3/4, full) where zsm, as newer kernels, chooses the fullest of twelve, so stores and the
  // zspages frees empty can differ: the pages held may differ by a few zspages (each one
  // printed), within 1 % of the comparable classes' pages. zs_compact() takes both back to the
  // same placement (compare_compaction()).
  static void compare_mixed_placement(const std::pair<Snapshot, Snapshot>& s, const char* phase) {
    const auto& [k, z] = s;
    for (const auto& [index, kr] : k.classes) {
      const ClassRow& zr = z.classes.at(index);
      unsigned long zsm_listed = zr.obj_allocated - zr.empty_zspages * zr.objs_per_zspage;
      if (!chain_rules_differ(kr.size) && kr.obj_allocated != zsm_listed)
        std::printf("%s: class %u (size %u): kernel %lu zspages, zsm %lu (spare left out)\n",
                    phase, index, kr.size, kr.obj_allocated / kr.objs_per_zspage,
                    zsm_listed / zr.objs_per_zspage);
    }
    double kp = static_cast<double>(pages_of(k, true)), zp = static_cast<double>(pages_of(z, true));
    EXPECT_LE(std::abs(kp - zp), 0.01 * kp) << phase << ": pages of the comparable classes";
  }

  // After zs_compact(): nothing left to compact on either side, no spare left in zsm, and the
  // pages compaction freed agree once zsm's spares (which it frees and counts) are taken off.
  void compare_compaction(const Snapshot& before_k, const Snapshot& before_z,
                          unsigned long kfreed, unsigned long zfreed, const char* phase) {
    auto s = compare(phase);
    const auto& [k, z] = s;
    for (const auto& [index, kr] : k.classes) {
      const ClassRow& zr = z.classes.at(index);
      EXPECT_LT(kr.obj_allocated - kr.obj_used, kr.objs_per_zspage) << phase << ", class " << index;
      EXPECT_LT(zr.obj_allocated - zr.obj_used, zr.objs_per_zspage) << phase << ", class " << index;
      EXPECT_EQ(zr.empty_zspages, 0u) << phase << ", class " << index;
    }
    compare_placement(s, phase);
    EXPECT_EQ(k.pages_compacted - before_k.pages_compacted, kfreed) << phase;
    EXPECT_EQ(z.pages_compacted - before_z.pages_compacted, zfreed) << phase;
    EXPECT_EQ(before_k.total_pages - k.total_pages, kfreed) << phase;
    EXPECT_EQ(before_z.total_pages - z.total_pages, zfreed) << phase;
    unsigned long kc = pages_of(before_k, true) - pages_of(k, true);
    unsigned long zc = pages_of(before_z, true) - pages_of(z, true);
    EXPECT_EQ(kc, zc) << phase << ": pages compaction freed in the comparable classes";
    std::printf("%s: kernel freed %lu pages, zsm %lu (spares included); pages held: kernel "
                "%lu, zsm %lu\n", phase, kfreed, zfreed, k.total_pages, z.total_pages);
  }

  void* kpool = nullptr;
  zs_pool* zpool = nullptr;
  std::vector<Object> live;
  std::vector<unsigned char> buf;
  unsigned long next_id = 1;
};

// Sizes 1..4096 in steps of 16 and the class boundaries' neighbours: every class is reached.
std::vector<size_t> every_size() {
  std::vector<size_t> sizes;
  for (size_t s = 1; s <= 4096; s += 16) sizes.push_back(s);
  for (size_t s : {24ul, 25ul, 3264ul, 3265ul, 4088ul, 4089ul, 4096ul}) sizes.push_back(s);
  return sizes;
}

TEST_F(KernelDiff, ClassTableIsTheKernels) {
  auto s = compare("empty pools");
  compare_placement(s, "empty pools");
  EXPECT_EQ(zs_huge_class_size(zpool), Kernel::huge_class_size(kpool));
  int differing = 0;
  for (const auto& [index, r] : s.first.classes) differing += chain_rules_differ(r.size);
  EXPECT_EQ(differing, 1) << "classes whose zspage size the two rules choose differently";
}

TEST_F(KernelDiff, FillsAtEverySize) {
  for (size_t size : every_size())
    for (int i = 0; i < 24; i++) alloc(size);
  compare_placement(compare("fill"), "fill");
}

TEST_F(KernelDiff, RandomFreesThenCompaction) {
  for (size_t size : every_size())
    for (int i = 0; i < 24; i++) alloc(size);
  std::mt19937_64 rng(7);
  for (size_t n = live.size() * 6 / 10; n > 0; n--) free_at(rng() % live.size());
  auto before = compare("random frees");
  compare_placement(before, "random frees");
  unsigned long kfreed = Kernel::compact(kpool), zfreed = zs_compact(zpool);
  compare_compaction(before.first, before.second, kfreed, zfreed, "zs_compact");
}

TEST_F(KernelDiff, RandomMixesThenCompactionThenEverythingFreed) {
  std::mt19937_64 rng(11);
  const std::vector<size_t> sizes = every_size();
  for (int op = 0; op < 30000; op++) {
    if (!live.empty() && rng() % 100 < 45)
      free_at(rng() % live.size());
    else
      alloc(sizes[rng() % sizes.size()]);
    if (op % 10000 == 9999) compare_mixed_placement(compare("random mix"), "random mix");
  }
  auto before = compare("random mix, end");
  unsigned long kfreed = Kernel::compact(kpool), zfreed = zs_compact(zpool);
  compare_compaction(before.first, before.second, kfreed, zfreed, "zs_compact after the mix");
  while (!live.empty()) free_at(live.size() - 1);
  auto empty = compare("everything freed");
  compare_placement(empty, "everything freed");
  EXPECT_EQ(empty.first.total_pages, 0u);
}

}  // namespace
