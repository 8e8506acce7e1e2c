// RocksDB's SecondaryCache on the cache's noexcept core (zsm/rocksdb_secondary_cache.hpp,
// compress/cache/cache_core.h).
//
// Buffers. Insert() has the block serialized by its helper straight into the record buffer
// the cache stores from (CacheCore::put() with a ValueWriter), so a block is copied once on its
// way into the pool: from the object into that buffer, which either goes to the pool as it is
// (a raw block) or is compressed into the buffer that does. Lookup() decompresses into a
// per-thread buffer of the cache's max_value_size. Neither direction allocates once a thread
// has its buffers.
//
// Errors. The core returns std::error_code values; Insert() maps them to a Status in
// insert_status() and Lookup() treats every error as a miss. No exception is caught here.
//
// Locks. cache_lock_ is read by every call and written only by SetCapacity(), which swaps the
// cache; the cache has its own shard locks underneath. The admission table is words read and
// written with relaxed atomics: two threads racing on one word can lose a remembered key,
// which only delays that block's admission to its next eviction.
//
// Capacity. capacity_ is the tier's; the cache is given capacity_ less the admission table,
// which keeps its size for the tier's life (SetCapacity() changes the cache's share only).
#include <zsm/rocksdb_secondary_cache.hpp>

#include <zsm/codec.hpp>

#include "cache_core.h"

#include <algorithm>
#include <unistd.h>
#include <bit>
#include <charconv>
#include <cstdint>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace zsm {

namespace {

std::string_view as_view(const rocksdb::Slice& key) { return {key.data(), key.size()}; }

// A key's hash for the admission table; never 0, which marks an empty word.
uint64_t admission_hash(const rocksdb::Slice& key) {
  return std::hash<std::string_view>{}(as_view(key)) | 1;
}

// The admission table's words for a tier of `capacity` bytes: one per KiB (a block of a few
// KiB compresses to one or two, so it remembers about as many keys as the cache holds, or
// more), a power of two, at least 64.
size_t admission_words(size_t capacity, Admission admission) {
  if (admission == Admission::every_block) return 0;
  return std::bit_ceil(std::max<size_t>(64, capacity / 1024));
}

// The calling thread's buffer, at least `size` bytes.
std::span<std::byte> thread_buffer(size_t size) {
  thread_local std::vector<std::byte> buffer;
  if (buffer.size() < size) buffer.resize(size);
  return {buffer.data(), size};
}

// What a successful lookup hands back: the object create_cb made, ready from the start.
class ReadyHandle : public rocksdb::SecondaryCacheResultHandle {
 public:
  ReadyHandle(void* value, size_t charge) : value_(value), charge_(charge) {}
  bool IsReady() override { return true; }
  void Wait() override {}
  void* Value() override { return value_; }
  size_t Size() override { return charge_; }

 private:
  void* value_;
  size_t charge_;
};

using detail::CacheCore;

// A cache core made with `options`, or nothing (with the reason in *status) when it refuses
// them.
// The Status of a cache that could not be made.
rocksdb::Status cache_refused(std::error_code ec, const std::string& why) {
  return ec == CacheError::no_memory ? rocksdb::Status::MemoryLimit("zsm cache", why)
                                     : rocksdb::Status::InvalidArgument("zsm cache", why);
}

std::unique_ptr<CacheCore> make_cache(const CacheOptions& options, rocksdb::Status* status) {
  std::error_code ec;
  std::string why;
  std::unique_ptr<CacheCore> core = CacheCore::create(options, ec, why);
  if (!core) *status = cache_refused(ec, why);
  return core;
}

// --- the zsm:// URI -------------------------------------------------------------------------

constexpr std::string_view kScheme = "zsm://";
constexpr size_t kLargestBlock = size_t{1} << 20;  // Cache's bound on max_value_size

// "zsm secondary cache URI 'zsm://...': <what>".
rocksdb::Status bad_uri(const std::string& uri, const std::string& what) {
  return rocksdb::Status::InvalidArgument("zsm secondary cache URI '" + uri + "'", what);
}

// A decimal integer with an optional K, M or G suffix, or nothing.
std::optional<uint64_t> parse_size(std::string_view text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [at, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc{} || at == text.data()) return std::nullopt;
  unsigned shift = 0;
  if (at != end) {
    switch (*at) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      default: return std::nullopt;
    }
    if (++at != end) return std::nullopt;
  }
  if (shift != 0 && value > (UINT64_MAX >> shift)) return std::nullopt;
  return value << shift;
}

