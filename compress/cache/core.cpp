// The cache core's operations (cache_core.h): making a core from its options, then put, get,
// erase and the calls over every entry. Each returns its error as a CacheError code; see
// cache.hpp for what each promises. Locks as cache_core.h says: one shard lock at a time, none
// while making room.
#include "cache_core.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>

namespace zsm::detail {

namespace {

std::error_code no_memory() noexcept { return make_error_code(CacheError::no_memory); }

// What is wrong with the options, naming the option and its range; empty when nothing is.
// max_value_size 0 has been resolved to the page size.
std::string options_problem(const CacheOptions& o, size_t page_size) {
  auto is = [](const char* name, uint64_t value, const std::string& want) {
    return std::string(name) + " " + std::to_string(value) + ": want " + want;
  };
  if (o.shards == 0 || (o.shards & (o.shards - 1)) != 0 || o.shards > 1024)
    return is("shards", o.shards, "a power of two in 1 .. 1024");
  if (o.capacity_bytes < page_size)
    return is("capacity_bytes", o.capacity_bytes,
              "at least the pool's page size, " + std::to_string(page_size));
  if (o.max_value_size > kLargestValue)
    return is("max_value_size", o.max_value_size, "0 (a page) or 1 .. 1048576");
  if (o.max_key_size == 0 || o.max_key_size > page_size / 2 || o.max_key_size > UINT16_MAX)
    return is("max_key_size", o.max_key_size, "1 .. half a page, " + std::to_string(page_size / 2));
  if (!o.backing_file) return {};
  const BackingFileOptions& f = *o.backing_file;
  if (f.batch_bytes < o.max_key_size + o.max_value_size + 64)
    return is("backing_file.batch_bytes", f.batch_bytes,
              "at least the largest record, max_key_size + max_value_size + 64");
  if ((1 + uint64_t{f.write_queue_batches}) * f.batch_bytes > o.capacity_bytes / 4)
    return "backing_file buffers ((1 + write_queue_batches) x batch_bytes = " +
           std::to_string((1 + uint64_t{f.write_queue_batches}) * f.batch_bytes) +
           " bytes): want at most a quarter of capacity_bytes";
  return {};
}

[[noreturn]] void throw_bad_options(const std::string& why) {
  throw std::system_error(make_error_code(CacheError::bad_options), why);
}

// The bytes of one record readable in place while the object stays open (for_each_key()).
struct KeyRead {
  zs_pool* pool;
  unsigned long handle;
  size_t size;
  void* mem;
  ~KeyRead() { zs_obj_read_end(pool, handle, size, mem); }
};

}  // namespace

CacheCore::CacheCore(CacheOptions o) : CacheCore(std::move(o), true) {}

CacheCore::CacheCore(CacheOptions o, bool open_file) : options_(std::move(o)) {
  codec_ = Codec::create(options_.codec);
  if (options_.recompress_codec) recodec_ = Codec::create(*options_.recompress_codec);
  const unsigned n = options_.shards;
  zs_pool_config pc = options_.pool;
  page_size_ = pc.page_size != 0 ? pc.page_size : 4096;
  if (options_.max_value_size == 0) options_.max_value_size = page_size_;
  if (std::string why = options_problem(options_, page_size_); !why.empty())
    throw_bad_options(why);
  pc.max_pages = options_.capacity_bytes / page_size_;
  pool_ = zs_create_pool_ex("zsm-cache", &pc);
  if (pool_ == nullptr && errno == ENOMEM) throw std::system_error(no_memory());
  if (pool_ == nullptr)
    throw_bad_options("pool: zs_create_pool_ex() refused its page_size, chain_size, nr_shards "
                      "or flags");
  huge_class_size_ = zs_huge_class_size(pool_);
  zspage_bytes_ = (pc.chain_size != 0 ? pc.chain_size : 8) * page_size_;
  shard_shift_ = 64;
  while ((1u << (64 - shard_shift_)) < n) shard_shift_--;
  try {
    shards_ = std::vector<IndexShard>(n);
    if (options_.backing_file && open_file) {
      try {
        file_ = BackingFile::open(*options_.backing_file, file_index_limit(), release_callback());
      } catch (const std::invalid_argument& e) {
        throw_bad_options(e.what());
      }
    }
  } catch (...) {
    zs_destroy_pool(pool_);
    throw;
  }
}

namespace {

// make() without exceptions: what it returns, or nullptr with the error in `ec` and `why`.
template <typename Make>
std::unique_ptr<CacheCore> made_or_error(Make make, std::error_code& ec,
                                         std::string& why) noexcept {
  auto say = [&why](const char* what) noexcept {
    try {
      why = what;
    } catch (const std::bad_alloc&) {
      why.clear();
    }
  };
  try {
    return make();
  } catch (const std::system_error& e) {
    ec = e.code();
    say(e.what());
  } catch (const std::bad_alloc&) {
    ec = no_memory();
    say("no memory for the cache");
  }
  return nullptr;
}

}  // namespace

std::unique_ptr<CacheCore> CacheCore::create(CacheOptions options, std::error_code& ec,
                                             std::string& why) noexcept {
  return made_or_error([&] { return std::make_unique<CacheCore>(std::move(options)); }, ec, why);
}

// The new core is made whole (pool, shards, options checked) before `from` gives anything up.
// The file's staged records are written first, so that no release is owed to `from`; then the
// file moves, and the entries are put into the new core, whose puts drop the file's records
// of those keys (the value is in memory again) and whose evictions write to the same file.
std::unique_ptr<CacheCore> CacheCore::resized(CacheCore& from, size_t capacity,
                                              std::error_code& ec, std::string& why) noexcept {
  CacheOptions options = from.options_;
  options.capacity_bytes = capacity;
  std::unique_ptr<CacheCore> to = made_or_error(
      [&] { return std::make_unique<CacheCore>(std::move(options), false); }, ec, why);
  if (!to) return nullptr;
  if (from.file_) {
    from.file_->flush();
    to->file_ = std::move(from.file_);
    to->file_->set_owner(to->release_callback(), to->file_index_limit());
  }
  from.move_entries_to(*to);
  return to;
}

// The file first: its writer may still be freeing written entries from the pool.
CacheCore::~CacheCore() {
  file_.reset();
  zs_destroy_pool(pool_);
}

std::error_code CacheCore::check_put(std::string_view key, size_t value_size) const noexcept {
  if (key.empty() || key.size() > options_.max_key_size)
    return make_error_code(CacheError::key_too_large);
  if (value_size > options_.max_value_size) return make_error_code(CacheError::value_too_large);
  return {};
}

std::error_code CacheCore::put(std::string_view key, std::span<const std::byte> value) noexcept {
  if (std::error_code ec = check_put(key, value.size())) return ec;
  return put_value(key, value, {});
}

std::error_code CacheCore::put(std::string_view key, size_t value_size,
                               ValueWriter write) noexcept {
  if (std::error_code ec = check_put(key, value_size)) return ec;
  std::span<std::byte> written = scratch(Scratch::written_value, key.size() + value_size);
  if (written.data() == nullptr) return no_memory();
  std::memcpy(written.data(), key.data(), key.size());
  if (std::error_code ec = write(written.subspan(key.size()))) return ec;
  return put_value(key, written.subspan(key.size()), written);
}

// The record is stored and room is made for it and its index slot before the entry goes into
// the index, so that a put that cannot fit fails with nothing to take back but its own record.
// Only when other threads' puts take that room meanwhile does the entry come out again.
std::error_code CacheCore::put_value(std::string_view key, std::span<const std::byte> value,
                                     std::span<std::byte> written) noexcept {
  const uint64_t h = hash_key(key);
  IndexShard& sh = shard_of(h);
  const size_t capacity = options_.capacity_bytes;
  Entry s;
  s.hash = static_cast<uint32_t>(h);
  s.key_size = static_cast<uint16_t>(key.size());
  s.value_size = static_cast<uint32_t>(value.size());
  s.flags = options_.insert_referenced ? kReferenced : 0;
  std::span<std::byte> record = encode(key, value, written, s);
  if (record.data() == nullptr) return no_memory();
  // A put that fails leaves its key without a value: the one it replaced is gone.
  auto refuse = [&] {
    (void)erase_entry(key);
    make_room(capacity);  // the zspage a freed record leaves empty, compacted away
    return no_memory();
  };
  s.handle = store_making_room(record);
  if (s.handle == 0) return refuse();
  size_t growth;
  {
    std::shared_lock guard(sh.lock);
    std::error_code ec;
    growth = find(sh, h, key, ec) != nullptr ? 0 : index_growth(sh);
  }
  if (growth >= capacity || !make_room(capacity - growth, s.handle)) {
    free_record(s);
    return refuse();
  }
  {
    std::unique_lock guard(sh.lock);
    std::error_code ec;
    Entry* old = find(sh, h, key, ec);
    if (ec || (old == nullptr && !reserve_slot(sh))) {
      guard.unlock();
      free_record(s);
      return refuse();
    }
    Entry* placed = old;
    if (old != nullptr) {
      account(*old, -1);
      free_record(*old);
      *old = s;
    } else {
      placed = insert(sh, s);
    }
    account(s, +1);
    if (s.kind == kRaw) huge_since_++;
    if (file_) {
      file_->erase(h);  // an older value on file must not come back
      if (s.kind == kRaw && options_.backing_file->write_huge &&
          stage_noexcept(h, key, s, record.subspan(key.size(), s.stored_size), true) ==
              Staged::taken)
        placed->flags |= kReleasePending;
    }
  }
  note_mem_used();
  if (!make_room(capacity, s.handle)) return refuse();
  compact_if_worth();  // the value it replaced, the entries it evicted
  return {};
}

// One read of the record: compare the key, then decode from the same bytes.
std::error_code CacheCore::get_locked(IndexShard& sh, uint64_t h, std::string_view key,
                                      std::span<std::byte> out, size_t& size) noexcept {
  enum Found { other_key, found, too_small, corrupt, codec_no_memory };
  if (sh.slots.empty()) return make_error_code(CacheError::not_found);
  const size_t mask = sh.slots.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    Entry& s = sh.slots[i];
    if (s.handle == 0) return make_error_code(CacheError::not_found);
    if (s.hash != static_cast<uint32_t>(h) || s.key_size != key.size()) continue;
    Found r = with_record(s, codec_no_memory, [&](std::span<const std::byte> record) {
      if (std::memcmp(record.data(), key.data(), key.size()) != 0) return other_key;
      if (out.size() < s.value_size) return too_small;
      std::error_code ec = decode(s, record, out.first(s.value_size));
      return !ec ? found : ec == CodecError::corrupt ? corrupt : codec_no_memory;
    });
    switch (r) {
      case other_key: continue;
      case too_small: return make_error_code(CacheError::buffer_too_small);
      case codec_no_memory: return no_memory();  // the value is fine: keep it
      case corrupt: return make_error_code(CacheError::corrupt);
      case found: break;
    }
    note_read(s);
    size = s.value_size;
    return {};
  }
}

