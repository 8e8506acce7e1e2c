// The cache's C API (zsm/cache.h): each call forwards to zsm::Cache and turns its
// exceptions into negative errno values.
#include <zsm/cache.h>
#include <zsm/cache.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <type_traits>

namespace {

zsm::Cache* impl(zsm_cache* c) { return reinterpret_cast<zsm::Cache*>(c); }

int to_errno(const std::system_error& e) {
  if (e.code().category() == zsm::cache_category()) {
    switch (static_cast<zsm::CacheError>(e.code().value())) {
      case zsm::CacheError::value_too_large: return -E2BIG;
      case zsm::CacheError::key_too_large: return -ENAMETOOLONG;
      case zsm::CacheError::no_memory: return -ENOMEM;
      case zsm::CacheError::corrupt: return -EBADMSG;
      case zsm::CacheError::buffer_too_small: return -ENOBUFS;
      case zsm::CacheError::bad_options: return -EINVAL;
    }
  }
  if (e.code().category() == std::generic_category()) return -e.code().value();  // the file
  return -EINVAL;  // codec options
}

// Runs f, mapping every failure to a negative errno.
template <typename F>
long guarded(F f) noexcept {
  try {
    return f();
  } catch (const std::system_error& e) {
    return to_errno(e);
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
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

zsm::CodecOptions codec_options(const zsm_codec& field, int level) {
  static const zsm::CodecKind kinds[] = {zsm::CodecKind::lz4, zsm::CodecKind::lz4hc,
                                         zsm::CodecKind::zstd, zsm::CodecKind::none};
  int codec = enum_field(field);
  if (codec < ZSM_CODEC_LZ4 || codec > ZSM_CODEC_NONE)
    throw std::system_error(make_error_code(zsm::CacheError::bad_options));
  return {kinds[codec], level, {}};
}

std::string_view key_of(const void* key, size_t len) {
  return {static_cast<const char*>(key), len};
}

}  // namespace

extern "C" {

zsm_cache* zsm_cache_create(const zsm_cache_config* cfg, int* err) {
  zsm_cache_config defaults{};
  if (cfg == nullptr) cfg = &defaults;
  zsm::Cache* cache = nullptr;
  long rc = guarded([&] {
    zsm::CacheOptions o;
    if (cfg->capacity_bytes != 0) o.capacity_bytes = cfg->capacity_bytes;
    o.codec = codec_options(cfg->codec, cfg->level);
    if (cfg->recompress) o.recompress_codec = codec_options(cfg->recompress_codec, cfg->recompress_level);
    o.max_value_size = cfg->max_value_size;
    if (cfg->max_key_size != 0) o.max_key_size = cfg->max_key_size;
    if (cfg->shards != 0) o.shards = cfg->shards;
    o.pool = cfg->pool;
    if (cfg->backing_file != nullptr) {
      zsm::BackingFileOptions f;
      f.path = cfg->backing_file;
      if (cfg->backing_file_capacity != 0) f.capacity_bytes = cfg->backing_file_capacity;
      f.write_limit_bytes = cfg->writeback_limit;
      if (cfg->writeback_limit_ms != 0)
        f.write_limit_period = std::chrono::milliseconds(cfg->writeback_limit_ms);
      f.promote_on_read = cfg->backing_file_keep_on_read == 0;
      o.backing_file = std::move(f);
    }
    cache = new zsm::Cache(std::move(o));
    return 0L;
  });
  if (err != nullptr) *err = static_cast<int>(rc);
  return reinterpret_cast<zsm_cache*>(cache);
}

void zsm_cache_destroy(zsm_cache* cache) { delete impl(cache); }

int zsm_cache_put(zsm_cache* cache, const void* key, size_t key_len, const void* value,
                  size_t value_len) {
  if (cache == nullptr || key == nullptr || (value == nullptr && value_len != 0)) return -EINVAL;
  return static_cast<int>(guarded([&] {
    impl(cache)->put(key_of(key, key_len),
                     {static_cast<const std::byte*>(value), value == nullptr ? 0 : value_len});
    return 0L;
  }));
}

long zsm_cache_get(zsm_cache* cache, const void* key, size_t key_len, void* buf, size_t buf_len) {
  if (cache == nullptr || key == nullptr || (buf == nullptr && buf_len != 0)) return -EINVAL;
  return guarded([&] {
    auto n = impl(cache)->get(key_of(key, key_len),
                              {static_cast<std::byte*>(buf), buf == nullptr ? 0 : buf_len});
    return n ? static_cast<long>(*n) : -ENOENT;
  });
}

int zsm_cache_erase(zsm_cache* cache, const void* key, size_t key_len) {
  if (cache == nullptr || key == nullptr) return -EINVAL;
  return static_cast<int>(
      guarded([&] { return impl(cache)->erase(key_of(key, key_len)) ? 0L : -ENOENT; }));
}

int zsm_cache_contains(zsm_cache* cache, const void* key, size_t key_len) {
  if (cache == nullptr || key == nullptr) return 0;
  return static_cast<int>(
      guarded([&] { return impl(cache)->contains(key_of(key, key_len)) ? 1L : 0L; }));
}

void zsm_cache_clear(zsm_cache* cache) {
  if (cache != nullptr) guarded([&] {
    impl(cache)->clear();
    return 0L;
  });
}

long zsm_cache_recompress(zsm_cache* cache, size_t max_entries) {
  if (cache == nullptr) return -EINVAL;
  return guarded([&] { return static_cast<long>(impl(cache)->recompress(max_entries)); });
}

void zsm_cache_stats(zsm_cache* cache, struct zsm_cache_stats* out) {
  if (cache == nullptr || out == nullptr) return;
  guarded([&] {
    zsm::CacheStats s = impl(cache)->stats();
    *out = {s.orig_data_size, s.compr_data_size, s.mem_used_total, s.mem_limit, s.mem_used_max,
            s.same_pages, s.pages_compacted, s.huge_pages, s.huge_pages_since, s.entries,
            s.bytes_held, s.hits, s.misses, s.evictions, s.recompressed,
            s.backing_file.bytes_on_file, s.backing_file.bytes_read, s.backing_file.bytes_written,
            s.written_back, s.backing_file.hits, s.backing_file.misses};
    return 0L;
  });
}

void zsm_cache_mark_idle(zsm_cache* cache) {
  if (cache != nullptr) guarded([&] {
    impl(cache)->mark_idle();
    return 0L;
  });
}

long zsm_cache_writeback_idle(zsm_cache* cache) {
  if (cache == nullptr) return -EINVAL;
  return guarded([&] { return static_cast<long>(impl(cache)->writeback_idle()); });
}

void zsm_cache_flush_backing_file(zsm_cache* cache) {
  if (cache != nullptr) guarded([&] {
    impl(cache)->flush_backing_file();
    return 0L;
  });
}

zs_pool* zsm_cache_pool(zsm_cache* cache) { return cache != nullptr ? impl(cache)->pool() : nullptr; }

}  // extern "C"