// RocksDB's CompressionType names (compressed_secondary_cache://...;compression_type=...) as
// zsm's codecs; nothing for a type zsm has no codec for.
std::optional<CodecOptions> codec_of_rocksdb_name(std::string_view name) {
  if (name == "kLZ4Compression") return CodecOptions{CodecKind::lz4, 0, {}};
  if (name == "kLZ4HCCompression") return CodecOptions{CodecKind::lz4hc, 0, {}};
  if (name == "kZSTD") return CodecOptions{CodecKind::zstd, 0, {}};
  if (name == "kNoCompression") return CodecOptions{CodecKind::none, 0, {}};
  return std::nullopt;
}

// Applies one KEY=VALUE of the URI; the reason when it is bad.
std::optional<std::string> apply_option(std::string_view key, std::string_view value,
                                        RocksTierConfig& config) {
  const std::string quoted = std::string(key) + "=" + std::string(value);
  if (key == "codec") {
    try {
      config.cache.codec = parse_codec(value);
      (void)Codec::create(config.cache.codec);
    } catch (const std::exception& e) {
      return "bad codec in '" + quoted + "' (" + e.what() +
             "): want lz4[:ACCEL], lz4hc[:LEVEL], zstd[:LEVEL] or none";
    }
  } else if (key == "admission") {
    if (value == "every") config.admission = Admission::every_block;
    else if (value == "second") config.admission = Admission::second_eviction;
    else return "bad admission in '" + quoted + "': want every or second";
  } else if (key == "max_value") {
    auto size = parse_size(value);
    if (!size || *size == 0 || *size > kLargestBlock)
      return "bad max_value in '" + quoted + "': want a size of 1 .. 1M";
    config.cache.max_value_size = *size;
  } else if (key == "page") {
    auto size = parse_size(value);
    if (!size || (*size != 4096 && *size != 16384 && *size != 65536))
      return "bad page in '" + quoted + "': want 4K, 16K or 64K";
    config.cache.pool.page_size = *size;
  } else if (key == "chain") {
    auto n = parse_size(value);
    if (!n || *n < 4 || *n > 16) return "bad chain in '" + quoted + "': want 4 .. 16";
    config.cache.pool.chain_size = static_cast<unsigned>(*n);
  } else if (key == "file") {
    if (value.empty()) return "bad file in '" + quoted + "': want a path";
    if (!config.cache.backing_file) config.cache.backing_file.emplace();
    config.cache.backing_file->path = std::string(value);
  } else if (key == "file_size") {
    auto size = parse_size(value);
    if (!size || *size < (size_t{2} << 20)) return "bad file_size in '" + quoted + "': want a size of at least 2M";
    if (!config.cache.backing_file) config.cache.backing_file.emplace();
    config.cache.backing_file->capacity_bytes = *size;
  } else if (key == "writeback_limit") {
    auto size = parse_size(value);
    if (!size) return "bad writeback_limit in '" + quoted + "': want a size (bytes a second)";
    if (!config.cache.backing_file) config.cache.backing_file.emplace();
    config.cache.backing_file->write_limit_bytes = *size;
  } else if (key == "shards") {
    auto n = parse_size(value);
    if (!n || *n == 0 || *n > 1024 || (*n & (*n - 1)) != 0)
      return "bad shards in '" + quoted + "': want a power of two 1 .. 1024";
    config.cache.shards = static_cast<unsigned>(*n);
  } else if (key == "capacity") {
    auto bytes = parse_size(value);
    if (!bytes) return "bad capacity in '" + quoted + "': want a size such as 32M or 33554432";
    config.cache.capacity_bytes = *bytes;
  } else if (key == "compression_type") {
    auto codec = codec_of_rocksdb_name(value);
    if (!codec)
      return "bad compression_type in '" + quoted +
             "': want kLZ4Compression, kLZ4HCCompression, kZSTD or kNoCompression";
    config.cache.codec = *codec;
  } else if (key == "recompress") {
    try {
      config.cache.recompress_codec = parse_codec(value);
      (void)Codec::create(*config.cache.recompress_codec);
    } catch (const std::exception& e) {
      return "bad recompress in '" + quoted + "' (" + e.what() +
             "): want lz4hc[:LEVEL], zstd[:LEVEL], lz4[:ACCEL] or none";
    }
  } else if (key == "recompress_every" || key == "idle_writeback") {
    auto seconds = parse_size(value);
    if (!seconds || *seconds == 0 || *seconds > 86400)
      return "bad " + std::string(key) + " in '" + quoted + "': want seconds, 1 .. 86400";
    (key == "recompress_every" ? config.recompress_every : config.idle_writeback_every) =
        std::chrono::seconds(*seconds);
  } else {
    return "unknown option '" + std::string(key) +
           "': want capacity, codec (or compression_type), admission, max_value, page, chain, "
           "shards, recompress, recompress_every, file, file_size, writeback_limit or "
           "idle_writeback";
  }
  return std::nullopt;
}

