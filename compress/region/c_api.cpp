// The region's C API (zsm/region.h): arguments checked, options turned into Settings (each
// one out of range named in zsm_region_last_error()), exceptions turned into errno.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <optional>
#include <system_error>

#include "region_core.h"

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
constexpr unsigned kMostColdAgeMs = 7u * 24 * 3600 * 1000;
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
  // No per-thread caches: a fault served in a SIGBUS handler frees copies, and a thread's
  // cache would be made (allocated) on its first free. nr_shards 0: one lock shard per CPU.
  s->pool.flags |= ZS_POOL_NO_THREAD_CACHE;
  size_t pool_page = o.pool.page_size == 0 ? kPageSize : o.pool.page_size;
  if (o.compressed_budget_bytes != 0 && o.compressed_budget_bytes < pool_page) {
    return fail_create(EINVAL, "compressed_budget_bytes is below one pool page");
  }
  s->pool.max_pages = o.compressed_budget_bytes / pool_page;
  if (o.flags & ~unsigned{ZSM_REGION_USER_MODE_ONLY | ZSM_REGION_ONE_HANDLER | ZSM_REGION_SELF_SERVE |
                          ZSM_REGION_BUDGET_ALL | ZSM_REGION_NO_MOVE}) {
    return fail_create(EINVAL, "flags has unknown bits");
  }
  if ((o.flags & ZSM_REGION_ONE_HANDLER) && (o.flags & ZSM_REGION_SELF_SERVE)) {
    return fail_create(EINVAL, "flags: ZSM_REGION_ONE_HANDLER and ZSM_REGION_SELF_SERVE exclude each other");
  }
  s->uffd.sigbus = (o.flags & ZSM_REGION_SELF_SERVE) != 0;
  s->uffd.want_move = (o.flags & ZSM_REGION_NO_MOVE) == 0;
  s->budget_all = (o.flags & ZSM_REGION_BUDGET_ALL) != 0;
  if (s->uffd.sigbus && s->codec.kind == zsm::CodecKind::zstd) {
    return fail_create(EINVAL, "codec: the SIGBUS mode decompresses in a signal handler, which zstd's "
                               "per-thread context would allocate in; lz4, lz4hc or none");
  }
  s->uffd.force_user_mode_only = (o.flags & ZSM_REGION_USER_MODE_ONLY) != 0;
  s->one_handler = (o.flags & ZSM_REGION_ONE_HANDLER) != 0;
  if (o.handler_spin_us < -1 || o.handler_spin_us > 10000) {
    return fail_create(EINVAL, "handler_spin_us is outside -1..10000");
  }
  s->spin_us = o.handler_spin_us == 0 ? kDefaultSpinUs : o.handler_spin_us < 0 ? 0 : o.handler_spin_us;
  if (o.probation_divisor < -1 || o.probation_divisor == 1 || o.probation_divisor > 1024) {
    return fail_create(EINVAL, "probation_divisor is not -1, 0 or 2..1024");
  }
  s->probation_divisor = o.probation_divisor == 0 ? 8 : o.probation_divisor < 0 ? 0 : o.probation_divisor;
  if (o.cold_age_ms != 0 && (o.cold_age_ms < 100 || o.cold_age_ms > kMostColdAgeMs)) {
    return fail_create(EINVAL, "cold_age_ms is not 0 or 100..604800000 (a week)");
  }
  if (o.cold_age_ms != 0 && s->probation_divisor == 0) {
    return fail_create(EINVAL, "cold_age_ms needs probation (probation_divisor -1 turns it off)");
  }
  s->cold_age_ms = o.cold_age_ms;
  if (o.stall_target_ppm > 100000) return fail_create(EINVAL, "stall_target_ppm is past 100000 (10 %)");
  if (o.stall_target_ppm != 0 && o.cold_age_ms == 0) {
    return fail_create(EINVAL, "stall_target_ppm steers the cold age: it needs cold_age_ms");
  }
  s->stall_target_ppm = o.stall_target_ppm;
  if (o.report_every_ms != 0 && (o.report == nullptr || o.report_every_ms < 100 || o.report_every_ms > 86'400'000)) {
    return fail_create(EINVAL, "report_every_ms is not 0 or 100..86400000 with a report function");
  }
  s->report_every_ms = o.report_every_ms;
  if (o.report_every_ms != 0) s->report = [fn = o.report, arg = o.report_arg] { fn(arg); };
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

int zsm_region_advise(struct zsm_region* r, void* addr, size_t len, int advice) {
  if (reinterpret_cast<uintptr_t>(addr) % kPageSize != 0) return -EINVAL;  // as madvise(2)
  return on_range(r, addr, len, [advice](Region& g, uint32_t f, uint32_t n) { return g.advise(f, n, advice); });
}
int zsm_region_reset(struct zsm_region* r, void* addr, size_t len) {
  return on_range(r, addr, len, [](Region& g, uint32_t f, uint32_t n) { return g.reset(f, n); });
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

int zsm_region_descriptors(struct zsm_region* region, int* fds, int n) {
  if (region == nullptr || (fds == nullptr && n > 0) || n < 0) return -EINVAL;
  return reinterpret_cast<Region*>(region)->descriptors(fds, n);
}

int zsm_region_sigbus_action(const struct sigaction* act, struct sigaction* old) {
  return zsm::region::chain_sigbus(act, old);
}

int zsm_region_internal_thread(void) { return zsm::region::on_region_thread() ? 1 : 0; }

}  // extern "C"
