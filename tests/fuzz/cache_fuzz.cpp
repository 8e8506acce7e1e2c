// tests/fuzz/cache_fuzz.cpp: libFuzzer target for the compressed cache (zsm/cache.hpp) and
// the codecs' decoders (zsm/codec.hpp).
//
// An input is a program. Its first bytes choose the cache: codec, recompress codec, the pool's
// page size, chain and lock shards, the cache's shards, a capacity a few pages above what the
// empty pool costs (so that puts evict), and the largest key and value. Each later byte picks
// an operation, whose arguments follow it. The model maps each key to the last value put: a
// get may miss (eviction) but never returns another value, nor a key never put or erased;
// stats must count the entries and bytes the model says are present, the capacity must hold
// after every call (as CacheOptions::capacity_bytes words it), pages must match the page
// source, and a put that fails for no memory must leave its key absent and the cache empty
// ("does not fit even after evicting every other entry").
//
// Corrupt input reaches the decoders two ways:
// (a) Codec::decompress() on fuzz bytes, and on valid compressed data with bytes flipped:
//     an error or bytes of the asked length, never a crash or an access out of bounds (ASan).
//     A round trip must be exact; a truncation or a wrong expected size must be an error.
// (b) Stored values in the cache's pool. The pool takes its pages from a source this target
//     owns (CacheOptions::pool.page_source, public API), which zeroes each page it hands out
//     and knows which pages the pool holds. A corruption op puts a value under a fresh key
//     that nothing else in the pool can contain (kMarkerLength marker bytes, which other keys
//     and values never contain, then a counter), finds the key in the pages and flips bytes
//     among the stored bytes that follow it, no further than the fewest bytes the value can be
//     stored in (compressed, raw or as a same-filled word). So only that record changes, never
//     a pool header or free link (zs_check_pool() agrees). get() must then give bytes of the
//     value's length or throw CacheError::corrupt and drop the entry; the entry is "tainted"
//     from then on.
//
// Input format (FuzzInput: bytes past the end read as 0; make_seeds.py writes the seeds):
//   program := cache op*
//   cache   := codec:u8 recompress:u8 page:u8 chain:u8 pool_shards:u8 shards:u8 pages:u8
//              max_key:u8 max_value:u16 (create_cache)
//   op      := kind:u8 arguments; kind%kNumOps is an Op, whose comment gives its arguments
//   key     := sel:u8, sel < 224: "key<sel%48>"; else len:u8 bytes (decode_key)
//   value   := shape:u8 len:u16 ... (decode_value)
#include <zsm/cache.hpp>
#include <zsm/codec.hpp>
#include <zsm/zsmalloc.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "fuzz_support.h"

namespace {

using zsm_fuzz::FuzzInput;
using Bytes = std::vector<std::byte>;

constexpr size_t kPageSizes[] = {4096, 16384, 65536};
constexpr size_t kMaxPageSize = 65536;
constexpr zsm::CodecKind kCodecs[] = {zsm::CodecKind::lz4, zsm::CodecKind::lz4hc,
                                      zsm::CodecKind::zstd, zsm::CodecKind::none};
constexpr uint8_t kMarker = 0xa5;        // in marked keys only: sanitize() removes it elsewhere
constexpr size_t kMarkerLength = 12;
constexpr size_t kMarkedKeySize = kMarkerLength + 4;
constexpr size_t kTailLink = 8;          // a split record's head ends with its tail's handle

enum Op : uint8_t {
  kPut,            // key value
  kPutBurst,       // count:u8 first:u8 value: puts one value under count keys
  kGet,            // key
  kGetInto,        // key size:u16: get(key, span) with a buffer of that size
  kErase,          // key
  kContains,       // key
  kClear,          //
  kRecompress,     // max:u8, 0 = all
  kCheck,          //
  kCorruptStored,  // value flips:u8 (pos:u16 mask:u8)* per copy found
  kDecode,         // codec:u8 dict_len:u8 dict mode:u8 ... (decode_fuzz)
  kBadCall,        // which:u8 arg:u8
  kNumOps
};

void sanitize(std::span<std::byte> bytes) {
  for (std::byte& b : bytes)
    if (b == std::byte{kMarker}) b = std::byte{kMarker - 1};
}

void sanitize(std::string& s) {
  sanitize(std::span(reinterpret_cast<std::byte*>(s.data()), s.size()));
}

// A key for messages: its length and its first bytes, escaped.
std::string describe(std::string_view key) {
  std::string out = std::to_string(key.size()) + " bytes \"";
  for (char c : key.substr(0, 24)) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    }
  }
  return out + "\"";
}

