// The cache's record store alone (compress/cache/record_store.h): values encoded into records
// of each kind (compressed, raw, same-filled, recompressed), stored as one object or as a
// chain of pieces, read back and decoded; its footprint and class against the pool's own
// classes; a store the pool has no room for; frees that leave the pool empty. Pools without
// per-thread caches, so that the class statistics count exactly the objects stored; every
// test ends with its pool empty and consistent.
#include "record_store.h"

#include <gtest/gtest.h>
#include <zsm/cache.hpp>
#include <zsm/codec.hpp>
#include <zsm/zsmalloc.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

using zsm::detail::Codecs;
using zsm::detail::Entry;
using zsm::detail::kCompressed;
using zsm::detail::kRaw;
using zsm::detail::kRecompressed;
using zsm::detail::kSame;
using zsm::detail::RecordStore;
using Bytes = std::vector<std::byte>;

constexpr size_t kPage = 4096;

Bytes random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes b(n);
  for (std::byte& x : b) x = static_cast<std::byte>(rng());
  return b;
}

// Words drawn from a small vocabulary: compressible, never one word repeated.
Bytes text_bytes(size_t n, uint64_t seed) {
  static const char* const words[] = {"index ", "shard ", "record ", "entry ", "zspage ",
                                      "class ", "handle ", "chain ", "pool ", "page ",
                                      "evict ", "compact ", "write ", "file ", "value "};
  std::mt19937_64 rng(seed);
  std::string s;
  while (s.size() < n) s += words[rng() % std::size(words)];
  Bytes b(n);
  std::memcpy(b.data(), s.data(), n);
  return b;
}

Bytes repeated_word(size_t n, uint64_t word) {
  Bytes b(n);
  for (size_t off = 0; off < n; off += 8) std::memcpy(b.data() + off, &word, 8);
  return b;
}

Bytes concat(std::string_view key, std::span<const std::byte> rest) {
  Bytes b(key.size() + rest.size());
  std::memcpy(b.data(), key.data(), key.size());
  if (!rest.empty()) std::memcpy(b.data() + key.size(), rest.data(), rest.size());
  return b;
}

zs_pool_config exact_pool(unsigned long max_pages = 0) {
  zs_pool_config pc{};
  pc.max_pages = max_pages;
  pc.flags = ZS_POOL_NO_THREAD_CACHE;
  return pc;
}

zsm::CodecOptions codec(zsm::CodecKind kind, int level = 0) {
  zsm::CodecOptions o;
  o.kind = kind;
  o.level = level;
  return o;
}

struct zs_class_stats class_stats(zs_pool* pool, unsigned cls) {
  struct zs_class_stats st{};
  EXPECT_GE(zs_class_stats(pool, cls, &st), 0);
  return st;
}

class CacheRecordStore : public ::testing::Test {
 protected:
  explicit CacheRecordStore(std::optional<zsm::CodecOptions> recodec = std::nullopt,
                            unsigned long max_pages = 0)
      : store_(Codecs(codec(zsm::CodecKind::lz4), recodec), exact_pool(max_pages)) {}

  // The key's entry for `value`, kind and sizes set, and its record in `record`.
  Entry encode(std::string_view key, const Bytes& value, Bytes& record) {
    Entry s;
    s.key_size = static_cast<uint16_t>(key.size());
    s.value_size = static_cast<uint32_t>(value.size());
    std::span<std::byte> r = store_.encode(key, value, {}, s);
    EXPECT_NE(r.data(), nullptr);
    EXPECT_EQ(r.size(), s.record_size());
    record.assign(r.begin(), r.end());
    return s;
  }
  // encode(), then the record stored: the entry's handle set.
  Entry put(std::string_view key, const Bytes& value) {
    Bytes record;
    Entry s = encode(key, value, record);
    const Bytes encoded = record;
    s.handle = store_.store_record(record);
    EXPECT_NE(s.handle, 0u);
    EXPECT_EQ(record, encoded) << "a chained record's bytes are restored after the store";
    return s;
  }
  Bytes record_of(const Entry& s) {
    Bytes out(s.record_size());
    EXPECT_TRUE(store_.read_record(s, out));
    return out;
  }
  Bytes value_of(const Entry& s) {
    Bytes out(s.value_size);
    const bool decoded = store_.with_record(s, false, [&](std::span<const std::byte> record) {
      EXPECT_EQ(Bytes(record.begin(), record.end()), record_of(s)) << "read whole, in one piece";
      return !store_.decode(s, record, out);
    });
    EXPECT_TRUE(decoded);
    return out;
  }

