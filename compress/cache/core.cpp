// The cache core's operations (cache_core.h): making a core from its options, then put, get,
// erase and the calls over every entry, on the index (index.h) and the record store
// (record_store.h). Each returns its error as a CacheError code; see cache.hpp for what each
// promises. Locks as cache_core.h says: one shard lock at a time, none while making room.
#include "cache_core.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <shared_mutex>
#include <stdexcept>
#include <vector>

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

// The options with max_value_size 0 resolved to the page size, checked.
CacheOptions checked(CacheOptions&& o) {
  const size_t page_size = RecordStore::page_size_of(o.pool);
  if (o.max_value_size == 0) o.max_value_size = page_size;
  if (std::string why = options_problem(o, page_size); !why.empty()) throw_bad_options(why);
  return std::move(o);
}

// The pool's configuration: the options', with the capacity as its page limit.
zs_pool_config pool_config(const CacheOptions& o) {
  zs_pool_config pc = o.pool;
  pc.max_pages = o.capacity_bytes / RecordStore::page_size_of(pc);
  return pc;
}

}  // namespace

void Counters::account(const Entry& s, int sign) noexcept {
  auto add = [sign](std::atomic<uint64_t>& counter, uint64_t v) {
    if (sign > 0)
      counter += v;
    else
      counter -= v;
  };
  add(orig, s.value_size);
  add(compr, s.kind == kSame ? 0 : s.stored_size);
  add(record_bytes, s.record_size());
  add(entries, 1);
  if (s.kind == kSame) add(same, 1);
  if (s.kind == kRaw) add(huge, 1);
}

CacheCore::CacheCore(CacheOptions o) : CacheCore(std::move(o), true) {}

CacheCore::CacheCore(CacheOptions o, bool open_file)
    : CacheCore(Codecs(o.codec, o.recompress_codec), std::move(o), open_file) {}

