// zsm_region_aging_cost: what aging (zsm_region_options.cold_age_ms) costs a program whose
// memory is all hot. A region with --mib MiB written (1 GiB by default) at a budget a quarter
// larger, so nothing leaves it for room, is read one word a page, page after page, in
// a loop by one thread for a quarter of --seconds, then measured for --seconds; once without aging and once with it, in one run.
// Printed for each: the pages read a second, the process's CPU time a second (getrusage: the
// reader, the evictor, the fault handlers), the faults and the pages aged a second, the time
// faults stalled the reader, and the hand's last whole turn; then aging's cost: the CPU share
// it adds and the reader's throughput with it over without. --rounds pairs, alternated (a
// page-by-page scan's speed varies between runs with where its pages landed).
//   zsm_region_aging_cost [--mib N] [--seconds S] [--cold-age-ms MS] [--rounds N] [--sigbus]
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <zsm/region.h>

namespace {

constexpr size_t kPage = 4096;
using Clock = std::chrono::steady_clock;

struct Args {
  size_t mib = 1024;
  double seconds = 30;
  unsigned cold_age_ms = 120'000;
  unsigned rounds = 3;
  bool sigbus = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "zsm_region_aging_cost: %s\nusage: zsm_region_aging_cost [--mib N] [--seconds S] "
               "[--cold-age-ms MS] [--rounds N] [--sigbus]\n", why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&](const char* name) -> const char* {
      std::string prefix = std::string(name) + "=";
      return s.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("--mib")) {
      a.mib = std::strtoull(v, nullptr, 10);
    } else if (const char* v = value("--seconds")) {
      a.seconds = std::strtod(v, nullptr);
    } else if (const char* v = value("--cold-age-ms")) {
      a.cold_age_ms = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
    } else if (const char* v = value("--rounds")) {
      a.rounds = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
    } else if (s == "--sigbus") {
      a.sigbus = true;
    } else if (s == "--help") {
      usage("what aging costs a program whose memory is all hot");
    } else {
      usage(("unknown argument " + s).c_str());
    }
  }
  if (a.mib < 1 || a.seconds <= 0 || a.rounds < 1) usage("--mib, --seconds and --rounds must be positive");
  return a;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Run {
  double pages_per_s, cpu_per_s, faults_per_s, minor_per_s, aged_per_s, stall_share;
  uint64_t turn_ms, cold;
};

Run measure(const Args& a, unsigned cold_age_ms) {
  const size_t pages = a.mib * (1 << 20) / kPage;
  const size_t size = pages * kPage * 5 / 4;  // the budget's watermarks stay clear of the pages written
  zsm_region_options o{};
  o.budget_bytes = size;
  o.cold_age_ms = cold_age_ms;
  if (a.sigbus) o.flags = ZSM_REGION_SELF_SERVE;
  zsm_region* r = zsm_region_create(size, &o);
  if (r == nullptr) {
    std::fprintf(stderr, "zsm_region_aging_cost: %s\n", zsm_region_last_error());
    std::exit(1);
  }
  auto* base = static_cast<volatile uint64_t*>(zsm_region_base(r));
  for (size_t p = 0; p < pages; ++p) base[p * kPage / 8] = p * 0x9E3779B97F4A7C15ull;  // every page written
  uint64_t sum = 0;
  auto read_for = [&](double seconds) {
    uint64_t read = 0;
    for (const auto t0 = Clock::now(); std::chrono::duration<double>(Clock::now() - t0).count() < seconds;) {
      for (size_t p = 0; p < pages; ++p) sum += base[p * kPage / 8];
      read += pages;
    }
    return read;
  };
  read_for(a.seconds / 4);  // the pages aged while they were written come back first
  struct zsm_region_stats before{}, after{};
  zsm_region_stats(r, &before);
  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  const uint64_t read = read_for(a.seconds);
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  zsm_region_stats(r, &after);
  zsm_region_destroy(r);
  if (sum == 42) std::puts("");  // keeps the reads
  return {read / wall,
          cpu / wall,
          static_cast<double>(after.faults - before.faults) / wall,
          static_cast<double>(after.probation_faults - before.probation_faults) / wall,
          static_cast<double>(after.aged_pages - before.aged_pages) / wall,
          static_cast<double>(after.stall_ns - before.stall_ns) / 1e9 / wall,
          after.aging_turn_ms,
          after.cold_evictions};
}

void print_row(const char* name, const Run& x) {
  std::printf("| %s | %.2f | %.3f | %.0f | %.0f | %.0f | %.3f %% | %.1f | %llu |\n", name, x.pages_per_s / 1e6, x.cpu_per_s,
              x.faults_per_s, x.minor_per_s, x.aged_per_s, 100 * x.stall_share, x.turn_ms / 1000.0,
              static_cast<unsigned long long>(x.cold));
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::printf("%zu MiB written and read in a loop by one thread, %.0f s a run, %s mode, budget = 1.25x that, "
              "cold age %.1f s\n", a.mib, a.seconds, a.sigbus ? "SIGBUS" : "handler-thread", a.cold_age_ms / 1000.0);
  std::printf("| aging | Mpages read/s | CPU s/s | faults/s | from probation/s | aged pages/s | reader stalled | hand's turn s | cold evictions |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  double read_off = 0, read_on = 0, cpu_off = 0, cpu_on = 0;
  for (unsigned round = 0; round < a.rounds; ++round) {
    Run off = measure(a, 0);
    print_row("off", off);
    Run on = measure(a, a.cold_age_ms);
    print_row("on", on);
    read_off += off.pages_per_s, read_on += on.pages_per_s, cpu_off += off.cpu_per_s, cpu_on += on.cpu_per_s;
    std::fflush(stdout);
  }
  std::printf("aging's cost over %u pairs: %+.2f %% of a CPU, the reader at %.3fx its pages read a second\n", a.rounds,
              100 * (cpu_on - cpu_off) / a.rounds, read_on / read_off);
  return 0;
}
