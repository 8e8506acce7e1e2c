// Codecs (compress/include/zsm/codec.hpp): round trips for every codec and value shape,
// output that does not fit, corrupted and truncated input (an error, never an out-of-bounds
// access: the ASan build checks that), option checks, parse_codec, zstd dictionaries, many
// threads.
#include <zsm/codec.hpp>

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bytes.h"

namespace {

using zsm_test::Bytes;
using zsm_test::random_bytes;

Bytes text_bytes(size_t n) {
  static const std::string words = "the quick brown fox jumps over the lazy dog zsmalloc zram ";
  Bytes b(n);
  for (size_t i = 0; i < n; i++) b[i] = static_cast<std::byte>(words[(i * 7 + i / 13) % words.size()]);
  return b;
}

Bytes same_filled(size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; i++) b[i] = static_cast<std::byte>("ABCDEFGH"[i % 8]);
  return b;
}

std::vector<std::pair<std::string, Bytes>> shapes() {
  return {{"empty", {}},
          {"one byte", Bytes{std::byte{42}}},
          {"tiny text", text_bytes(7)},
          {"text 4096", text_bytes(4096)},
          {"random 4096", random_bytes(4096, 1)},
          {"same-filled 4096", same_filled(4096)},
          {"random 3625", random_bytes(3625, 2)},
          {"text 65536", text_bytes(65536)},
          {"random 65536", random_bytes(65536, 3)}};
}

std::vector<zsm::CodecOptions> all_codecs() {
  std::vector<zsm::CodecOptions> v;
  v.push_back({zsm::CodecKind::none, 0, {}});
  for (int level : {0, 1, 8, 100}) v.push_back({zsm::CodecKind::lz4, level, {}});
  for (int level : {0, 1, 12}) v.push_back({zsm::CodecKind::lz4hc, level, {}});
  for (int level : {0, -5, 1, 19}) v.push_back({zsm::CodecKind::zstd, level, {}});
  return v;
}

std::string label(const zsm::Codec& c) { return std::string(c.name()) + "/" + std::to_string(c.level()); }

TEST(Codec, RoundTripsEveryShape) {
  for (const auto& options : all_codecs()) {
    auto codec = zsm::Codec::create(options);
    for (const auto& [shape, data] : shapes()) {
      SCOPED_TRACE(label(*codec) + " " + shape);
      Bytes out(codec->bound(data.size()));
      std::optional<size_t> n = codec->compress(data, out);
      ASSERT_TRUE(n.has_value());
      ASSERT_LE(*n, out.size());
      Bytes back(data.size());
      ASSERT_FALSE(codec->decompress(std::span(out).first(*n), back));
      EXPECT_EQ(back, data);
    }
  }
}

TEST(Codec, CompressibleDataShrinks) {
  for (const auto& options : all_codecs()) {
    auto codec = zsm::Codec::create(options);
    if (codec->name() == "none") continue;
    Bytes data = text_bytes(4096), out(codec->bound(4096));
    EXPECT_LT(codec->compress(data, out).value_or(4096), 2048u) << label(*codec);
  }
}

TEST(Codec, OutputThatDoesNotFitReturnsZero) {
  for (const auto& options : all_codecs()) {
    auto codec = zsm::Codec::create(options);
    Bytes data = random_bytes(4096, 9), out(100);
    EXPECT_FALSE(codec->compress(data, out).has_value()) << label(*codec);
  }
}

// Every truncation, and many random corruptions, of each codec's output: an error or, for a
// corruption the format cannot see, bytes of the right length; never a crash or an access out
// of bounds (the ASan build checks).
TEST(Codec, CorruptAndTruncatedInputIsAnError) {
  std::mt19937_64 rng(7);
  for (const auto& options : all_codecs()) {
    auto codec = zsm::Codec::create(options);
    SCOPED_TRACE(label(*codec));
    Bytes data = text_bytes(4096), out(codec->bound(4096));
    size_t n = codec->compress(data, out).value_or(0);
    ASSERT_GT(n, 0u);
    Bytes good(out.begin(), out.begin() + static_cast<ptrdiff_t>(n)), back(4096);
    for (size_t len = 0; len < n; len++) {
      Bytes cut(good.begin(), good.begin() + static_cast<ptrdiff_t>(len));
      EXPECT_TRUE(codec->decompress(cut, back)) << "truncated to " << len;
    }
    Bytes longer = good;
    longer.push_back(std::byte{0});
    EXPECT_TRUE(codec->decompress(longer, back)) << "a trailing byte";
    Bytes small(4095);
    EXPECT_TRUE(codec->decompress(good, small)) << "one byte less expected";
    if (codec->name() != "none") {  // no input is no value, even for an empty output
      Bytes nothing;
      EXPECT_EQ(codec->decompress(nothing, nothing), zsm::CodecError::corrupt);
    }
    int detected = 0;
    for (int trial = 0; trial < 2000; trial++) {
      Bytes bad = good;
      for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; flips--)
        bad[rng() % bad.size()] ^= static_cast<std::byte>(1 + rng() % 255);
      std::error_code ec = codec->decompress(bad, back);
      if (ec) {
        detected++;
        EXPECT_EQ(ec, zsm::CodecError::corrupt);
      }
    }
    if (codec->name() != "none") {
      EXPECT_GT(detected, 0) << "no corruption was ever seen";
    }
  }
}

