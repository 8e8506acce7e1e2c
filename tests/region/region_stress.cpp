// region_stress: N GiB of accesses to a region at 1/8 budget while an evictor thread evicts
// random ranges flat out. Each writer thread owns the pages p with p % threads == its index;
// an access is a read of a whole page checked against the version it last wrote, followed
// (three times in four) by a word-by-word write of the next version. At the end every page is
// checked. Exit status 0 only when no byte was wrong. --sigbus 1: the SIGBUS mode
// (ZSM_REGION_SELF_SERVE), each thread serving its own faults; --no-move 1: pages copied out
// of the region (ZSM_REGION_NO_MOVE), as on kernels without UFFDIO_MOVE; --file DIR: a backing
// file in DIR, the pool's budget a 16th of the region's budget (most copies go to the file). The
// line at the end also says how many range calls the evicting thread made, and its slowest:
// range calls must not wait long behind faults. --cold-age MS: aging (cold_age_ms) at a budget
// a quarter past the region, so that pages leave by their idle age and the range calls alone;
// --stall-target PPM steers it (stall_target_ppm). --noise 1: every other page does not compress
// (aging puts such pages back in the region rather than store them).
//   region_stress [--gib N] [--threads T] [--mib REGION_MIB] [--seed S] [--sigbus 0|1] [--no-move 0|1]
//                 [--file DIR] [--cold-age MS] [--stall-target PPM] [--noise 0|1]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <zsm/region.h>

#include "region_patterns.h"

namespace {

using zsm_test::kPage;
using zsm_test::page_mismatch;
using zsm_test::write_page_wordwise;

struct Options {
  double gib = 1;
  unsigned threads = 4;
  size_t mib = 64;
  uint64_t seed = 1;
  bool sigbus = false;
  bool no_move = false;
  unsigned cold_age_ms = 0;
  unsigned stall_target_ppm = 0;
  bool noise = false;
  std::string file;  // "" = no backing file
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "region_stress: %s\nusage: region_stress [--gib N] [--threads T] "
               "[--mib REGION_MIB] [--seed S] [--sigbus 0|1] [--no-move 0|1] [--file DIR] [--cold-age MS] "
               "[--stall-target PPM] [--noise 0|1]\n", why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    char* end = nullptr;
    const char* v = argv[++i];
    if (a == "--file") {
      o.file = v;
      continue;
    }
    if (a == "--gib") o.gib = std::strtod(v, &end);
    else if (a == "--threads") o.threads = static_cast<unsigned>(std::strtoul(v, &end, 10));
    else if (a == "--mib") o.mib = std::strtoul(v, &end, 10);
    else if (a == "--seed") o.seed = std::strtoull(v, &end, 10);
    else if (a == "--sigbus") o.sigbus = std::strtoul(v, &end, 10) != 0;
    else if (a == "--no-move") o.no_move = std::strtoul(v, &end, 10) != 0;
    else if (a == "--cold-age") o.cold_age_ms = static_cast<unsigned>(std::strtoul(v, &end, 10));
    else if (a == "--stall-target") o.stall_target_ppm = static_cast<unsigned>(std::strtoul(v, &end, 10));
    else if (a == "--noise") o.noise = std::strtoul(v, &end, 10) != 0;
    else usage(("unknown option " + a).c_str());
    if (end == v || *end != '\0') usage(("not a number: " + std::string(v)).c_str());
  }
  if (!(o.gib > 0) || o.threads == 0 || o.threads > 256 || o.mib < 1 || o.mib > (1u << 20)) {
    usage("--gib > 0, --threads 1..256, --mib 1..1048576");
  }
  return o;
}

bool noise_pages = false;  // --noise: the even pages
bool noisy(uint64_t p) { return noise_pages && p % 2 == 0; }

bool holds(const unsigned char* page, uint64_t p, uint64_t version) {
  if (version != 0) return page_mismatch(page, p, version, noisy(p)) == -1;
  for (size_t i = 0; i < kPage; ++i) {
    if (page[i] != 0) return false;
  }
  return true;
}

