// The region's life (create, destroy), its range calls and its C API (zsm/region.h). The C
// functions check arguments and turn exceptions into errno; Region's methods take the lock,
// change page states, and serve the faults read meanwhile before they let it go.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <system_error>

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "region_core.h"

namespace zsm::region {

std::unique_ptr<Region> Region::create(const Settings& s, int* err, std::string* why) {
  std::unique_ptr<Region> r(new Region());
  *err = r->init(s, why);
  if (*err != 0) return nullptr;
  return r;
}

int Region::init(const Settings& s, std::string* why) {
  owner_ = getpid();
  size_ = s.size;
  npages_ = static_cast<uint32_t>(s.size / kPageSize);
  budget_pages_ = s.budget_pages;
  fault_around_ = s.fault_around;
  spin_us_ = s.spin_us;
  one_handler_ = s.one_handler;
  self_serve_ = s.self_serve;
  probation_divisor_ = s.probation_divisor;
  codec_ = Codec::create(s.codec);
  pool_ = zs_create_pool_ex("zsm_region", &s.pool);
  if (pool_ == nullptr) {
    *why = std::string("the pool's configuration was refused: ") + std::strerror(errno);
    return -errno;
  }
  pool_page_size_ = s.pool.page_size == 0 ? kPageSize : s.pool.page_size;
  if (!pages_.allocate(npages_) || !copies_.allocate(npages_) || !frame_of_.allocate(npages_)) {
    *why = "mmap of the region's page tables failed";
    return -errno;
  }
  size_probation();
  frames_.reserve(size_t{budget_pages_} + self_serve_slack() + 64);  // no growth in a SIGBUS handler
  scratch_.resize(std::max(fault_around_, 1u) * kPageSize);
  compress_buf_.resize(std::max(codec_->bound(kPageSize), kPageSize));
  zeros_.resize(kPageSize);
  evict_buf_.resize(kPageSize);
  file_buf_.resize(kPageSize);
  if (!s.backing_file.empty()) {
    try {
      file_ = std::make_unique<PageFile>(s.backing_file, s.backing_file_capacity);
    } catch (const std::system_error& e) {
      *why = e.what();
      return -e.code().value();
    }
  }

  void* m = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m == MAP_FAILED) {
    *why = "mmap of the region failed";
    return -errno;
  }
  base_ = reinterpret_cast<uintptr_t>(m);
  // The child of a fork() gets no mapping: it cannot fault on pages no handler serves there.
  if (madvise(m, size_, MADV_DONTFORK) != 0 || madvise(m, size_, MADV_NOHUGEPAGE) != 0) {
    *why = "madvise(MADV_DONTFORK) on the region failed";
    return -errno;
  }
  uffd_ = uffd_open(s.force_user_mode_only, self_serve_, &user_mode_only_, why);
  if (uffd_ < 0) return uffd_;
  if (int rc = uffd_register(uffd_, m, size_, why); rc != 0) return rc;
  if (self_serve_) return start_self_serving(why);
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) {
    *why = "eventfd failed";
    return -errno;
  }
  start_handlers();
  return 0;
}

// The SIGBUS mode's evictor, then the handler's entry for this region.
int Region::start_self_serving(std::string* why) {
  evict_fd_ = eventfd(0, EFD_CLOEXEC);
  if (evict_fd_ < 0) {
    *why = "eventfd failed";
    return -errno;
  }
  evictor_ = std::thread([this] {
    block_signals(nullptr);  // a signal handler here touching the region would wait for itself
    evictor_main();
  });
  return register_self_serving(this, why) ? 0 : -errno;
}

// In a child of fork(): the threads, the mapping (MADV_DONTFORK), the file and its name are
// the parent's; only the descriptors are the child's. Everything else is left to the exit.
void Region::close_in_child() {
  // The threads do not exist here: their handles are left unjoined, never destroyed.
  new std::vector<std::thread>(std::move(handlers_));
  new std::thread(std::move(evictor_));
  if (file_) file_.release()->close_descriptor_only();
  for (int fd : {uffd_, stop_fd_, evict_fd_}) {
    if (fd >= 0) close(fd);
  }
}

