// The command line of zsm's programs, one table of flags per program, parsed by CLI11
// (Debian's libcli11-dev): "--name VALUE" and "--name=VALUE" flags, switches, positional
// arguments handed to the program, --help printed from the same table, --version from
// zsm/version.h, and an error that names the flag and its range for a bad value
// ("--pages: 'abc' is not a count (1..4294967295)").
//
// A program declares `const zsm_cli::Flag<Options> kFlags[]` and calls
// zsm_cli::parse(argc, argv, kSynopsis, kFlags, opt, positional), which answers --help and
// --version itself (exit 0) and throws std::invalid_argument for anything wrong; its catch
// block returns zsm_cli::usage_error(program, e): the message and a hint at --help, exit 2.
// The value parsers below (counts, integers, sizes with K/M/G, paths that must exist) throw
// the same exception with the flag's name, from a flag's setter or from the program's checks.
// Header-only, beside corpus.h: used by tools/, examples/ and bench/ programs alike.
#pragma once

#include <zsm/version.h>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace zsm_cli {

// One flag: a switch when `value` is null, else "--name VALUE" with `value` naming the VALUE.
// A flag without `help` is the program's own (e.g. a child process's job) and is not listed.
template <class Options>
struct Flag {
  const char* name;
  const char* value;
  const char* help;
  void (*set)(Options&, const std::string&);
};

template <class Options>
using Positional = std::function<void(Options&, const std::string&)>;

// What parse() does with arguments that are neither its flags nor positional: refuse them, or
// hand them back for another parser (Google Benchmark's flags).
enum class Extras { refused, returned };

// 16777216 as "16M", 4096 as "4K"; other numbers in decimal.
inline std::string format_size(uint64_t bytes) {
  const char* const suffixes = "GMK";
  for (int i = 0; i < 3; i++) {
    const uint64_t unit = uint64_t{1} << (10 * (3 - i));
    if (bytes != 0 && bytes % unit == 0) return std::to_string(bytes / unit) + suffixes[i];
  }
  return std::to_string(bytes);
}

namespace detail {

inline std::invalid_argument bad_value(const std::string& what, const std::string& text,
                                       const std::string& expected) {
  return std::invalid_argument(what + ": '" + text + "' is not " + expected);
}

// The decimal digits at the start of `text` as a number; `used` their count (0: none, or
// too many for 64 bits).
inline uint64_t leading_count(const std::string& text, size_t& used) {
  used = 0;
  if (text.empty() || text[0] < '0' || text[0] > '9') return 0;
  try {
    return std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
    return 0;
  }
}

inline void check_range(uint64_t v, const std::string& what, const std::string& text,
                        uint64_t lo, uint64_t hi, std::string (*format)(uint64_t)) {
  if (v < lo || v > hi)
    throw std::invalid_argument(what + ": " + text + " is out of range " + format(lo) + ".." +
                                format(hi));
}

inline std::string format_count(uint64_t v) { return std::to_string(v); }

}  // namespace detail

// A decimal count within [lo, hi], without sign or trailing text; `what` names it in the error.
inline uint64_t parse_count(const std::string& text, const std::string& what, uint64_t lo = 0,
                            uint64_t hi = UINT64_MAX) {
  size_t used = 0;
  const uint64_t v = detail::leading_count(text, used);
  if (used == 0 || used != text.size())
    throw detail::bad_value(what, text, "a count (" + std::to_string(lo) + ".." +
                                            std::to_string(hi) + ")");
  detail::check_range(v, what, text, lo, hi, detail::format_count);
  return v;
}

// A decimal integer, optionally negative, within int's range.
inline int parse_int(const std::string& text, const std::string& what) {
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) throw detail::bad_value(what, text, "an integer");
  return v;
}

// A byte count within [lo, hi]: decimal, optionally followed by K, M or G (KiB, MiB, GiB;
// "16M", "16MiB" and "16m" alike). The error gives the range in the same units.
inline uint64_t parse_size(const std::string& text, const std::string& what, uint64_t lo = 0,
                           uint64_t hi = UINT64_MAX) {
  const std::string expected =
      "a size (bytes, or with K, M or G: " + format_size(lo) + ".." + format_size(hi) + ")";
  size_t used = 0;
  const uint64_t v = detail::leading_count(text, used);
  if (used == 0) throw detail::bad_value(what, text, expected);
  std::string unit = text.substr(used);
  if (unit.size() == 3 && (unit[1] == 'i' || unit[1] == 'I') && (unit[2] == 'B' || unit[2] == 'b'))
    unit.resize(1);
  int shift = 0;
  if (unit.size() == 1) {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
    shift = u == 'K' ? 10 : u == 'M' ? 20 : u == 'G' ? 30 : -1;
  } else if (!unit.empty()) {
    shift = -1;
  }
  if (shift < 0 || (shift > 0 && v > (UINT64_MAX >> shift)))
    throw detail::bad_value(what, text, expected);
  detail::check_range(v << shift, what, text, lo, hi, format_size);
  return v << shift;
}

