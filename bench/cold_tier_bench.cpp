// zsm_cold_tier_bench: zsm::Cache with and without its backing file, on working sets larger
// than memory. Values are real 4 KiB pages (bench/corpus.h); keys are drawn Zipf (s = 0.99)
// or uniformly over a working set of W pages, W x 4 KiB = --ratio x --memory. Each run warms
// the cache (every key put once, then one get per key, putting back what misses, as a
// cache-aside client does), writes out what is staged, then times --gets gets, putting back
// each miss; every value read is compared with its page.
//
// Per run: the share of gets served by memory, by the file, and by neither (misses); get
// latency (median, p99, p99.9) for each tier; the put's median latency (every put: the
// warm-up's, which evict once memory is full, and the misses');
// write amplification (bytes written to the file per byte put); the entries memory evicted
// that the file did not take (dropped: its writer's queue stayed full, or the write limit),
// as a share of the evictions, and how full the file was at the end; bytes held against the
// capacity. The backing file is an unnamed file in the directory --file names (default: the
// working directory, on its disk); it is opened with O_DIRECT where the file system allows,
// so reads come from the disk, not the page cache (the table says which). --hog=N runs N
// threads that only spin beside the whole run: a machine whose cores are busy, where the
// file's writer must compete for CPU.
//
// Usage: zsm_cold_tier_bench [--memory=BYTES] [--ratios=4,16] [--file-ratio=4] [--gets=N]
//                            [--keys=zipf,uniform] [--file=DIR] [--hog=N] [--seed=N]; --help.
#include <zsm/cache.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "corpus.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  size_t memory = size_t{8} << 20;
  std::vector<uint64_t> ratios = {4, 16};
  uint64_t file_ratio = 4;
  uint64_t gets = 200000;
  std::vector<std::string> keys = {"zipf", "uniform"};
  std::string file = ".";
  uint64_t hog = 0;
  uint64_t seed = 1;
};

// An existing directory, or a path that does not exist yet in one (zsm/backing_file.hpp).
std::string backing_file_path(const std::string& path) {
  if (std::filesystem::is_directory(path)) return path;
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  zsm_cli::existing_path(folder.empty() ? "." : folder.string(), "--file's folder",
                         zsm_cli::PathKind::directory);
  return path;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) parts.push_back(part);
  return parts;
}

const zsm_cli::Flag<Options> kFlags[] = {
    {"--memory", "BYTES", "the cache's capacity (default 8M)",
     [](Options& o, const std::string& v) {
       o.memory = zsm_cli::parse_size(v, "--memory", 4 << 20, uint64_t{1} << 34);
     }},
    {"--ratios", "N[,N]", "working sets, in multiples of the memory (default 4,16)",
     [](Options& o, const std::string& v) {
       o.ratios.clear();
       for (const std::string& r : split(v)) o.ratios.push_back(zsm_cli::parse_count(r, "--ratios", 1, 64));
     }},
    {"--file-ratio", "N", "the file's capacity, in multiples of the memory (default 4)",
     [](Options& o, const std::string& v) { o.file_ratio = zsm_cli::parse_count(v, "--file-ratio", 1, 256); }},
    {"--gets", "N", "timed gets per run (default 200000)",
     [](Options& o, const std::string& v) { o.gets = zsm_cli::parse_count(v, "--gets", 1, uint64_t{1} << 32); }},
    {"--keys", "zipf|uniform[,...]", "key choices (default zipf,uniform)",
     [](Options& o, const std::string& v) {
       o.keys = split(v);
       for (const std::string& k : o.keys)
         if (k != "zipf" && k != "uniform")
           throw std::invalid_argument("--keys: unknown '" + k + "' (zipf, uniform)");
     }},
    {"--file", "DIR|PATH", "the backing file: an unnamed file in DIR, or a new file at PATH "
     "(default .)",
     [](Options& o, const std::string& v) { o.file = backing_file_path(v); }},
    {"--hog", "N", "threads that spin beside the runs (default 0)",
     [](Options& o, const std::string& v) { o.hog = zsm_cli::parse_count(v, "--hog", 0, 64); }},
    {"--seed", "N", "pages, key order and draws (default 1)",
     [](Options& o, const std::string& v) { o.seed = zsm_cli::parse_count(v, "--seed"); }},
};