std::error_code CacheCore::get(std::string_view key, std::span<std::byte> out,
                               size_t& size) noexcept {
  const uint64_t h = hash_key(key);
  IndexShard& sh = shard_of(h);
  std::error_code ec;
  {
    std::shared_lock guard(sh.lock);
    ec = get_locked(sh, h, key, out, size);
  }
  if (ec == CacheError::corrupt) {
    // A value that does not decompress is worth nothing: drop it. Not compacted after: objects
    // are moved through the pool's own links, which the corruption may have hit too.
    (void)erase_entry(key);
    return ec;
  }
  if (ec == CacheError::not_found && file_) ec = get_from_file(key, h, out, size);
  if (!ec) hits_++;
  if (ec == CacheError::not_found) misses_++;
  return ec;
}

std::error_code CacheCore::erase(std::string_view key) noexcept {
  std::error_code ec = erase_entry(key);
  if (!ec) compact_if_worth();
  return ec;
}

// Under the key's shard read lock: the size of its value in memory, if there is one, and
// whether the backing file has a record of its hash.
std::error_code CacheCore::peek(std::string_view key, std::optional<size_t>& in_memory,
                                bool& on_file) const noexcept {
  const uint64_t h = hash_key(key);
  IndexShard& sh = shard_of(h);
  std::shared_lock guard(sh.lock);
  std::error_code ec;
  if (const Entry* s = find(sh, h, key, ec)) in_memory = s->value_size;
  on_file = file_ && file_->contains(h);
  return ec;
}

