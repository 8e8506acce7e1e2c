// The record store (record_store.h has the layout): its pool, encoding a value into a record,
// storing it as one object or a chain, reading it back, freeing it, decoding its value. No
// shard lock is needed here (the caller holds what the entry needs).
#include "record_store.h"

#include <zsm/cache.hpp>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace zsm::detail {

namespace {

// One 8-byte word repeated (the word, if so).
std::optional<uint64_t> same_filled_word(std::span<const std::byte> v) {
  if (v.empty() || v.size() % 8 != 0) return std::nullopt;
  uint64_t first, word;
  std::memcpy(&first, v.data(), 8);
  for (size_t off = 8; off < v.size(); off += 8) {
    std::memcpy(&word, v.data() + off, 8);
    if (word != first) return std::nullopt;
  }
  return first;
}

void fill_words(std::span<std::byte> out, uint64_t word) {
  for (size_t off = 0; off < out.size(); off += 8) std::memcpy(out.data() + off, &word, 8);
}

// A page for reading a chain's links when the thread's buffer cannot grow (free_chain() must
// not fail): one per process, taken in turn.
std::mutex spare_page_lock;
std::byte spare_page[size_t{64} << 10];  // the largest page zsm supports

}  // namespace

std::span<std::byte> scratch(Scratch which, size_t size) noexcept {
  thread_local std::vector<std::byte> buffers[4];
  std::vector<std::byte>& b = buffers[static_cast<int>(which)];
  if (b.size() < size) {
    try {
      b.resize(size);
    } catch (const std::bad_alloc&) {
      return {};
    }
  }
  return {b.data(), size};
}

Codecs::Codecs(const CodecOptions& codec_options,
               const std::optional<CodecOptions>& recompress_codec)
    : codec(Codec::create(codec_options)) {
  if (recompress_codec) recodec = Codec::create(*recompress_codec);
}

RecordStore::RecordStore(Codecs codecs, const zs_pool_config& config)
    : codec_(std::move(codecs.codec)),
      recodec_(std::move(codecs.recodec)),
      pool_(zs_create_pool_ex("zsm-cache", &config)),
      page_size_(page_size_of(config)) {
  if (pool_ == nullptr && errno == ENOMEM)
    throw std::system_error(make_error_code(CacheError::no_memory));
  if (pool_ == nullptr)
    throw std::system_error(make_error_code(CacheError::bad_options),
                            "pool: zs_create_pool_ex() refused its page_size, chain_size, "
                            "nr_shards or flags");
  huge_class_size_ = zs_huge_class_size(pool_);
  zspage_bytes_ = (config.chain_size != 0 ? config.chain_size : 8) * page_size_;
}

RecordStore::~RecordStore() { zs_destroy_pool(pool_); }

size_t RecordStore::footprint(size_t record_size) const {
  size_t heads = split(record_size) ? heads_of(record_size) : 0;
  size_t last = record_size - heads * head_payload();
  return heads * page_size_ + (last >= huge_class_size_ ? page_size_ : last + ZS_HANDLE_SIZE);
}

unsigned RecordStore::class_of_record(size_t record_size) const {
  size_t first_object = split(record_size) ? page_size_ : record_size;
  return zs_lookup_class_index(pool_, static_cast<unsigned>(first_object + ZS_HANDLE_SIZE));
}

// Same-filled values keep their word; a value is stored raw when compression saves no pool
// memory: zram's rule (a compressed record in the huge class takes a page, as the raw one
// does), for chains too.
std::span<std::byte> RecordStore::encode(std::string_view key, std::span<const std::byte> value,
                                       std::span<std::byte> written, Entry& s) const noexcept {
  std::span<std::byte> record =
      scratch(Scratch::record, key.size() + codec_->bound(value.size()) + 8);
  if (record.data() == nullptr) return {};
  std::span<std::byte> after_key = record.subspan(key.size());
  if (auto word = same_filled_word(value)) {
    s.kind = kSame;
    s.stored_size = 8;
    std::memcpy(after_key.data(), &*word, 8);
  } else {
    std::optional<size_t> n;
    try {
      n = codec_->compress(value, after_key);
    } catch (const std::bad_alloc&) {  // lz4's per-thread state
      return {};
    }
    if (n && *n < value.size() &&
        footprint(key.size() + *n) < footprint(key.size() + value.size())) {
      s.kind = kCompressed;
      s.stored_size = static_cast<uint32_t>(*n);
    } else {
      s.kind = kRaw;
      s.stored_size = static_cast<uint32_t>(value.size());
      if (!written.empty()) return written;
      if (!value.empty()) std::memcpy(after_key.data(), value.data(), value.size());
    }
  }
  std::memcpy(record.data(), key.data(), key.size());
  return record.first(s.record_size());
}

