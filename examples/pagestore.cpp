// zsm_pagestore: feeds real files through the compressed cache as 4 KiB pages, the way zram
// stores a swap or block device's pages, reads every page back and checks it, then prints
// zram's mm_stat line, the compression ratio, throughput and the pool's class table.
//
// Usage: zsm_pagestore [options] [DIR...]; `zsm_pagestore --help` lists the options (kFlags).
// Pages come from the regular files under DIR (default /usr/lib and /usr/share), up to 8 per
// file, files in a shuffled order fixed by --seed. The key of a page is its number, 8 bytes,
// as zram indexes pages by sector. With the default capacity every page fits; a smaller one
// makes the cache evict, and pages it evicted are counted, not treated as errors.
#include <zsm/cache.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli.h"
#include "codec_flag.h"
#include "corpus.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  size_t pages = 50000;
  zsm::CodecOptions codec;
  std::optional<zsm::CodecOptions> recompress;
  size_t capacity = 0;  // 0: room for every page uncompressed
  uint64_t seed = 1;
  std::vector<std::string> roots;
};

using zsm_cli::parse_count;

const zsm_cli::Flag<Options> kFlags[] = {
    {"--pages", "N", "pages to store (default 50000)",
     [](Options& o, const std::string& v) { o.pages = parse_count(v, "--pages", 1, UINT32_MAX); }},
    {"--codec", "lz4|lz4hc|zstd|none[:LEVEL]", "codec (default lz4)",
     [](Options& o, const std::string& v) { o.codec = zsm_cli::parse_codec(v, "--codec"); }},
    {"--level", "N", "the codec's level",
     [](Options& o, const std::string& v) {
       o.codec.level = zsm_cli::parse_int(v, "--level");
       zsm_cli::checked_codec(o.codec, "--level");
     }},
    {"--recompress", "CODEC[:LEVEL]", "recompress every page with CODEC after storing",
     [](Options& o, const std::string& v) { o.recompress = zsm_cli::parse_codec(v, "--recompress"); }},
    {"--capacity", "BYTES", "cache capacity (default: room for every page uncompressed)",
     [](Options& o, const std::string& v) {
       o.capacity = zsm_cli::parse_size(v, "--capacity", 0, uint64_t{1} << 40);
     }},
    {"--seed", "N", "order of the files (default 1)",
     [](Options& o, const std::string& v) { o.seed = parse_count(v, "--seed"); }},
};
constexpr const char* kSynopsis =
    "zsm_pagestore [options] [DIR...]  (pages from the files under DIR, default /usr/lib "
    "/usr/share)";

Options parse(int argc, char** argv) {
  Options opt;
  zsm_cli::parse<Options>(argc, argv, kSynopsis, kFlags, opt, [](Options& o, const std::string& dir) {
    o.roots.push_back(zsm_cli::existing_path(dir, "DIR", zsm_cli::PathKind::directory));
  });
  if (opt.roots.empty()) opt.roots = zsm_bench::default_corpus_roots();
  return opt;
}

std::string page_key(uint64_t n) { return std::string(reinterpret_cast<const char*>(&n), 8); }

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A progress line every tenth of the run.
void progress(const char* what, size_t done, size_t total, Clock::time_point start) {
  if (total < 10 || done % (total / 10) != 0) return;
  std::fprintf(stderr, "[pagestore] %s %zu/%zu pages, %.1f s\n", what, done, total,
               seconds_since(start));
}

struct Where {
  std::filesystem::path file;
  size_t index;
};

}  // namespace

int main(int argc, char** argv) try {
  const Options opt = parse(argc, argv);
  auto files = zsm_bench::corpus_files(opt.roots, opt.seed);

  zsm::CacheOptions co;
  co.codec = opt.codec;
  co.recompress_codec = opt.recompress;
  co.capacity_bytes = opt.capacity != 0 ? opt.capacity : (opt.pages + 1024) * 4096 * 2;
  zsm::Cache cache(co);

  // Store.
  std::vector<Where> where;
  auto start = Clock::now();
  double store_seconds = 0;
  zsm_bench::for_each_corpus_page(
      files, opt.pages, 8,
      [&](const std::filesystem::path& file, size_t index, const unsigned char* page) {
        where.push_back({file, index});
        auto t = Clock::now();
        cache.put(page_key(where.size() - 1), {reinterpret_cast<const std::byte*>(page), 4096});
        store_seconds += seconds_since(t);
        progress("stored", where.size(), opt.pages, start);
        return true;
      });
  if (where.empty()) {
    std::fprintf(stderr, "zsm_pagestore: no page to read in the files under %s\n",
                 opt.roots[0].c_str());
    return 1;
  }
  size_t recompressed = opt.recompress ? cache.recompress() : 0;

  // Read back and verify against the files.
  std::vector<std::byte> out(4096);
  std::vector<char> expect(4096);
  size_t mismatches = 0, evicted = 0;
  double load_seconds = 0;
  start = Clock::now();
  for (size_t n = 0; n < where.size(); n++) {
    std::ifstream in(where[n].file, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(where[n].index * 4096));
    in.read(expect.data(), 4096);
    auto t = Clock::now();
    std::optional<size_t> got = cache.get(page_key(n), out);
    load_seconds += seconds_since(t);
    if (!got)
      evicted++;
    else if (*got != 4096 || std::memcmp(out.data(), expect.data(), 4096) != 0)
      mismatches++;
    progress("verified", n + 1, where.size(), start);
  }

  zsm::CacheStats s = cache.stats();
  double mib = static_cast<double>(where.size()) * 4096 / (1 << 20);
  std::printf("pages %zu from %s..., codec %s level %d%s\n", where.size(), opt.roots[0].c_str(),
              std::string(zsm::Codec::create(opt.codec)->name()).c_str(),
              zsm::Codec::create(opt.codec)->level(),
              opt.recompress ? (", recompressed " + std::to_string(recompressed)).c_str() : "");
  std::printf("verified: %zu mismatches, %zu evicted\n", mismatches, evicted);
  std::printf("mm_stat: %s\n", cache.mm_stat().c_str());
  std::printf("ratio: %.2f (orig/compr), %.2f (orig/mem_used_total), %.2f (orig/bytes held)\n",
              static_cast<double>(s.orig_data_size) / std::max<uint64_t>(s.compr_data_size, 1),
              static_cast<double>(s.orig_data_size) / std::max<uint64_t>(s.mem_used_total, 1),
              static_cast<double>(s.orig_data_size) / std::max<uint64_t>(s.bytes_held, 1));
  std::printf("same-filled %llu, huge %llu, entries %llu, bytes held %llu of %llu\n",
              static_cast<unsigned long long>(s.same_pages),
              static_cast<unsigned long long>(s.huge_pages),
              static_cast<unsigned long long>(s.entries),
              static_cast<unsigned long long>(s.bytes_held),
              static_cast<unsigned long long>(s.mem_limit));
  std::printf("throughput: put %.0f MiB/s, get %.0f MiB/s (4 KiB pages, one thread)\n\n",
              mib / store_seconds, mib / load_seconds);
  zs_print_classes(cache.pool(), stdout);
  return mismatches == 0 ? 0 : 1;
} catch (const std::invalid_argument& e) {
  return zsm_cli::usage_error("zsm_pagestore", e);
} catch (const std::exception& e) {
  std::fprintf(stderr, "zsm_pagestore: %s\n", e.what());
  return 2;
}
