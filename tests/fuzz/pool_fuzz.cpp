// tests/fuzz/pool_fuzz.cpp: libFuzzer target for the pool's C API (zsm/zsmalloc.h).
//
// An input is a program. Its first bytes make a pool: page size, chain size, lock shards and,
// optionally, a memory limit, a counting page source that fails every n-th page, and the
// hardened flag. Each later byte picks an operation, whose arguments follow it. A reference
// model keeps every live object's requested size, capacity and expected bytes; the bytes are
// a pattern of a write generation and, where it is known before the write, the handle.
//
// Checks: every read and every free compares the bytes (a direct read pointer must lie in one
// page); stats checks hold each class row against the model (objects per class, pages, the
// fullness groups, at most one spare empty zspage per shard), the pages against the page
// source and the Total row of zs_print_classes() against the rows, and run zs_check_pool();
// compaction must free what zs_get_total_pages() loses, leave nothing freeable, and not move
// an object with a read open. Threads: two threads store at once, free objects the other
// stored (into their own caches), store again and exit with what their caches hold. Errors must be the documented ones: EINVAL for size 0, a NULL
// source, a length past the capacity, a bad configuration; ENOSPC above a page; ENOMEM only
// under a memory limit or a failing page source. At the end every object is checked and
// freed, the pool compacted and expected to hold no page, and the page source must have every
// page back. A mismatch aborts with a message (FUZZ_CHECK).
//
// Input format (FuzzInput: bytes past the end read as 0; make_seeds.py writes the seeds):
//   program := pool op*
//   pool    := page:u8 chain:u8 shards:u8 options:u8 [limit:u8 if options&1]
//              [fail_every:u8 if options&2]
//              page: 4096/16384/65536 by page%3; chain: 4 + chain%13; shards:
//              kShardChoices[shards%8]; options&1: max_pages = 1 + limit; options&2: a
//              counting page source that fails every (fail_every%32)-th page, 0 = never;
//              options&4: ZS_POOL_HARDENED, where zsmalloc.h has it.
//   op      := kind:u8 arguments; kind%kNumOps is an Op, whose comment gives its arguments
//   size    := shape:u8 value:u16 (decode_size)
#include <zsm/zsmalloc.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <barrier>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "fuzz_support.h"

namespace {

using zsm_fuzz::FuzzInput;

constexpr size_t kPageSizes[] = {4096, 16384, 65536};
constexpr size_t kMaxLive = 2048;                    // objects the model holds at most
constexpr size_t kMaxLiveBytes = size_t{64} << 20;   // capacity the model holds at most
constexpr unsigned kDefaultShardsBound = 16;         // nr_shards 0: one per CPU, at most 16
// Lock shards per class; 0 is one per CPU. 64 is the most allowed, and makes the pool slow
// to create and to check, so it comes up rarely.
constexpr unsigned kShardChoices[] = {1, 1, 1, 2, 2, 4, 64, 0};

enum Op : uint8_t {
  kStore,               // size
  kStoreBurst,          // count:u8 size: up to 64 stores of one size
  kMallocWrite,         // size
  kRead,                // pick:u16 len:u16
  kOverwrite,           // pick:u16 len:u16
  kFree,                // pick:u16
  kFreeStride,          // stride:u8 offset:u8: frees every stride-th object
  kCompact,             //
  kReadDuringCompact,   // pick:u16
  kBadCall,             // which:u8 arg:u16
  kCheckStats,          //
  kRecreate,            // pool: destroys the pool with its objects, makes another
  kThreads,             // count:u8 size: two threads store, free each other's, store again
  kNumOps
};

// A page source over a zs_vm_source that counts the pages it has out and fails every n-th
// request (never when n is 0).
class CountingSource {
 public:
  CountingSource(size_t page_size, unsigned fail_every)
      : vm_(zs_vm_source_create(page_size, 0, 64)), fail_every_(fail_every) {
    FUZZ_CHECK(vm_ != nullptr, "zs_vm_source_create: errno %d", errno);
    inner_ = zs_vm_source_ops(vm_);
  }
  ~CountingSource() { zs_vm_source_destroy(vm_); }
  CountingSource(const CountingSource&) = delete;
  CountingSource& operator=(const CountingSource&) = delete;

