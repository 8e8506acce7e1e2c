// tests/support/test_support.h: helpers shared by the zsm GoogleTest suite. An owning pool pointer, the pattern seed of an
// object (the patterns are in bytes.h), reading and checking an object through
// zs_obj_read_begin/end, per-class stats invariants, a fault-injecting page source wrapping zs_vm_source, and a fixture whose
// TearDown frees every tracked object, compacts and checks that the pool holds no page, and a
// thread that compacts until stopped.
#pragma once

#include <zsm/zsmalloc.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bytes.h"

namespace zsm_test {

// A pool that a failed ASSERT does not leak.
struct PoolDeleter {
  void operator()(zs_pool* p) const { zs_destroy_pool(p); }
};
using PoolPtr = std::unique_ptr<zs_pool, PoolDeleter>;

// A seed for the pattern of an object, derived from its handle and size.
inline uint64_t seed_of(unsigned long handle, size_t size) {
  return mix64(static_cast<uint64_t>(handle) * 0x100000001b3ull ^ (static_cast<uint64_t>(size) << 1));
}

// Outcome of one read through zs_obj_read_begin/end.
struct ReadInfo {
  bool copied = false;  // the pool returned local_copy (the bytes span two pages)
};

// Read the first `len` bytes of `h` and compare them with `expected`. A direct pointer must
// lie within one page of `page_size` bytes. Safe to call from any thread (no gtest macros).
inline ::testing::AssertionResult check_object(zs_pool* pool, unsigned long h,
                                               const uint8_t* expected, size_t len,
                                               size_t page_size = 4096,
                                               ReadInfo* info = nullptr) {
  std::vector<uint8_t> local(len == 0 ? 1 : len);
  errno = 0;
  void* mem = zs_obj_read_begin(pool, h, len, local.data());
  if (mem == nullptr) {
    return ::testing::AssertionFailure()
           << "zs_obj_read_begin(h=" << h << ", len=" << len << ") returned NULL, errno " << errno;
  }
  const bool copied = mem == local.data();
  if (info != nullptr) info->copied = copied;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  if (!copied && len > 0) {
    auto a = reinterpret_cast<uintptr_t>(mem);
    if ((a / page_size) != ((a + len - 1) / page_size)) {
      result = ::testing::AssertionFailure()
               << "direct pointer for h=" << h << " len=" << len << " spans a page boundary (addr 0x"
               << std::hex << a << std::dec << ")";
    }
  }
  if (result && std::memcmp(mem, expected, len) != 0) {
    const auto* got = static_cast<const uint8_t*>(mem);
    size_t off = 0;
    while (off < len && got[off] == expected[off]) ++off;
    result = ::testing::AssertionFailure()
             << "content mismatch for h=" << h << " len=" << len << " at byte " << off
             << " (got " << int(got[off]) << ", want " << int(expected[off]) << ")"
             << (copied ? " [local copy]" : " [direct]");
  }
  zs_obj_read_end(pool, h, len, mem);
  return result;
}

inline ::testing::AssertionResult check_object(zs_pool* pool, unsigned long h,
                                               const std::vector<uint8_t>& expected,
                                               size_t page_size = 4096, ReadInfo* info = nullptr) {
  return check_object(pool, h, expected.data(), expected.size(), page_size, info);
}

// Sums over the distinct classes of a pool.
struct PoolTotals {
  unsigned distinct = 0;
  unsigned long obj_used = 0;
  unsigned long obj_allocated = 0;
  unsigned long pages_used = 0;
  unsigned long freeable = 0;
  unsigned long zspages = 0;
};

// Walk every class index, check the per-class invariants of the stats (kernel §3.9) and sum
// them. Only meaningful while no other thread changes the pool.
inline ::testing::AssertionResult collect_totals(zs_pool* pool, PoolTotals* out) {
  PoolTotals t;
  const unsigned n = zs_class_count(pool);
  for (unsigned i = 0; i < n; ++i) {
    struct zs_class_stats st{};
    int rc = zs_class_stats(pool, i, &st);
    if (rc < 0) return ::testing::AssertionFailure() << "zs_class_stats(" << i << ") failed";
    if (rc == 0) continue;
    ++t.distinct;
    unsigned long zsp = 0;
    for (unsigned long z : st.zspages) zsp += z;
    if (st.obj_allocated != zsp * st.objs_per_zspage)
      return ::testing::AssertionFailure()
             << "class " << i << " (size " << st.size << "): obj_allocated " << st.obj_allocated
             << " != zspages " << zsp << " * objs " << st.objs_per_zspage;
    if (st.obj_used > st.obj_allocated)
      return ::testing::AssertionFailure() << "class " << i << ": obj_used " << st.obj_used
                                           << " > obj_allocated " << st.obj_allocated;
    if (st.pages_used != st.obj_allocated / st.objs_per_zspage * st.pages_per_zspage)
      return ::testing::AssertionFailure() << "class " << i << ": pages_used " << st.pages_used
                                           << " inconsistent with obj_allocated " << st.obj_allocated;
    t.obj_used += st.obj_used;
    t.obj_allocated += st.obj_allocated;
    t.pages_used += st.pages_used;
    t.freeable += st.freeable;
    t.zspages += zsp;
  }
  *out = t;
  return ::testing::AssertionSuccess();
}

// Stats agree with the caller's live count, plus the slots threads' caches reserve, and with
// zs_get_total_pages(). Call it with no store or free of the pool in progress.
inline ::testing::AssertionResult check_stats_consistent(zs_pool* pool, size_t live) {
  PoolTotals t;
  auto r = collect_totals(pool, &t);
  if (!r) return r;
  struct zs_pool_stats s{};
  zs_pool_stats(pool, &s);
  if (t.obj_used != live + s.cached_objs)
    return ::testing::AssertionFailure() << "sum of obj_used " << t.obj_used << " != live objects "
                                         << live << " + slots caches reserve " << s.cached_objs;
  unsigned long total = zs_get_total_pages(pool);
  if (t.pages_used != total)
    return ::testing::AssertionFailure() << "sum of pages_used " << t.pages_used
                                         << " != zs_get_total_pages " << total;
  return ::testing::AssertionSuccess();
}

// Compact, then check the pool holds nothing: no page, no zspage, no object in any class.
inline ::testing::AssertionResult compact_and_check_empty(zs_pool* pool) {
  zs_compact(pool);
  unsigned long total = zs_get_total_pages(pool);
  if (total != 0)
    return ::testing::AssertionFailure() << "zs_get_total_pages() == " << total
                                         << " after freeing everything and zs_compact()";
  PoolTotals t;
  auto r = collect_totals(pool, &t);
  if (!r) return r;
  if (t.obj_used != 0 || t.obj_allocated != 0 || t.zspages != 0 || t.pages_used != 0)
    return ::testing::AssertionFailure() << "empty pool still shows obj_used " << t.obj_used
                                         << ", obj_allocated " << t.obj_allocated << ", zspages "
                                         << t.zspages << ", pages_used " << t.pages_used;
  return ::testing::AssertionSuccess();
}

// Fullness group of a zspage holding `inuse` of `objs` objects (kernel get_fullness_group).
inline int fullness_group(unsigned inuse, unsigned objs) {
  if (inuse == 0) return 0;
  if (inuse == objs) return ZS_NR_FULLNESS_GROUPS - 1;
  int ratio = static_cast<int>(100 * inuse / objs);
  return ratio / 10 + 1;
}

// The stats of the class that serves zs_malloc(size) (the lookup adds the 8-byte header).
inline struct zs_class_stats class_for_request(zs_pool* pool, size_t size) {
  struct zs_class_stats st{};
  unsigned idx = zs_lookup_class_index(pool, static_cast<unsigned>(size + ZS_HANDLE_SIZE));
  zs_class_stats(pool, idx, &st);
  return st;
}

// The default zs_vm_source behind a zs_page_source of the caller's, whose alloc_page and
// free_page a subclass defines (on top of inner_alloc and inner_free).
class WrappedVmSource {
 public:
  WrappedVmSource(const WrappedVmSource&) = delete;
  WrappedVmSource& operator=(const WrappedVmSource&) = delete;

