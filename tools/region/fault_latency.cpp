// zsm_region_fault_latency: the fault-in latency of the region's handler modes on real data.
// Fills a region with the bytes of the system's shared libraries (the .so files of a
// directory, in name order, 64 MiB by default), evicts all of it, then reads one byte of every
// page, timing each touch; repeats per mode. Modes: a handler pinned to each CPU (the
// default); the SIGBUS mode (ZSM_REGION_SELF_SERVE); one handler (ZSM_REGION_ONE_HANDLER) sleeping after each fault (handler_spin_us
// = -1), or spinning for 20, 50 and 200 us before sleeping; each with
// fault-around off and pages touched in a shuffled order (every touch a fault), then
// sequentially with fault-around on (16 pages). Also the touch of resident pages, and lz4's
// decompression of a page alone, for scale. Then the policy on the real region: zipf(0.99)
// touches (one in four a write) at a budget of a quarter of the data, with probation
// (budget/8) and without: time and faults.
//   zsm_region_fault_latency [--mib N] [--dir DIR]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <zsm/codec.hpp>
#include <zsm/region.h>

namespace {

constexpr size_t kPage = 4096;
using Clock = std::chrono::steady_clock;

std::vector<char> library_bytes(const std::string& dir, size_t want) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (e.is_regular_file(ec) && name.find(".so") != std::string::npos) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<char> out;
  out.reserve(want);
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t take = std::min(b.size(), want - out.size());
    out.insert(out.end(), b.begin(), b.begin() + static_cast<long>(take));
    if (out.size() == want) break;
  }
  return out;
}

struct Result {
  double p50, p99, p999, mean, total_s;
  uint64_t faults;
};

Result summarize(std::vector<double>& ns, double total_s, uint64_t faults) {
  std::sort(ns.begin(), ns.end());
  auto at = [&](double q) { return ns[std::min(ns.size() - 1, static_cast<size_t>(q * ns.size()))]; };
  double mean = std::accumulate(ns.begin(), ns.end(), 0.0) / ns.size();
  return {at(0.5), at(0.99), at(0.999), mean, total_s, faults};
}

// Touches every page once, in `order`, after evicting all; returns the per-touch times.
// spin_us: handler_spin_us with one handler; kPerCpu: the default, a handler on each CPU;
// kSigbus: the SIGBUS mode, each faulting thread serving its own fault.
constexpr int kPerCpu = -2;
constexpr int kSigbus = -3;

Result touch_all(const std::vector<char>& data, int spin_us, unsigned fault_around,
                 const std::vector<size_t>& order, bool evict) {
  zsm_region_options o{};
  o.budget_bytes = data.size();
  if (spin_us == kSigbus) {
    o.flags = ZSM_REGION_SELF_SERVE;
  } else if (spin_us != kPerCpu) {
    o.flags = ZSM_REGION_ONE_HANDLER;
    o.handler_spin_us = spin_us;
  }
  o.fault_around_pages = fault_around;
  o.probation_divisor = -1;
  zsm_region* r = zsm_region_create(data.size(), &o);
  if (r == nullptr) {
    std::fprintf(stderr, "zsm_region_fault_latency: %s\n", zsm_region_last_error());
    std::exit(77);
  }
  auto* base = static_cast<volatile char*>(zsm_region_base(r));
  std::memcpy(const_cast<char*>(base), data.data(), data.size());
  if (evict) zsm_region_evict(r, const_cast<char*>(base), data.size());
  struct zsm_region_stats before {};
  zsm_region_stats(r, &before);
  std::vector<double> ns;
  ns.reserve(order.size());
  unsigned sum = 0;
  auto start = Clock::now();
  for (size_t p : order) {
    auto t0 = Clock::now();
    sum += static_cast<unsigned char>(base[p * kPage + 7]);
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }
  double total = std::chrono::duration<double>(Clock::now() - start).count();
  struct zsm_region_stats after {};
  zsm_region_stats(r, &after);
  zsm_region_destroy(r);
  if (sum == 1) std::puts("");  // keeps the loads
  return summarize(ns, total, after.faults - before.faults);
}

double lz4_decompress_ns(const std::vector<char>& data) {
  auto codec = zsm::Codec::create({});
  std::vector<std::byte> comp(codec->bound(kPage)), out(kPage);
  double total = 0;
  size_t pages = data.size() / kPage;
  for (size_t p = 0; p < pages; ++p) {
    auto src = std::as_bytes(std::span(data.data() + p * kPage, kPage));
    auto n = codec->compress(src, comp);
    if (!n) continue;
    auto t0 = Clock::now();
    (void)codec->decompress({comp.data(), *n}, out);
    total += std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  }
  return total / pages;
}