// The cache's rule for same-filled values: one 8-byte word repeated.
bool same_filled(const Bytes& v) {
  if (v.empty() || v.size() % 8 != 0) return false;
  for (size_t i = 8; i < v.size(); i++)
    if (v[i] != v[i % 8]) return false;
  return true;
}

// A page source over a zs_vm_source that zeroes the pages it hands out and keeps the set the
// pool holds, so that a record's bytes can be found (and no stale copy of one survives).
class TrackingSource {
 public:
  explicit TrackingSource(size_t page_size)
      : vm_(zs_vm_source_create(page_size, 0, 64)), page_size_(page_size) {
    FUZZ_CHECK(vm_ != nullptr, "zs_vm_source_create: errno %d", errno);
    inner_ = zs_vm_source_ops(vm_);
  }
  ~TrackingSource() { zs_vm_source_destroy(vm_); }
  TrackingSource(const TrackingSource&) = delete;
  TrackingSource& operator=(const TrackingSource&) = delete;

  [[nodiscard]] zs_page_source ops() { return {&alloc_thunk, &free_thunk, this}; }
  [[nodiscard]] const std::set<char*>& pages() const { return pages_; }
  [[nodiscard]] size_t page_size() const { return page_size_; }

 private:
  static void* alloc_thunk(void* self) { return static_cast<TrackingSource*>(self)->alloc(); }
  static void free_thunk(void* self, void* page) {
    static_cast<TrackingSource*>(self)->free(static_cast<char*>(page));
  }

  void* alloc() {
    auto* page = static_cast<char*>(inner_.alloc_page(inner_.ctx));
    if (page == nullptr) return nullptr;
    std::memset(page, 0, page_size_);
    pages_.insert(page);
    return page;
  }

  void free(char* page) {
    FUZZ_CHECK(pages_.erase(page) == 1, "the pool freed a page it did not hold");
    inner_.free_page(inner_.ctx, page);
  }

  zs_vm_source* vm_;
  zs_page_source inner_{};
  size_t page_size_;
  std::set<char*> pages_;
};

struct Expected {
  Bytes value;           // the last value put
  bool tainted = false;  // its stored bytes were corrupted: any bytes of its length will do
};

class CacheFuzzer {
 public:
  explicit CacheFuzzer(FuzzInput& in) : in_(in) { create_cache(); }

  void run() {
    while (!in_.empty()) {
      step(static_cast<Op>(in_.u8() % kNumOps));
      check_capacity();
    }
    finish();
  }

 private:
  void step(Op op) {
    switch (op) {
      case kPut: {
        std::string key = decode_key();
        put(key, decode_value(max_value_));
        break;
      }
      case kPutBurst: put_burst(); break;
      case kGet: get(decode_key()); break;
      case kGetInto: get_into(decode_key()); break;
      case kErase: erase(decode_key()); break;
      case kContains: contains(decode_key()); break;
      case kClear: clear(); break;
      case kRecompress: recompress(); break;
      case kCheck: check_entries(); break;
      case kCorruptStored: corrupt_stored(); break;
      case kDecode: decode_fuzz(); break;
      case kBadCall: bad_call(); break;
      case kNumOps: break;
    }
  }

  // --- the cache ----------------------------------------------------------------------------