Region::~Region() {
  if (getpid() != owner_) {
    close_in_child();
    return;
  }
  if (self_serve_) unregister_self_serving(this);
  if (evictor_.joinable()) {
    stopping_.store(true);
    uint64_t one = 1;
    ssize_t n = write(evict_fd_, &one, sizeof one);
    (void)n;
    evictor_.join();
  }
  if (evict_fd_ >= 0) close(evict_fd_);
  if (!handlers_.empty()) {
    stopping_.store(true);
    uint64_t one = 1;
    ssize_t n = write(stop_fd_, &one, sizeof one);
    (void)n;  // an eventfd write of 1 cannot fail short of overflow; it stays readable for all
    for (std::thread& t : handlers_) t.join();
  }
  if (stop_fd_ >= 0) close(stop_fd_);
  if (uffd_ >= 0) close(uffd_);  // unregisters the range
  if (base_ != 0) munmap(reinterpret_cast<void*>(base_), size_);
  zs_destroy_pool(pool_);
}

int Region::prefetch(uint32_t first, uint32_t count) {
  Locked lock(*this);
  uint32_t room = mapped_budget();
  for (uint32_t p = first; p < first + count && room > 0; ++p) {
    if (kind(p) != Kind::stored && kind(p) != Kind::probation) continue;
    bring_in(p, false, 0);
    --room;
  }
  finish_locked();
  return 0;
}

int Region::evict(uint32_t first, uint32_t count) {
  Locked lock(*this);
  std::vector<uint32_t> victims;
  for (uint32_t p = first; p < first + count; ++p) {
    if (kind(p) == Kind::probation) probation_retire(p);
    if (!mapped(p) || pages_[p].pins > 0) continue;
    pages_[p].victim = 1;
    victims.push_back(p);
    if (victims.size() == 64) {
      evict_batch(victims, false);
      victims.clear();
    }
  }
  if (!victims.empty()) evict_batch(victims, false);
  finish_locked();
  return 0;
}

int Region::discard(uint32_t first, uint32_t count) {
  Locked lock(*this);
  for (uint32_t p = first; p < first + count; ++p) {
    if (pages_[p].pins > 0) {
      std::memset(page(p), 0, kPageSize);  // pinned pages are mapped and writable
    } else if (mapped(p)) {
      drop_mapped(p);
    } else {
      if (kind(p) == Kind::probation) probation_release(p);
      if (pages_[p].has_copy) free_copy(p);
      set_kind(p, Kind::empty);
    }
  }
  finish_locked();
  return 0;
}

int Region::pin(uint32_t first, uint32_t count) {
  Locked lock(*this);
  uint64_t newly = 0;
  for (uint32_t p = first; p < first + count; ++p) {
    if (pages_[p].pins == kMaxPins) return -EOVERFLOW;
    if (pages_[p].pins == 0) ++newly;
  }
  uint64_t pinned = counters_.pinned.load(std::memory_order_relaxed);
  if (pinned + newly > budget_pages_ / 2) return -ENOMEM;  // half the budget stays for faults
  for (uint32_t p = first; p < first + count; ++p) {
    if (!mapped(p)) bring_in(p, true, 0);
    make_writable(p);  // a syscall may write it: no fault it could not serve (user mode only)
    if (pages_[p].pins++ == 0) counters_.pinned.fetch_add(1, std::memory_order_relaxed);
  }
  finish_locked();
  return 0;
}

int Region::unpin(uint32_t first, uint32_t count) {
  Locked lock(*this);
  for (uint32_t p = first; p < first + count; ++p) {
    if (pages_[p].pins == 0) return -EINVAL;
  }
  for (uint32_t p = first; p < first + count; ++p) {
    if (--pages_[p].pins == 0) counters_.pinned.fetch_sub(1, std::memory_order_relaxed);
  }
  return 0;
}

