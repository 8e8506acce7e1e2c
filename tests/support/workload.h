// tests/support/workload.h: the one engine of the tests that make random operations. A test
// states its mix (named operations with weights), its target (a pool, a cache, a model of
// either) and what must hold: the operations' own checks, checks run every n steps, and the
// test's final check. A Workload draws each step's operation from a std::mt19937_64 seeded by
// the test, so a run replays from its seed; the first operation that fails ends the run, and
// the failure names the seed, the step and the operation.
//
//   PoolTarget pool(p);
//   Workload<PoolTarget> mix(pool, seed);
//   mix.op("store", 30, &PoolTarget::store, Needs::room)
//      .op("free", 25, &PoolTarget::free, Needs::a_live_object)
//      .every(500, "zs_check_pool", &PoolTarget::check_pool)
//      .at_most(3000);
//   ASSERT_TRUE(mix.run(20000));
//   ASSERT_TRUE(pool.finish());
//
// The checked live set (LiveSet) keeps every stored object's expected bytes. PoolTarget is a
// pool with one: its reads and frees check the bytes, and finish() checks and frees every
// object and expects a pool holding no page. A cache target keeps its model in a LiveSet of
// keys (which forgets what the cache evicted) or in versions of its own, and states its
// operations as lambdas over it.
//
// Operations return an AssertionResult and use no gtest assertion, so that worker threads may
// each run a Workload of their own (over a PoolTarget of their own on a shared pool). The
// operations documented "single user" hold only while no other thread uses the pool.
// Depends on test_support.h and bytes.h.
#pragma once

#include <zsm/zsmalloc.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bytes.h"
#include "test_support.h"

namespace zsm_test {

using Rng = std::mt19937_64;
using Check = ::testing::AssertionResult;

// ---- the engine --------------------------------------------------------------------------------

// What an operation needs of its target's live set to be drawn: nothing, an object to act on,
// or room for one more (the population bound of Workload::at_most).
enum class Needs { nothing, a_live_object, room };

// How often each operation ran, by name; added over the workloads of several threads.
class OpCounts {
 public:
  void add(const std::string& name, uint64_t n = 1) { counts_[name] += n; }
  OpCounts& operator+=(const OpCounts& other) {
    for (const auto& [name, n] : other.counts_) counts_[name] += n;
    return *this;
  }
  uint64_t operator[](const std::string& name) const {
    auto it = counts_.find(name);
    return it == counts_.end() ? 0 : it->second;
  }
  uint64_t total() const {
    uint64_t sum = 0;
    for (const auto& [name, n] : counts_) sum += n;
    return sum;
  }
  // "free 4988, read 3597, store 6012"
  std::string to_string() const {
    std::string s;
    for (const auto& [name, n] : counts_)
      s += (s.empty() ? "" : ", ") + name + " " + std::to_string(n);
    return s;
  }

 private:
  std::map<std::string, uint64_t> counts_;
};

// A weighted mix of operations on one target, run step by step. A target whose operations
// need something of its live set (Needs other than nothing) has `size_t live_size() const`.
template <class Target>
class Workload {
 public:
  using Fn = std::function<Check(Target&, Rng&)>;

  Workload(Target& target, uint64_t seed) : target_(target), seed_(seed), rng_(seed) {}

  // An operation drawn with probability weight / (sum of the weights of those that can run).
  Workload& op(std::string name, unsigned weight, Fn fn, Needs needs = Needs::nothing) {
    ops_.push_back({std::move(name), weight, std::move(fn), needs});
    return *this;
  }
  // A check run after every `n`-th step (and after step 0).
  Workload& every(uint64_t n, std::string name, Fn fn) {
    checks_.push_back({std::move(name), n, std::move(fn)});
    return *this;
  }
  // Operations that need room are not drawn while the target holds `live` objects.
  Workload& at_most(size_t live) {
    max_live_ = live;
    return *this;
  }
  // Called after every step: a watchdog's beat.
  Workload& on_step(std::function<void()> fn) {
    on_step_ = std::move(fn);
    return *this;
  }