  void create_cache() {
    zsm::CacheOptions o;
    o.codec.kind = kCodecs[in_.u8() % 4];
    switch (in_.u8() % 4) {
      case 1: o.recompress_codec = zsm::CodecOptions{zsm::CodecKind::zstd, 0, {}}; break;
      case 2: o.recompress_codec = zsm::CodecOptions{zsm::CodecKind::lz4hc, 0, {}}; break;
      case 3: o.recompress_codec = zsm::CodecOptions{zsm::CodecKind::zstd, 1, {}}; break;
      default: break;
    }
    size_t page_size = kPageSizes[in_.u8() % 3];
    o.pool.page_size = page_size;
    o.pool.chain_size = ZS_MIN_CHAIN_SIZE + in_.u8() % (ZS_MAX_CHAIN_SIZE - ZS_MIN_CHAIN_SIZE + 1);
    o.pool.nr_shards = 1u << (in_.u8() % 2);
    o.shards = 1u << (in_.u8() % 5);
    size_t pages = 2 + in_.u8() % 63;
    o.max_key_size = kMarkedKeySize + in_.u8() % (257 - kMarkedKeySize);
    uint16_t max_value = in_.u16();
    o.max_value_size = max_value % 4 == 0 ? 0 : 1 + max_value % page_size;
    o.capacity_bytes = empty_pool_bytes(o.pool) + pages * page_size;
    source_ = std::make_unique<TrackingSource>(page_size);
    source_ops_ = source_->ops();
    o.pool.page_source = &source_ops_;
    capacity_ = o.capacity_bytes;
    codec_ = zsm::Codec::create(o.codec);
    cache_ = std::make_unique<zsm::Cache>(o);
    max_value_ = cache_->options().max_value_size;
    max_key_ = cache_->options().max_key_size;
  }

  // What a pool of this configuration costs before it holds anything.
  static size_t empty_pool_bytes(const zs_pool_config& cfg) {
    zs_pool* probe = zs_create_pool_ex("probe", &cfg);
    FUZZ_CHECK(probe != nullptr, "zs_create_pool_ex: errno %d", errno);
    size_t bytes = zs_pool_bookkeeping_bytes(probe);
    zs_destroy_pool(probe);
    return bytes;
  }

  // Every entry once more, then the cache goes: the page source must have every page back.
  void finish() {
    check_entries();
    std::vector<std::string> keys;
    for (const auto& entry : model_) keys.push_back(entry.first);
    for (const std::string& key : keys) get(key);
    cache_.reset();
    FUZZ_CHECK(source_->pages().empty(), "the destroyed cache's pool kept %zu pages",
               source_->pages().size());
  }

  // --- keys and values ----------------------------------------------------------------------

  std::string decode_key() {
    uint8_t sel = in_.u8();
    if (sel < 224) return "key" + std::to_string(sel % 48);
    auto raw = in_.bytes(1 + in_.u8() % max_key_);
    std::string key(raw.begin(), raw.end());
    if (key.empty()) key = "k";
    sanitize(key);
    return key;
  }

  // Literal bytes, a short chunk repeated, a same-filled word, or pattern bytes (which do not
  // compress) of a given length or of the largest length.
  Bytes decode_value(size_t max) {
    uint8_t shape = in_.u8();
    size_t len = in_.u16() % (max + 1);
    Bytes v;
    switch (shape % 5) {
      case 0: {
        auto raw = in_.bytes(len);
        v.assign(reinterpret_cast<const std::byte*>(raw.data()),
                 reinterpret_cast<const std::byte*>(raw.data() + raw.size()));
        break;
      }
      case 1: {
        auto chunk = in_.bytes(1 + in_.u8() % 16);
        v.resize(len);
        for (size_t i = 0; i < len; i++)
          v[i] = chunk.empty() ? std::byte{'z'} : std::byte{chunk[i % chunk.size()]};
        break;
      }
      case 2: {
        auto word = in_.bytes(8);
        v.resize(len / 8 * 8);
        for (size_t i = 0; i < v.size(); i++)
          v[i] = i % 8 < word.size() ? std::byte{word[i % 8]} : std::byte{0};
        break;
      }
      default:
        v.resize(shape % 5 == 3 ? len : max);
        zsm_test::fill_pattern(v.data(), v.size(), zsm_test::mix64(in_.u8()));
        break;
    }
    sanitize(v);
    return v;
  }

  // A key nothing else in the pool can contain.
  std::string next_marked_key() {
    std::string key(kMarkerLength, static_cast<char>(kMarker));
    for (int shift = 24; shift >= 0; shift -= 8)
      key += static_cast<char>((marked_keys_ >> shift) & 0xff);
    marked_keys_++;
    return key;
  }

  // --- the API against the model ------------------------------------------------------------

  // Stores the value; false when the cache had no room for it.
  bool put(const std::string& key, const Bytes& value) {
    try {
      cache_->put(key, value);
    } catch (const std::system_error& e) {
      FUZZ_CHECK(e.code() == zsm::CacheError::no_memory, "put(%s, %zu bytes): %s",
                 describe(key).c_str(), value.size(), e.what());
      uint64_t left = cache_->stats().entries;
      FUZZ_CHECK(left == 0, "put(%zu bytes) failed for no memory with %lu entries left",
                 value.size(), static_cast<unsigned long>(left));
      model_.erase(key);
      FUZZ_CHECK(!cache_->contains(key), "put(%s) failed for no memory, the key is still there",
                 describe(key).c_str());
      return false;
    }
    model_[key] = {value, false};
    return true;
  }