  void TearDown() override {
    zs_compact(store_.pool());
    EXPECT_EQ(store_.pool_pages(), 0u) << "every record freed, the pool is empty";
    EXPECT_EQ(zs_check_pool(store_.pool(), stderr), 0);
  }

  RecordStore store_;
};

TEST_F(CacheRecordStore, ASmallRecordIsCompressedAndReadsBack) {
  EXPECT_FALSE(store_.can_recompress()) << "no recompression codec";
  const Bytes value = text_bytes(3000, 1);
  Entry s = put("small", value);
  EXPECT_EQ(s.kind, kCompressed);
  EXPECT_LT(s.stored_size, value.size());
  EXPECT_LT(store_.footprint(s.record_size()), store_.footprint(5 + value.size()));
  const Bytes record = record_of(s);
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(record.data()), 5), "small");
  EXPECT_EQ(value_of(s), value);
  store_.free_record(s);
}

TEST_F(CacheRecordStore, KeysMatchOnlyThemselves) {
  Entry s = put("some key", text_bytes(500, 2));
  EXPECT_EQ(store_.key_matches(s, "some key"), std::optional<bool>(true));
  EXPECT_EQ(store_.key_matches(s, "some kez"), std::optional<bool>(false)) << "same length";
  EXPECT_EQ(store_.key_matches(s, "some"), std::optional<bool>(false)) << "another length";
  std::string seen;
  EXPECT_TRUE(store_.with_key(s, [&](std::string_view key) { seen = key; }));
  EXPECT_EQ(seen, "some key");
  store_.free_record(s);
}

// A value compression does not shrink is stored raw, as the ValueWriter's buffer when it
// wrote one (no copy).
TEST_F(CacheRecordStore, AnIncompressibleValueIsStoredRaw) {
  const Bytes value = random_bytes(1000, 3);
  Entry s = put("raw", value);
  EXPECT_EQ(s.kind, kRaw);
  EXPECT_EQ(s.stored_size, value.size());
  EXPECT_EQ(record_of(s), concat("raw", value));
  EXPECT_EQ(value_of(s), value);
  store_.free_record(s);

  Bytes written = concat("raw", value);
  Entry t;
  t.key_size = 3;
  t.value_size = static_cast<uint32_t>(value.size());
  std::span<std::byte> record =
      store_.encode("raw", std::span(written).subspan(3), written, t);
  EXPECT_EQ(t.kind, kRaw);
  EXPECT_EQ(record.data(), written.data());
  EXPECT_EQ(record.size(), written.size());
}

// zram's rule: compressed into the huge class, a record takes a page as the raw one does, so
// it is stored raw though the codec shrank it.
TEST_F(CacheRecordStore, ACompressedRecordInTheHugeClassIsStoredRaw) {
  Bytes value = random_bytes(4000, 4);
  std::memset(value.data() + 3700, 0, 300);
  const std::unique_ptr<zsm::Codec> lz4 = zsm::Codec::create(codec(zsm::CodecKind::lz4));
  Bytes out(lz4->bound(value.size()));
  std::optional<size_t> n = lz4->compress(value, out);
  ASSERT_TRUE(n.has_value());
  ASSERT_LT(*n, value.size()) << "the codec does shrink it";
  ASSERT_GE(3 + *n, zs_huge_class_size(store_.pool())) << "but not out of the huge class";
  EXPECT_EQ(store_.footprint(3 + *n), kPage);
  Entry s = put("big", value);
  EXPECT_EQ(s.kind, kRaw);
  EXPECT_EQ(value_of(s), value);
  store_.free_record(s);
}

