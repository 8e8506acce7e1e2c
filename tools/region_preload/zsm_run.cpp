// zsm-run: runs a program with all of its memory in a zsm region, as eatmydata or numactl run
// one with their change (the preload library, libzsm_region_preload.so, does the work: its
// top comment says what it takes and what stays outside).
//
//   zsm-run [--budget=SIZE] [--cold-age=SECONDS] [--stall-target=PERCENT] [--pool-budget=SIZE]
//           [--backing-file=PATH|none] [--self-serve] [--region-size=SIZE] [--stats]
//           [--stats-interval=SECONDS] [--stats-file=PATH] [--quiet] -- PROGRAM ARGS...
//
// With neither --budget nor --cold-age it runs the automatic mode: pages left untouched for a
// cold age (kAutoColdAge to start) are compressed, the age steered so that faults on
// compressed pages take about kAutoStallTarget of the time, under a budget of half the
// machine's memory as a cap. A --budget alone compresses only past it, as before.
//
// It sets the library's variables (ZSM_REGION_*; sizes as byte counts), puts the library first
// in LD_PRELOAD and executes the program in its own place (its exit status is the program's,
// and its PID: the library prints its line at start, and --stats's at exit, from that process
// alone, through its execs). Each process the program starts has a region and a budget of its
// own. The library is found beside zsm-run (the build tree), in ../lib/ (an install), or where
// --library says. A program that cannot be run is exit status 127, with the reason; a bad
// flag, 2.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.h"

namespace {

namespace fs = std::filesystem;

struct Options {
  std::string budget;  // byte counts, as the library reads them
  std::string pool_budget, backing_file, region_size, library, cold_age, stall_target;
  std::string stats_interval, stats_file;
  bool self_serve = false, stats = false, quiet = false;
  std::vector<std::string> program;
};

constexpr uint64_t kLeastBudget = uint64_t{1} << 20;       // the library's least (preload.cpp)
constexpr uint64_t kLeastRegion = uint64_t{256} << 20;
constexpr const char* kAutoColdAge = "10";       // seconds, the automatic mode's start
constexpr const char* kAutoStallTarget = "1";  // percent of the time in faults on compressed pages

// A size checked here (so that a mistake is an error of zsm-run's, not a line from the
// library), handed on as bytes.
std::string size_flag(const std::string& v, const char* what, uint64_t least = 1) {
  return std::to_string(zsm_cli::parse_size(v, what, least));
}

// 0, or a number of `unit`s within [least, most], handed on as the user wrote it.
std::string number_flag(const std::string& v, const char* what, double least, double most,
                        const char* unit = "seconds") {
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(v, &used);
  } catch (const std::exception&) {
  }
  if (used != v.size() || !(value == 0 || (value >= least && value <= most))) {
    char range[64];
    std::snprintf(range, sizeof range, "0 or %s from %g to %g", unit, least, most);
    throw std::invalid_argument(std::string(what) + " '" + v + "' is not " + range);
  }
  return v;
}

const zsm_cli::Flag<Options> kFlags[] = {
    {"--budget", "SIZE", "all the region may cost: decompressed pages, pool, bookkeeping; at least 1M (default: half the machine's memory); each process the program starts has its own",
     [](Options& o, const std::string& v) { o.budget = size_flag(v, "--budget", kLeastBudget); }},
    {"--cold-age", "SECONDS", "compress a page left untouched this long whatever the budget, 0.1 to 604800, 0: off (default: 10 to start, steered, without --budget; off with it); finding which are untouched costs up to 1 % of a CPU",
     [](Options& o, const std::string& v) { o.cold_age = number_flag(v, "--cold-age", 0.1, 604800); }},
    {"--stall-target", "PERCENT", "steer the cold age so that faults on compressed pages take about this share of the time, 0.0001 to 10, 0: a fixed cold age (default 1 without --budget and --cold-age, else 0)",
     [](Options& o, const std::string& v) { o.stall_target = number_flag(v, "--stall-target", 0.0001, 10, "percent"); }},
    {"--pool-budget", "SIZE", "the compressed pool's most (default: half the budget); past it, pages go to the file",
     [](Options& o, const std::string& v) { o.pool_budget = size_flag(v, "--pool-budget"); }},
    {"--backing-file", "PATH", "a directory (an unnamed file there), a path that does not exist, or none (default $TMPDIR or /tmp)",
     [](Options& o, const std::string& v) { o.backing_file = v; }},
    {"--region-size", "SIZE", "the region's virtual size, at least 256M (default 64G)",
     [](Options& o, const std::string& v) { o.region_size = size_flag(v, "--region-size", kLeastRegion); }},
    {"--self-serve", nullptr, "the SIGBUS mode: each thread serves its own faults; as where the kernel's faults cannot be served (no privilege), allocations under 64 KiB and libc's own stay outside the region (docs/region.md)",
     [](Options& o, const std::string&) { o.self_serve = true; }},
    {"--stats", nullptr, "one line of the region's statistics on stderr at exit (or why there was none)",
     [](Options& o, const std::string&) { o.stats = true; }},
    {"--stats-interval", "SECONDS", "a CSV line of the region's figures this often (RSS, memory saved, stall share, promotions a minute, cold age), 0.1 to 86400 (0: none), on stderr or --stats-file",
     [](Options& o, const std::string& v) { o.stats_interval = number_flag(v, "--stats-interval", 0.1, 86400); }},
    {"--stats-file", "PATH", "where --stats-interval's lines go (default stderr); made empty at start",
     [](Options& o, const std::string& v) { o.stats_file = v; }},
    {"--quiet", nullptr, "no line at start saying the budget and the mode",
     [](Options& o, const std::string&) { o.quiet = true; }},
    {"--library", "PATH", "the preload library (default: found beside zsm-run or in ../lib)",
     [](Options& o, const std::string& v) { o.library = zsm_cli::existing_path(v, "--library"); }},
};