  void put_burst() {
    unsigned count = 1 + in_.u8() % 32;
    unsigned first = in_.u8();
    Bytes value = decode_value(max_value_);
    for (unsigned i = 0; i < count; i++) put("key" + std::to_string((first + i) % 48), value);
  }

  void get(const std::string& key) {
    std::optional<Bytes> got;
    try {
      got = cache_->get(key);
    } catch (const std::system_error& e) {
      expect_corrupt(key, e);
      return;
    }
    if (got) check_value(key, *got);
  }

  void get_into(const std::string& key) {
    Bytes out(in_.u16() % (max_value_ + 2));
    std::optional<size_t> n;
    try {
      n = cache_->get(key, out);
    } catch (const std::system_error& e) {
      if (e.code() == zsm::CacheError::buffer_too_small)
        expect_too_small(key, out.size());
      else
        expect_corrupt(key, e);
      return;
    }
    if (!n) return;
    FUZZ_CHECK(*n <= out.size(), "get(%s, %zu-byte buffer) returned %zu", describe(key).c_str(),
               out.size(), *n);
    check_value(key, Bytes(out.begin(), out.begin() + static_cast<ptrdiff_t>(*n)));
  }

  void check_value(const std::string& key, const Bytes& got) const {
    auto it = model_.find(key);
    FUZZ_CHECK(it != model_.end(), "get(%s) returned %zu bytes for a key not put or erased",
               describe(key).c_str(), got.size());
    const Expected& want = it->second;
    FUZZ_CHECK(got.size() == want.value.size(), "get(%s) returned %zu bytes, %zu were put",
               describe(key).c_str(), got.size(), want.value.size());
    FUZZ_CHECK(want.tainted || got == want.value, "get(%s): not the %zu bytes last put",
               describe(key).c_str(), want.value.size());
  }

  // Only a value whose stored bytes were corrupted may fail to decode; it is then dropped.
  void expect_corrupt(const std::string& key, const std::system_error& e) {
    FUZZ_CHECK(e.code() == zsm::CacheError::corrupt, "get(%s): %s", describe(key).c_str(),
               e.what());
    auto it = model_.find(key);
    FUZZ_CHECK(it != model_.end() && it->second.tainted,
               "get(%s): corrupt, but nobody corrupted its stored bytes", describe(key).c_str());
    FUZZ_CHECK(!cache_->contains(key), "get(%s): corrupt, and the entry is still there",
               describe(key).c_str());
    model_.erase(it);
  }

  // buffer_too_small: the value is larger than the buffer, and it is still there.
  void expect_too_small(const std::string& key, size_t buffer) const {
    auto it = model_.find(key);
    FUZZ_CHECK(it != model_.end() && buffer < it->second.value.size(),
               "get(%s, %zu-byte buffer): buffer_too_small", describe(key).c_str(), buffer);
    FUZZ_CHECK(cache_->contains(key), "get(%s): buffer_too_small dropped the entry",
               describe(key).c_str());
  }

  void erase(const std::string& key) {
    bool erased = cache_->erase(key);
    FUZZ_CHECK(!erased || model_.count(key) == 1, "erase(%s) found a key not put",
               describe(key).c_str());
    model_.erase(key);
    FUZZ_CHECK(!cache_->contains(key), "contains(%s) after erase", describe(key).c_str());
  }

  void contains(const std::string& key) const {
    FUZZ_CHECK(!cache_->contains(key) || model_.count(key) == 1,
               "contains(%s) for a key not put or erased", describe(key).c_str());
  }

  void clear() {
    cache_->clear();
    model_.clear();
    zsm::CacheStats s = cache_->stats();
    FUZZ_CHECK(s.entries == 0 && s.orig_data_size == 0 && s.mem_used_total == 0,
               "after clear(): %lu entries, %lu bytes, %lu bytes of pages",
               static_cast<unsigned long>(s.entries), static_cast<unsigned long>(s.orig_data_size),
               static_cast<unsigned long>(s.mem_used_total));
    FUZZ_CHECK(source_->pages().empty(), "after clear() the pool holds %zu pages",
               source_->pages().size());
  }