// The leading part of a URI names the capacity unless it is an option itself
// (zsm://capacity=16M;...).
bool is_option(std::string_view part) { return part.find('=') != std::string_view::npos; }

}  // namespace

rocksdb::Status ParseZsmUri(const std::string& uri, RocksTierConfig* out) {
  if (uri.compare(0, kScheme.size(), kScheme) != 0)
    return bad_uri(uri, "does not start with zsm:// (want zsm://CAPACITY[;KEY=VALUE]...)");
  RocksTierConfig config;
  config.cache.max_value_size = RocksSecondaryCache::kDefaultMaxBlock;
  std::string_view rest = std::string_view(uri).substr(kScheme.size());
  size_t end = rest.find(';');
  const std::string_view leading = rest.substr(0, end);
  std::vector<std::string_view> seen;
  if (!is_option(leading)) {
    auto bytes = parse_size(leading);
    if (!bytes)
      return bad_uri(uri, "bad capacity '" + std::string(leading) +
                              "': want a size such as 32M (digits, then K, M or G)");
    config.cache.capacity_bytes = *bytes;
    seen.push_back("capacity");
  }
  for (bool first = true;; first = false) {
    const std::string_view option = rest.substr(0, end);
    if (!first || is_option(leading)) {
      const size_t equals = option.find('=');
      if (equals == std::string_view::npos || equals == 0)
        return bad_uri(uri, "bad option '" + std::string(option) + "': want KEY=VALUE");
      std::string_view key = option.substr(0, equals);
      const std::string_view same_as = key == "compression_type" ? "codec" : key;
      if (std::find(seen.begin(), seen.end(), same_as) != seen.end())
        return bad_uri(uri, "option '" + std::string(key) + "' given twice" +
                                (key == "capacity" ? " (it is the URI's first part)" : "") +
                                (same_as != key ? " (as codec)" : ""));
      seen.push_back(same_as);
      if (auto why = apply_option(key, option.substr(equals + 1), config))
        return bad_uri(uri, *why);
    }
    if (end == std::string_view::npos) break;
    rest = rest.substr(end + 1);
    end = rest.find(';');
  }
  if (std::find(seen.begin(), seen.end(), "capacity") == seen.end())
    return bad_uri(uri, "no capacity: want zsm://CAPACITY[;KEY=VALUE]... or capacity=SIZE");
  if (config.cache.backing_file && config.cache.backing_file->path.empty())
    return bad_uri(uri, "file_size, writeback_limit or idle_writeback without file=PATH");
  if (config.idle_writeback_every.count() != 0 && !config.cache.backing_file)
    return bad_uri(uri, "idle_writeback without file=PATH: idle blocks are written to the file");
  if (config.recompress_every.count() != 0 && !config.cache.recompress_codec)
    return bad_uri(uri, "recompress_every without recompress=CODEC");
  const size_t page = config.cache.pool.page_size != 0 ? config.cache.pool.page_size : 4096;
  if (config.cache.capacity_bytes < page)
    return bad_uri(uri, "capacity " + std::to_string(config.cache.capacity_bytes) +
                            " below the pool's page (" + std::to_string(page) + " bytes)");
  *out = std::move(config);
  return rocksdb::Status::OK();
}

