// The command line of the two counting drivers (zsm_pair_count, and the kernel's pair driver
// in bench/kernel_pair_count.cpp): positional arguments only, each checked, with --help and
// --version. Not CLI11, which every other program uses (bench/cli.h): the drivers are also
// cross-compiled for arm64 against libc alone (ZSM_POOL_ONLY, the kernel A/B's arm64 build),
// where no CLI11 is installed. The programs whose command line is Google Benchmark's own
// (zsm_pair_bench, zsm_copy_bench, the kernel's pair benchmark) take --version from here.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace zsm_driver {

// --version: `version` on stdout, and the caller exits 0.
inline bool answered_version(int argc, char** argv, const char* version) {
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("%s\n", version);
      return true;
    }
  }
  return false;
}

// --help or -h: the usage on stdout; --version: `version`; either way the caller exits 0.
inline bool answered_help_or_version(int argc, char** argv, const char* usage,
                                     const char* version) {
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: %s %s\n", argv[0], usage);
      return true;
    }
  }
  return answered_version(argc, argv, version);
}

// A decimal count in [lo, hi], or an error on stderr naming the argument and its range.
inline bool parse_count(const char* text, const char* what, uint64_t lo, uint64_t hi,
                        uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno != 0 || v < lo || v > hi) {
    std::fprintf(stderr, "%s: '%s' is not a count in %llu..%llu\n", what, text,
                 static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi));
    return false;
  }
  out = v;
  return true;
}

}  // namespace zsm_driver
