// A codec flag's value (--codec=zstd:19): zsm::parse_codec()'s spec, with its level checked
// against the codec's range by Codec::create() at once, so that a bad value is an error naming
// the flag before the program starts. For the programs that link zsm::cache.
#pragma once

#include <zsm/codec.hpp>

#include <string>

#include "cli.h"

namespace zsm_cli {

inline zsm::CodecOptions checked_codec(const zsm::CodecOptions& options, const std::string& what) {
  return named(what, [&] {
    zsm::Codec::create(options);
    return options;
  });
}

inline zsm::CodecOptions parse_codec(const std::string& spec, const std::string& what) {
  return checked_codec(named(what, [&] { return zsm::parse_codec(spec); }), what);
}

}  // namespace zsm_cli