  [[nodiscard]] zs_page_source ops() { return {&alloc_thunk, &free_thunk, this}; }
  [[nodiscard]] long in_use() const { return in_use_; }
  [[nodiscard]] bool fails() const { return fail_every_ != 0; }

 private:
  static void* alloc_thunk(void* self) { return static_cast<CountingSource*>(self)->alloc(); }
  static void free_thunk(void* self, void* page) {
    static_cast<CountingSource*>(self)->free(page);
  }

  void* alloc() {
    if (fail_every_ != 0 && ++requests_ % fail_every_ == 0) return nullptr;
    void* page = inner_.alloc_page(inner_.ctx);
    if (page != nullptr) in_use_++;
    return page;
  }

  void free(void* page) {
    in_use_--;
    inner_.free_page(inner_.ctx, page);
  }

  zs_vm_source* vm_;
  zs_page_source inner_{};
  unsigned fail_every_;
  unsigned long requests_ = 0;
  long in_use_ = 0;
};

struct LiveObject {
  unsigned long handle;
  size_t size;                 // as allocated
  size_t capacity;             // zs_obj_capacity()
  std::vector<uint8_t> bytes;  // what the object holds from its first byte on
};

// The live objects, picked by index; a freed object's slot takes the last one.
class Model {
 public:
  [[nodiscard]] bool empty() const { return objects_.empty(); }
  [[nodiscard]] size_t count() const { return objects_.size(); }
  [[nodiscard]] bool full() const { return count() >= kMaxLive || capacity_ >= kMaxLiveBytes; }
  [[nodiscard]] size_t capacity() const { return capacity_; }
  [[nodiscard]] bool holds(unsigned long handle) const { return index_.count(handle) != 0; }
  [[nodiscard]] const std::vector<LiveObject>& objects() const { return objects_; }
  LiveObject& at(size_t i) { return objects_[i]; }

  // The object `r` picks, or nullptr when there is none.
  LiveObject* pick(uint16_t r) { return empty() ? nullptr : &objects_[r % count()]; }

  void add(LiveObject obj) {
    capacity_ += obj.capacity;
    index_[obj.handle] = objects_.size();
    objects_.push_back(std::move(obj));
  }

  void remove(size_t i) {
    capacity_ -= objects_[i].capacity;
    index_.erase(objects_[i].handle);
    if (i + 1 != objects_.size()) {
      objects_[i] = std::move(objects_.back());
      index_[objects_[i].handle] = i;
    }
    objects_.pop_back();
  }

  void clear() {
    objects_.clear();
    index_.clear();
    capacity_ = 0;
  }

 private:
  std::vector<LiveObject> objects_;
  std::unordered_map<unsigned long, size_t> index_;
  size_t capacity_ = 0;
};

// Sets the hardened flag where this zsmalloc.h has one; returns whether the pool is hardened.
bool set_hardened(zs_pool_config& cfg, bool wanted) {
#ifdef ZS_POOL_HARDENED
  if (wanted) cfg.flags |= ZS_POOL_HARDENED;
  return wanted;
#else
  (void)cfg;
  (void)wanted;
  return false;
#endif
}

// Turns the per-thread cache off (the locked path) where this zsmalloc.h has the flag.
void set_locked_path(zs_pool_config& cfg, bool wanted) {
#ifdef ZS_POOL_NO_THREAD_CACHE
  if (wanted) cfg.flags |= ZS_POOL_NO_THREAD_CACHE;
#else
  (void)cfg;
  (void)wanted;
#endif
}

class PoolFuzzer {
 public:
  explicit PoolFuzzer(FuzzInput& in) : in_(in) { create_pool(); }

  void run() {
    while (!in_.empty()) step(static_cast<Op>(in_.u8() % kNumOps));
    finish();
  }

 private:
  void step(Op op) {
    switch (op) {
      case kStore: store(decode_size()); break;
      case kStoreBurst: store_burst(); break;
      case kMallocWrite: malloc_write(decode_size()); break;
      case kRead: read(); break;
      case kOverwrite: overwrite(); break;
      case kFree: free_one(); break;
      case kFreeStride: free_stride(); break;
      case kCompact: compact(); break;
      case kReadDuringCompact: read_during_compact(); break;
      case kBadCall: bad_call(); break;
      case kCheckStats: check_stats(false); break;
      case kRecreate:
        destroy_pool();
        create_pool();
        break;
      case kThreads: threads(); break;
      case kNumOps: break;
    }
  }