// One line naming a page that does not hold what was written: where it first differs, and which
// version (if any) its first and last words belong to.
void report(const unsigned char* page, uint64_t p, uint64_t version, const char* when) {
  auto version_at = [&](size_t off) {
    uint64_t a;
    std::memcpy(&a, page + off, 8);
    return a ^ (p * 0x9E3779B97F4A7C15ull);
  };
  long at = version == 0 ? 0 : page_mismatch(page, p, version, noisy(p));
  std::fprintf(stderr, "region_stress: %s: page %llu should hold version %llu; first wrong 16 bytes at %ld; "
               "its first words are version %llu, its last %llu\n", when, (unsigned long long)p,
               (unsigned long long)version, at * 16, (unsigned long long)version_at(0),
               (unsigned long long)version_at(kPage - 16));
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  size_t pages = o.mib * 1024 * 1024 / kPage;
  zsm_region_options ro{};
  ro.budget_bytes = std::max<size_t>(o.cold_age_ms != 0 ? pages + pages / 4 : pages / 8, 16) * kPage;
  ro.cold_age_ms = o.cold_age_ms;
  ro.stall_target_ppm = o.stall_target_ppm;
  noise_pages = o.noise;
  ro.flags = (o.sigbus ? ZSM_REGION_SELF_SERVE : 0) | (o.no_move ? ZSM_REGION_NO_MOVE : 0);
  if (!o.file.empty()) {
    ro.backing_file = o.file.c_str();
    ro.compressed_budget_bytes = ro.budget_bytes / 16;
  }
  zsm_region* r = zsm_region_create(pages * kPage, &ro);
  if (r == nullptr) {
    std::fprintf(stderr, "region_stress: %s\n", zsm_region_last_error());
    return 77;  // ctest's SKIP_RETURN_CODE
  }
  auto* base = static_cast<unsigned char*>(zsm_region_base(r));
  std::vector<uint64_t> version(pages, 0);
  auto total_bytes = static_cast<uint64_t>(o.gib * (1ull << 30));
  std::atomic<uint64_t> bytes{0}, errors{0}, reads{0}, writes{0};
  std::atomic<bool> stop{false};
  auto start = std::chrono::steady_clock::now();

  std::vector<std::thread> threads;
  for (unsigned t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(o.seed * 1000 + t);
      size_t mine = (pages - t + o.threads - 1) / o.threads;
      if (mine == 0) return;
      uint64_t local = 0;
      while (bytes.load(std::memory_order_relaxed) < total_bytes) {
        size_t p = (rng() % mine) * o.threads + t;
        unsigned char* page = base + p * kPage;
        if (!holds(page, p, version[p])) {
          report(page, p, version[p], "during the run");
          errors.fetch_add(1);
        }
        local += kPage;
        reads.fetch_add(1, std::memory_order_relaxed);
        if (rng() % 4 != 0) {
          write_page_wordwise(page, p, ++version[p], noisy(p));
          local += kPage;
          writes.fetch_add(1, std::memory_order_relaxed);
        }
        if (local >= (1u << 20)) bytes.fetch_add(std::exchange(local, 0));
      }
      bytes.fetch_add(local);
    });
  }
  uint64_t range_calls = 0;
  double slowest_ms = 0;
  std::thread evictor([&] {
    std::mt19937_64 rng(o.seed);
    while (!stop.load()) {
      size_t p = rng() % pages;
      size_t n = std::min<size_t>(1 + rng() % 32, pages - p);
      auto t0 = std::chrono::steady_clock::now();
      if (zsm_region_evict(r, base + p * kPage, n * kPage) != 0) errors.fetch_add(1);
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      slowest_ms = std::max(slowest_ms, ms);
      ++range_calls;
    }
  });
  for (auto& th : threads) th.join();
  stop.store(true);
  evictor.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t p = 0; p < pages; ++p) {
    if (!holds(base + p * kPage, p, version[p])) {
      report(base + p * kPage, p, version[p], "at the end");
      errors.fetch_add(1);
    }
  }
  struct zsm_region_stats s {};
  zsm_region_stats(r, &s);
  std::string file_line;
  if (!o.file.empty()) {
    file_line = ", backing file: " + std::to_string(s.written_back) + " written, " + std::to_string(s.read_back) +
                " read back";
  }
  std::printf("region_stress: %.2f GiB of accesses (%llu page reads, %llu page writes) in %.1f s "
              "by %u threads%s, region %zu MiB, budget %zu MiB: %llu errors; faults %llu, "
              "evictions %llu (clean %llu), wp faults %llu, resident %llu KiB%s; aged %llu, cold %llu, kept "
              "incompressible %llu, cold age %llu ms; range calls %llu (%.0f/s), the slowest %.1f ms\n",
              bytes.load() / double(1ull << 30), (unsigned long long)reads.load(),
              (unsigned long long)writes.load(), secs, o.threads,
              o.sigbus ? " serving their own faults (SIGBUS mode)" : "", o.mib,
              ro.budget_bytes >> 20, (unsigned long long)errors.load(),
              (unsigned long long)s.faults, (unsigned long long)s.evictions,
              (unsigned long long)s.clean_evictions,
              (unsigned long long)s.wp_faults, (unsigned long long)(s.resident_bytes >> 10),
              file_line.c_str(), (unsigned long long)s.aged_pages, (unsigned long long)s.cold_evictions,
              (unsigned long long)s.kept_incompressible, (unsigned long long)s.cold_age_ms,
              (unsigned long long)range_calls,
              range_calls / secs, slowest_ms);
  zsm_region_destroy(r);
  return errors.load() == 0 ? 0 : 1;
}
