// The command line of zsm's programs, one table of flags per program: "--name=VALUE" flags and
// switches, positional arguments handed to the program, --help printed from the same table,
// and an error that names the flag for a bad value ("--pages: 'abc' is not a count").
//
// A program declares `const zsm_cli::Flag<Options> kFlags[]`, calls
// zsm_cli::parse(argc, argv, kFlags, positional) and, in its catch block for
// std::invalid_argument, prints the message and the usage (zsm_cli::print_usage): exit 2.
// Header-only, beside corpus.h: used by tools/ and bench/ programs alike.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>

namespace zsm_cli {

// One flag: a switch when `value` is null, else "--name=VALUE" with `value` naming the VALUE.
template <class Options>
struct Flag {
  const char* name;
  const char* value;
  const char* help;
  void (*set)(Options&, const std::string&);
};

// A decimal count without sign or trailing text; `what` names it in the error.
inline uint64_t parse_count(const std::string& text, const std::string& what) {
  size_t used = 0;
  unsigned long long v = 0;
  try {
    if (!text.empty() && text[0] != '-' && text[0] != '+') v = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw std::invalid_argument(what + ": '" + text + "' is not a count (a decimal number >= 0)");
  return v;
}

// parse_count() bounded to [lo, hi].
inline uint64_t parse_count(const std::string& text, const std::string& what, uint64_t lo,
                            uint64_t hi) {
  uint64_t v = parse_count(text, what);
  if (v < lo || v > hi)
    throw std::invalid_argument(what + ": " + text + " is out of range " + std::to_string(lo) +
                                ".." + std::to_string(hi));
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
  if (used == 0 || used != text.size())
    throw std::invalid_argument(what + ": '" + text + "' is not an integer");
  return v;
}

template <class Options>
void print_usage(std::FILE* out, const char* synopsis, std::span<const Flag<Options>> flags) {
  std::fprintf(out, "usage: %s\n", synopsis);
  for (const Flag<Options>& f : flags) {
    std::string spelled = std::string(f.name) + (f.value ? std::string("=") + f.value : "");
    std::fprintf(out, "  %-34s %s\n", spelled.c_str(), f.help);
  }
  std::fprintf(out, "  %-34s %s\n", "--help", "this text");
}

// Applies each argument to `opt`: flags through the table, anything not starting with "--"
// through `positional`. Returns false when --help was given (the caller prints the usage and
// exits 0). Throws std::invalid_argument for an unknown flag or a flag used wrongly.
template <class Options>
bool parse(int argc, char** argv, std::span<const Flag<Options>> flags, Options& opt,
           const std::function<void(Options&, const std::string&)>& positional = {}) {
  for (int i = 1; i < argc; i++) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return false;
    if (arg.rfind("--", 0) != 0) {
      if (!positional) throw std::invalid_argument("unexpected argument '" + arg + "'");
      positional(opt, arg);
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const Flag<Options>* flag = nullptr;
    for (const Flag<Options>& f : flags)
      if (name == f.name) flag = &f;
    if (flag == nullptr) throw std::invalid_argument("unknown option " + arg);
    const bool has_value = eq != std::string::npos;
    if (has_value != (flag->value != nullptr))
      throw std::invalid_argument(name + (flag->value ? " needs =" + std::string(flag->value)
                                                      : " takes no value"));
    flag->set(opt, has_value ? arg.substr(eq + 1) : "");
  }
  return true;
}

}  // namespace zsm_cli