  // Runs `steps` more steps. The first failure ends the run: "seed S, step N (name): why".
  Check run(uint64_t steps) {
    for (uint64_t end = step_ + steps; step_ < end; ++step_) {
      Operation& op = draw();
      ++op.count;
      if (Check c = op.fn(target_, rng_); !c) return failed(op.name, c);
      for (const Periodic& check : checks_)
        if (step_ % check.n == 0)
          if (Check c = check.fn(target_, rng_); !c) return failed(check.name, c);
      if (on_step_) on_step_();
    }
    return ::testing::AssertionSuccess();
  }

  OpCounts counts() const {
    OpCounts counts;
    for (const Operation& op : ops_) counts.add(op.name, op.count);
    return counts;
  }
  uint64_t steps() const { return step_; }
  uint64_t seed() const { return seed_; }

 private:
  struct Operation {
    std::string name;
    unsigned weight;
    Fn fn;
    Needs needs;
    uint64_t count = 0;
  };
  struct Periodic {
    std::string name;
    uint64_t n;
    Fn fn;
  };

  // Whether the target's live set allows an operation that needs `needs`.
  bool allows(Needs needs, size_t live) const {
    if (needs == Needs::nothing) return true;
    return needs == Needs::a_live_object ? live > 0 : live < max_live_;
  }
  size_t live() const {
    if constexpr (requires(const Target& t) { t.live_size(); }) {
      return target_.live_size();
    } else {
      return 0;  // a target without a live set: its operations need nothing
    }
  }

  Operation& draw() {
    const size_t live_now = live();
    uint64_t total = 0;
    for (const Operation& op : ops_) total += allows(op.needs, live_now) ? op.weight : 0;
    if (total == 0) return no_operation_;
    uint64_t r = rng_() % total;
    for (Operation& op : ops_) {
      if (!allows(op.needs, live_now)) continue;
      if (r < op.weight) return op;
      r -= op.weight;
    }
    return no_operation_;  // not reached: r < total
  }

  Check failed(const std::string& name, const Check& why) const {
    return ::testing::AssertionFailure() << "workload seed " << seed_ << ", step " << step_ << " ("
                                         << name << "): " << why.message();
  }

  Target& target_;
  const uint64_t seed_;
  Rng rng_;
  std::vector<Operation> ops_;
  std::vector<Periodic> checks_;
  size_t max_live_ = SIZE_MAX;
  std::function<void()> on_step_;
  Operation no_operation_{"no operation can run", 0,
                          [](Target&, Rng&) { return ::testing::AssertionFailure(); },
                          Needs::nothing};
  uint64_t step_ = 0;
};

// ---- workloads on several threads -------------------------------------------------------------

// Failures seen by the workloads of several threads (or any thread's mismatches), and the
// first one's description.
class Mismatches {
 public:
  void record(const std::string& what) {
    if (count_++ == 0) {
      std::lock_guard<std::mutex> guard(mu_);
      first_ = what;
    }
  }
  unsigned long count() const { return count_.load(); }
  std::string first() const {
    std::lock_guard<std::mutex> guard(mu_);
    return first_;
  }

 private:
  std::atomic<unsigned long> count_{0};
  mutable std::mutex mu_;
  std::string first_;
};

// ---- the checked live set ----------------------------------------------------------------------

// Objects by key with the bytes each must hold; a random pick and a removal take O(1).
template <class Key, class Value = std::vector<uint8_t>>
class LiveSet {
 public:
  struct Object {
    Key key;
    Value bytes;
  };