  // --- the pool -----------------------------------------------------------------------------

  void create_pool() {
    zs_pool_config cfg{};
    page_size_ = kPageSizes[in_.u8() % 3];
    cfg.page_size = page_size_;
    cfg.chain_size = ZS_MIN_CHAIN_SIZE + in_.u8() % (ZS_MAX_CHAIN_SIZE - ZS_MIN_CHAIN_SIZE + 1);
    cfg.nr_shards = kShardChoices[in_.u8() % 8];
    shards_bound_ = cfg.nr_shards != 0 ? cfg.nr_shards : kDefaultShardsBound;
    uint8_t options = in_.u8();
    max_pages_ = (options & 1) != 0 ? 1 + in_.u8() : 0;
    cfg.max_pages = max_pages_;
    if ((options & 2) != 0) {
      source_ = std::make_unique<CountingSource>(page_size_, in_.u8() % 32);
      source_ops_ = source_->ops();
      cfg.page_source = &source_ops_;
    }
    hardened_ = set_hardened(cfg, (options & 4) != 0);
    set_locked_path(cfg, (options & 8) != 0);
    pool_ = zs_create_pool_ex("fuzz", &cfg);
    FUZZ_CHECK(pool_ != nullptr, "zs_create_pool_ex(page %zu, chain %u, shards %u): errno %d",
               page_size_, cfg.chain_size, cfg.nr_shards, errno);
    huge_size_ = zs_huge_class_size(pool_);
    FUZZ_CHECK(huge_size_ > 32 && huge_size_ < page_size_, "huge class size %zu, page %zu",
               huge_size_, page_size_);
    compacted_ = 0;
  }

  // Destroys the pool with whatever it holds: every page must go back to the source.
  void destroy_pool() {
    zs_destroy_pool(pool_);
    pool_ = nullptr;
    model_.clear();
    if (source_ == nullptr) return;
    FUZZ_CHECK(source_->in_use() == 0, "zs_destroy_pool() kept %ld pages of its source",
               source_->in_use());
    source_.reset();
  }

  // Frees every object (checking it), compacts, and expects an empty pool.
  void finish() {
    check_stats(false);
    while (!model_.empty()) free_at(model_.count() - 1);
    compact_checked();
    FUZZ_CHECK(zs_get_total_pages(pool_) == 0, "%lu pages held with no object after zs_compact()",
               zs_get_total_pages(pool_));
    check_stats(true);
    destroy_pool();
  }

  // --- sizes and patterns -------------------------------------------------------------------

  // Small, anywhere up to the page, around the huge class boundary, or near the page.
  size_t decode_size() {
    uint8_t shape = in_.u8();
    uint16_t value = in_.u16();
    switch (shape % 4) {
      case 0: return 1 + value % 256;
      case 1: return 1 + value % page_size_;
      case 2: return huge_size_ - 16 + value % 32;
      default: return page_size_ - value % 64;
    }
  }

  std::vector<uint8_t> next_pattern(size_t n, unsigned long handle) {
    std::vector<uint8_t> bytes(n);
    zsm_test::fill_pattern(bytes.data(), n, zsm_test::mix64(++generation_) ^ handle);
    return bytes;
  }

  // Bytes a read or write may cover: the capacity, or in a hardened pool the size allocated.
  [[nodiscard]] size_t accessible(const LiveObject& obj) const {
    return hardened_ ? obj.size : obj.capacity;
  }

  // --- stores -------------------------------------------------------------------------------

  void store(size_t size) {
    if (model_.full()) return;
    std::vector<uint8_t> bytes = next_pattern(size, 0);
    errno = 0;
    unsigned long handle = zs_store(pool_, bytes.data(), size);
    if (handle == 0) {
      check_alloc_failure("zs_store", size);
      return;
    }
    track(handle, size, std::move(bytes), "zs_store");
  }

  void store_burst() {
    unsigned count = 1 + in_.u8() % 64;
    size_t size = decode_size();
    for (unsigned i = 0; i < count; i++) store(size);
  }

