// The cache's C API (zsm/cache.h) on the cache's noexcept core (cache_core.h): each call
// forwards to the core and maps its error code to a negative errno in to_errno(), the one
// table of that mapping. A zsm_cache is a core.
#include <zsm/cache.h>

#include "cache_core.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <type_traits>

namespace {

using zsm::detail::CacheCore;

CacheCore* core_of(zsm_cache* c) { return reinterpret_cast<CacheCore*>(c); }

// 0 for no error; a CacheError as zsm/cache.h lists them; an errno of the backing file
// (generic category) as itself; a codec's option error as -EINVAL.
long to_errno(std::error_code ec) noexcept {
  if (!ec) return 0;
  if (ec.category() == zsm::cache_category()) {
    switch (static_cast<zsm::CacheError>(ec.value())) {
      case zsm::CacheError::value_too_large: return -E2BIG;
      case zsm::CacheError::key_too_large: return -ENAMETOOLONG;
      case zsm::CacheError::no_memory: return -ENOMEM;
      case zsm::CacheError::corrupt: return -EBADMSG;
      case zsm::CacheError::buffer_too_small: return -ENOBUFS;
      case zsm::CacheError::bad_options: return -EINVAL;
      case zsm::CacheError::not_found: return -ENOENT;
    }
  }
  if (ec.category() == std::generic_category()) return -ec.value();  // the file
  return -EINVAL;  // codec options
}

// The integer a C caller stored in an enum field. C lets any int stand there; loading one
// outside the enumerators as the enum type would be undefined behaviour in C++, so the field
// is read as the integer it is, and range-checked before it becomes an enumerator.
template <typename Enum>
int enum_field(const Enum& field) {
  static_assert(std::is_enum_v<Enum> && sizeof(Enum) == sizeof(int));
  int value;
  std::memcpy(&value, &field, sizeof value);
  return value;
}

// The codec options of a C enum field, or nothing for a value outside the enum.
std::optional<zsm::CodecOptions> codec_options(const zsm_codec& field, int level) {
  static const zsm::CodecKind kinds[] = {zsm::CodecKind::lz4, zsm::CodecKind::lz4hc,
                                         zsm::CodecKind::zstd, zsm::CodecKind::none};
  int codec = enum_field(field);
  if (codec < ZSM_CODEC_LZ4 || codec > ZSM_CODEC_NONE) return std::nullopt;
  return zsm::CodecOptions{kinds[codec], level, {}};
}

std::string_view key_of(const void* key, size_t len) {
  return {static_cast<const char*>(key), len};
}

// The options of a C configuration (the C API's defaults for its zero fields), or nothing when
// a codec field is outside its enum. Throws std::bad_alloc (a path string).
std::optional<zsm::CacheOptions> options_of(const zsm_cache_config& cfg) {
  zsm::CacheOptions o;
  if (cfg.capacity_bytes != 0) o.capacity_bytes = cfg.capacity_bytes;
  std::optional<zsm::CodecOptions> codec = codec_options(cfg.codec, cfg.level);
  if (!codec) return std::nullopt;
  o.codec = std::move(*codec);
  if (cfg.recompress) {
    o.recompress_codec = codec_options(cfg.recompress_codec, cfg.recompress_level);
    if (!o.recompress_codec) return std::nullopt;
  }
  o.max_value_size = cfg.max_value_size;
  if (cfg.max_key_size != 0) o.max_key_size = cfg.max_key_size;
  if (cfg.shards != 0) o.shards = cfg.shards;
  o.pool = cfg.pool;
  if (cfg.backing_file != nullptr) {
    zsm::BackingFileOptions f;
    f.path = cfg.backing_file;
    if (cfg.backing_file_capacity != 0) f.capacity_bytes = cfg.backing_file_capacity;
    f.write_limit_bytes = cfg.writeback_limit;
    if (cfg.writeback_limit_ms != 0)
      f.write_limit_period = std::chrono::milliseconds(cfg.writeback_limit_ms);
    f.promote_on_read = cfg.backing_file_keep_on_read == 0;
    if (cfg.backing_file_batch_bytes != 0) f.batch_bytes = cfg.backing_file_batch_bytes;
    o.backing_file = std::move(f);
  }
  return o;
}

// The reason the calling thread's last zsm_cache_create() gave (zsm_cache_last_error()).
thread_local std::string last_create_error;

}  // namespace

