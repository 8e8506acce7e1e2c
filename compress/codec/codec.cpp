// The codecs behind zsm/codec.hpp. Per-thread contexts live in thread_local slots created on
// a thread's first call and freed when the thread exits; a zstd dictionary is digested once
// per codec (ZSTD_CDict/ZSTD_DDict are read-only and shared by all threads).
#include <zsm/codec.hpp>

#include <lz4.h>
#include <lz4hc.h>
#include <zdict.h>
#include <zstd.h>

#include <charconv>
#include <climits>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace zsm {

namespace {

class CodecCategory : public std::error_category {
 public:
  const char* name() const noexcept override { return "zsm.codec"; }
  std::string message(int value) const override {
    switch (static_cast<CodecError>(value)) {
      case CodecError::corrupt: return "compressed data is corrupt or truncated";
      case CodecError::bad_options: return "codec options out of range";
    }
    return "unknown codec error";
  }
};

[[noreturn]] void throw_bad_options(const std::string& what) {
  throw std::system_error(make_error_code(CodecError::bad_options), what);
}

// Inputs and outputs are page-sized in practice; the C libraries take int sizes.
bool fits_int(size_t n) { return n <= static_cast<size_t>(INT_MAX); }

const char* chars(std::span<const std::byte> s) { return reinterpret_cast<const char*>(s.data()); }
char* chars(std::span<std::byte> s) { return reinterpret_cast<char*>(s.data()); }

class NoneCodec final : public Codec {
 public:
  std::string_view name() const noexcept override { return "none"; }
  int level() const noexcept override { return 0; }
  size_t bound(size_t n) const noexcept override { return n; }
  std::optional<size_t> compress(std::span<const std::byte> src,
                                 std::span<std::byte> dst) const override {
    if (src.size() > dst.size()) return std::nullopt;
    if (!src.empty()) std::memcpy(dst.data(), src.data(), src.size());
    return src.size();
  }
  std::error_code decompress(std::span<const std::byte> src,
                             std::span<std::byte> dst) const override {
    if (src.size() != dst.size()) return CodecError::corrupt;
    if (!src.empty()) std::memcpy(dst.data(), src.data(), src.size());
    return {};
  }
};

// lz4 and lz4hc share the decompressor.
std::error_code lz4_decompress(std::span<const std::byte> src, std::span<std::byte> dst) {
  if (!fits_int(src.size()) || !fits_int(dst.size())) return CodecError::corrupt;
  if (dst.empty()) return src.size() == 1 && src[0] == std::byte{0} ? std::error_code{}
                                                                      : CodecError::corrupt;
  int n = LZ4_decompress_safe(chars(src), chars(dst), static_cast<int>(src.size()),
                              static_cast<int>(dst.size()));
  return n == static_cast<int>(dst.size()) ? std::error_code{} : CodecError::corrupt;
}

size_t lz4_bound(size_t n) {
  return fits_int(n) ? static_cast<size_t>(LZ4_compressBound(static_cast<int>(n))) : 0;
}

// 16 KiB: made on the thread's first call rather than in static TLS.
LZ4_stream_t* thread_lz4_state() {
  thread_local std::unique_ptr<LZ4_stream_t> state(new LZ4_stream_t);
  return state.get();
}

// 256 KiB: too big for static TLS, so made on the thread's first call.
LZ4_streamHC_t* thread_lz4hc_state() {
  thread_local std::unique_ptr<LZ4_streamHC_t> state(new LZ4_streamHC_t);
  return state.get();
}

class Lz4Codec final : public Codec {
 public:
  explicit Lz4Codec(int acceleration) : acceleration_(acceleration) {}
  std::string_view name() const noexcept override { return "lz4"; }
  int level() const noexcept override { return acceleration_; }
  size_t bound(size_t n) const noexcept override { return lz4_bound(n); }
  void prepare_thread() const override { thread_lz4_state(); }
  std::optional<size_t> compress(std::span<const std::byte> src,
                                 std::span<std::byte> dst) const override {
    if (!fits_int(src.size())) return std::nullopt;
    int n = LZ4_compress_fast_extState(thread_lz4_state(), chars(src), chars(dst),
                                       static_cast<int>(src.size()),
                                       static_cast<int>(std::min<size_t>(dst.size(), INT_MAX)),
                                       acceleration_);
    return n > 0 ? std::optional<size_t>(n) : std::nullopt;
  }
  std::error_code decompress(std::span<const std::byte> src,
                             std::span<std::byte> dst) const override {
    return lz4_decompress(src, dst);
  }