  void malloc_write(size_t size) {
    if (model_.full()) return;
    errno = 0;
    unsigned long handle = zs_malloc(pool_, size);
    if (handle == 0) {
      check_alloc_failure("zs_malloc", size);
      return;
    }
    std::vector<uint8_t> bytes = next_pattern(size, handle);
    errno = 0;
    zs_obj_write(pool_, handle, bytes.data(), size);
    FUZZ_CHECK(errno == 0, "zs_obj_write(%zu bytes) into a new %zu-byte object: errno %d", size,
               size, errno);
    track(handle, size, std::move(bytes), "zs_malloc");
  }

  // A store or malloc of a valid size failed: ENOMEM, and only where memory is bounded.
  void check_alloc_failure(const char* call, size_t size) {
    int err = errno;
    FUZZ_CHECK(err == ENOMEM, "%s(%zu) failed with errno %d", call, size, err);
    FUZZ_CHECK(max_pages_ != 0 || (source_ != nullptr && source_->fails()),
               "%s(%zu): ENOMEM with no memory limit and a page source that never fails", call,
               size);
    check_limit();
  }

  void track(unsigned long handle, size_t size, std::vector<uint8_t> bytes, const char* call) {
    FUZZ_CHECK(!model_.holds(handle), "%s returned handle %#lx, which is live", call, handle);
    size_t capacity = zs_obj_capacity(pool_, handle);
    if (size >= huge_size_) {
      FUZZ_CHECK(capacity == page_size_, "a huge %zu-byte object (huge from %zu) has capacity %zu",
                 size, huge_size_, capacity);
    } else {
      FUZZ_CHECK(capacity >= size && capacity < huge_size_,
                 "a %zu-byte object (huge from %zu) has capacity %zu", size, huge_size_, capacity);
    }
    model_.add({handle, size, capacity, std::move(bytes)});
    check_limit();
  }

  // --- reads and writes ---------------------------------------------------------------------

  void read() {
    uint16_t pick = in_.u16(), len = in_.u16();
    if (LiveObject* obj = model_.pick(pick)) check_read(*obj, len % (accessible(*obj) + 1), "read");
  }

  // Reads the first `len` bytes of the object and compares what the model knows of them.
  void check_read(const LiveObject& obj, size_t len, const char* when) {
    std::vector<uint8_t> local(std::max<size_t>(len, 1));
    errno = 0;
    void* mem = zs_obj_read_begin(pool_, obj.handle, len, local.data());
    FUZZ_CHECK(mem != nullptr,
               "%s: zs_obj_read_begin(%zu) of a %zu-byte object (capacity %zu): errno %d", when,
               len, obj.size, obj.capacity, errno);
    if (mem != local.data()) check_in_one_page(mem, len);
    check_bytes(obj, static_cast<const uint8_t*>(mem), len, when);
    zs_obj_read_end(pool_, obj.handle, len, mem);
  }

  void check_in_one_page(const void* mem, size_t len) const {
    if (len == 0) return;
    auto first = reinterpret_cast<uintptr_t>(mem);
    uintptr_t last = first + len - 1;
    FUZZ_CHECK(first / page_size_ == last / page_size_,
               "a direct read pointer %#zx for %zu bytes crosses a %zu-byte page boundary",
               static_cast<size_t>(first), len, page_size_);
  }

  static void check_bytes(const LiveObject& obj, const uint8_t* got, size_t len, const char* when) {
    size_t n = std::min(len, obj.bytes.size());
    size_t at = zsm_fuzz::first_difference(got, obj.bytes.data(), n);
    FUZZ_CHECK(at == n, "%s: a %zu-byte object (capacity %zu) differs at byte %zu of %zu read",
               when, obj.size, obj.capacity, at, len);
  }

  void overwrite() {
    uint16_t pick = in_.u16(), len_sel = in_.u16();
    LiveObject* obj = model_.pick(pick);
    if (obj == nullptr) return;
    size_t len = len_sel % (accessible(*obj) + 1);
    std::vector<uint8_t> fresh = next_pattern(len, obj->handle);
    errno = 0;
    zs_obj_write(pool_, obj->handle, fresh.data(), len);
    FUZZ_CHECK(errno == 0, "zs_obj_write(%zu) into a %zu-byte object (capacity %zu): errno %d",
               len, obj->size, obj->capacity, errno);
    if (len > obj->bytes.size()) obj->bytes.resize(len);
    std::copy(fresh.begin(), fresh.end(), obj->bytes.begin());
  }