  bool ok() const { return vm_ != nullptr; }
  // The source to put in zs_pool_config.page_source (lives as long as this object).
  const zs_page_source* source() const { return &ops_; }
  size_t vm_in_use() const { return zs_vm_source_pages_in_use(vm_); }

 protected:
  explicit WrappedVmSource(size_t page_size)
      : page_size_(page_size), vm_(zs_vm_source_create(page_size, 0, 0)) {
    if (vm_ != nullptr) inner_ = zs_vm_source_ops(vm_);
    ops_.alloc_page = &alloc_thunk;
    ops_.free_page = &free_thunk;
    ops_.ctx = this;
  }
  virtual ~WrappedVmSource() {
    if (vm_ != nullptr) zs_vm_source_destroy(vm_);
  }
  void* inner_alloc() { return inner_.alloc_page(inner_.ctx); }
  void inner_free(void* page) { inner_.free_page(inner_.ctx, page); }

  const size_t page_size_;

 private:
  virtual void* alloc() = 0;
  virtual void free(void* page) = 0;
  static void* alloc_thunk(void* ctx) { return static_cast<WrappedVmSource*>(ctx)->alloc(); }
  static void free_thunk(void* ctx, void* page) {
    static_cast<WrappedVmSource*>(ctx)->free(page);
  }