std::error_code CacheCore::contains(std::string_view key, bool& found) const noexcept {
  std::optional<size_t> in_memory;
  bool on_file = false;
  std::error_code ec = peek(key, in_memory, on_file);
  found = in_memory || on_file;
  return ec;
}

std::error_code CacheCore::value_size(std::string_view key, size_t& size) const noexcept {
  std::optional<size_t> in_memory;
  bool on_file = false;
  if (std::error_code ec = peek(key, in_memory, on_file)) return ec;
  if (!in_memory) return make_error_code(CacheError::not_found);
  size = *in_memory;
  return {};
}

void CacheCore::for_each_key(const std::function<void(std::string_view)>& fn) const {
  for (IndexShard& sh : shards_) {
    std::shared_lock guard(sh.lock);
    for (const Entry& s : sh.slots) {
      if (s.handle == 0) continue;
      std::byte* copy = scratch(Scratch::object_copy, s.key_size).data();
      if (copy == nullptr) throw std::bad_alloc();
      KeyRead read{pool_, s.handle, s.key_size, zs_obj_read_begin(pool_, s.handle, s.key_size, copy)};
      fn(std::string_view(static_cast<const char*>(read.mem), s.key_size));
    }
  }
}

void CacheCore::clear() noexcept {
  for (IndexShard& sh : shards_) {
    std::unique_lock guard(sh.lock);
    for (Entry& s : sh.slots) {
      if (s.handle == 0) continue;
      account(s, -1);
      free_record(s);
    }
    index_bytes_ -= sh.slots.size() * sizeof(Entry);
    sh.slots = {};
    sh.used = 0;
    sh.hand = 0;
  }
  if (file_) file_->clear();
  compact();
}