  // --- frees --------------------------------------------------------------------------------

  void free_at(size_t i) {
    const LiveObject& obj = model_.at(i);
    check_read(obj, obj.bytes.size(), "before zs_free");
    zs_free(pool_, obj.handle);
    model_.remove(i);
  }

  void free_one() {
    uint16_t pick = in_.u16();
    if (!model_.empty()) free_at(pick % model_.count());
  }

  // Frees the objects whose index is `offset` modulo `stride`: holes in many zspages. From
  // the top down, so that the object moved into a freed slot has been looked at already.
  void free_stride() {
    size_t stride = 2 + in_.u8() % 7;
    size_t offset = in_.u8() % stride;
    for (size_t i = model_.count(); i-- > 0;)
      if (i % stride == offset) free_at(i);
  }

  // --- threads ------------------------------------------------------------------------------

  // What one of threads()'s workers stored, and the patterns it stores: made beforehand, as
  // the generation counter is the fuzzer's.
  struct Worker {
    std::vector<std::vector<uint8_t>> first, second;  // patterns of its two rounds of stores
    std::vector<LiveObject> stored;                   // its first round, in order
    std::vector<LiveObject> kept;                     // its second round
  };

  // Two threads each store `count` objects of one size; once both are done, each reads and
  // frees every other object the *other* stored (a free from another thread than the store's:
  // the slot joins the freeing thread's cache) and stores count / 2 + 1 more of the size,
  // which take those slots; then it exits, and its cache goes back to the pool. What is left
  // joins the model, which every later check holds the pool to.
  void threads() {
    unsigned count = 1 + in_.u8() % 64;
    size_t size = decode_size();
    if (model_.count() + 4 * count > kMaxLive ||
        model_.capacity() + 4 * count * std::max(size, page_size_) > kMaxLiveBytes)
      return;
    Worker workers[2];
    for (Worker& w : workers) {
      for (unsigned i = 0; i < count; i++) w.first.push_back(next_pattern(size, 0));
      for (unsigned i = 0; i < count / 2 + 1; i++) w.second.push_back(next_pattern(size, 0));
    }
    std::barrier both_stored(2);
    auto work = [&](Worker& self, const Worker& other) {
      for (std::vector<uint8_t>& bytes : self.first)
        if (LiveObject obj; store_in_worker(bytes, obj)) self.stored.push_back(std::move(obj));
      both_stored.arrive_and_wait();
      for (size_t i = 0; i < other.stored.size(); i += 2) {
        check_read(other.stored[i], other.stored[i].bytes.size(), "before a cross-thread free");
        zs_free(pool_, other.stored[i].handle);
      }
      for (std::vector<uint8_t>& bytes : self.second)
        if (LiveObject obj; store_in_worker(bytes, obj)) self.kept.push_back(std::move(obj));
    };
    std::thread a(work, std::ref(workers[0]), std::cref(workers[1]));
    std::thread b(work, std::ref(workers[1]), std::cref(workers[0]));
    a.join();
    b.join();
    for (Worker& w : workers) {
      for (size_t i = 1; i < w.stored.size(); i += 2) adopt(std::move(w.stored[i]));
      for (LiveObject& obj : w.kept) adopt(std::move(obj));
    }
  }

  // A worker's zs_store() of `bytes`: true with `obj` filled in, or false after the failure
  // was checked to be a documented one.
  bool store_in_worker(std::vector<uint8_t>& bytes, LiveObject& obj) {
    errno = 0;
    unsigned long handle = zs_store(pool_, bytes.data(), bytes.size());
    if (handle == 0) {
      check_alloc_failure("zs_store (in a thread)", bytes.size());
      return false;
    }
    obj = {handle, bytes.size(), zs_obj_capacity(pool_, handle), std::move(bytes)};
    return true;
  }

  // An object a worker stored joins the model, its bytes checked.
  void adopt(LiveObject obj) {
    check_read(obj, obj.bytes.size(), "an object a thread stored");
    track(obj.handle, obj.size, std::move(obj.bytes), "zs_store (in a thread)");
  }

  // --- compaction ---------------------------------------------------------------------------