 private:
  int acceleration_;
};

class Lz4HcCodec final : public Codec {
 public:
  explicit Lz4HcCodec(int level) : level_(level) {}
  std::string_view name() const noexcept override { return "lz4hc"; }
  int level() const noexcept override { return level_; }
  size_t bound(size_t n) const noexcept override { return lz4_bound(n); }
  void prepare_thread() const override { thread_lz4hc_state(); }
  std::optional<size_t> compress(std::span<const std::byte> src,
                                 std::span<std::byte> dst) const override {
    if (!fits_int(src.size())) return std::nullopt;
    // liblz4 1.9.4's optimal parser (levels 10..12) crashes on empty input; the block for
    // no bytes is one zero token.
    if (src.empty()) {
      if (dst.empty()) return std::nullopt;
      dst[0] = std::byte{0};
      return 1;
    }
    int n = LZ4_compress_HC_extStateHC(thread_lz4hc_state(), chars(src), chars(dst),
                                       static_cast<int>(src.size()),
                                       static_cast<int>(std::min<size_t>(dst.size(), INT_MAX)),
                                       level_);
    return n > 0 ? std::optional<size_t>(n) : std::nullopt;
  }
  std::error_code decompress(std::span<const std::byte> src,
                             std::span<std::byte> dst) const override {
    return lz4_decompress(src, dst);
  }

 private:
  int level_;
};

struct ZstdDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
  void operator()(ZSTD_CDict* c) const { ZSTD_freeCDict(c); }
  void operator()(ZSTD_DDict* d) const { ZSTD_freeDDict(d); }
};

// A context that could not be allocated is asked for again on the next call, so that a
// moment of memory shortage does not disable the codec on this thread for good.
ZSTD_CCtx* thread_cctx() {
  thread_local std::unique_ptr<ZSTD_CCtx, ZstdDeleter> cctx;
  if (!cctx) cctx.reset(ZSTD_createCCtx());
  return cctx.get();
}

ZSTD_DCtx* thread_dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, ZstdDeleter> dctx;
  if (!dctx) dctx.reset(ZSTD_createDCtx());
  return dctx.get();
}

class ZstdCodec final : public Codec {
 public:
  ZstdCodec(int level, const std::vector<std::byte>& dictionary) : level_(level) {
    if (dictionary.empty()) return;
    cdict_.reset(ZSTD_createCDict(dictionary.data(), dictionary.size(), level));
    ddict_.reset(ZSTD_createDDict(dictionary.data(), dictionary.size()));
    if (!cdict_ || !ddict_) throw_bad_options("zstd: the dictionary cannot be loaded");
  }
  std::string_view name() const noexcept override { return "zstd"; }
  int level() const noexcept override { return level_; }
  size_t bound(size_t n) const noexcept override { return ZSTD_compressBound(n); }
  void prepare_thread() const override {
    if (thread_cctx() == nullptr || thread_dctx() == nullptr) throw std::bad_alloc();
  }
  std::optional<size_t> compress(std::span<const std::byte> src,
                                 std::span<std::byte> dst) const override {
    ZSTD_CCtx* cctx = thread_cctx();
    if (cctx == nullptr) return std::nullopt;
    size_t n = cdict_ ? ZSTD_compress_usingCDict(cctx, dst.data(), dst.size(), src.data(),
                                                 src.size(), cdict_.get())
                      : ZSTD_compressCCtx(cctx, dst.data(), dst.size(), src.data(), src.size(),
                                          level_);
    return ZSTD_isError(n) ? std::nullopt : std::optional<size_t>(n);
  }
  std::error_code decompress(std::span<const std::byte> src,
                             std::span<std::byte> dst) const override {
    if (src.empty()) return CodecError::corrupt;  // zstd reads no frame as no bytes
    ZSTD_DCtx* dctx = thread_dctx();
    if (dctx == nullptr) return std::make_error_code(std::errc::not_enough_memory);
    size_t n = ddict_ ? ZSTD_decompress_usingDDict(dctx, dst.data(), dst.size(), src.data(),
                                                   src.size(), ddict_.get())
                      : ZSTD_decompressDCtx(dctx, dst.data(), dst.size(), src.data(), src.size());
    return !ZSTD_isError(n) && n == dst.size() ? std::error_code{} : CodecError::corrupt;
  }