  void recompress() {
    uint8_t max = in_.u8();
    size_t limit = max == 0 ? SIZE_MAX : max;
    uint64_t before = cache_->stats().recompressed;
    size_t moved = cache_->recompress(limit);
    FUZZ_CHECK(moved <= limit && (cache_->options().recompress_codec || moved == 0),
               "recompress(%zu) moved %zu", limit, moved);
    FUZZ_CHECK(cache_->stats().recompressed == before + moved, "recompressed counts %zu moves",
               moved);
  }

  // bytes_held within the capacity, except where CacheOptions::capacity_bytes allows: a
  // failed put leaves its index slots and pool bookkeeping behind, which may pass a capacity
  // close to what an empty cache holds; the cache then holds no entry. Pages never pass it.
  void check_capacity() const {
    zsm::CacheStats s = cache_->stats();
    FUZZ_CHECK(s.mem_used_total <= capacity_ &&
                   (s.bytes_held <= capacity_ || (s.entries == 0 && s.mem_used_total == 0)),
               "the cache holds %lu bytes (%lu entries, %lu of pages), capacity %zu",
               static_cast<unsigned long>(s.bytes_held), static_cast<unsigned long>(s.entries),
               static_cast<unsigned long>(s.mem_used_total), capacity_);
  }

  // Stats and for_each_key() against the entries the model says are present.
  void check_entries() const {
    uint64_t present = 0, orig = 0;
    for (const auto& [key, want] : model_) {
      if (!cache_->contains(key)) continue;
      present++;
      orig += want.value.size();
    }
    zsm::CacheStats s = cache_->stats();
    FUZZ_CHECK(s.entries == present && s.orig_data_size == orig,
               "stats: %lu entries of %lu bytes, the model %lu of %lu",
               static_cast<unsigned long>(s.entries), static_cast<unsigned long>(s.orig_data_size),
               static_cast<unsigned long>(present), static_cast<unsigned long>(orig));
    FUZZ_CHECK(s.same_pages + s.huge_pages <= s.entries && s.mem_limit == capacity_,
               "stats: %lu same-filled and %lu raw of %lu entries, limit %lu",
               static_cast<unsigned long>(s.same_pages), static_cast<unsigned long>(s.huge_pages),
               static_cast<unsigned long>(s.entries), static_cast<unsigned long>(s.mem_limit));
    check_mm_stat(s);
    uint64_t visited = 0;
    cache_->for_each_key([&](std::string_view key) {
      visited++;
      FUZZ_CHECK(model_.count(std::string(key)) == 1, "for_each_key: %s was not put",
                 describe(key).c_str());
    });
    FUZZ_CHECK(visited == s.entries, "for_each_key visited %lu of %lu entries",
               static_cast<unsigned long>(visited), static_cast<unsigned long>(s.entries));
    unsigned long pages = zs_get_total_pages(cache_->pool());
    FUZZ_CHECK(source_->pages().size() == pages, "the source has %zu pages out, the pool holds %lu",
               source_->pages().size(), pages);
    check_pool();
  }

  // zram's mm_stat columns are the stats' first nine counters.
  void check_mm_stat(const zsm::CacheStats& s) const {
    unsigned long long c[9] = {};
    std::string line = cache_->mm_stat();
    int n = std::sscanf(line.c_str(), "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &c[0], &c[1],
                        &c[2], &c[3], &c[4], &c[5], &c[6], &c[7], &c[8]);
    FUZZ_CHECK(n == 9 && c[0] == s.orig_data_size && c[1] == s.compr_data_size &&
                   c[2] == s.mem_used_total && c[3] == s.mem_limit && c[4] == s.mem_used_max &&
                   c[5] == s.same_pages && c[6] == s.pages_compacted && c[7] == s.huge_pages &&
                   c[8] == s.huge_pages_since,
               "mm_stat \"%s\" does not match the stats", line.c_str());
  }

  // The pool's own invariants: also that a corruption stayed inside its record.
  void check_pool() const {
    FUZZ_CHECK(zs_check_pool(cache_->pool(), stderr) == 0,
               "zs_check_pool() found the violations above");
  }

  // --- (b) corrupted stored values ----------------------------------------------------------