RocksSecondaryCache::RocksSecondaryCache(std::unique_ptr<CacheCore> cache, size_t capacity,
                                         Admission admission)
    : cache_(std::move(cache)),
      capacity_(capacity),
      admission_(admission),
      evicted_once_(admission_words(capacity, admission)) {}

RocksSecondaryCache::~RocksSecondaryCache() { stop_periodic_work(); }

rocksdb::Status RocksSecondaryCache::Create(const CacheOptions& options,
                                            std::shared_ptr<RocksSecondaryCache>* out,
                                            Admission admission) {
  const size_t table_bytes = admission_words(options.capacity_bytes, admission) * sizeof(uint64_t);
  CacheOptions cache_options = options;
  cache_options.capacity_bytes -= std::min(table_bytes, options.capacity_bytes);
  if (cache_options.max_value_size == 0) cache_options.max_value_size = kDefaultMaxBlock;
  cache_options.insert_referenced = false;  // a victim cache (see Create() in the header)
  rocksdb::Status status;
  std::unique_ptr<CacheCore> cache = make_cache(cache_options, &status);
  if (!cache) return status;
  out->reset(new RocksSecondaryCache(std::move(cache), options.capacity_bytes, admission));
  return rocksdb::Status::OK();
}

rocksdb::Status RocksSecondaryCache::CreateFromUri(const std::string& uri,
                                                   std::shared_ptr<RocksSecondaryCache>* out) {
  RocksTierConfig config;
  rocksdb::Status status = ParseZsmUri(uri, &config);
  if (!status.ok()) return status;
  status = Create(config, out);
  if (!status.ok()) return bad_uri(uri, status.ToString());
  return status;
}

rocksdb::Status RocksSecondaryCache::Create(const RocksTierConfig& config,
                                            std::shared_ptr<RocksSecondaryCache>* out) {
  std::shared_ptr<RocksSecondaryCache> tier;
  rocksdb::Status status = Create(config.cache, &tier, config.admission);
  if (!status.ok()) return status;
  tier->start_periodic_work(config.recompress_every, config.idle_writeback_every);
  *out = std::move(tier);
  return status;
}

// One thread for both kinds of work, woken at the nearer of the two.
void RocksSecondaryCache::start_periodic_work(std::chrono::seconds recompress_every,
                                              std::chrono::seconds idle_writeback_every) {
  if (recompress_every.count() == 0 && idle_writeback_every.count() == 0) return;
  using Clock = std::chrono::steady_clock;
  worker_pid_ = getpid();
  worker_ = std::thread([this, recompress_every, idle_writeback_every] {
    const auto far = Clock::time_point::max();
    auto next_recompress = recompress_every.count() ? Clock::now() + recompress_every : far;
    auto next_idle = idle_writeback_every.count() ? Clock::now() + idle_writeback_every : far;
    std::unique_lock guard(work_lock_);
    while (!work_wake_.wait_until(guard, std::min(next_recompress, next_idle),
                                  [this] { return work_stop_; })) {
      guard.unlock();
      {
        std::shared_lock cache(cache_lock_);
        size_t staged = 0, moved = 0;
        if (Clock::now() >= next_recompress) {
          (void)cache_->recompress(SIZE_MAX, moved);
          next_recompress += recompress_every;
        }
        if (Clock::now() >= next_idle) {
          (void)cache_->writeback_idle(staged);  // idle since the last mark: to the file
          cache_->mark_idle();
          next_idle += idle_writeback_every;
        }
      }
      guard.lock();
    }
  });
}

void RocksSecondaryCache::stop_periodic_work() {
  if (!worker_.joinable()) return;
  if (getpid() != worker_pid_) {  // a child of fork(): the thread is the parent's
    worker_.detach();
    return;
  }
  {
    std::lock_guard guard(work_lock_);
    work_stop_ = true;
  }
  work_wake_.notify_all();
  worker_.join();
}

std::atomic<uint64_t>& RocksSecondaryCache::admission_word(uint64_t hash) {
  return evicted_once_[hash & (evicted_once_.size() - 1)];
}