  zs_vm_source* vm_;
  zs_page_source inner_{};
  zs_page_source ops_{};
};

// How a scripted workload's page requests fail (FailingPageSource::start()): not at all, only
// the k-th from the start (1-based), or the k-th and every later one until the phase that
// met the first failure ends.
struct FaultPlan {
  enum Mode { none, once, until_phase_end } mode = none;
  unsigned long k = 0;
};

// A page source that fails on demand. Counts pages in use on its own (independently of the
// vm source's count) and the alloc_page calls it has seen.
class FailingPageSource final : public WrappedVmSource {
 public:
  explicit FailingPageSource(size_t page_size = 4096) : WrappedVmSource(page_size) {}

  // The n-th alloc_page call from now (1-based) and every later one fail, until recover().
  void fail_from(unsigned long n) {
    fail_at_ = calls_.load() + n;
    once_ = false;
  }
  // Only the n-th alloc_page call from now fails.
  void fail_once_at(unsigned long n) {
    fail_at_ = calls_.load() + n;
    once_ = true;
  }
  void recover() { fail_at_ = 0; }

  // Fails the requests from now as `plan` says.
  void start(FaultPlan plan) {
    plan_ = plan;
    recovered_ = false;
    if (plan.mode == FaultPlan::once) fail_once_at(plan.k);
    if (plan.mode == FaultPlan::until_phase_end) fail_from(plan.k);
  }
  // A phase of the plan's workload ended: requests failing until then stop failing.
  void end_phase() {
    if (plan_.mode == FaultPlan::until_phase_end && failures() > 0 && !recovered_) {
      recover();
      recovered_ = true;
    }
  }
  // end_phase() has stopped the plan's failures: no request fails from here on.
  bool recovered() const { return recovered_; }

  unsigned long calls() const { return calls_.load(); }
  unsigned long failures() const { return failures_.load(); }
  long in_use() const { return in_use_.load(); }

 private:
  void* alloc() override {
    unsigned long c = ++calls_;
    unsigned long f = fail_at_.load();
    if (f != 0 && (once_ ? c == f : c >= f)) {
      ++failures_;
      return nullptr;
    }
    void* p = inner_alloc();
    if (p != nullptr) ++in_use_;
    return p;
  }
  void free(void* page) override {
    --in_use_;
    inner_free(page);
  }

