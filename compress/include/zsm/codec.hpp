// zsm codecs: one small interface over lz4, lz4hc, zstd and a plain copy, for the compressed
// cache (cache.hpp) and for anyone storing compressed pages in a zsm pool.
//
// compress() never allocates: each thread keeps its own codec contexts (an lz4 stream state,
// zstd compression and decompression contexts), made on the thread's first call and reused.
// decompress() checks its input: corrupt or truncated data gives an error, never a read past
// the input or a write past the output.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <system_error>
#include <vector>

namespace zsm {

enum class CodecKind { none, lz4, lz4hc, zstd };

struct CodecOptions {
  CodecKind kind = CodecKind::lz4;
  // 0 = the codec's default: lz4 acceleration 1, lz4hc level 9, zstd level 3. lz4: an
  // acceleration (1..65537, higher is faster and compresses less); lz4hc: 1..12; zstd:
  // ZSTD_minCLevel()..ZSTD_maxCLevel().
  int level = 0;
  // zstd only: a dictionary, e.g. from train_zstd_dictionary().
  std::vector<std::byte> dictionary;
};

// Errors of the compression layer (category "zsm.codec").
enum class CodecError {
  corrupt = 1,    // the input is not a compressed form of the expected number of bytes
  bad_options,    // an unknown codec, a level out of range, a dictionary for a codec without one
};
const std::error_category& codec_category() noexcept;
std::error_code make_error_code(CodecError e) noexcept;

class Codec {
 public:
  // Throws std::system_error(CodecError::bad_options) for options the codec cannot take.
  static std::unique_ptr<Codec> create(const CodecOptions& options);
  virtual ~Codec() = default;

  // "none", "lz4", "lz4hc" or "zstd".
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  [[nodiscard]] virtual int level() const noexcept = 0;
  // The most bytes compress() can write for `n` input bytes.
  [[nodiscard]] virtual size_t bound(size_t n) const noexcept = 0;
  // Compresses `src` into `dst`; returns the compressed size, or nothing when it does not fit
  // in dst (a caller then stores the data raw). Thread-safe; no allocation after a thread's
  // first call.
  virtual std::optional<size_t> compress(std::span<const std::byte> src,
                                         std::span<std::byte> dst) const = 0;
  // Decompresses `src` into exactly dst.size() bytes. Thread-safe. A corruption the format
  // cannot see (lz4 and zstd blocks carry no checksum) may decode to wrong bytes of the right
  // length; every other corruption, and any truncation, is CodecError::corrupt.
  [[nodiscard]] virtual std::error_code decompress(std::span<const std::byte> src,
                                                   std::span<std::byte> dst) const = 0;
};

// A zstd dictionary of up to `max_size` bytes trained on `samples` (ZDICT_trainFromBuffer).
// Throws std::system_error(CodecError::bad_options) when the samples cannot train one (too
// few or too small).
std::vector<std::byte> train_zstd_dictionary(const std::vector<std::span<const std::byte>>& samples,
                                             size_t max_size);

}  // namespace zsm

template <>
struct std::is_error_code_enum<zsm::CodecError> : std::true_type {};