size_t RocksSecondaryCache::admission_bytes() const {
  return evicted_once_.size() * sizeof(uint64_t);
}

bool RocksSecondaryCache::seen_before(const rocksdb::Slice& key) {
  const uint64_t h = admission_hash(key);
  std::atomic<uint64_t>& word = admission_word(h);
  const bool seen = word.load(std::memory_order_relaxed) == h;
  word.store(seen ? 0 : h, std::memory_order_relaxed);
  return seen;
}

void RocksSecondaryCache::remember(const rocksdb::Slice& key) {
  const uint64_t h = admission_hash(key);
  admission_word(h).store(h, std::memory_order_relaxed);
}

rocksdb::Status RocksSecondaryCache::Insert(const rocksdb::Slice& key, void* value,
                                            const rocksdb::Cache::CacheItemHelper* helper) {
  if (value == nullptr || helper == nullptr || helper->size_cb == nullptr ||
      helper->saveto_cb == nullptr) {
    return rocksdb::Status::InvalidArgument("zsm secondary cache: no value or helper");
  }
  if (admission_ == Admission::second_eviction && !seen_before(key)) {
    first_evictions_.fetch_add(1, std::memory_order_relaxed);
    return rocksdb::Status::OK();
  }
  std::shared_lock lock(cache_lock_);
  const size_t size = helper->size_cb(value);
  rocksdb::Status saved;
  auto serialize = [&](std::span<std::byte> out) noexcept {
    saved = helper->saveto_cb(value, 0, size, out.data());
    return saved.ok() ? std::error_code{} : std::make_error_code(std::errc::io_error);
  };
  return insert_status(cache_->put(as_view(key), size, serialize), size, saved);
}

// The Status of an Insert() from the cache's error, counted: OK, the save callback's own
// Status when it failed, or the cache's refusal.
rocksdb::Status RocksSecondaryCache::insert_status(std::error_code ec, size_t size,
                                                   const rocksdb::Status& saved) {
  if (!ec) {
    inserts_.fetch_add(1, std::memory_order_relaxed);
    return rocksdb::Status::OK();
  }
  inserts_refused_.fetch_add(1, std::memory_order_relaxed);
  if (!saved.ok()) return saved;
  const char* what = "zsm secondary cache";
  if (ec == CacheError::value_too_large) {
    refuse_too_large(size, cache_->options().max_value_size);
    return rocksdb::Status::InvalidArgument(what, "block above max_value_size, not stored");
  }
  if (ec == CacheError::key_too_large)
    return rocksdb::Status::InvalidArgument(what, "key empty or above max_key_size");
  if (ec == CacheError::no_memory)
    return rocksdb::Status::MemoryLimit(what, "no room for the block, even after evicting");
  return rocksdb::Status::InvalidArgument(what, ec.message());
}

// Counts a block above max_value_size, and says so on stderr the first time: a tier that
// refuses every block of a workload is otherwise a tier that silently holds nothing.
void RocksSecondaryCache::refuse_too_large(size_t size, size_t max_value_size) {
  if (inserts_too_large_.fetch_add(1, std::memory_order_relaxed) == 0)
    std::fprintf(stderr,
                 "zsm secondary cache: a block of %zu bytes is above max_value_size (%zu bytes) "
                 "and is not stored; blocks this large need a larger max_value_size "
                 "(CacheOptions::max_value_size, or zsm://...;max_value=, up to 1M)\n",
                 size, max_value_size);
}

std::unique_ptr<rocksdb::SecondaryCacheResultHandle> RocksSecondaryCache::Lookup(
    const rocksdb::Slice& key, const rocksdb::Cache::CreateCallback& create_cb, bool /*wait*/,
    bool advise_erase, bool& is_in_sec_cache) {
  is_in_sec_cache = false;
  std::unique_ptr<rocksdb::SecondaryCacheResultHandle> handle = create_from_cache(key, create_cb);
  if (!handle) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  if (advise_erase) {
    Erase(key);
    // The primary takes the block: its next eviction is its second (RocksDB's tier inserts a
    // dummy entry here).
    if (admission_ == Admission::second_eviction) remember(key);
  } else {
    is_in_sec_cache = true;
  }
  return handle;
}