  // False (and nothing added) when `key` is live already.
  bool add(Key key, Value bytes) {
    if (index_.count(key) != 0) return false;
    index_.emplace(key, objects_.size());
    objects_.push_back({std::move(key), std::move(bytes)});
    return true;
  }
  // Adds `key` or replaces its bytes.
  void set(const Key& key, Value bytes) {
    if (Object* o = find(key)) {
      o->bytes = std::move(bytes);
    } else {
      add(key, std::move(bytes));
    }
  }
  Object* find(const Key& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &objects_[it->second];
  }
  // A live object at random; the set must not be empty.
  Object& pick(Rng& rng) { return objects_[rng() % objects_.size()]; }
  // The object added last, while no other was removed since.
  Object& newest() { return objects_.back(); }
  // Takes `key` out of the set (it must be live) and returns it. `key` is a copy: the
  // caller's may be the object's own.
  Object take(Key key) {
    const size_t i = index_.at(key);
    Object o = std::move(objects_[i]);
    index_.erase(key);
    if (i + 1 != objects_.size()) {
      objects_[i] = std::move(objects_.back());
      index_[objects_[i].key] = i;
    }
    objects_.pop_back();
    return o;
  }
  bool erase(const Key& key) {
    if (index_.count(key) == 0) return false;
    take(key);
    return true;
  }
  void clear() {
    objects_.clear();
    index_.clear();
  }

  size_t size() const { return objects_.size(); }
  bool empty() const { return objects_.empty(); }
  auto begin() { return objects_.begin(); }
  auto end() { return objects_.end(); }
  auto begin() const { return objects_.begin(); }
  auto end() const { return objects_.end(); }

 private:
  std::vector<Object> objects_;
  std::unordered_map<Key, size_t> index_;
};

// ---- sizes -------------------------------------------------------------------------------------

using SizeDraw = std::function<size_t(Rng&)>;

// Sizes skewed toward typical compressed pages: mostly 100..3000, some anywhere in 1..4096,
// a few anywhere up to the page (which differs only for 16K/64K pages).
inline SizeDraw typical_sizes(size_t page_size = 4096) {
  return [page_size](Rng& rng) -> size_t {
    const unsigned r = rng() % 100;
    if (r < 80) return 100 + rng() % 2901;
    if (r < 95) return 1 + rng() % 4096;
    return 1 + rng() % page_size;
  };
}

// Any size in lo..hi.
inline SizeDraw uniform_sizes(size_t lo, size_t hi) {
  return [lo, hi](Rng& rng) -> size_t { return lo + rng() % (hi - lo + 1); };
}

// One of `sizes`.
inline SizeDraw sizes_of(std::vector<size_t> sizes) {
  return [sizes = std::move(sizes)](Rng& rng) { return sizes[rng() % sizes.size()]; };
}

// ---- a pool with its live set ------------------------------------------------------------------

using PoolObject = LiveSet<unsigned long>::Object;

// Objects in transit between the live sets of threads on one pool, at most kMaxQueued at a time.
class Handoff {
 public:
  static constexpr size_t kMaxQueued = 4096;

  // False (and `o` left as it was) when the queue is full.
  bool push(PoolObject& o) {
    std::lock_guard<std::mutex> guard(mu_);
    if (queue_.size() >= kMaxQueued) return false;
    queue_.push_back(std::move(o));
    return true;
  }
  std::optional<PoolObject> pop() {
    std::lock_guard<std::mutex> guard(mu_);
    if (queue_.empty()) return std::nullopt;
    PoolObject o = std::move(queue_.front());
    queue_.pop_front();
    return o;
  }
  size_t size() {
    std::lock_guard<std::mutex> guard(mu_);
    return queue_.size();
  }

 private:
  std::mutex mu_;
  std::deque<PoolObject> queue_;
};

// A pool and the objects a workload stored in it: every read checks every byte it reads
// against the live set, every free checks the object first.
class PoolTarget {
 public:
  LiveSet<unsigned long> live;
  SizeDraw sizes;  // what store and malloc_write draw

  // `hardened`: the pool takes writes only up to an object's size, not its capacity.
  explicit PoolTarget(zs_pool* pool, size_t page_size = 4096, bool hardened = false)
      : sizes(typical_sizes(page_size)), pool_(pool), page_size_(page_size), hardened_(hardened) {}

  zs_pool* pool() const { return pool_; }
  size_t live_size() const { return live.size(); }

  // ---- operations ----