  // zs_compact(): the pages it reports freed are the pages the pool no longer holds.
  void compact_checked() {
    unsigned long before = zs_get_total_pages(pool_);
    unsigned long freed = zs_compact(pool_);
    compacted_ += freed;
    FUZZ_CHECK(freed <= before && zs_get_total_pages(pool_) == before - freed,
               "zs_compact() freed %lu pages, total went from %lu to %lu", freed, before,
               zs_get_total_pages(pool_));
  }

  void compact() {
    compact_checked();
    check_stats(true);
    unsigned long again = zs_compact(pool_);
    FUZZ_CHECK(again == 0, "a second zs_compact() freed %lu pages", again);
  }

  // A read stays open across zs_compact(): the object must not move, its bytes not change.
  void read_during_compact() {
    LiveObject* obj = model_.pick(in_.u16());
    if (obj == nullptr) return;
    size_t len = obj->bytes.size();
    std::vector<uint8_t> local(std::max<size_t>(len, 1));
    void* mem = zs_obj_read_begin(pool_, obj->handle, len, local.data());
    FUZZ_CHECK(mem != nullptr, "zs_obj_read_begin(%zu) of a %zu-byte object: errno %d", len,
               obj->size, errno);
    compact_checked();
    check_bytes(*obj, static_cast<const uint8_t*>(mem), len, "zs_compact() with a read open");
    zs_obj_read_end(pool_, obj->handle, len, mem);
    check_read(*obj, len, "after zs_compact() with a read open");
  }

  // --- errors -------------------------------------------------------------------------------

  static void expect_failure(bool failed, int want, const char* call) {
    int err = errno;
    FUZZ_CHECK(failed && err == want, "%s: %s, errno %d (want %d)", call,
               failed ? "failed" : "succeeded", err, want);
  }

  void bad_call() {
    uint8_t which = in_.u8();
    uint16_t arg = in_.u16();
    errno = 0;
    switch (which % 9) {
      case 0: expect_failure(zs_malloc(pool_, 0) == 0, EINVAL, "zs_malloc(0)"); break;
      case 1:
        expect_failure(zs_malloc(pool_, page_size_ + 1 + arg) == 0, ENOSPC,
                       "zs_malloc(above a page)");
        break;
      case 2:
        expect_failure(zs_store(pool_, nullptr, 1 + arg % page_size_) == 0, EINVAL,
                       "zs_store(NULL)");
        break;
      case 3: {
        std::vector<uint8_t> src(page_size_ + 64);
        expect_failure(zs_store(pool_, src.data(), 0) == 0, EINVAL, "zs_store(size 0)");
        errno = 0;
        expect_failure(zs_store(pool_, src.data(), page_size_ + 1 + arg % 63) == 0, ENOSPC,
                       "zs_store(above a page)");
        break;
      }
      case 4: read_past_capacity(arg); break;
      case 5: write_past_capacity(arg); break;
      case 6: free_no_ops(arg); break;
      case 7: bad_config(arg); break;
      default: {
        struct zs_class_stats st{};
        expect_failure(zs_class_stats(pool_, zs_class_count(pool_), &st) == -1, EINVAL,
                       "zs_class_stats(past the last index)");
        errno = 0;
        expect_failure(zs_malloc(nullptr, 1) == 0, EINVAL, "zs_malloc(NULL pool)");
        break;
      }
    }
  }

  // mem_len past the capacity: NULL and EINVAL, and no read left open. A hardened pool
  // aborts on it by design, so it is skipped there.
  void read_past_capacity(uint16_t arg) {
    LiveObject* obj = model_.pick(arg);
    if (obj == nullptr || hardened_) return;
    size_t len = obj->capacity + 1 + arg % 64;
    std::vector<uint8_t> local(len);
    expect_failure(zs_obj_read_begin(pool_, obj->handle, len, local.data()) == nullptr, EINVAL,
                   "zs_obj_read_begin(past the capacity)");
    compact();  // leaves a freeable page behind where a read was left open on a source zspage
    check_read(*obj, obj->bytes.size(), "after a read past the capacity");
  }