extern "C" {

zsm_cache* zsm_cache_create(const zsm_cache_config* cfg, int* err) {
  zsm_cache_config defaults{};
  if (cfg == nullptr) cfg = &defaults;
  std::error_code ec;
  std::string why;
  std::unique_ptr<CacheCore> core;
  std::optional<zsm::CacheOptions> options;
  try {
    options = options_of(*cfg);
  } catch (const std::bad_alloc&) {
    ec = make_error_code(zsm::CacheError::no_memory);
  }
  if (!ec && !options) {
    ec = make_error_code(zsm::CacheError::bad_options);
    why = "codec or recompress_codec outside enum zsm_codec";
  }
  if (!ec) core = CacheCore::create(std::move(*options), ec, why);
  last_create_error = ec ? (why.empty() ? ec.message() : why) : std::string();
  if (err != nullptr) *err = static_cast<int>(to_errno(ec));
  return reinterpret_cast<zsm_cache*>(core.release());
}

void zsm_cache_destroy(zsm_cache* cache) { delete core_of(cache); }

const char* zsm_cache_last_error(void) { return last_create_error.c_str(); }

const char* zsm_cache_strerror(int err) {
  switch (err) {
    case 0: return "success";
    case -EINVAL: return "bad arguments or options";
    case -E2BIG: return "value larger than the cache's max_value_size";
    case -ENAMETOOLONG: return "key empty or longer than max_key_size";
    case -ENOMEM: return "no room even after evicting, or the heap is short";
    case -EBADMSG: return "stored value corrupt (dropped)";
    case -ENOBUFS: return "buffer smaller than the value";
    case -ENOENT: return "no such key";
    case -EEXIST: return "the backing file's path exists (it is left as it is)";
    default: return err < 0 ? std::strerror(-err) : "unknown error";  // a backing file's errno
  }
}

int zsm_cache_put(zsm_cache* cache, const void* key, size_t key_len, const void* value,
                  size_t value_len) {
  if (cache == nullptr || key == nullptr || (value == nullptr && value_len != 0)) return -EINVAL;
  std::span<const std::byte> bytes(static_cast<const std::byte*>(value),
                                   value == nullptr ? 0 : value_len);
  return static_cast<int>(to_errno(core_of(cache)->put(key_of(key, key_len), bytes)));
}

long zsm_cache_get(zsm_cache* cache, const void* key, size_t key_len, void* buf, size_t buf_len) {
  if (cache == nullptr || key == nullptr || (buf == nullptr && buf_len != 0)) return -EINVAL;
  size_t size = 0;
  std::error_code ec = core_of(cache)->get(
      key_of(key, key_len), {static_cast<std::byte*>(buf), buf == nullptr ? 0 : buf_len}, size);
  return ec ? to_errno(ec) : static_cast<long>(size);
}

int zsm_cache_erase(zsm_cache* cache, const void* key, size_t key_len) {
  if (cache == nullptr || key == nullptr) return -EINVAL;
  return static_cast<int>(to_errno(core_of(cache)->erase(key_of(key, key_len))));
}

int zsm_cache_contains(zsm_cache* cache, const void* key, size_t key_len) {
  if (cache == nullptr || key == nullptr) return 0;
  bool found = false;
  std::error_code ec = core_of(cache)->contains(key_of(key, key_len), found);
  return ec ? static_cast<int>(to_errno(ec)) : found ? 1 : 0;
}

void zsm_cache_clear(zsm_cache* cache) {
  if (cache != nullptr) core_of(cache)->clear();
}

long zsm_cache_recompress(zsm_cache* cache, size_t max_entries) {
  if (cache == nullptr) return -EINVAL;
  size_t moved = 0;
  std::error_code ec = core_of(cache)->recompress(max_entries, moved);
  return ec ? to_errno(ec) : static_cast<long>(moved);
}

void zsm_cache_stats(zsm_cache* cache, struct zsm_cache_stats* out) {
  if (cache == nullptr || out == nullptr) return;
  const zsm::CacheStats s = core_of(cache)->stats();
  *out = {s.orig_data_size, s.compr_data_size, s.mem_used_total, s.mem_limit, s.mem_used_max,
          s.same_pages, s.pages_compacted, s.huge_pages, s.huge_pages_since, s.entries,
          s.bytes_held, s.hits, s.misses, s.evictions, s.recompressed,
          s.backing_file.bytes_on_file, s.backing_file.bytes_read, s.backing_file.bytes_written,
          s.written_back, s.backing_file.hits, s.backing_file.misses};
}

void zsm_cache_mark_idle(zsm_cache* cache) {
  if (cache != nullptr) core_of(cache)->mark_idle();
}

long zsm_cache_writeback_idle(zsm_cache* cache) {
  if (cache == nullptr) return -EINVAL;
  size_t staged = 0;
  std::error_code ec = core_of(cache)->writeback_idle(staged);
  return ec ? to_errno(ec) : static_cast<long>(staged);
}

void zsm_cache_flush_backing_file(zsm_cache* cache) {
  if (cache != nullptr) core_of(cache)->flush_backing_file();
}

zs_pool* zsm_cache_pool(zsm_cache* cache) {
  return cache != nullptr ? core_of(cache)->pool() : nullptr;
}

}  // extern "C"
