// zsm::Cache (zsm/cache.hpp): the public C++ facade over the noexcept core (cache_core.h). Each
// call forwards to the core and throws its error code as std::system_error; not_found becomes
// an empty optional or false. Also the "zsm.cache" error category and the zram-format lines.
#include <zsm/cache.hpp>

#include "cache_core.h"

#include <cstdio>

namespace zsm {

namespace {

class CacheCategory : public std::error_category {
 public:
  const char* name() const noexcept override { return "zsm.cache"; }
  std::string message(int value) const override {
    switch (static_cast<CacheError>(value)) {
      case CacheError::value_too_large: return "value larger than the cache's maximum";
      case CacheError::key_too_large: return "key empty or larger than the cache's maximum";
      case CacheError::no_memory: return "no room for the value, even after evicting";
      case CacheError::corrupt: return "stored value failed to decompress; entry dropped";
      case CacheError::buffer_too_small: return "buffer smaller than the value";
      case CacheError::bad_options: return "cache options out of range";
      case CacheError::not_found: return "no entry for the key";
    }
    return "unknown cache error";
  }
};

void throw_if(std::error_code ec) {
  if (ec) throw std::system_error(ec);
}

}  // namespace

namespace detail {

std::string bd_stat_line(const BackingFileStats& f) {
  auto pages = [](uint64_t bytes) { return static_cast<unsigned long long>((bytes + 4095) / 4096); };
  char line[96];
  std::snprintf(line, sizeof line, "%8llu %8llu %8llu", pages(f.bytes_on_file),
                pages(f.bytes_read), pages(f.bytes_written));
  return line;
}

std::string mm_stat_line(const CacheStats& s) {
  char line[256];
  std::snprintf(line, sizeof line, "%8llu %8llu %8llu %8llu %8llu %8llu %8llu %8llu %8llu",
                static_cast<unsigned long long>(s.orig_data_size),
                static_cast<unsigned long long>(s.compr_data_size),
                static_cast<unsigned long long>(s.mem_used_total),
                static_cast<unsigned long long>(s.mem_limit),
                static_cast<unsigned long long>(s.mem_used_max),
                static_cast<unsigned long long>(s.same_pages),
                static_cast<unsigned long long>(s.pages_compacted),
                static_cast<unsigned long long>(s.huge_pages),
                static_cast<unsigned long long>(s.huge_pages_since));
  return line;
}

}  // namespace detail

const std::error_category& cache_category() noexcept {
  static const CacheCategory category;
  return category;
}

std::error_code make_error_code(CacheError e) noexcept {
  return {static_cast<int>(e), cache_category()};
}

Cache::Cache(CacheOptions options)
    : core_(std::make_unique<detail::CacheCore>(std::move(options))) {}
Cache::~Cache() = default;

void Cache::put(std::string_view key, std::span<const std::byte> value) {
  throw_if(core_->put(key, value));
}

std::optional<size_t> Cache::get(std::string_view key, std::span<std::byte> out) {
  size_t size = 0;
  std::error_code ec = core_->get(key, out, size);
  if (ec == CacheError::not_found) return std::nullopt;
  throw_if(ec);
  return size;
}

std::optional<std::vector<std::byte>> Cache::get(std::string_view key) {
  // Sized as the value in memory; a value not in memory may be on the backing file, with any
  // size up to the largest. The value may change before the copy: then read again at that size.
  const CacheOptions& o = core_->options();
  size_t size = 0;
  if (core_->value_size(key, size)) size = o.backing_file ? o.max_value_size : 0;
  std::vector<std::byte> value(size);
  std::error_code ec = core_->get(key, value, size);
  if (ec == CacheError::buffer_too_small) {
    value.resize(o.max_value_size);
    ec = core_->get(key, value, size);
  }
  if (ec == CacheError::not_found) return std::nullopt;
  throw_if(ec);
  value.resize(size);
  return value;
}

bool Cache::erase(std::string_view key) {
  std::error_code ec = core_->erase(key);
  if (ec == CacheError::not_found) return false;
  throw_if(ec);
  return true;
}

bool Cache::contains(std::string_view key) const {
  bool found = false;
  throw_if(core_->contains(key, found));
  return found;
}

void Cache::for_each_key(const std::function<void(std::string_view)>& fn) const {
  core_->for_each_key(fn);
}

void Cache::clear() { core_->clear(); }

size_t Cache::recompress(size_t max_entries) {
  size_t moved = 0;
  throw_if(core_->recompress(max_entries, moved));
  return moved;
}

void Cache::mark_idle() { core_->mark_idle(); }

size_t Cache::writeback_idle() {
  size_t staged = 0;
  throw_if(core_->writeback_idle(staged));
  return staged;
}

void Cache::flush_backing_file() { core_->flush_backing_file(); }

CacheStats Cache::stats() const { return core_->stats(); }

std::string Cache::bd_stat() const { return detail::bd_stat_line(stats().backing_file); }
std::string Cache::mm_stat() const { return detail::mm_stat_line(stats()); }

const char* Cache::mm_stat_columns() noexcept {
  return "orig_data_size compr_data_size mem_used_total mem_limit mem_used_max same_pages "
         "pages_compacted huge_pages huge_pages_since";
}

zs_pool* Cache::pool() const noexcept { return core_->pool(); }
const CacheOptions& Cache::options() const noexcept { return core_->options(); }

}  // namespace zsm