// `text` when it names an existing file or directory, as `kind` says ("a file", "a
// directory", "a file or directory").
enum class PathKind { file, directory, any };
inline std::string existing_path(const std::string& text, const std::string& what,
                                 PathKind kind = PathKind::any) {
  std::error_code ec;
  const auto status = std::filesystem::status(text, ec);
  if (!std::filesystem::exists(status))
    throw std::invalid_argument(what + ": '" + text + "' does not exist");
  if (kind == PathKind::directory && !std::filesystem::is_directory(status))
    throw std::invalid_argument(what + ": '" + text + "' is not a directory");
  if (kind == PathKind::file && std::filesystem::is_directory(status))
    throw std::invalid_argument(what + ": '" + text + "' is a directory, not a file");
  return text;
}

// What `parse()` returns, its error (any exception) led by the flag's name `what`: for value
// parsers of other libraries ("--codec: unknown codec 'x'").
template <class Parse>
auto named(const std::string& what, Parse&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const std::exception& e) {
    throw std::invalid_argument(what + ": " + e.what());
  }
}

template <class Options>
void print_usage(std::FILE* out, const char* synopsis, std::span<const Flag<Options>> flags) {
  std::fprintf(out, "usage: %s\n", synopsis);
  std::fprintf(out, "  (a flag's value as --flag=VALUE or --flag VALUE; sizes in bytes or with "
                    "K, M, G: 16M)\n");
  for (const Flag<Options>& f : flags) {
    if (f.help == nullptr) continue;
    std::string spelled = std::string(f.name) + (f.value ? std::string("=") + f.value : "");
    std::fprintf(out, "  %-34s %s\n", spelled.c_str(), f.help);
  }
  std::fprintf(out, "  %-34s %s\n", "--help", "this text");
  std::fprintf(out, "  %-34s %s\n", "--version", "zsm's version");
}

// The program's name as the messages give it: argv[0] without its folder.
inline std::string program_name(const char* argv0) {
  return std::filesystem::path(argv0 != nullptr ? argv0 : "zsm").filename().string();
}

// A bad command line: the message, a hint at --help, and the exit status 2.
inline int usage_error(const std::string& program, const std::exception& e) {
  std::fprintf(stderr, "%s: %s\nRun '%s --help' for the flags.\n", program.c_str(), e.what(),
               program.c_str());
  return 2;
}

namespace detail {

template <class Options>
void add_flag(CLI::App& app, const Flag<Options>& f, Options& opt) {
  CLI::Option* option =
      f.value == nullptr
          ? app.add_flag_callback(f.name, [&opt, &f] { f.set(opt, ""); })
          : app.add_option_function<std::string>(
                f.name, [&opt, &f](const std::string& v) { f.set(opt, v); })
                ->type_name(f.value);
  // In the command line's order, as the flags were given (--codec before --level).
  option->trigger_on_parse()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

}  // namespace detail

// Applies each argument to `opt`: flags through the table, the others through `positional`
// (or, with Extras::returned, back to the caller, in order). --help prints the usage to stdout
// and exits 0 (with Extras::returned it is also handed back, so the next parser lists its own
// flags); --version prints "PROGRAM VERSION" and exits 0. Throws std::invalid_argument for an
// unknown flag, a missing value, or what a flag's setter refuses.
template <class Options>
std::vector<std::string> parse(int argc, char** argv, const char* synopsis,
                               std::span<const Flag<Options>> flags, Options& opt,
                               const Positional<Options>& positional = {},
                               Extras extras = Extras::refused) {
  CLI::App app;
  app.set_help_flag();
  bool help = false, version = false;
  app.add_flag("-h,--help", help);
  app.add_flag("--version", version);
  for (const Flag<Options>& f : flags) detail::add_flag(app, f, opt);
  std::vector<std::string> positionals;
  if (positional) app.add_option("ARGS", positionals)->expected(0, -1);
  app.allow_extras(extras == Extras::returned);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    throw std::invalid_argument(e.what());
  }
  if (version) {
    std::printf("%s %s\n", program_name(argv[0]).c_str(), ZSM_VERSION_STRING);
    std::exit(0);
  }
  if (help) {
    print_usage<Options>(stdout, synopsis, flags);
    if (extras == Extras::refused) std::exit(0);
  }
  for (const std::string& arg : positionals) positional(opt, arg);
  std::vector<std::string> rest = app.remaining();
  if (help) rest.insert(rest.begin(), "--help");
  return rest;
}

}  // namespace zsm_cli