TEST(Codec, BadOptionsAreRejected) {
  auto rejected = [](zsm::CodecOptions o) {
    try {
      zsm::Codec::create(o);
    } catch (const std::system_error& e) {
      return e.code() == zsm::CodecError::bad_options;
    }
    return false;
  };
  EXPECT_TRUE(rejected({zsm::CodecKind::lz4hc, 13, {}}));
  EXPECT_TRUE(rejected({zsm::CodecKind::lz4, -1, {}}));
  EXPECT_TRUE(rejected({zsm::CodecKind::zstd, 1000, {}}));
  EXPECT_TRUE(rejected({zsm::CodecKind::none, 3, {}}));
  EXPECT_TRUE(rejected({zsm::CodecKind::lz4, 0, Bytes(64)}));
  EXPECT_TRUE(rejected({static_cast<zsm::CodecKind>(99), 0, {}}));
}

TEST(Codec, ParseCodecReadsNameAndLevel) {
  const zsm::CodecOptions zstd = zsm::parse_codec("zstd:19");
  EXPECT_EQ(zstd.kind, zsm::CodecKind::zstd);
  EXPECT_EQ(zstd.level, 19);
  EXPECT_EQ(zsm::parse_codec("zstd:-5").level, -5);
  EXPECT_EQ(zsm::parse_codec("lz4hc").kind, zsm::CodecKind::lz4hc);
  EXPECT_EQ(zsm::parse_codec("lz4").level, 0);
  EXPECT_EQ(zsm::parse_codec("none").kind, zsm::CodecKind::none);
  for (const char* bad : {"", "gzip", "lz4:", "lz4:x", "zstd:3x", "zstd: 3", "LZ4"})
    EXPECT_THROW(zsm::parse_codec(bad), std::invalid_argument) << bad;
}

TEST(Codec, ZstdDictionaryHelpsSmallValues) {
  std::vector<Bytes> samples;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 400; i++) {
    std::string s = "{\"user\":" + std::to_string(rng() % 100000) + ",\"name\":\"name-" +
                    std::to_string(rng() % 1000) + "\",\"status\":\"active\",\"plan\":\"pro\"}";
    samples.push_back(Bytes(reinterpret_cast<const std::byte*>(s.data()),
                            reinterpret_cast<const std::byte*>(s.data()) + s.size()));
  }
  std::vector<std::span<const std::byte>> spans(samples.begin(), samples.end());
  Bytes dict = zsm::train_zstd_dictionary(spans, 4096);
  ASSERT_FALSE(dict.empty());
  auto plain = zsm::Codec::create({zsm::CodecKind::zstd, 3, {}});
  auto with_dict = zsm::Codec::create({zsm::CodecKind::zstd, 3, dict});
  size_t plain_total = 0, dict_total = 0;
  for (const Bytes& s : samples) {
    Bytes out(with_dict->bound(s.size())), back(s.size());
    size_t n = with_dict->compress(s, out).value_or(0);
    ASSERT_GT(n, 0u);
    ASSERT_FALSE(with_dict->decompress(std::span(out).first(n), back));
    EXPECT_EQ(back, s);
    EXPECT_TRUE(plain->decompress(std::span(out).first(n), back)) << "needs the dictionary";
    dict_total += n;
    plain_total += plain->compress(s, out).value_or(s.size());
  }
  EXPECT_LT(dict_total * 2, plain_total) << "dictionary " << dict_total << " vs " << plain_total;
}

TEST(Codec, ThreadsShareACodec) {
  for (auto kind : {zsm::CodecKind::lz4, zsm::CodecKind::lz4hc, zsm::CodecKind::zstd}) {
    auto codec = zsm::Codec::create({kind, 0, {}});
    std::vector<std::thread> threads;
    std::vector<int> bad(4, 0);
    for (int t = 0; t < 4; t++) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 200; i++) {
          Bytes data = i % 2 ? text_bytes(512 + 37 * i) : random_bytes(256 + i, t * 1000 + i);
          Bytes out(codec->bound(data.size())), back(data.size());
          std::optional<size_t> n = codec->compress(data, out);
          if (!n || codec->decompress(std::span(out).first(*n), back) || back != data) bad[t]++;
        }
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; t++) EXPECT_EQ(bad[t], 0) << codec->name() << " thread " << t;
  }
}

}  // namespace