  // A write past the capacity: EINVAL, and nothing written.
  void write_past_capacity(uint16_t arg) {
    LiveObject* obj = model_.pick(arg);
    if (obj == nullptr || hardened_) return;
    size_t len = obj->capacity + 1 + arg % 64;
    std::vector<uint8_t> src = next_pattern(len, obj->handle);
    zs_obj_write(pool_, obj->handle, src.data(), len);
    expect_failure(true, EINVAL, "zs_obj_write(past the capacity)");
    check_read(*obj, obj->bytes.size(), "after a write past the capacity");
  }

  // Handle 0 and a NULL pool are no-ops for zs_free().
  void free_no_ops(uint16_t arg) {
    zs_free(pool_, 0);
    LiveObject* obj = model_.pick(arg);
    if (obj == nullptr) return;
    zs_free(nullptr, obj->handle);
    check_read(*obj, obj->bytes.size(), "after zs_free(NULL pool)");
  }

  // Configurations zs_create_pool_ex() must refuse with EINVAL.
  static void bad_config(uint16_t arg) {
    zs_pool_config cfg{};
    zs_page_source no_alloc{nullptr, nullptr, nullptr};
    switch (arg % 6) {
      case 0: cfg.page_size = 8192; break;
      case 1: cfg.chain_size = ZS_MIN_CHAIN_SIZE - 1; break;
      case 2: cfg.chain_size = ZS_MAX_CHAIN_SIZE + 1; break;
      case 3: cfg.nr_shards = 3; break;
      case 4: cfg.nr_shards = 128; break;
      default: cfg.page_source = &no_alloc; break;
    }
    zs_pool* pool = zs_create_pool_ex("bad", &cfg);
    int err = errno;
    zs_destroy_pool(pool);
    errno = err;
    expect_failure(pool == nullptr, EINVAL, "zs_create_pool_ex(bad configuration)");
  }

  // --- statistics ---------------------------------------------------------------------------

  void check_limit() const {
    unsigned long total = zs_get_total_pages(pool_);
    FUZZ_CHECK(max_pages_ == 0 || total <= max_pages_, "%lu pages held, limit %lu", total,
               max_pages_);
  }

  // The slots this thread's cache reserves count as used until they are taken back: the
  // classes' sum against the model and the caches' count, then every slot taken back
  // (zs_drain_thread_caches()), so that each class row can be checked exactly.
  void drain_caches() {
#ifdef ZS_POOL_NO_THREAD_CACHE
    unsigned long used = 0;
    for (unsigned i = 0; i < zs_class_count(pool_); i++) {
      struct zs_class_stats st{};
      if (zs_class_stats(pool_, i, &st) == 1) used += st.obj_used;
    }
    struct zs_pool_stats ps{};
    zs_pool_stats(pool_, &ps);
    FUZZ_CHECK(used == model_.count() + ps.cached_objs,
               "classes hold %lu objects, the model %zu and the thread's cache %lu", used,
               model_.count(), ps.cached_objs);
    zs_drain_thread_caches(pool_);
#endif
  }

  // Every distinct class row against the model, their sums against the pool's totals.
  void check_stats(bool just_compacted) {
    drain_caches();
    std::unordered_map<unsigned, unsigned long> live_per_class;
    for (const LiveObject& obj : model_.objects())
      live_per_class[class_index(obj.size)]++;
    unsigned long used = 0, pages = 0;
    const unsigned count = zs_class_count(pool_);
    for (unsigned i = 0; i < count; i++) {
      struct zs_class_stats st{};
      int rc = zs_class_stats(pool_, i, &st);
      FUZZ_CHECK(rc == 0 || rc == 1, "zs_class_stats(%u) returned %d", i, rc);
      if (rc == 0) continue;
      FUZZ_CHECK(st.index == i, "zs_class_stats(%u) describes class %u", i, st.index);
      check_class_row(st, live_per_class[i], just_compacted);
      used += st.obj_used;
      pages += st.pages_used;
    }
    FUZZ_CHECK(used == model_.count(), "classes hold %lu objects, the model %zu", used,
               model_.count());
    unsigned long total = zs_get_total_pages(pool_);
    FUZZ_CHECK(pages == total, "classes use %lu pages, zs_get_total_pages() %lu", pages, total);
    check_printed_totals(used, pages);
    FUZZ_CHECK(source_ == nullptr || source_->in_use() == static_cast<long>(total),
               "the page source has %ld pages out, the pool holds %lu", source_->in_use(), total);
    check_limit();
    struct zs_pool_stats ps{};
    zs_pool_stats(pool_, &ps);
    FUZZ_CHECK(ps.pages_compacted == compacted_, "pages_compacted %lu, compactions freed %lu",
               ps.pages_compacted, compacted_);
    FUZZ_CHECK(zs_check_pool(pool_, stderr) == 0, "zs_check_pool() found the violations above");
  }