std::error_code CacheCore::recompress(size_t max_entries, size_t& moved) noexcept {
  moved = 0;
  if (!recodec_) return {};
  size_t tried = 0;
  auto class_of = [&](size_t record_size) {
    return zs_lookup_class_index(pool_, static_cast<unsigned>(record_size + ZS_HANDLE_SIZE));
  };
  for (IndexShard& sh : shards_) {
    std::unique_lock guard(sh.lock);
    for (Entry& s : sh.slots) {
      if (tried == max_entries) break;
      bool candidate = s.kind == kCompressed || s.kind == kRaw;  // zram: type=huge too
      if (s.handle == 0 || !candidate || (s.flags & kRecompressTried)) continue;
      tried++;
      s.flags |= kRecompressTried;
      std::span<std::byte> value = scratch(Scratch::written_value, s.value_size);
      std::span<std::byte> record =
          scratch(Scratch::record, s.key_size + recodec_->bound(s.value_size));
      if (value.data() == nullptr || record.data() == nullptr) return no_memory();
      bool decoded = with_record(s, false, [&](std::span<const std::byte> old) {
        zs_memcpy(record.data(), old.data(), s.key_size);
        return !decode(s, old, value);
      });
      if (!decoded) continue;
      std::optional<size_t> n;
      try {
        n = recodec_->compress(value, record.subspan(s.key_size));
      } catch (const std::bad_alloc&) {
        return no_memory();
      }
      if (!n || class_of(s.key_size + *n) >= class_of(s.record_size())) continue;
      unsigned long h = store_record(record.first(s.key_size + *n));
      if (h == 0) continue;
      account(s, -1);
      free_record(s);
      s.handle = h;
      s.stored_size = static_cast<uint32_t>(*n);
      s.kind = kRecompressed;
      account(s, +1);
      moved++;
      recompressed_++;
    }
  }
  if (moved > 0) compact();  // the old records left holes
  make_room(options_.capacity_bytes);  // new records may have opened zspages
  return {};
}

// The key and value of each entry are copied out of this core's pool before `to` stores them:
// the record's bytes may lie in this thread's buffers, which a put into `to` reuses.
void CacheCore::move_entries_to(CacheCore& to) noexcept {
  std::string key;
  std::vector<std::byte> value;
  try {
    key.reserve(options_.max_key_size);
    value.resize(options_.max_value_size);
  } catch (const std::bad_alloc&) {
    return;
  }
  for (IndexShard& sh : shards_) {
    std::shared_lock guard(sh.lock);
    for (const Entry& s : sh.slots) {
      if (s.handle == 0) continue;
      bool decoded = with_record(s, false, [&](std::span<const std::byte> record) {
        key.assign(reinterpret_cast<const char*>(record.data()), s.key_size);
        return !decode(s, record, std::span(value).first(s.value_size));
      });
      if (decoded) (void)to.put(key, std::span(value).first(s.value_size));
    }
  }
}

CacheStats CacheCore::stats() const noexcept {
  struct zs_pool_stats ps{};
  zs_pool_stats(pool_, &ps);
  CacheStats s;
  s.orig_data_size = orig_.load();
  s.compr_data_size = compr_.load();
  s.mem_used_total = pool_bytes();
  s.mem_limit = options_.capacity_bytes;
  s.mem_used_max = std::max<uint64_t>(mem_used_max_.load(), s.mem_used_total);
  s.same_pages = same_.load();
  s.pages_compacted = ps.pages_compacted;
  s.huge_pages = huge_.load();
  s.huge_pages_since = huge_since_.load();
  s.entries = entries_.load();
  s.bytes_held = bytes_held();
  s.hits = hits_.load();
  s.misses = misses_.load();
  s.evictions = evictions_.load();
  s.recompressed = recompressed_.load();
  s.written_back = written_back_.load();
  if (file_) s.backing_file = file_->stats();
  return s;
}

}  // namespace zsm::detail