// The object create_cb makes from the key's block, or nothing when the cache has no block for
// it (absent, or dropped as corrupt) or create_cb fails.
std::unique_ptr<rocksdb::SecondaryCacheResultHandle> RocksSecondaryCache::create_from_cache(
    const rocksdb::Slice& key, const rocksdb::Cache::CreateCallback& create_cb) {
  std::shared_lock lock(cache_lock_);
  std::span<std::byte> buffer = thread_buffer(cache_->options().max_value_size);
  size_t size = 0;
  // not_found, corrupt (dropped by the cache) and no_memory (for the codec) are all misses.
  if (cache_->get(as_view(key), buffer, size)) return nullptr;
  void* object = nullptr;
  size_t charge = 0;
  if (!create_cb(buffer.data(), size, &object, &charge).ok() || object == nullptr) return nullptr;
  return std::make_unique<ReadyHandle>(object, charge);
}

void RocksSecondaryCache::Erase(const rocksdb::Slice& key) {
  std::shared_lock lock(cache_lock_);
  if (!cache_->erase(as_view(key))) erases_.fetch_add(1, std::memory_order_relaxed);
}

rocksdb::Status RocksSecondaryCache::SetCapacity(size_t capacity) {
  std::unique_lock lock(cache_lock_);
  if (capacity == capacity_) return rocksdb::Status::OK();
  const size_t table_bytes = admission_bytes();
  if (capacity <= table_bytes)
    return rocksdb::Status::InvalidArgument(
        "zsm secondary cache: capacity below the admission table");
  // The new cache keeps the backing file (the same file, with what it holds) and evicts by
  // its CLOCK what does not fit.
  std::error_code ec;
  std::string why;
  std::unique_ptr<CacheCore> resized = CacheCore::resized(*cache_, capacity - table_bytes, ec, why);
  if (!resized) return cache_refused(ec, why);
  cache_ = std::move(resized);
  capacity_ = capacity;
  return rocksdb::Status::OK();
}

rocksdb::Status RocksSecondaryCache::GetCapacity(size_t& capacity) {
  std::shared_lock lock(cache_lock_);
  capacity = capacity_;
  return rocksdb::Status::OK();
}

std::string RocksSecondaryCache::GetPrintableOptions() const {
  std::shared_lock lock(cache_lock_);
  const CacheOptions& options = cache_->options();
  return "    capacity : " + std::to_string(capacity_) +
         "\n    admission : " +
         (admission_ == Admission::every_block ? "every_block" : "second_eviction") +
         "\n    codec : " + std::string(Codec::create(options.codec)->name()) +
         "\n    max_value_size : " + std::to_string(options.max_value_size) +
         "\n    mm_stat : " + detail::mm_stat_line(cache_->stats()) + "\n";
}

size_t RocksSecondaryCache::recompress(size_t max_entries) {
  std::shared_lock lock(cache_lock_);
  size_t moved = 0;
  (void)cache_->recompress(max_entries, moved);  // no_memory: stopped early, `moved` moved
  return moved;
}

RocksSecondaryCacheStats RocksSecondaryCache::stats() const {
  RocksSecondaryCacheStats s;
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.inserts = inserts_.load(std::memory_order_relaxed);
  s.inserts_refused = inserts_refused_.load(std::memory_order_relaxed);
  s.erases = erases_.load(std::memory_order_relaxed);
  s.first_evictions = first_evictions_.load(std::memory_order_relaxed);
  s.inserts_too_large = inserts_too_large_.load(std::memory_order_relaxed);
  s.admission_bytes = admission_bytes();
  std::shared_lock lock(cache_lock_);
  s.cache = cache_->stats();
  return s;
}

std::string RocksSecondaryCache::mm_stat() const {
  std::shared_lock lock(cache_lock_);
  return detail::mm_stat_line(cache_->stats());
}

std::string RocksSecondaryCache::bd_stat() const {
  std::shared_lock lock(cache_lock_);
  return detail::bd_stat_line(cache_->stats().backing_file);
}

zs_pool* RocksSecondaryCache::pool() const {
  std::shared_lock lock(cache_lock_);
  return cache_->pool();
}

}  // namespace zsm