 private:
  int level_;
  std::unique_ptr<ZSTD_CDict, ZstdDeleter> cdict_;
  std::unique_ptr<ZSTD_DDict, ZstdDeleter> ddict_;
};

int checked_level(const CodecOptions& o, int fallback, int min, int max) {
  int level = o.level == 0 ? fallback : o.level;
  if (level < min || level > max)
    throw_bad_options("level " + std::to_string(o.level) + " out of range " +
                      std::to_string(min) + ".." + std::to_string(max));
  return level;
}

}  // namespace

const std::error_category& codec_category() noexcept {
  static const CodecCategory category;
  return category;
}

std::error_code make_error_code(CodecError e) noexcept {
  return {static_cast<int>(e), codec_category()};
}

CodecOptions parse_codec(std::string_view spec) {
  const size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  CodecOptions options;
  if (name == "none") options.kind = CodecKind::none;
  else if (name == "lz4") options.kind = CodecKind::lz4;
  else if (name == "lz4hc") options.kind = CodecKind::lz4hc;
  else if (name == "zstd") options.kind = CodecKind::zstd;
  else throw std::invalid_argument("unknown codec '" + std::string(name) + "'");
  if (colon == std::string_view::npos) return options;
  const std::string_view level = spec.substr(colon + 1);
  const char* end = level.data() + level.size();
  const auto [parsed_to, error] = std::from_chars(level.data(), end, options.level);
  if (error != std::errc{} || parsed_to != end)
    throw std::invalid_argument("bad codec level '" + std::string(level) + "'");
  return options;
}

std::unique_ptr<Codec> Codec::create(const CodecOptions& o) {
  if (!o.dictionary.empty() && o.kind != CodecKind::zstd)
    throw_bad_options("only zstd takes a dictionary");
  switch (o.kind) {
    case CodecKind::none:
      checked_level(o, 0, 0, 0);
      return std::make_unique<NoneCodec>();
    case CodecKind::lz4:
      return std::make_unique<Lz4Codec>(checked_level(o, 1, 1, 65537));
    case CodecKind::lz4hc:
      return std::make_unique<Lz4HcCodec>(checked_level(o, LZ4HC_CLEVEL_DEFAULT, 1,
                                                        LZ4HC_CLEVEL_MAX));
    case CodecKind::zstd:
      return std::make_unique<ZstdCodec>(
          checked_level(o, ZSTD_CLEVEL_DEFAULT, ZSTD_minCLevel(), ZSTD_maxCLevel()),
          o.dictionary);
  }
  throw_bad_options("unknown codec");
}

std::vector<std::byte> train_zstd_dictionary(const std::vector<std::span<const std::byte>>& samples,
                                             size_t max_size) {
  std::vector<std::byte> joined;
  std::vector<size_t> sizes;
  for (auto s : samples) {
    joined.insert(joined.end(), s.begin(), s.end());
    sizes.push_back(s.size());
  }
  std::vector<std::byte> dict(max_size);
  size_t n = ZDICT_trainFromBuffer(dict.data(), dict.size(), joined.data(), sizes.data(),
                                   static_cast<unsigned>(sizes.size()));
  if (ZDICT_isError(n)) throw_bad_options(std::string("zstd dictionary: ") + ZDICT_getErrorName(n));
  dict.resize(n);
  return dict;
}

}  // namespace zsm