CacheCore::CacheCore(Codecs codecs, CacheOptions&& o, bool open_file)
    : options_(checked(std::move(o))),
      records_(std::move(codecs), pool_config(options_)),
      index_(options_.shards) {
  if (options_.backing_file && open_file) {
    try {
      file_ = BackingFile::open(*options_.backing_file, file_index_limit(), release_callback());
    } catch (const std::invalid_argument& e) {
      throw_bad_options(e.what());
    }
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
CacheCore::~CacheCore() { file_.reset(); }

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
  IndexShard& sh = index_.shard_of(h);
  const size_t capacity = options_.capacity_bytes;
  Entry s;
  s.hash = static_cast<uint32_t>(h);
  s.key_size = static_cast<uint16_t>(key.size());
  s.value_size = static_cast<uint32_t>(value.size());
  s.flags = options_.insert_referenced ? kReferenced : 0;
  std::span<std::byte> record = records_.encode(key, value, written, s);
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
    std::shared_lock guard(sh.lock());
    std::error_code ec;
    growth = find(sh, h, key, ec) != nullptr ? 0 : sh.growth();
  }
  if (growth >= capacity || !make_room(capacity - growth, s.handle)) {
    records_.free_record(s);
    return refuse();
  }
  {
    std::unique_lock guard(sh.lock());
    std::error_code ec;
    Entry* old = find(sh, h, key, ec);
    if (ec || (old == nullptr && !sh.reserve_slot())) {
      guard.unlock();
      records_.free_record(s);
      return refuse();
    }
    Entry* placed = old;
    if (old != nullptr) {
      counters_.account(*old, -1);
      records_.free_record(*old);
      *old = s;
    } else {
      placed = sh.insert(s);
    }
    counters_.account(s, +1);
    if (s.kind == kRaw) counters_.huge_since++;
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
  Found r = other_key;
  Entry* s = sh.find_if(h, [&](const Entry& e) {
    if (e.key_size != key.size()) return false;
    r = records_.with_record(e, codec_no_memory, [&](std::span<const std::byte> record) {
      if (std::memcmp(record.data(), key.data(), key.size()) != 0) return other_key;
      if (out.size() < e.value_size) return too_small;
      std::error_code ec = records_.decode(e, record, out.first(e.value_size));
      return !ec ? found : ec == CodecError::corrupt ? corrupt : codec_no_memory;
    });
    return r != other_key;
  });
  if (s == nullptr) return make_error_code(CacheError::not_found);
  if (r == too_small) return make_error_code(CacheError::buffer_too_small);
  if (r == codec_no_memory) return no_memory();  // the value is fine: keep it
  if (r == corrupt) return make_error_code(CacheError::corrupt);
  note_read(*s);
  size = s->value_size;
  return {};
}

std::error_code CacheCore::get(std::string_view key, std::span<std::byte> out,
                               size_t& size) noexcept {
  const uint64_t h = hash_key(key);
  IndexShard& sh = index_.shard_of(h);
  std::error_code ec;
  {
    std::shared_lock guard(sh.lock());
    ec = get_locked(sh, h, key, out, size);
  }
  if (ec == CacheError::corrupt) {
    // A value that does not decompress is worth nothing: drop it. Not compacted after: objects
    // are moved through the pool's own links, which the corruption may have hit too.
    (void)erase_entry(key);
    return ec;
  }
  if (ec == CacheError::not_found && file_) ec = get_from_file(key, h, out, size);
  if (!ec) counters_.hits++;
  if (ec == CacheError::not_found) counters_.misses++;
  return ec;
}

Entry* CacheCore::find(IndexShard& sh, uint64_t h, std::string_view key,
                       std::error_code& ec) const noexcept {
  Entry* s = sh.find_if(h, [&](const Entry& e) {
    std::optional<bool> same = records_.key_matches(e, key);
    if (same) return *same;
    ec = no_memory();
    return true;  // no further: this key could not be read
  });
  return ec ? nullptr : s;
}

void CacheCore::drop(IndexShard& sh, Entry* s) noexcept {
  counters_.account(*s, -1);
  records_.free_record(*s);
  sh.remove(s);
}

std::error_code CacheCore::erase_entry(std::string_view key) noexcept {
  uint64_t h = hash_key(key);
  IndexShard& sh = index_.shard_of(h);
  std::unique_lock guard(sh.lock());
  const bool on_file = file_ && file_->contains(h);
  if (on_file) file_->erase(h);
  std::error_code ec;
  Entry* s = find(sh, h, key, ec);
  if (ec) return ec;
  if (s == nullptr) return on_file ? std::error_code{} : make_error_code(CacheError::not_found);
  drop(sh, s);
  return {};
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
  IndexShard& sh = index_.shard_of(h);
  std::shared_lock guard(sh.lock());
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
  for (IndexShard& sh : index_) {
    std::shared_lock guard(sh.lock());
    sh.for_each([&](const Entry& s) {
      if (!records_.with_key(s, fn)) throw std::bad_alloc();
    });
  }
}

void CacheCore::clear() noexcept {
  for (IndexShard& sh : index_) {
    std::unique_lock guard(sh.lock());
    sh.for_each([&](const Entry& s) {
      counters_.account(s, -1);
      records_.free_record(s);
    });
    sh.clear();
  }
  if (file_) file_->clear();
  compact();
}

std::error_code CacheCore::recompress(size_t max_entries, size_t& moved) noexcept {
  moved = 0;
  if (!records_.can_recompress()) return {};
  size_t tried = 0;
  std::error_code ec;
  for (IndexShard& sh : index_) {
    std::unique_lock guard(sh.lock());
    sh.for_each([&](Entry& s) {
      if (tried == max_entries) return false;
      bool candidate = s.kind == kCompressed || s.kind == kRaw;  // zram: type=huge too
      if (!candidate || (s.flags & kRecompressTried)) return true;
      tried++;
      s.flags |= kRecompressTried;
      std::span<std::byte> record = records_.recompressed(s, ec);
      if (ec) return false;
      if (record.empty()) return true;
      unsigned long h = records_.store_record(record);
      if (h == 0) return true;
      counters_.account(s, -1);
      records_.free_record(s);
      s.handle = h;
      s.stored_size = static_cast<uint32_t>(record.size() - s.key_size);
      s.kind = kRecompressed;
      counters_.account(s, +1);
      moved++;
      counters_.recompressed++;
      return true;
    });
    if (ec) return ec;
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
  for (IndexShard& sh : index_) {
    std::shared_lock guard(sh.lock());
    sh.for_each([&](const Entry& s) {
      bool decoded = records_.with_record(s, false, [&](std::span<const std::byte> record) {
        key.assign(reinterpret_cast<const char*>(record.data()), s.key_size);
        return !records_.decode(s, record, std::span(value).first(s.value_size));
      });
      if (decoded) (void)to.put(key, std::span(value).first(s.value_size));
    });
  }
}

CacheStats CacheCore::stats() const noexcept {
  struct zs_pool_stats ps{};
  zs_pool_stats(records_.pool(), &ps);
  const Counters& c = counters_;
  CacheStats s;
  s.orig_data_size = c.orig.load();
  s.compr_data_size = c.compr.load();
  s.mem_used_total = records_.pool_bytes();
  s.mem_limit = options_.capacity_bytes;
  s.mem_used_max = std::max<uint64_t>(c.mem_used_max.load(), s.mem_used_total);
  s.same_pages = c.same.load();
  s.pages_compacted = ps.pages_compacted;
  s.huge_pages = c.huge.load();
  s.huge_pages_since = c.huge_since.load();
  s.entries = c.entries.load();
  s.bytes_held = bytes_held();
  s.hits = c.hits.load();
  s.misses = c.misses.load();
  s.evictions = c.evictions.load();
  s.recompressed = c.recompressed.load();
  s.written_back = c.written_back.load();
  if (file_) s.backing_file = file_->stats();
  return s;
}

}  // namespace zsm::detail