// zipf(s) page numbers over `pages`, hot pages spread by a shuffle.
std::vector<size_t> zipf_pages(size_t pages, size_t n, double s, uint64_t seed) {
  std::vector<double> cdf(pages);
  double sum = 0;
  for (size_t i = 0; i < pages; ++i) cdf[i] = sum += 1.0 / std::pow(double(i + 1), s);
  std::vector<size_t> perm(pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::uniform_real_distribution<double> u(0, sum);
  std::vector<size_t> out(n);
  for (auto& p : out) p = perm[std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin()];
  return out;
}

void policy_run(const std::vector<char>& data, int probation_divisor, const std::vector<size_t>& order) {
  zsm_region_options o{};
  o.budget_bytes = data.size() / 4;
  o.probation_divisor = probation_divisor;
  zsm_region* r = zsm_region_create(data.size(), &o);
  if (r == nullptr) std::exit(77);
  auto* base = static_cast<volatile char*>(zsm_region_base(r));
  std::memcpy(const_cast<char*>(base), data.data(), data.size());
  struct zsm_region_stats before {};
  zsm_region_stats(r, &before);
  auto start = Clock::now();
  for (size_t i = 0; i < order.size(); ++i) {
    volatile char* b = base + order[i] * kPage + 64;
    if (i % 4 == 0) *b = static_cast<char>(*b + 1);
    else (void)*b;
  }
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  struct zsm_region_stats a {};
  zsm_region_stats(r, &a);
  std::printf("| %s | %.2f | %llu | %llu | %llu | %llu |\n",
              probation_divisor < 0 ? "none" : "budget/8", secs * 1e9 / order.size() / 1000,
              (unsigned long long)(a.refaults - before.refaults),
              (unsigned long long)(a.probation_faults - before.probation_faults),
              (unsigned long long)(a.evictions - before.evictions),
              (unsigned long long)(a.clean_evictions - before.clean_evictions));
  zsm_region_destroy(r);
}

void print(const char* mode, const Result& r, size_t bytes) {
  std::printf("| %s | %llu | %.2f | %.2f | %.2f | %.2f | %.0f |\n", mode,
              static_cast<unsigned long long>(r.faults), r.p50 / 1000, r.p99 / 1000, r.p999 / 1000,
              r.mean / 1000, bytes / r.total_s / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 64;
  std::string dir = "/usr/lib/x86_64-linux-gnu";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mib")) mib = std::strtoul(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: zsm_region_fault_latency [--mib N] [--dir DIR]\n");
      return 2;
    }
  }
  if (argc % 2 == 0 || mib < 1 || mib > 4096) {
    std::fprintf(stderr, "usage: zsm_region_fault_latency [--mib 1..4096] [--dir DIR]\n");
    return 2;
  }
  std::vector<char> data = library_bytes(dir, mib << 20);
  if (data.size() < 64 * kPage) {
    std::fprintf(stderr, "zsm_region_fault_latency: too few .so bytes under %s\n", dir.c_str());
    return 2;
  }
  data.resize(data.size() / kPage * kPage);
  size_t pages = data.size() / kPage;
  std::vector<size_t> shuffled(pages), sequential(pages);
  std::iota(sequential.begin(), sequential.end(), 0);
  shuffled = sequential;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(1));
  std::printf("%zu MiB of %s/*.so, %zu pages; lz4 decompression alone %.2f us a page\n",
              data.size() >> 20, dir.c_str(), pages, lz4_decompress_ns(data) / 1000);
  std::printf("| mode | faults | p50 us | p99 us | p99.9 us | mean us | MB/s |\n|---|---:|---:|---:|---:|---:|---:|\n");
  print("resident (no fault), shuffled", touch_all(data, kPerCpu, 1, shuffled, false), data.size());
  const struct { const char* name; int spin; } modes[] = {
      {"a handler a CPU (default)", kPerCpu}, {"SIGBUS mode", kSigbus}, {"one handler, sleeping", -1},
      {"one handler, spin 20 us", 20}, {"one handler, spin 50 us", 0}, {"one handler, spin 200 us", 200}};
  for (const auto& m : modes) {
    std::string a = std::string(m.name) + ", shuffled, no fault-around";
    print(a.c_str(), touch_all(data, m.spin, 1, shuffled, true), data.size());
    std::string b = std::string(m.name) + ", sequential, fault-around 16";
    print(b.c_str(), touch_all(data, m.spin, 16, sequential, true), data.size());
  }
  std::vector<size_t> zipf = zipf_pages(pages, 2'000'000, 0.99, 2);
  std::printf("\nzipf(0.99) over %zu pages, 2,000,000 touches (1 in 4 a write), budget a quarter:\n"
              "| probation | us a touch | major faults | minor faults | compressed evictions | clean evictions |\n"
              "|---|---:|---:|---:|---:|---:|\n", pages);
  policy_run(data, -1, zipf);
  policy_run(data, 0, zipf);
  return 0;
}