// Zipf over ranks 0..n-1 by its inverse CDF; ranks are mapped to keys by a shuffle.
class Keys {
 public:
  Keys(const std::string& kind, size_t n, uint64_t seed) : n_(n), rng_(seed) {
    order_.resize(n);
    for (size_t i = 0; i < n; i++) order_[i] = i;
    std::shuffle(order_.begin(), order_.end(), rng_);
    if (kind != "zipf") return;
    cdf_.resize(n);
    double sum = 0;
    for (size_t i = 0; i < n; i++) cdf_[i] = sum += 1.0 / std::pow(static_cast<double>(i + 1), 0.99);
    for (double& c : cdf_) c /= sum;
  }
  size_t next() {
    if (cdf_.empty()) return std::uniform_int_distribution<size_t>(0, n_ - 1)(rng_);
    double u = std::uniform_real_distribution<double>(0, 1)(rng_);
    size_t rank = static_cast<size_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
    return order_[std::min(rank, n_ - 1)];
  }

 private:
  size_t n_;
  std::mt19937_64 rng_;
  std::vector<size_t> order_;
  std::vector<double> cdf_;
};

struct Latencies {
  std::vector<double> us;
  double at(double q) {
    if (us.empty()) return 0;
    std::sort(us.begin(), us.end());
    return us[std::min(us.size() - 1, static_cast<size_t>(q * static_cast<double>(us.size())))];
  }
};

struct Row {
  std::string keys;
  uint64_t ratio = 0;
  bool file = false;
  uint64_t gets = 0, memory_hits = 0, file_hits = 0, misses = 0, wrong = 0;
  Latencies memory_get, file_get, put;
  uint64_t bytes_put = 0, bytes_written = 0, bytes_held = 0, tier_memory = 0;
  uint64_t evictions = 0, dropped = 0, bytes_on_file = 0, file_capacity = 0;
  bool direct_io = false;
};

// Threads that spin until destroyed: busy cores beside the measured loop.
class Hog {
 public:
  explicit Hog(uint64_t threads) {
    for (uint64_t i = 0; i < threads; i++)
      threads_.emplace_back([this] {
        uint64_t x = 1;
        while (!stop_.load(std::memory_order_relaxed)) x = x * 6364136223846793005ull + 1;
        sink_.fetch_add(x, std::memory_order_relaxed);
      });
  }
  ~Hog() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> sink_{0};
  std::vector<std::thread> threads_;
};

std::string key_of(size_t n) { return "page-" + std::to_string(n); }

double us_since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

Row run(const Options& opt, const std::vector<std::vector<std::byte>>& pages,
        const std::string& kind, uint64_t ratio, bool with_file) {
  const size_t n = std::min(pages.size(), static_cast<size_t>(ratio * opt.memory / 4096));
  zsm::CacheOptions co;
  co.capacity_bytes = opt.memory;
  if (with_file) {
    zsm::BackingFileOptions f;
    f.path = opt.file;
    f.capacity_bytes = opt.file_ratio * opt.memory;
    co.backing_file = f;
  }
  zsm::Cache cache(co);
  Row row;
  row.keys = kind;
  row.ratio = ratio;
  row.file = with_file;
  std::vector<std::byte> out(4096);
  auto put = [&](size_t k) {
    auto t = Clock::now();
    cache.put(key_of(k), pages[k]);
    row.put.us.push_back(us_since(t));
    row.bytes_put += pages[k].size();
  };
  Keys warm_order("uniform", n, opt.seed);
  for (size_t i = 0; i < n; i++) put(i);
  for (size_t i = 0; i < n; i++) {
    size_t k = warm_order.next();
    if (!cache.get(key_of(k), out)) put(k);
  }
  cache.flush_backing_file();

  Keys draw(kind, n, opt.seed + 1);
  for (uint64_t g = 0; g < opt.gets; g++) {
    const size_t k = draw.next();
    const uint64_t file_hits_before = with_file ? cache.stats().backing_file.hits : 0;
    auto t = Clock::now();
    std::optional<size_t> got = cache.get(key_of(k), out);
    const double us = us_since(t);
    row.gets++;
    if (!got) {
      row.misses++;
      put(k);
      continue;
    }
    if (*got != pages[k].size() || !std::equal(pages[k].begin(), pages[k].end(), out.begin()))
      row.wrong++;
    const bool from_file = with_file && cache.stats().backing_file.hits != file_hits_before;
    (from_file ? row.file_hits : row.memory_hits)++;
    (from_file ? row.file_get : row.memory_get).us.push_back(us);
  }
  zsm::CacheStats s = cache.stats();
  row.bytes_written = s.backing_file.bytes_written;
  row.bytes_held = s.bytes_held;
  row.tier_memory = s.backing_file.memory_bytes;
  row.direct_io = s.backing_file.direct_io;
  row.evictions = s.evictions;
  row.dropped = s.backing_file.dropped_busy + s.backing_file.dropped_limit;
  row.bytes_on_file = s.backing_file.bytes_on_file;
  row.file_capacity = with_file ? co.backing_file->capacity_bytes : 0;
  std::fprintf(stderr, "[cold_tier] %s %llux %s: mm_stat %s; bd_stat %s\n", kind.c_str(),
               static_cast<unsigned long long>(ratio), with_file ? "file" : "memory only",
               cache.mm_stat().c_str(), cache.bd_stat().c_str());
  return row;
}

