// zsm codecs: one small interface over lz4, lz4hc, zstd and a plain copy, for the compressed
// cache (cache.hpp) and for anyone storing compressed pages in a zsm pool.
//
// Each thread keeps its own codec contexts (an lz4 state, an lz4hc state, zstd compression and
// decompression contexts), made on the thread's first call to a codec of that kind, shared by
// every codec of the kind on that thread, and freed when the thread exits. compress()
// allocates nothing else, except that zstd reallocates a thread's context when the level or
// dictionary in use needs a different size. A Codec is immutable once made: any thread may
// call it at once with others. decompress() checks its input: corrupt or truncated data gives
// an error, never a read past the input or a write past the output.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <system_error>
#include <vector>

namespace zsm {

// The algorithm: none (a plain copy), lz4, lz4hc (lz4's format, slower and stronger to
// compress, same decompressor) or zstd.
enum class CodecKind { none, lz4, lz4hc, zstd };

// What Codec::create() makes; the default is lz4 at its default acceleration.
struct CodecOptions {
  CodecKind kind = CodecKind::lz4;
  // 0 = the codec's default: lz4 acceleration 1, lz4hc level 9, zstd level 3. lz4: an
  // acceleration (1..65537, higher is faster and compresses less); lz4hc: 1..12; zstd:
  // ZSTD_minCLevel()..ZSTD_maxCLevel(); none: only 0.
  int level = 0;
  // zstd only (empty for the others): a dictionary, e.g. from train_zstd_dictionary(). Data
  // compressed with it decompresses only with a codec made with the same dictionary.
  std::vector<std::byte> dictionary;
};

// The options a command line names: "none", "lz4", "lz4hc" or "zstd", optionally followed by
// ":LEVEL", a decimal integer (negative too: zstd's fast levels), e.g. "zstd:19". Throws
// std::invalid_argument for another name or a level that is not an integer; whether the
// level is in the codec's range is for Codec::create() to say.
CodecOptions parse_codec(std::string_view spec);

// Errors of the compression layer (category "zsm.codec").
enum class CodecError {
  corrupt = 1,    // the input is not a compressed form of the expected number of bytes
  bad_options,    // an unknown codec, a level out of range, a dictionary for a codec without
                  // one or that zstd cannot load, samples that train no dictionary
};
// The category of CodecError codes, named "zsm.codec"; one object for the whole process.
const std::error_category& codec_category() noexcept;
// The std::error_code of `e` in codec_category(); makes CodecError compare equal to it.
std::error_code make_error_code(CodecError e) noexcept;

// One compression algorithm at one level (and, for zstd, one dictionary). Abstract: made by
// create(). Every method is const and may be called from any thread at once.
class Codec {
 public:
  // A codec for `options`. Throws std::system_error(CodecError::bad_options) for options the
  // codec cannot take (see CodecOptions and CodecError), std::bad_alloc when memory is short.
  static std::unique_ptr<Codec> create(const CodecOptions& options);
  // Must not overlap a call on this codec; the threads' contexts stay (they are shared).
  virtual ~Codec() = default;

  // "none", "lz4", "lz4hc" or "zstd".
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  // The level in use, defaults resolved: lz4's acceleration, lz4hc's or zstd's level, 0 for
  // none.
  [[nodiscard]] virtual int level() const noexcept = 0;
  // The most bytes compress() can write for `n` input bytes (n for none). lz4 and lz4hc give
  // 0 above LZ4_MAX_INPUT_SIZE (about 2 GiB), which they cannot compress.
  [[nodiscard]] virtual size_t bound(size_t n) const noexcept = 0;
  // Compresses `src` into `dst`; returns the compressed size, or nothing when it does not fit
  // in dst (a caller then stores the data raw), and also when lz4 or lz4hc get more than
  // LZ4_MAX_INPUT_SIZE bytes or zstd cannot make the thread's context. Otherwise a dst of
  // bound(src.size()) bytes always fits. Empty src compresses to a short block (none: 0
  // bytes). Thread-safe; allocates only as the top of this header says, and throws
  // std::bad_alloc only when lz4 or lz4hc cannot make the thread's state.
  virtual std::optional<size_t> compress(std::span<const std::byte> src,
                                         std::span<std::byte> dst) const = 0;
  // Decompresses `src`, the output of compress() of a codec of the same kind (and
  // dictionary), into exactly dst.size() bytes: returns an empty error_code when src decodes
  // to exactly that many bytes. A corruption the format cannot see (lz4 and zstd blocks carry
  // no checksum) may decode to wrong bytes of the right length; every other corruption, any
  // truncation and any other length is CodecError::corrupt. zstd alone can also fail with
  // std::errc::not_enough_memory (generic category) when it cannot make the thread's context.
  // dst's bytes are unspecified after an error. Thread-safe.
  [[nodiscard]] virtual std::error_code decompress(std::span<const std::byte> src,
                                                   std::span<std::byte> dst) const = 0;
  // Makes the calling thread's contexts now, where the codec has them (lz4's and lz4hc's
  // compression state, zstd's two contexts), so that its later calls allocate nothing and
  // register nothing with the C++ runtime: a first call does both, and registering takes the
  // dynamic loader's lock, which a caller holding a lock that a dlopen()ing thread may wait on
  // must not wait for (zsm's region compresses under a page's lock). Thread-safe; may throw
  // std::bad_alloc.
  virtual void prepare_thread() const {}
};

// A zstd dictionary of up to `max_size` bytes trained on `samples` (ZDICT_trainFromBuffer);
// returns it, sized to what training produced. Throws
// std::system_error(CodecError::bad_options) when the samples cannot train one (too few or too
// small, or max_size too small), and std::bad_alloc when memory is short. Thread-safe.
std::vector<std::byte> train_zstd_dictionary(const std::vector<std::span<const std::byte>>& samples,
                                             size_t max_size);

}  // namespace zsm

// CodecError converts to std::error_code implicitly (through make_error_code()).
template <>
struct std::is_error_code_enum<zsm::CodecError> : std::true_type {};