  // zs_print_classes(): its Total row sums the objects and pages of the class rows.
  void check_printed_totals(unsigned long used, unsigned long pages) const {
    char* text = nullptr;
    size_t size = 0;
    FILE* out = open_memstream(&text, &size);
    FUZZ_CHECK(out != nullptr, "open_memstream: errno %d", errno);
    int rc = zs_print_classes(pool_, out);
    std::fclose(out);
    // "Total", then the zspages of 11 fullness groups, obj_allocated, obj_used, pages_used
    // and freeable.
    unsigned long n[15] = {};
    const char* row = std::strstr(text, "Total");
    int fields = 0;
    if (row != nullptr) {
      fields = std::sscanf(row + 5, "%lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu",
                           &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6], &n[7], &n[8], &n[9],
                           &n[10], &n[11], &n[12], &n[13], &n[14]);
    }
    std::free(text);
    FUZZ_CHECK(rc == 0 && fields == 15 && n[12] == used && n[13] == pages,
               "zs_print_classes() returned %d, Total row of %d fields: %lu objects, %lu pages "
               "(rows: %lu, %lu)",
               rc, fields, n[12], n[13], used, pages);
  }

  // The class that serves a request of `size` bytes (the lookup takes the header too).
  unsigned class_index(size_t size) const {
    return zs_lookup_class_index(pool_, static_cast<unsigned>(size + ZS_HANDLE_SIZE));
  }

  void check_class_row(const struct zs_class_stats& st, unsigned long live,
                       bool just_compacted) const {
    unsigned long zspages = 0;
    for (unsigned long n : st.zspages) zspages += n;
    const unsigned long full = st.zspages[ZS_NR_FULLNESS_GROUPS - 1];
    const unsigned long partial = zspages - full - st.zspages[0];
    FUZZ_CHECK(st.obj_used == live, "class %u (size %u): obj_used %lu, the model has %lu", st.index,
               st.size, st.obj_used, live);
    FUZZ_CHECK(st.obj_allocated == zspages * st.objs_per_zspage &&
                   st.pages_used == zspages * st.pages_per_zspage,
               "class %u: %lu zspages of %u objects, %u pages; obj_allocated %lu, pages_used %lu",
               st.index, zspages, st.objs_per_zspage, st.pages_per_zspage, st.obj_allocated,
               st.pages_used);
    FUZZ_CHECK(st.obj_used >= full * st.objs_per_zspage + partial &&
                   st.obj_used <= full * st.objs_per_zspage + partial * (st.objs_per_zspage - 1),
               "class %u: %lu objects do not fit %lu full and %lu partial zspages of %u", st.index,
               st.obj_used, full, partial, st.objs_per_zspage);
    FUZZ_CHECK(st.zspages[0] <= shards_bound_, "class %u keeps %lu empty zspages (%u shards)",
               st.index, st.zspages[0], shards_bound_);
    if (just_compacted) {
      FUZZ_CHECK(st.freeable == 0 && st.zspages[0] == 0,
                 "class %u after zs_compact(): %lu pages freeable, %lu empty zspages", st.index,
                 st.freeable, st.zspages[0]);
    }
  }

  FuzzInput& in_;
  zs_pool* pool_ = nullptr;
  std::unique_ptr<CountingSource> source_;
  zs_page_source source_ops_{};
  size_t page_size_ = 0;
  size_t huge_size_ = 0;
  unsigned shards_bound_ = 0;      // most lock shards a class can have
  unsigned long max_pages_ = 0;    // 0: no limit
  bool hardened_ = false;
  uint64_t generation_ = 0;        // writes so far: seeds the patterns
  unsigned long compacted_ = 0;    // pages zs_compact() reported freed since the pool was made
  Model model_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  PoolFuzzer fuzzer(in);
  fuzzer.run();
  return 0;
}