int Region::set_budget(uint32_t pages) {
  Locked lock(*this);
  if (counters_.pinned.load(std::memory_order_relaxed) > pages / 2) return -EBUSY;
  while (probation_retire_oldest()) {
  }
  if (counters_.probation.load(std::memory_order_relaxed) > 0) return -ENOMEM;  // the pool is full
  budget_pages_ = pages;
  frames_.reserve(size_t{budget_pages_} + self_serve_slack() + 64);
  size_probation();
  make_room(0);
  finish_locked();
  return 0;
}

void Region::stats(struct zsm_region_stats* out) const {
  auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  *out = {};
  out->size_bytes = size_;
  out->budget_bytes = uint64_t{budget_pages_} * kPageSize;
  out->resident_bytes = get(counters_.resident) * kPageSize;
  out->stored_pages = get(counters_.stored);
  out->orig_data_size = out->stored_pages * kPageSize;
  out->compr_data_size = get(counters_.compr_bytes);
  out->mem_used_total = uint64_t{zs_get_total_pages(pool_)} * pool_page_size_;
  out->same_pages = get(counters_.same);
  out->huge_pages = get(counters_.whole);
  out->faults = get(counters_.faults);
  out->zero_faults = get(counters_.zero_faults);
  out->fault_around_pages = get(counters_.fault_around);
  out->evictions = get(counters_.evictions);
  out->clean_evictions = get(counters_.clean_evictions);
  out->refaults = get(counters_.refaults);
  out->wp_faults = get(counters_.wp_faults);
  out->abandoned_evictions = get(counters_.abandoned);
  out->pinned_pages = get(counters_.pinned);
  out->user_mode_only = user_mode_only_ ? 1 : 0;
  out->probation_bytes = get(counters_.probation) * kPageSize;
  out->probation_faults = get(counters_.probation_faults);
  out->written_back = get(counters_.written_back);
  out->read_back = get(counters_.read_back);
  out->bd_bytes_on_file = get(counters_.file_bytes);
}

}  // namespace zsm::region