std::span<std::byte> RecordStore::recompressed(const Entry& s,
                                               std::error_code& ec) const noexcept {
  std::span<std::byte> value = scratch(Scratch::written_value, s.value_size);
  std::span<std::byte> record =
      scratch(Scratch::record, s.key_size + recodec_->bound(s.value_size));
  if (value.data() == nullptr || record.data() == nullptr) {
    ec = make_error_code(CacheError::no_memory);
    return {};
  }
  bool decoded = with_record(s, false, [&](std::span<const std::byte> old) {
    zs_memcpy(record.data(), old.data(), s.key_size);
    return !decode(s, old, value);
  });
  if (!decoded) return {};
  std::optional<size_t> n;
  try {
    n = recodec_->compress(value, record.subspan(s.key_size));
  } catch (const std::bad_alloc&) {
    ec = make_error_code(CacheError::no_memory);
    return {};
  }
  if (!n || class_of_record(s.key_size + *n) >= class_of_record(s.record_size())) return {};
  return record.first(s.key_size + *n);
}

// A chain is stored from its last piece back, so that each head piece is stored with the
// handle of the next. A head piece is head_payload() bytes of the record then that handle:
// the handle is written over the record's next kTailLink bytes (the start of the piece after
// it, stored already) for the zs_store(), and those bytes are put back after it.
unsigned long RecordStore::store_record(std::span<std::byte> record) noexcept {
  if (!split(record.size())) return zs_store(pool_, record.data(), record.size());
  const size_t heads = heads_of(record.size());
  const size_t last_at = heads * head_payload();
  unsigned long next = zs_store(pool_, record.data() + last_at, record.size() - last_at);
  if (next == 0) return 0;
  for (size_t i = heads; i-- > 0;) {
    std::byte* piece = record.data() + i * head_payload();
    std::byte* link = piece + head_payload();
    std::byte under_link[kTailLink];
    std::memcpy(under_link, link, kTailLink);
    std::memcpy(link, &next, kTailLink);
    unsigned long head = zs_store(pool_, piece, page_size_);
    std::memcpy(link, under_link, kTailLink);
    if (head == 0) {
      free_chain(next, record.size() - (i + 1) * head_payload());
      return 0;
    }
    next = head;
  }
  return next;
}

void RecordStore::free_chain(unsigned long handle, size_t size) noexcept {
  auto next_of = [&](std::byte* copy) {
    void* mem = zs_obj_read_begin(pool_, handle, page_size_, copy);
    unsigned long next;
    std::memcpy(&next, static_cast<std::byte*>(mem) + head_payload(), kTailLink);
    zs_obj_read_end(pool_, handle, page_size_, mem);
    return next;
  };
  while (split(size)) {
    unsigned long next;
    if (std::byte* copy = scratch(Scratch::object_copy, page_size_).data()) {
      next = next_of(copy);
    } else {
      std::lock_guard guard(spare_page_lock);
      next = next_of(spare_page);
    }
    zs_free(pool_, handle);
    handle = next;
    size -= head_payload();
  }
  zs_free(pool_, handle);
}

void RecordStore::free_record(const Entry& s) noexcept { free_chain(s.handle, s.record_size()); }

bool RecordStore::read_record(const Entry& s, std::span<std::byte> out) const noexcept {
  std::span<std::byte> copy = scratch(Scratch::object_copy, page_size_);
  if (copy.data() == nullptr) return false;
  unsigned long handle = s.handle;
  size_t done = 0, size = s.record_size();
  while (split(size - done)) {
    void* mem = zs_obj_read_begin(pool_, handle, page_size_, copy.data());
    zs_memcpy(out.data() + done, mem, head_payload());
    unsigned long next;
    std::memcpy(&next, static_cast<std::byte*>(mem) + head_payload(), kTailLink);
    zs_obj_read_end(pool_, handle, page_size_, mem);
    handle = next;
    done += head_payload();
  }
  void* mem = zs_obj_read_begin(pool_, handle, size - done, copy.data());
  zs_memcpy(out.data() + done, mem, size - done);
  zs_obj_read_end(pool_, handle, size - done, mem);
  return true;
}

std::optional<bool> RecordStore::key_matches(const Entry& s, std::string_view key) const noexcept {
  if (s.key_size != key.size()) return false;
  std::byte* copy = scratch(Scratch::object_copy, key.size()).data();
  if (copy == nullptr) return std::nullopt;
  void* mem = zs_obj_read_begin(pool_, s.handle, key.size(), copy);
  bool same = std::memcmp(mem, key.data(), key.size()) == 0;
  zs_obj_read_end(pool_, s.handle, key.size(), mem);
  return same;
}

std::error_code RecordStore::decode(const Entry& s, std::span<const std::byte> record,
                                  std::span<std::byte> out) const noexcept {
  auto stored = record.subspan(s.key_size, s.stored_size);
  switch (s.kind) {
    case kSame: {
      uint64_t word;
      std::memcpy(&word, stored.data(), 8);
      fill_words(out, word);
      return {};
    }
    case kRaw:
      zs_memcpy(out.data(), stored.data(), out.size());
      return {};
    default: {
      const Codec& c = s.kind == kRecompressed ? *recodec_ : *codec_;
      return c.decompress(stored, out);
    }
  }
}

}  // namespace zsm::detail