  FaultPlan plan_;
  bool recovered_ = false;
  std::atomic<unsigned long> calls_{0};
  std::atomic<unsigned long> failures_{0};
  std::atomic<unsigned long> fail_at_{0};
  std::atomic<bool> once_{false};
  std::atomic<long> in_use_{0};
};

// A page source whose pages are never contiguous within a zspage: it takes the default
// source's pages two at a time and hands out the higher one first, so consecutive pages run
// downwards. A pool on it takes the path for zspages a source cannot give contiguously
// (ZsPage::layout, the cached store's scattered branch). Thread-safe.
class ScatteredPageSource final : public WrappedVmSource {
 public:
  explicit ScatteredPageSource(size_t page_size = 4096) : WrappedVmSource(page_size) {}
  ~ScatteredPageSource() override {
    if (spare_ != nullptr) inner_free(spare_);
  }

  // Pages handed out that did not directly follow the one before.
  unsigned long breaks() const { return breaks_.load(); }

 private:
  void* alloc() override {
    std::lock_guard<std::mutex> guard(lock_);
    void* page = spare_;
    spare_ = nullptr;
    if (page == nullptr) {
      void* low = inner_alloc();
      page = low != nullptr ? inner_alloc() : nullptr;
      if (page == nullptr) return low;
      spare_ = low;
    }
    if (static_cast<char*>(page) != static_cast<char*>(last_) + page_size_) ++breaks_;
    last_ = page;
    return page;
  }
  void free(void* page) override {
    std::lock_guard<std::mutex> guard(lock_);
    inner_free(page);
  }

  std::mutex lock_;
  void* spare_ = nullptr;
  void* last_ = nullptr;
  std::atomic<unsigned long> breaks_{0};
};

// A pool plus the objects a test stored in it (handle -> expected bytes). TearDown checks
// every object once more, frees them all, compacts and expects an empty pool.
class PoolFixture : public ::testing::Test {
 protected:
  void create_pool(const zs_pool_config& cfg = {}) {
    destroy_pool();
    pool_ = zs_create_pool_ex("test", &cfg);
    ASSERT_NE(pool_, nullptr) << "zs_create_pool_ex failed, errno " << errno;
    page_size_ = cfg.page_size == 0 ? 4096 : cfg.page_size;
  }

  void SetUp() override { create_pool(); }

  void TearDown() override {
    if (pool_ == nullptr) return;
    for (auto& [h, bytes] : live_) {
      EXPECT_TRUE(check_object(pool_, h, bytes, page_size_));
      zs_free(pool_, h);
    }
    live_.clear();
    EXPECT_TRUE(compact_and_check_empty(pool_));
    zs_destroy_pool(pool_);
    pool_ = nullptr;
  }

  void destroy_pool() {
    if (pool_ != nullptr) {
      zs_destroy_pool(pool_);
      pool_ = nullptr;
    }
    live_.clear();
  }

  // Store `size` pattern bytes; track the object. Returns 0 (and tracks nothing) on failure.
  unsigned long store(size_t size, uint64_t seed) {
    std::vector<uint8_t> bytes = make_pattern(size, seed);
    unsigned long h = zs_store(pool_, bytes.data(), size);
    if (h != 0) {
      EXPECT_EQ(live_.count(h), 0u) << "handle " << h << " handed out twice";
      live_[h] = std::move(bytes);
    }
    return h;
  }

  void free_tracked(unsigned long h) {
    auto it = live_.find(h);
    ASSERT_NE(it, live_.end());
    EXPECT_TRUE(check_object(pool_, h, it->second, page_size_));
    zs_free(pool_, h);
    live_.erase(it);
  }

  zs_pool* pool_ = nullptr;
  size_t page_size_ = 4096;
  std::unordered_map<unsigned long, std::vector<uint8_t>> live_;
};

// A thread that calls zs_compact() until told to stop; sums what it returns.
class Compactor {
 public:
  explicit Compactor(zs_pool* pool) : pool_(pool), thread_([this] { run(); }) {}
  ~Compactor() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  unsigned long freed() const { return freed_.load(); }
  unsigned long calls() const { return calls_.load(); }

 private:
  void run() {
    while (!stop_) {
      freed_ += zs_compact(pool_);
      ++calls_;
      std::this_thread::yield();
    }
  }
  zs_pool* pool_;
  std::atomic<bool> stop_{false};
  std::atomic<unsigned long> freed_{0};
  std::atomic<unsigned long> calls_{0};
  std::thread thread_;
};

}  // namespace zsm_test