void print(const Options& opt, std::vector<Row>& rows, size_t pages) {
  std::printf("# zsm::Cache, %zu MiB memory, backing file %llu x memory, %llu timed gets a run, "
              "%zu real 4 KiB pages available, %llu spinning threads beside\n",
              opt.memory >> 20, static_cast<unsigned long long>(opt.file_ratio),
              static_cast<unsigned long long>(opt.gets), pages,
              static_cast<unsigned long long>(opt.hog));
  std::printf("| keys | working set | file | memory hits | file hits | misses | misses vs memory "
              "only | get us memory p50/p99/p99.9 | get us file p50/p99/p99.9 | put us p50 | "
              "put p50 vs memory only | write amp. | dropped | file full | bytes held / capacity "
              "| tier memory | wrong |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (Row& r : rows) {
    Row* alone = nullptr;  // the same run without the file
    for (Row& o : rows)
      if (!o.file && o.keys == r.keys && o.ratio == r.ratio) alone = &o;
    auto pct = [&](uint64_t v) { return 100.0 * static_cast<double>(v) / static_cast<double>(r.gets); };
    double vs = alone && alone->misses ? static_cast<double>(r.misses) / static_cast<double>(alone->misses) : 0;
    std::printf("| %s | %llux | %s | %.1f %% | %.1f %% | %.1f %% | %.2f | %.2f / %.2f / %.2f | ",
                r.keys.c_str(), static_cast<unsigned long long>(r.ratio),
                r.file ? (r.direct_io ? "O_DIRECT" : "buffered") : "none", pct(r.memory_hits),
                pct(r.file_hits), pct(r.misses), vs, r.memory_get.at(0.5), r.memory_get.at(0.99),
                r.memory_get.at(0.999));
    if (r.file) std::printf("%.1f / %.1f / %.1f | ", r.file_get.at(0.5), r.file_get.at(0.99), r.file_get.at(0.999));
    else std::printf("- | ");
    const double put_vs = alone ? r.put.at(0.5) / alone->put.at(0.5) : 0;
    std::printf("%.2f | %.2f | %.3f | ", r.put.at(0.5), put_vs,
                static_cast<double>(r.bytes_written) / static_cast<double>(r.bytes_put));
    if (r.file)
      std::printf("%.2f %% | %.0f %% | ",
                  r.evictions ? 100.0 * static_cast<double>(r.dropped) / static_cast<double>(r.evictions) : 0,
                  100.0 * static_cast<double>(r.bytes_on_file) / static_cast<double>(r.file_capacity));
    else
      std::printf("- | - | ");
    std::printf("%.2f / %.2f MiB | %.2f MiB | %llu |\n",
                static_cast<double>(r.bytes_held) / (1 << 20),
                static_cast<double>(opt.memory) / (1 << 20),
                static_cast<double>(r.tier_memory) / (1 << 20),
                static_cast<unsigned long long>(r.wrong));
  }
}

}  // namespace

int main(int argc, char** argv) try {
  Options opt;
  constexpr const char* kSynopsis = "zsm_cold_tier_bench [options]";
  zsm_cli::parse<Options>(argc, argv, kSynopsis, kFlags, opt);
  const uint64_t most = *std::max_element(opt.ratios.begin(), opt.ratios.end());
  const size_t want = static_cast<size_t>(most * opt.memory / 4096);
  std::vector<std::vector<std::byte>> pages;
  pages.reserve(want);
  zsm_bench::for_each_corpus_page(
      zsm_bench::corpus_files(zsm_bench::default_corpus_roots(), opt.seed), want, 8,
      [&](const std::filesystem::path&, size_t, const unsigned char* page) {
        auto* b = reinterpret_cast<const std::byte*>(page);
        pages.emplace_back(b, b + 4096);
        return true;
      });
  if (pages.size() < want)
    std::fprintf(stderr, "[cold_tier] only %zu pages of the %zu asked for: the largest working "
                         "set is smaller\n", pages.size(), want);
  std::vector<Row> rows;
  Hog hog(opt.hog);
  for (const std::string& kind : opt.keys)
    for (uint64_t ratio : opt.ratios)
      for (bool with_file : {false, true}) rows.push_back(run(opt, pages, kind, ratio, with_file));
  print(opt, rows, pages.size());
  uint64_t wrong = 0;
  for (const Row& r : rows) wrong += r.wrong;
  std::printf("values read back that differ: %llu\n", static_cast<unsigned long long>(wrong));
  return wrong == 0 ? 0 : 1;
} catch (const std::invalid_argument& e) {
  return zsm_cli::usage_error("zsm_cold_tier_bench", e);
}