TEST_F(CacheRecordStore, ASameFilledValueKeepsItsWord) {
  const uint64_t word = 0x0123456789abcdefULL;
  const Bytes value = repeated_word(kPage, word);
  Entry s = put("same", value);
  EXPECT_EQ(s.kind, kSame);
  EXPECT_EQ(s.stored_size, 8u);
  EXPECT_EQ(record_of(s), concat("same", std::span(value).first(8)));
  EXPECT_EQ(value_of(s), value);
  store_.free_record(s);

  Entry zeros = put("zero", Bytes(kPage));
  EXPECT_EQ(zeros.kind, kSame);
  EXPECT_EQ(value_of(zeros), Bytes(kPage));
  store_.free_record(zeros);
}

// A record within a page is one object of its class: the class is the pool's for its size
// with the header, and its footprint that size, within the class's slot.
TEST_F(CacheRecordStore, FootprintAndClassOfARecordWithinAPage) {
  const Bytes value = random_bytes(700, 5);
  Entry s = put("k", value);
  ASSERT_EQ(s.kind, kRaw);
  const size_t size = s.record_size();
  const unsigned cls = store_.class_of_record(size);
  EXPECT_EQ(cls,
            zs_lookup_class_index(store_.pool(), static_cast<unsigned>(size + ZS_HANDLE_SIZE)));
  EXPECT_EQ(store_.footprint(size), size + ZS_HANDLE_SIZE);
  const struct zs_class_stats st = class_stats(store_.pool(), cls);
  EXPECT_LE(store_.footprint(size), st.size);
  EXPECT_EQ(st.obj_used, 1u) << "one object";
  EXPECT_EQ(store_.pool_pages(), st.pages_per_zspage) << "one zspage of its class";
  store_.free_record(s);
}

// Longer than a page: page-sized pieces in the huge class, each one page of the pool, and a
// last piece of the rest. Here the rest is huge too: the footprint is exactly the pool's
// growth.
TEST_F(CacheRecordStore, AChainedRecordTakesAPagePerPiece) {
  const Bytes value = random_bytes(3 * kPage - 100, 6);
  const size_t before = store_.pool_bytes();
  Entry s = put("chain", value);
  ASSERT_EQ(s.kind, kRaw);
  ASSERT_GT(s.record_size(), 2 * kPage);
  EXPECT_EQ(store_.footprint(s.record_size()), 3 * kPage);
  EXPECT_EQ(store_.pool_bytes() - before, store_.footprint(s.record_size()));
  const unsigned huge = zs_lookup_class_index(store_.pool(), kPage);
  EXPECT_EQ(store_.class_of_record(s.record_size()), huge) << "its first piece is a page";
  EXPECT_EQ(class_stats(store_.pool(), huge).obj_used, 3u);
  EXPECT_EQ(record_of(s), concat("chain", value));
  EXPECT_EQ(value_of(s), value);
  store_.free_record(s);
  EXPECT_EQ(class_stats(store_.pool(), huge).obj_used, 0u) << "every piece freed";
}

// A chain whose last piece is small: two pages and one object of a small class.
TEST_F(CacheRecordStore, AChainEndsWithAPieceOfItsOwnClass) {
  const size_t head_payload = kPage - zsm::detail::kTailLink;
  const size_t rest = 200;
  const Bytes value = random_bytes(2 * head_payload + rest - 1, 7);  // key "k": 1 byte
  Entry s = put("k", value);
  ASSERT_EQ(s.kind, kRaw);
  EXPECT_EQ(store_.footprint(s.record_size()), 2 * kPage + rest + ZS_HANDLE_SIZE);
  const unsigned huge = zs_lookup_class_index(store_.pool(), kPage);
  const unsigned last = zs_lookup_class_index(store_.pool(), rest + ZS_HANDLE_SIZE);
  ASSERT_NE(last, huge);
  EXPECT_EQ(class_stats(store_.pool(), huge).obj_used, 2u);
  EXPECT_EQ(class_stats(store_.pool(), last).obj_used, 1u);
  EXPECT_EQ(value_of(s), value);
  store_.free_record(s);
}

