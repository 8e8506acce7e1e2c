// The cache's side of its backing file (backing_file.h holds the file itself): what goes to
// the file (evicted entries, raw ones, idle ones), reading a record back on a miss, putting
// it back into the pool, and freeing from memory what the writer has written. The writer
// thread calls release_written(), which takes one shard's write lock; everything else here
// runs on the caller's thread. The rule that keeps a get from returning anything but the
// value last put is in cache_core.h ("generations").
#include "cache_core.h"

#include <cstring>
#include <new>
#include <vector>

namespace zsm::detail {

size_t CacheCore::file_index_limit() const noexcept {
  const BackingFileOptions& f = *options_.backing_file;
  const size_t buffers = (1 + size_t{f.write_queue_batches}) * f.batch_bytes;
  return (options_.capacity_bytes - std::min(buffers, options_.capacity_bytes)) / 2;
}

BackingFile::Released CacheCore::release_callback() noexcept {
  return [this](uint64_t hash, uint64_t generation) { release_written(hash, generation); };
}

// stage() grows the file's index and log: a heap too short for them makes the record one the
// file does not take, as one larger than a batch.
Staged CacheCore::stage_noexcept(uint64_t h, std::string_view key, const Entry& s,
                                 std::span<const std::byte> stored, bool release) noexcept {
  try {
    return file_->stage(h, key, {s.kind, s.value_size, 0}, stored, release);
  } catch (const std::bad_alloc&) {
    return Staged::too_large;
  }
}

// A promoted entry keeps kOnFile until it is replaced (a put makes a new entry), and the file
// holds no other record of its key meanwhile (only this entry could stage one).
bool CacheCore::on_file(uint64_t h, const Entry& s) const noexcept {
  return (s.flags & kOnFile) && file_->contains(h);
}

bool CacheCore::has_hash(const Entry& s, uint64_t h) const noexcept {
  return records_.with_record(s, false, [&](std::span<const std::byte> record) {
    return hash_key({reinterpret_cast<const char*>(record.data()), s.key_size}) == h;
  });
}

Staged CacheCore::write_back(Entry& s, bool release, bool* was_on_file) noexcept {
  Staged r = records_.with_record(s, Staged::too_large, [&](std::span<const std::byte> record) {
    std::string_view key(reinterpret_cast<const char*>(record.data()), s.key_size);
    const uint64_t h = hash_key(key);
    if (on_file(h, s)) {
      if (was_on_file != nullptr) *was_on_file = true;
      return Staged::taken;
    }
    return stage_noexcept(h, key, s, record.subspan(s.key_size, s.stored_size), release);
  });
  if (release && r == Staged::taken) s.flags |= kReleasePending;
  return r;
}

// On the writer thread: the record of `generation` for `hash` is on file. While the file holds
// that generation, the key was neither put nor erased since it was staged, so the entry of
// that key marked kReleasePending is the one written (or a promotion of that record): freed.
void CacheCore::release_written(uint64_t hash, uint64_t generation) noexcept {
  IndexShard& sh = index_.shard_of(hash);
  std::unique_lock guard(sh.lock());
  if (sh.size() == 0 || !file_->holds(hash, generation)) return;
  Entry* written = sh.find_if(hash, [&](const Entry& s) {
    return (s.flags & kReleasePending) && has_hash(s, hash);
  });
  if (written == nullptr) return;
  drop(sh, written);
  counters_.written_back++;
}

std::error_code CacheCore::get_from_file(std::string_view key, uint64_t h,
                                         std::span<std::byte> out, size_t& size) noexcept {
  std::vector<std::byte> stored;
  std::optional<FileRecordInfo> info;
  try {
    info = file_->read(h, key, stored);
  } catch (const std::bad_alloc&) {
    return make_error_code(CacheError::no_memory);
  }
  if (!info) return make_error_code(CacheError::not_found);
  if (out.size() < info->value_size) return make_error_code(CacheError::buffer_too_small);
  Entry s;
  s.kind = info->kind;
  s.value_size = info->value_size;
  s.stored_size = static_cast<uint32_t>(stored.size());
  if (std::error_code ec = records_.decode(s, stored, out.first(s.value_size))) {
    file_->erase(h, info->generation);
    return make_error_code(ec == CodecError::corrupt ? CacheError::corrupt : CacheError::no_memory);
  }
  file_->count_hit();
  if (options_.backing_file->promote_on_read) promote(key, h, *info, stored);
  size = s.value_size;
  return {};
}

// Puts a record read from the file back into the pool, as it was (no recompression), unless
// the key was put or erased since it was read (the file no longer holds that generation) or
// there is no room (it stays on file then). The file keeps the record (kOnFile), so that
// evicting the entry again costs no write.
void CacheCore::promote(std::string_view key, uint64_t h, const FileRecordInfo& info,
                        std::span<const std::byte> stored) noexcept {
  std::span<std::byte> record = scratch(Scratch::record, key.size() + stored.size());
  if (record.data() == nullptr) return;
  std::memcpy(record.data(), key.data(), key.size());
  if (!stored.empty()) std::memcpy(record.data() + key.size(), stored.data(), stored.size());
  Entry s;
  s.hash = static_cast<uint32_t>(h);
  s.key_size = static_cast<uint16_t>(key.size());
  s.value_size = info.value_size;
  s.stored_size = static_cast<uint32_t>(stored.size());
  s.kind = info.kind;
  s.flags = kReferenced | kOnFile;
  s.handle = store_making_room(record);
  if (s.handle == 0) return;
  {
    IndexShard& sh = index_.shard_of(h);
    std::unique_lock guard(sh.lock());
    std::error_code ec;
    if (find(sh, h, key, ec) != nullptr || ec || !file_->holds(h, info.generation) ||
        !sh.reserve_slot()) {
      records_.free_record(s);
      return;
    }
    sh.insert(s);
    counters_.account(s, +1);
  }
  file_->count_promoted();
  make_room(options_.capacity_bytes, s.handle);
}

// Stages the shard's idle entries, clearing their mark, and frees at once those the file
// holds already; stops when the writer's queue is full (queue_full then says so) or the write
// limit is reached. Returns how many it wrote back.
size_t CacheCore::writeback_idle_shard(IndexShard& sh, bool& queue_full) noexcept {
  std::unique_lock guard(sh.lock());
  size_t staged = 0;
  sh.sweep([&](Entry& s) {
    if ((s.flags & (kIdle | kReferenced)) != kIdle) return Sweep::next;
    bool was_on_file = false;
    Staged r = write_back(s, true, &was_on_file);
    if (r == Staged::queue_full) {
      queue_full = true;
      return Sweep::stop;
    }
    if (r == Staged::write_limit) return Sweep::stop;
    if (r != Staged::taken) return Sweep::next;
    staged++;
    if (was_on_file) {
      drop(sh, &s);
      counters_.written_back++;
      return Sweep::again;
    }
    s.flags &= static_cast<uint8_t>(~kIdle);
    return Sweep::next;
  });
  return staged;
}

std::error_code CacheCore::writeback_idle(size_t& staged) noexcept {
  staged = 0;
  if (!file_) return {};
  for (IndexShard& sh : index_) {
    for (bool queue_full = true; queue_full;) {
      queue_full = false;
      staged += writeback_idle_shard(sh, queue_full);
      if (queue_full) file_->flush();  // without the shard's lock: the writer takes it
    }
  }
  file_->flush();
  return {};
}

void CacheCore::flush_backing_file() noexcept {
  if (file_) file_->flush();
}

void CacheCore::mark_idle() noexcept {
  for (IndexShard& sh : index_) {
    std::unique_lock guard(sh.lock());
    sh.for_each([](Entry& s) {
      s.flags = static_cast<uint8_t>((s.flags | kIdle) & ~(kReferenced | kReferencedAgain));
    });
  }
}

}  // namespace zsm::detail