constexpr const char* kSynopsis = "zsm-run [flags] -- PROGRAM [ARGS...]";

std::string default_budget() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  unsigned long long half = pages > 0 && page > 0 ? static_cast<unsigned long long>(pages) * page / 2 : 1ull << 30;
  return std::to_string(half);
}

// The library: beside this program, or in ../lib (and its multiarch folder).
std::string find_library(const char* argv0) {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) self = fs::absolute(argv0);
  fs::path dir = self.parent_path();
  for (fs::path candidate : {dir / "libzsm_region_preload.so", dir / "../lib/libzsm_region_preload.so",
                             dir / "../lib/x86_64-linux-gnu/libzsm_region_preload.so",
                             dir / "../lib/aarch64-linux-gnu/libzsm_region_preload.so"}) {
    if (fs::exists(candidate, ec)) return fs::canonical(candidate, ec).string();
  }
  return "";
}

// The stats file, made (or emptied) now: the library appends to it, through the program's execs.
bool make_empty(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  close(fd);
  return true;
}

bool is_zero(const std::string& number) { return !number.empty() && std::stod(number) == 0; }

// The automatic mode without --budget and --cold-age: a cold age to start, steered. A stall
// target alone steers from the same start.
void choose_aging(Options& o) {
  if (o.budget.empty() && o.cold_age.empty()) {
    o.cold_age = kAutoColdAge;
    if (o.stall_target.empty()) o.stall_target = kAutoStallTarget;
  } else if (o.cold_age.empty() && !o.stall_target.empty() && !is_zero(o.stall_target)) {
    o.cold_age = kAutoColdAge;
  }
}

void set(const char* name, const std::string& value) {
  if (!value.empty()) setenv(name, value.c_str(), 1);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string me = zsm_cli::program_name(argv[0]);
  Options o;
  try {
    zsm_cli::parse<Options>(argc, argv, kSynopsis, kFlags, o,
                            [](Options& opt, const std::string& a) { opt.program.push_back(a); });
    if (o.program.empty()) throw std::invalid_argument("no program to run (zsm-run [flags] -- PROGRAM ARGS...)");
    if (is_zero(o.cold_age) && !o.stall_target.empty() && !is_zero(o.stall_target)) {
      throw std::invalid_argument("--stall-target steers the cold age: it cannot be used with --cold-age=0");
    }
    if (is_zero(o.stats_interval)) o.stats_interval.clear();
    if (!o.stats_file.empty() && o.stats_interval.empty()) {
      throw std::invalid_argument("--stats-file is where --stats-interval's lines go: give --stats-interval too");
    }
  } catch (const std::exception& e) {
    return zsm_cli::usage_error(me, e);
  }
  std::string library = o.library.empty() ? find_library(argv[0]) : o.library;
  if (library.empty()) {
    std::fprintf(stderr, "%s: libzsm_region_preload.so is neither beside %s nor in ../lib; give --library\n",
                 me.c_str(), me.c_str());
    return 2;
  }
  set("ZSM_REGION_BUDGET", o.budget.empty() ? default_budget() : o.budget);
  set("ZSM_REGION_POOL_BUDGET", o.pool_budget);
  choose_aging(o);
  set("ZSM_REGION_COLD_AGE", o.cold_age);
  set("ZSM_REGION_STALL_TARGET", o.stall_target);
  if (!o.stats_file.empty() && !make_empty(o.stats_file)) {
    std::fprintf(stderr, "%s: --stats-file '%s' cannot be written: %s\n", me.c_str(), o.stats_file.c_str(),
                 std::strerror(errno));
    return 2;
  }
  set("ZSM_REGION_STATS_INTERVAL", o.stats_interval);
  set("ZSM_REGION_STATS_FILE", o.stats_file);
  set("ZSM_REGION_BACKING_FILE", o.backing_file);
  set("ZSM_REGION_SIZE", o.region_size);
  if (o.self_serve) setenv("ZSM_REGION_SELF_SERVE", "1", 1);
  if (o.stats) setenv("ZSM_REGION_STATS", "1", 1);
  if (!o.quiet) setenv("ZSM_RUN_ANNOUNCE", "1", 1);
  set("ZSM_RUN_PID", std::to_string(getpid()));
  const char* before = std::getenv("LD_PRELOAD");
  set("LD_PRELOAD", before != nullptr && *before != '\0' ? library + ":" + before : library);

  std::vector<char*> args;
  for (std::string& a : o.program) args.push_back(a.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "%s: cannot run '%s': %s\n", me.c_str(), args[0], std::strerror(errno));
  return 127;
}