// Records of every kind, freed in another order than stored: the pool ends empty (TearDown).
TEST_F(CacheRecordStore, FreeingEveryRecordEmptiesThePool) {
  std::vector<Entry> entries;
  std::vector<Bytes> values = {text_bytes(2000, 8), random_bytes(900, 9),
                               repeated_word(kPage, 7), random_bytes(5 * kPage, 10),
                               text_bytes(kPage, 11)};
  for (size_t i = 0; i < values.size(); i++)
    entries.push_back(put("key" + std::to_string(i), values[i]));
  EXPECT_GT(store_.pool_pages(), 5u);
  for (size_t i = 0; i < values.size(); i++) EXPECT_EQ(value_of(entries[i]), values[i]) << i;
  for (size_t i : {3, 0, 4, 1, 2}) store_.free_record(entries[i]);
}

// Room for two pages only: a chain of three takes its last pieces, finds no page for its
// first, and gives back what it took; a record that fits is stored after.
class CacheRecordStoreOfTwoPages : public CacheRecordStore {
 protected:
  CacheRecordStoreOfTwoPages() : CacheRecordStore(std::nullopt, 2) {}
};

TEST_F(CacheRecordStoreOfTwoPages, AStoreThatDoesNotFitFailsAndTakesNothing) {
  Bytes record;
  Entry s = encode("chain", random_bytes(3 * kPage - 100, 12), record);
  ASSERT_EQ(store_.footprint(s.record_size()), 3 * kPage);
  const Bytes encoded = record;
  EXPECT_EQ(store_.store_record(record), 0u);
  EXPECT_EQ(record, encoded) << "the record restored";
  const unsigned huge = zs_lookup_class_index(store_.pool(), kPage);
  EXPECT_EQ(class_stats(store_.pool(), huge).obj_used, 0u) << "its stored pieces freed";
  zs_compact(store_.pool());
  EXPECT_EQ(store_.pool_pages(), 0u);

  const Bytes two_pieces = random_bytes(2 * kPage - 100, 13);
  Entry t = put("chain", two_pieces);
  EXPECT_EQ(store_.pool_pages(), 2u);
  EXPECT_EQ(value_of(t), two_pieces);
  store_.free_record(t);
}

// With a recompression codec: a record zstd moves to a smaller class than lz4 put it in comes
// back as the new record, which decodes as kRecompressed.
class CacheRecordStoreRecompressing : public CacheRecordStore {
 protected:
  CacheRecordStoreRecompressing() : CacheRecordStore(codec(zsm::CodecKind::zstd, 19)) {}
};

TEST_F(CacheRecordStoreRecompressing, ARecordMovesToASmallerClass) {
  ASSERT_TRUE(store_.can_recompress());
  const Bytes value = text_bytes(3000, 14);
  Entry s = put("text", value);
  ASSERT_EQ(s.kind, kCompressed);
  std::error_code ec;
  std::span<std::byte> record = store_.recompressed(s, ec);
  ASSERT_FALSE(ec);
  ASSERT_FALSE(record.empty());
  EXPECT_LT(store_.class_of_record(record.size()), store_.class_of_record(s.record_size()));
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(record.data()), 4), "text");
  Entry t = s;
  t.kind = kRecompressed;
  t.stored_size = static_cast<uint32_t>(record.size() - 4);
  t.handle = store_.store_record(record);
  ASSERT_NE(t.handle, 0u);
  EXPECT_EQ(value_of(t), value);
  store_.free_record(s);
  store_.free_record(t);
}

// A raw value no codec shrinks stays: nothing to store.
TEST_F(CacheRecordStoreRecompressing, AnIncompressibleRecordStaysWhereItIs) {
  Entry s = put("raw", random_bytes(1500, 15));
  ASSERT_EQ(s.kind, kRaw);
  std::error_code ec;
  EXPECT_TRUE(store_.recompressed(s, ec).empty());
  EXPECT_FALSE(ec);
  store_.free_record(s);
}

}  // namespace