  void corrupt_stored() {
    std::string key = next_marked_key();
    Bytes value = decode_value(max_value_);
    unsigned flips = 1 + in_.u8() % 4;
    if (!put(key, value)) return;
    model_[key].tainted = corrupt_after(key, stored_size_floor(value), flips) > 0;
    check_pool();
    get(key);
  }

  // The fewest bytes the cache can store `value` in: raw, compressed or as a same-filled
  // word. Flipping no further than that after the key stays inside the record.
  size_t stored_size_floor(const Bytes& value) const {
    size_t floor = value.size();
    if (same_filled(value)) floor = std::min<size_t>(floor, 8);
    Bytes packed(codec_->bound(value.size()));
    if (std::optional<size_t> n = codec_->compress(value, packed)) floor = std::min(floor, *n);
    return floor;
  }

  // Flips bytes among the first `span` bytes after each copy of `key` in the pool's pages
  // (in the same page, short of where a split record keeps its tail link); returns the number
  // of copies changed. Copies other than the entry's own are stale slots of the same record.
  size_t corrupt_after(const std::string& key, size_t span, unsigned flips) {
    const size_t page_size = source_->page_size();
    size_t changed = 0;
    for (char* page : source_->pages()) {
      std::string_view bytes(page, page_size);
      for (size_t at = bytes.find(key); at != std::string_view::npos;
           at = bytes.find(key, at + key.size())) {
        size_t start = at + key.size();
        if (start + kTailLink >= page_size) continue;
        size_t room = std::min(span, page_size - kTailLink - start);
        if (room == 0) continue;
        for (unsigned f = 0; f < flips; f++) {
          size_t pos = start + in_.u16() % room;
          page[pos] = static_cast<char>(page[pos] ^ (1 + in_.u8() % 255));
        }
        changed++;
      }
    }
    return changed;
  }

  // --- (a) the decoders on their own --------------------------------------------------------

  void decode_fuzz() {
    zsm::CodecOptions o;
    o.kind = kCodecs[in_.u8() % 4];
    uint8_t dict_len = in_.u8();
    if (o.kind == zsm::CodecKind::zstd && dict_len != 0) {
      auto dict = in_.bytes(dict_len);
      o.dictionary.assign(reinterpret_cast<const std::byte*>(dict.data()),
                          reinterpret_cast<const std::byte*>(dict.data() + dict.size()));
    }
    std::unique_ptr<zsm::Codec> codec;
    try {
      codec = zsm::Codec::create(o);
    } catch (const std::system_error& e) {
      FUZZ_CHECK(!o.dictionary.empty() && e.code() == zsm::CodecError::bad_options,
                 "Codec::create: %s", e.what());
      return;
    }
    if (in_.u8() % 2 == 0)
      decode_fuzz_bytes(*codec);
    else
      decode_damaged(*codec);
  }

  // Whatever the input holds, as compressed data of a size the input chooses.
  void decode_fuzz_bytes(const zsm::Codec& codec) {
    Bytes out(in_.u16() % (kMaxPageSize + 1));
    auto raw = in_.bytes(in_.u16() % 8192);
    std::span<const std::byte> src(reinterpret_cast<const std::byte*>(raw.data()), raw.size());
    std::error_code ec = codec.decompress(src, out);
    FUZZ_CHECK(!ec || ec == zsm::CodecError::corrupt, "%s: decompress: %s",
               std::string(codec.name()).c_str(), ec.message().c_str());
    if (!ec && codec.name() == "none")
      FUZZ_CHECK(std::equal(src.begin(), src.end(), out.begin(), out.end()),
                 "none: decompress changed the bytes");
  }