  // zs_store of a pattern of a drawn size.
  Check store(Rng& rng) {
    const size_t size = sizes(rng);
    std::vector<uint8_t> bytes = make_pattern(size, rng());
    const unsigned long h = zs_store(pool_, bytes.data(), size);
    if (h == 0) return ::testing::AssertionFailure() << "zs_store(" << size << ") errno " << errno;
    return adopt(h, std::move(bytes));
  }
  // zs_malloc of a drawn size, then zs_obj_write of the pattern seed_of(handle, size).
  Check malloc_write(Rng& rng) {
    const size_t size = sizes(rng);
    const unsigned long h = zs_malloc(pool_, size);
    if (h == 0) return ::testing::AssertionFailure() << "zs_malloc(" << size << ") errno " << errno;
    std::vector<uint8_t> bytes = make_pattern(size, seed_of(h, size));
    errno = 0;
    zs_obj_write(pool_, h, bytes.data(), size);
    if (errno != 0)
      return ::testing::AssertionFailure() << "zs_obj_write(" << size << ") errno " << errno;
    return adopt(h, std::move(bytes));
  }
  // A live object, read whole.
  Check read(Rng& rng) { return check(live.pick(rng)); }
  // A live object's prefix of a random length.
  Check read_prefix(Rng& rng) {
    const PoolObject& o = live.pick(rng);
    const size_t len = o.bytes.empty() ? 0 : 1 + rng() % o.bytes.size();
    return check_object(pool_, o.key, o.bytes.data(), len, page_size_);
  }
  // A new pattern over a prefix of a live object, up to all it can take (its capacity, or its
  // size in a hardened pool), then the whole object read back.
  Check overwrite(Rng& rng) {
    PoolObject& o = live.pick(rng);
    const size_t capacity = zs_obj_capacity(pool_, o.key);
    if (capacity < o.bytes.size()) return below_capacity(o.key, capacity, o.bytes.size());
    const size_t len = 1 + rng() % (hardened_ ? o.bytes.size() : capacity);
    if (len > o.bytes.size()) o.bytes.resize(len);
    fill_pattern(o.bytes.data(), len, rng());
    errno = 0;
    zs_obj_write(pool_, o.key, o.bytes.data(), len);
    if (errno != 0)
      return ::testing::AssertionFailure() << "zs_obj_write(" << len << ") of h=" << o.key
                                           << " within its capacity, errno " << errno;
    return check(o);
  }
  // A live object, checked, then freed.
  Check free(Rng& rng) { return free_object(live.pick(rng).key); }
  // Single user: zs_compact() frees exactly the pages it reports and leaves none freeable.
  Check compact(Rng&) {
    const unsigned long before = zs_get_total_pages(pool_);
    const unsigned long freed = zs_compact(pool_);
    compacted_ += freed;
    const unsigned long after = zs_get_total_pages(pool_);
    if (after != before - freed)
      return ::testing::AssertionFailure() << "zs_compact() returned " << freed
                                           << " but the pool went from " << before << " to "
                                           << after << " pages";
    PoolTotals t;
    if (Check c = collect_totals(pool_, &t); !c) return c;
    if (t.freeable != 0)
      return ::testing::AssertionFailure() << "compaction left " << t.freeable << " pages freeable";
    return ::testing::AssertionSuccess();
  }
  // Single user: the statistics agree with the live set, and pages_compacted with what
  // compact() freed.
  Check check_stats(Rng&) {
    if (Check c = check_stats_consistent(pool_, live.size()); !c) return c;
    struct zs_pool_stats s{};
    zs_pool_stats(pool_, &s);
    if (s.pages_compacted != compacted_)
      return ::testing::AssertionFailure() << "pages_compacted " << s.pages_compacted << " != "
                                           << compacted_ << " that zs_compact() returned";
    return ::testing::AssertionSuccess();
  }
  // zs_check_pool() finds nothing wrong (it reports to stderr).
  Check check_pool(Rng&) {
    if (zs_check_pool(pool_, stderr) != 0)
      return ::testing::AssertionFailure() << "zs_check_pool() found violations";
    return ::testing::AssertionSuccess();
  }
  // A live object moves to `handoff`, for another thread's target (stays when it is full).
  Check hand_off(Handoff& handoff, Rng& rng) {
    PoolObject& o = live.pick(rng);
    const unsigned long h = o.key;
    if (handoff.push(o)) {
      live.erase(h);  // `o` was moved from
      ++handed_;
    }
    return ::testing::AssertionSuccess();
  }
  // Another thread's object from `handoff`, if any, checked; then kept in the live set when
  // `keep` says so, else freed here, by another thread than the one that stored it.
  Check receive(Handoff& handoff, bool keep) {
    std::optional<PoolObject> o = handoff.pop();
    if (!o) return ::testing::AssertionSuccess();
    ++received_;
    const unsigned long h = o->key;
    if (Check c = check(*o); !c) return c;
    if (keep) {
      live.add(h, std::move(o->bytes));
    } else {
      zs_free(pool_, h);
      ++freed_;
      ++cross_frees_;
    }
    return ::testing::AssertionSuccess();
  }