// The C API.
namespace {

using zsm::region::kPageSize;
using zsm::region::Region;

thread_local std::string last_error;

int fail_create(int err, std::string why) {
  last_error = std::move(why);
  errno = err;
  return err;
}

// The codec a C caller stored in the enum field: read as the int it is (C lets any int stand
// there; loading one outside the enumerators as the C++ enum would be undefined behaviour).
std::optional<zsm::CodecKind> codec_kind(const zsm_codec& field) {
  static_assert(sizeof(zsm_codec) == sizeof(int));
  int c;
  std::memcpy(&c, &field, sizeof c);
  switch (c) {
    case ZSM_CODEC_LZ4: return zsm::CodecKind::lz4;
    case ZSM_CODEC_LZ4HC: return zsm::CodecKind::lz4hc;
    case ZSM_CODEC_ZSTD: return zsm::CodecKind::zstd;
    case ZSM_CODEC_NONE: return zsm::CodecKind::none;
  }
  return std::nullopt;
}

constexpr size_t kMinBudgetPages = 16;
constexpr unsigned kMaxFaultAround = 64;
constexpr unsigned kDefaultSpinUs = 50;
constexpr uint64_t kDefaultFileCapacity = uint64_t{256} << 20;
constexpr uint64_t kMaxFileCapacity = uint64_t{2} << 40;  // 2^32 sectors of 512 bytes

// Settings from the options, or an errno with last_error set.
int settings_from(size_t size, const zsm_region_options& o, zsm::region::Settings* s) {
  if (size == 0) return fail_create(EINVAL, "the region's size is 0");
  if (size > (size_t{UINT32_MAX} - 1) * kPageSize) return fail_create(EINVAL, "the region is larger than 16 TiB");
  s->size = (size + kPageSize - 1) / kPageSize * kPageSize;
  size_t budget = o.budget_bytes != 0 ? o.budget_bytes : std::max(s->size / 4, kMinBudgetPages * kPageSize);
  if (budget < kMinBudgetPages * kPageSize) return fail_create(EINVAL, "budget_bytes is below 16 pages");
  s->budget_pages = static_cast<uint32_t>(std::min(budget, s->size) / kPageSize);
  s->budget_pages = std::max<uint32_t>(s->budget_pages, std::min<size_t>(kMinBudgetPages, s->size / kPageSize));
  auto kind = codec_kind(o.codec);
  if (!kind) return fail_create(EINVAL, "codec is not a zsm_codec");
  s->codec.kind = *kind;
  s->codec.level = o.level;
  if (o.fault_around_pages > kMaxFaultAround) return fail_create(EINVAL, "fault_around_pages is above 64");
  s->fault_around = o.fault_around_pages == 0 ? 16 : o.fault_around_pages;
  if (o.backing_file != nullptr) {
    if (*o.backing_file == '\0') return fail_create(EINVAL, "backing_file is an empty path");
    if (o.compressed_budget_bytes == 0) {
      return fail_create(EINVAL, "backing_file needs a compressed_budget_bytes: the pool's size past "
                                 "which pages go to the file");
    }
    if (o.backing_file_capacity != 0 &&
        (o.backing_file_capacity < kPageSize || o.backing_file_capacity > kMaxFileCapacity)) {
      return fail_create(EINVAL, "backing_file_capacity is not in one page .. 2 TiB");
    }
    s->backing_file = o.backing_file;
    s->backing_file_capacity = o.backing_file_capacity == 0 ? kDefaultFileCapacity : o.backing_file_capacity;
  } else if (o.backing_file_capacity != 0) {
    return fail_create(EINVAL, "backing_file_capacity without a backing_file");
  }
  s->pool = o.pool;
  // Every store and free is made under the region's lock: one lock shard and no per-thread
  // caches, unless asked (more would only leave more partly used zspages, one set a handler).
  if (s->pool.nr_shards == 0) s->pool.nr_shards = 1;
  s->pool.flags |= ZS_POOL_NO_THREAD_CACHE;
  size_t pool_page = o.pool.page_size == 0 ? kPageSize : o.pool.page_size;
  if (o.compressed_budget_bytes != 0 && o.compressed_budget_bytes < pool_page) {
    return fail_create(EINVAL, "compressed_budget_bytes is below one pool page");
  }
  s->pool.max_pages = o.compressed_budget_bytes / pool_page;
  if (o.flags & ~unsigned{ZSM_REGION_USER_MODE_ONLY | ZSM_REGION_ONE_HANDLER | ZSM_REGION_SELF_SERVE}) {
    return fail_create(EINVAL, "flags has unknown bits");
  }
  if ((o.flags & ZSM_REGION_ONE_HANDLER) && (o.flags & ZSM_REGION_SELF_SERVE)) {
    return fail_create(EINVAL, "flags: ZSM_REGION_ONE_HANDLER and ZSM_REGION_SELF_SERVE exclude each other");
  }
  s->self_serve = (o.flags & ZSM_REGION_SELF_SERVE) != 0;
  if (s->self_serve && s->codec.kind == zsm::CodecKind::zstd) {
    return fail_create(EINVAL, "codec: the SIGBUS mode decompresses in a signal handler, which zstd's "
                               "per-thread context would allocate in; lz4, lz4hc or none");
  }
  s->force_user_mode_only = (o.flags & ZSM_REGION_USER_MODE_ONLY) != 0;
  s->one_handler = (o.flags & ZSM_REGION_ONE_HANDLER) != 0;
  if (o.handler_spin_us < -1 || o.handler_spin_us > 10000) {
    return fail_create(EINVAL, "handler_spin_us is outside -1..10000");
  }
  s->spin_us = o.handler_spin_us == 0 ? kDefaultSpinUs : o.handler_spin_us < 0 ? 0 : o.handler_spin_us;
  if (o.probation_divisor < -1 || o.probation_divisor == 1 || o.probation_divisor > 1024) {
    return fail_create(EINVAL, "probation_divisor is not -1, 0 or 2..1024");
  }
  s->probation_divisor = o.probation_divisor == 0 ? 8 : o.probation_divisor < 0 ? 0 : o.probation_divisor;
  return 0;
}

// Pages [*first, *first + *count) of [addr, addr + len), or -EINVAL outside the region.
int range_pages(zsm_region* r, void* addr, size_t len, uint32_t* first, uint32_t* count) {
  if (r == nullptr) return -EINVAL;
  auto* region = reinterpret_cast<Region*>(r);
  auto a = reinterpret_cast<uintptr_t>(addr);
  if (a < region->base() || len > region->size() || a - region->base() > region->size() - len) {
    return -EINVAL;
  }
  size_t off = a - region->base();
  size_t end = (off + len + kPageSize - 1) / kPageSize;
  *first = static_cast<uint32_t>(off / kPageSize);
  *count = len == 0 ? 0 : static_cast<uint32_t>(end - *first);
  return 0;
}

template <typename Call>
int on_range(zsm_region* r, void* addr, size_t len, Call call) {
  uint32_t first, count;
  if (int rc = range_pages(r, addr, len, &first, &count); rc != 0) return rc;
  if (count == 0) return 0;
  try {
    return call(*reinterpret_cast<Region*>(r), first, count);
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
}

}  // namespace

extern "C" {

struct zsm_region* zsm_region_create(size_t size, const struct zsm_region_options* opts) {
  last_error.clear();
  zsm_region_options defaults{};
  zsm::region::Settings s;
  if (settings_from(size, opts != nullptr ? *opts : defaults, &s) != 0) return nullptr;
  try {
    int err = 0;
    std::string why;
    auto region = Region::create(s, &err, &why);
    if (!region) {
      fail_create(-err, std::move(why));
      return nullptr;
    }
    return reinterpret_cast<zsm_region*>(region.release());
  } catch (const std::system_error& e) {  // the codec refused its options
    fail_create(EINVAL, std::string("codec: ") + e.what());
  } catch (const std::bad_alloc&) {
    fail_create(ENOMEM, "memory short");
  }
  return nullptr;
}

void zsm_region_destroy(struct zsm_region* region) { delete reinterpret_cast<Region*>(region); }

void* zsm_region_base(struct zsm_region* region) {
  return region == nullptr ? nullptr
                           : reinterpret_cast<void*>(reinterpret_cast<Region*>(region)->base());
}

size_t zsm_region_size(struct zsm_region* region) {
  return region == nullptr ? 0 : reinterpret_cast<Region*>(region)->size();
}

int zsm_region_stats(struct zsm_region* region, struct zsm_region_stats* out) {
  if (region == nullptr || out == nullptr) return -EINVAL;
  reinterpret_cast<Region*>(region)->stats(out);
  return 0;
}

int zsm_region_prefetch(struct zsm_region* r, void* addr, size_t len) {
  return on_range(r, addr, len, [](Region& g, uint32_t f, uint32_t n) { return g.prefetch(f, n); });
}
int zsm_region_evict(struct zsm_region* r, void* addr, size_t len) {
  return on_range(r, addr, len, [](Region& g, uint32_t f, uint32_t n) { return g.evict(f, n); });
}
int zsm_region_discard(struct zsm_region* r, void* addr, size_t len) {
  return on_range(r, addr, len, [](Region& g, uint32_t f, uint32_t n) { return g.discard(f, n); });
}
int zsm_region_pin(struct zsm_region* r, void* addr, size_t len) {
  return on_range(r, addr, len, [](Region& g, uint32_t f, uint32_t n) { return g.pin(f, n); });
}
int zsm_region_unpin(struct zsm_region* r, void* addr, size_t len) {
  return on_range(r, addr, len, [](Region& g, uint32_t f, uint32_t n) { return g.unpin(f, n); });
}

int zsm_region_set_budget(struct zsm_region* region, size_t budget_bytes) {
  if (region == nullptr || budget_bytes < kMinBudgetPages * kPageSize) return -EINVAL;
  auto* r = reinterpret_cast<Region*>(region);
  size_t pages = std::min(budget_bytes, r->size()) / kPageSize;
  try {
    return r->set_budget(static_cast<uint32_t>(std::max(pages, kMinBudgetPages)));
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
}

const char* zsm_region_last_error(void) { return last_error.c_str(); }

}  // extern "C"
