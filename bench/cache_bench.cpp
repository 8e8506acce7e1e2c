// zsm_cache_bench: the compressed cache on real 4 KiB pages (corpus.h), per codec, beside the
// codec alone in the same run, and its memory against a plain hash map.
//
// Families (items = pages, bytes = 4096 per page):
//   codec_compress/<codec>, codec_decompress/<codec>   the codec alone, on the same pages
//   cache_put/<codec>    put into a warm cache (each key already there: replace)
//   cache_get/<codec>    get into a caller buffer
//   memory/<codec>       one pass: the cache and a std::unordered_map<std::string, std::string>
//                        on mimalloc holding the same compressed values, same entry count;
//                        counters: bytes held per entry and per compressed payload byte
// Flags: --pages N (default 4000) and Google Benchmark's (--benchmark_filter=REGEX, ...), which
// are handed on to benchmark::Initialize(); --help lists both.
#include <benchmark/benchmark.h>
#include <mimalloc.h>

#include <zsm/cache.hpp>

#include <string>
#include <unordered_map>
#include <vector>

#include "cli.h"
#include "corpus.h"

namespace {

using Page = std::vector<std::byte>;

struct Options {
  size_t pages = 4000;
};
Options g_options;  // main() parses the command line into it before the corpus is read

const zsm_cli::Flag<Options> kFlags[] = {
    {"--pages", "N", "pages read from /usr/lib and /usr/share (default 4000)",
     [](Options& o, const std::string& v) { o.pages = zsm_cli::parse_count(v, "--pages", 1, UINT32_MAX); }},
};
constexpr const char* kSynopsis = "zsm_cache_bench [--pages N] [Google Benchmark's flags]";


const std::vector<Page>& pages() {
  static const std::vector<Page> all = [] {
    std::vector<Page> v;
    zsm_bench::for_each_corpus_page(
        zsm_bench::corpus_files(zsm_bench::default_corpus_roots(), 1), g_options.pages, 8,
        [&](const std::filesystem::path&, size_t, const unsigned char* p) {
          auto* b = reinterpret_cast<const std::byte*>(p);
          v.emplace_back(b, b + zsm_bench::kCorpusPage);
          return true;
        });
    return v;
  }();
  return all;
}

std::string key_of(size_t n) { return std::string(reinterpret_cast<const char*>(&n), sizeof n); }

// Each codec at its default level, by the name the families carry.
const char* const kCodecs[] = {"lz4", "lz4hc", "zstd", "none"};

void per_page(benchmark::State& state) {
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * zsm_bench::kCorpusPage));
}

void BM_Compress(benchmark::State& state, zsm::CodecOptions options) {
  auto codec = zsm::Codec::create(options);
  std::vector<std::byte> out(codec->bound(zsm_bench::kCorpusPage));
  size_t i = 0;
  for (auto _ : state) {
    auto n = codec->compress(pages()[i++ % pages().size()], out);
    benchmark::DoNotOptimize(n);
  }
  per_page(state);
}

void BM_Decompress(benchmark::State& state, zsm::CodecOptions options) {
  auto codec = zsm::Codec::create(options);
  std::vector<std::vector<std::byte>> packed;
  for (const Page& p : pages()) {
    std::vector<std::byte> out(codec->bound(p.size()));
    out.resize(codec->compress(p, out).value_or(0));
    packed.push_back(std::move(out));
  }
  std::vector<std::byte> back(zsm_bench::kCorpusPage);
  size_t i = 0;
  for (auto _ : state) {
    std::error_code ec = codec->decompress(packed[i++ % packed.size()], back);
    benchmark::DoNotOptimize(ec);
  }
  per_page(state);
}

std::unique_ptr<zsm::Cache> filled_cache(zsm::CodecOptions options) {
  zsm::CacheOptions o;
  o.codec = std::move(options);
  o.capacity_bytes = (pages().size() + 1024) * zsm_bench::kCorpusPage * 2;
  auto cache = std::make_unique<zsm::Cache>(o);
  for (size_t n = 0; n < pages().size(); n++) cache->put(key_of(n), pages()[n]);
  return cache;
}