  // Every object in transit in `handoff` checked and freed here; the first mismatch is returned.
  Check receive_all(Handoff& handoff) {
    Check result = ::testing::AssertionSuccess();
    while (std::optional<PoolObject> o = handoff.pop()) {
      ++received_;
      if (Check c = check(*o); !c && result) result = c;
      zs_free(pool_, o->key);
      ++freed_;
      ++cross_frees_;
    }
    return result;
  }

  // ---- what a test's own operations are made of ----

  // A newly stored object joins the live set (its capacity at least its size).
  Check adopt(unsigned long h, std::vector<uint8_t> bytes) {
    const size_t capacity = zs_obj_capacity(pool_, h);
    if (capacity < bytes.size()) return below_capacity(h, capacity, bytes.size());
    if (!live.add(h, std::move(bytes)))
      return ::testing::AssertionFailure() << "handle " << h << " handed out while live";
    ++stored_;
    return ::testing::AssertionSuccess();
  }
  Check check(const PoolObject& o) const { return check_object(pool_, o.key, o.bytes, page_size_); }
  // Checks and frees a live object.
  Check free_object(unsigned long h) {
    PoolObject o = live.take(h);
    Check c = check(o);
    zs_free(pool_, h);
    ++freed_;
    return c;
  }

  // ---- the end ----

  // Every live object checked and freed; the first mismatch is returned.
  Check free_all() {
    Check result = ::testing::AssertionSuccess();
    while (!live.empty())
      if (Check c = free_object(live.newest().key); !c && result) result = c;
    return result;
  }
  // Single user: the statistics agree, every object is checked once more (its bytes, and its
  // capacity at least its size), then checked and freed, and the pool holds no page, no
  // zspage and no object after a compaction.
  Check finish() {
    Rng unused;
    if (Check c = check_stats(unused); !c) return c;
    for (const PoolObject& o : live) {
      if (Check c = check(o); !c) return c;
      const size_t capacity = zs_obj_capacity(pool_, o.key);
      if (capacity < o.bytes.size()) return below_capacity(o.key, capacity, o.bytes.size());
    }
    if (Check c = free_all(); !c) return c;
    if (Check c = check_stats_consistent(pool_, 0); !c) return c;
    return compact_and_check_empty(pool_);
  }

  // What this target did: objects stored (adopt) and freed (free_object, receive), objects
  // handed off and received, and how many of those it freed.
  uint64_t stored() const { return stored_; }
  uint64_t freed() const { return freed_; }
  uint64_t handed() const { return handed_; }
  uint64_t received() const { return received_; }
  uint64_t cross_frees() const { return cross_frees_; }

 private:
  static Check below_capacity(unsigned long h, size_t capacity, size_t size) {
    return ::testing::AssertionFailure() << "capacity " << capacity << " of h=" << h
                                         << " below its " << size << " bytes";
  }

  zs_pool* pool_;
  size_t page_size_;
  bool hardened_;
  unsigned long compacted_ = 0;
  uint64_t stored_ = 0, freed_ = 0, handed_ = 0, received_ = 0, cross_frees_ = 0;
};

}  // namespace zsm_test