  // A value compressed, then decoded whole, truncated, to a wrong size, and with bytes flipped.
  void decode_damaged(const zsm::Codec& codec) {
    const std::string name(codec.name());
    Bytes value = decode_value(kMaxPageSize);
    Bytes packed(codec.bound(value.size()));
    std::optional<size_t> n = codec.compress(value, packed);
    FUZZ_CHECK(n && *n <= packed.size(), "%s: %zu bytes do not compress into their bound",
               name.c_str(), value.size());
    packed.resize(*n);
    Bytes out(value.size());
    std::error_code ec = codec.decompress(packed, out);
    FUZZ_CHECK(!ec && out == value, "%s: %zu bytes do not round-trip: %s", name.c_str(),
               value.size(), ec.message().c_str());
    uint16_t cut = in_.u16();
    if (!packed.empty()) {
      std::span<const std::byte> truncated(packed.data(), cut % packed.size());
      FUZZ_CHECK(codec.decompress(truncated, out) == zsm::CodecError::corrupt,
                 "%s: %zu of %zu compressed bytes decoded to %zu bytes", name.c_str(),
                 truncated.size(), packed.size(), value.size());
    }
    size_t delta = 1 + in_.u8() % 64;
    Bytes longer(value.size() + delta);
    FUZZ_CHECK(codec.decompress(packed, longer) == zsm::CodecError::corrupt,
               "%s: %zu bytes compressed decoded to %zu", name.c_str(), value.size(),
               longer.size());
    if (value.size() >= delta) {
      Bytes shorter(value.size() - delta);
      FUZZ_CHECK(codec.decompress(packed, shorter) == zsm::CodecError::corrupt,
                 "%s: %zu bytes compressed decoded to %zu", name.c_str(), value.size(),
                 shorter.size());
    }
    unsigned flips = 1 + in_.u8() % 8;
    for (unsigned f = 0; f < flips && !packed.empty(); f++)
      packed[in_.u16() % packed.size()] ^= std::byte{static_cast<uint8_t>(1 + in_.u8() % 255)};
    ec = codec.decompress(packed, out);
    FUZZ_CHECK(!ec || ec == zsm::CodecError::corrupt, "%s: decompress of flipped bytes: %s",
               name.c_str(), ec.message().c_str());
  }

  // --- errors -------------------------------------------------------------------------------

  void bad_call() {
    uint8_t which = in_.u8(), arg = in_.u8();
    switch (which % 6) {
      case 0: expect_refused_put("", Bytes(1), zsm::CacheError::key_too_large); break;
      case 1:
        expect_refused_put(std::string(max_key_ + 1 + arg % 8, 'k'), Bytes(1),
                           zsm::CacheError::key_too_large);
        break;
      case 2:
        expect_refused_put("key0", Bytes(max_value_ + 1 + arg), zsm::CacheError::value_too_large);
        break;
      default: expect_bad_options(which % 6, arg); break;
    }
  }

  // A refused put changes nothing: the same entries, the key's value (if any) still there.
  void expect_refused_put(const std::string& key, const Bytes& value, zsm::CacheError want) {
    uint64_t entries = cache_->stats().entries;
    bool had = cache_->contains(key);
    try {
      cache_->put(key, value);
    } catch (const std::system_error& e) {
      FUZZ_CHECK(e.code() == want, "put(%s, %zu bytes): %s", describe(key).c_str(), value.size(),
                 e.what());
      FUZZ_CHECK(cache_->stats().entries == entries && cache_->contains(key) == had,
                 "a refused put changed the cache");
      return;
    }
    FUZZ_CHECK(false, "put(%s, %zu bytes) was accepted (max key %zu, max value %zu)",
               describe(key).c_str(), value.size(), max_key_, max_value_);
  }

  // Options a Cache must refuse: cache errors for its own, codec errors for the codec's.
  static void expect_bad_options(unsigned which, uint8_t arg) {
    zsm::CacheOptions o;
    std::error_code want = zsm::CacheError::bad_options;
    if (which == 3) {
      o.shards = 3 + 2 * (arg % 8);
    } else if (which == 4) {
      o.capacity_bytes = arg % 4096;
    } else {
      o.codec = zsm::CodecOptions{zsm::CodecKind::lz4hc, 13 + arg % 8, {}};
      want = zsm::CodecError::bad_options;
    }
    try {
      zsm::Cache cache(o);
    } catch (const std::system_error& e) {
      FUZZ_CHECK(e.code() == want, "bad options %u: %s", which, e.what());
      return;
    }
    FUZZ_CHECK(false, "bad options %u (arg %u) were accepted", which, arg);
  }

  FuzzInput& in_;
  std::unique_ptr<TrackingSource> source_;
  zs_page_source source_ops_{};
  std::unique_ptr<zsm::Codec> codec_;  // the cache's codec, for stored_size_floor()
  std::unique_ptr<zsm::Cache> cache_;
  size_t capacity_ = 0;
  size_t max_value_ = 0;
  size_t max_key_ = 0;
  uint32_t marked_keys_ = 0;
  std::map<std::string, Expected> model_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  CacheFuzzer fuzzer(in);
  fuzzer.run();
  return 0;
}