void BM_CachePut(benchmark::State& state, zsm::CodecOptions options) {
  auto cache = filled_cache(std::move(options));
  size_t i = 0;
  for (auto _ : state) {
    size_t n = i++ % pages().size();
    cache->put(key_of(n), pages()[n]);
  }
  per_page(state);
}

void BM_CacheGet(benchmark::State& state, zsm::CodecOptions options) {
  auto cache = filled_cache(std::move(options));
  std::vector<std::byte> out(zsm_bench::kCorpusPage);
  size_t i = 0;
  for (auto _ : state) {
    auto n = cache->get(key_of(i++ % pages().size()), out);
    benchmark::DoNotOptimize(n);
  }
  per_page(state);
}

// Bytes mimalloc's default heap has committed (the bench process's malloc is mimalloc).
size_t mimalloc_committed() {
  size_t committed = 0;
  mi_heap_collect(mi_heap_get_default(), true);
  mi_heap_visit_blocks(
      mi_heap_get_default(), false,
      [](const mi_heap_t*, const mi_heap_area_t* area, void*, size_t, void* arg) {
        *static_cast<size_t*>(arg) += area->committed;
        return true;
      },
      &committed);
  return committed;
}

void BM_Memory(benchmark::State& state, zsm::CodecOptions options) {
  for (auto _ : state) {
    auto cache = filled_cache(options);
    zsm::CacheStats s = cache->stats();
    auto codec = zsm::Codec::create(options);
    size_t before = mimalloc_committed();
    {
      std::unordered_map<std::string, std::string> map;
      std::vector<std::byte> out(codec->bound(zsm_bench::kCorpusPage));
      size_t payload = 0;
      for (size_t n = 0; n < pages().size(); n++) {
        size_t len = codec->compress(pages()[n], out).value_or(0);
        map.emplace(key_of(n), std::string(reinterpret_cast<const char*>(out.data()), len));
        payload += len;
      }
      size_t map_bytes = mimalloc_committed() - before;
      double entries = static_cast<double>(pages().size());
      state.counters["cache_B_per_entry"] = static_cast<double>(s.bytes_held) / entries;
      state.counters["map_B_per_entry"] = static_cast<double>(map_bytes) / entries;
      state.counters["cache_B_per_payload_B"] =
          static_cast<double>(s.bytes_held) / static_cast<double>(s.compr_data_size);
      state.counters["map_B_per_payload_B"] = static_cast<double>(map_bytes) / payload;
      state.counters["cache_over_budget_B_per_entry"] =
          (static_cast<double>(s.bytes_held) - 1.03 * static_cast<double>(s.compr_data_size)) /
              entries - 8.0;  // less the 8-byte key
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> rest = {argv[0]};  // Google Benchmark's flags, after argv[0]
  try {
    for (std::string& arg : zsm_cli::parse<Options>(argc, argv, kSynopsis, kFlags, g_options, {},
                                                    zsm_cli::Extras::returned))
      rest.push_back(std::move(arg));
  } catch (const std::invalid_argument& e) {
    return zsm_cli::usage_error("zsm_cache_bench", e);
  }
  std::vector<char*> benchmark_argv;
  for (std::string& arg : rest) benchmark_argv.push_back(arg.data());
  int benchmark_argc = static_cast<int>(benchmark_argv.size());
  benchmark::Initialize(&benchmark_argc, benchmark_argv.data());  // exits after --help
  if (benchmark::ReportUnrecognizedArguments(benchmark_argc, benchmark_argv.data())) return 2;
  pages();  // read the corpus before anything is timed
  for (const std::string name : kCodecs) {
    const zsm::CodecOptions codec = zsm::parse_codec(name);
    benchmark::RegisterBenchmark(("codec_compress/" + name).c_str(), BM_Compress, codec);
    benchmark::RegisterBenchmark(("codec_decompress/" + name).c_str(), BM_Decompress, codec);
    benchmark::RegisterBenchmark(("cache_put/" + name).c_str(), BM_CachePut, codec);
    benchmark::RegisterBenchmark(("cache_get/" + name).c_str(), BM_CacheGet, codec);
    benchmark::RegisterBenchmark(("memory/" + name).c_str(), BM_Memory, codec)->Iterations(1);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
