// zsm_stats: runs a workload on a zsm pool and prints what the kernel would show for it: the
// debugfs classes table, zram's mm_stat line (cache runs) and a short summary; --trace writes
// the sampler's time series for the utilization plot, --class-table the class geometry for
// the waste plot. Everything is printed through the zsm_stats library (zsm/stats.hpp), the
// same calls a program can make on its own pool or cache.
//
// Workloads:
//   --sizes=FILE      object sizes and operations on a bare pool, one per line:
//                       SIZE or +SIZE     store one object of SIZE bytes (1 .. page size)
//                       +SIZExN           store N objects of SIZE bytes
//                       -ID               free the ID-th object stored (from 0, in store order)
//                       -PCT%             free PCT % of the live objects, drawn at random (--seed)
//                       compact           zs_compact()
//                     '#' starts a comment; blank lines are skipped. tools/data/*.sizes are examples.
//   --files=DIR[,DIR] real files cut into 4 KiB pages (bench/corpus.h: up to 8 pages a file,
//                     files shuffled by --seed), compressed and stored in a zsm::Cache keyed by
//                     page number, as zram stores a device's pages.
// Every store or free (a put, for the cache) is one operation; the sampler records a row every
// --sample-every operations, after each compaction and at the end.
//
// The options are one table (kFlags), which also prints --help: a new report is one row there
// and one call in print_reports().
#include <zsm/cache.hpp>
#include <zsm/stats.hpp>
#include <zsm/zsm.hpp>
#include <zsm/zsmalloc.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "cli.h"
#include "codec_flag.h"
#include "corpus.h"

namespace {

using zsm::stats::Sampler;
using zsm_cli::parse_count;

// When the tool itself calls zs_compact() (beside the workload's own "compact" lines and the
// cache's compaction under pressure).
struct CompactPolicy {
  enum class Kind { never, end, every, free } kind = Kind::never;
  uint64_t every_ops = 0;     // every: this many operations apart
  double free_fraction = 0;   // free: when freeable pages reach this fraction of the pages held
};

// 4 KiB pages, chain 8 and the kernel's single lock per class; everything else the default.
zs_pool_config default_pool_config() {
  zs_pool_config c{};
  c.page_size = 4096;
  c.chain_size = 8;
  c.nr_shards = 1;
  return c;
}

struct Options {
  std::string sizes_file;
  std::vector<std::string> dirs;
  bool class_table = false;
  size_t pages = 5000;
  zsm::CodecOptions codec;
  size_t capacity = 0;  // 0: room for every page uncompressed
  zs_pool_config pool = default_pool_config();
  CompactPolicy compact;
  std::string trace;
  uint64_t sample_every = 100;
  uint64_t seed = 1;
  bool allocinfo = false;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);)
    if (!part.empty()) parts.push_back(part);
  return parts;
}


CompactPolicy parse_compact(const std::string& spec) {
  CompactPolicy p;
  const std::string kind = spec.substr(0, spec.find(':'));
  const std::string arg = spec.find(':') == std::string::npos ? "" : spec.substr(spec.find(':') + 1);
  if (kind == "never" && arg.empty()) {
    p.kind = CompactPolicy::Kind::never;
  } else if (kind == "end" && arg.empty()) {
    p.kind = CompactPolicy::Kind::end;
  } else if (kind == "every") {
    p.kind = CompactPolicy::Kind::every;
    p.every_ops = parse_count(arg, "--compact=every:N", 1, UINT64_MAX);
  } else if (kind == "free") {
    p.kind = CompactPolicy::Kind::free;
    p.free_fraction = static_cast<double>(parse_count(arg, "--compact=free:PCT", 0, 100)) / 100;
  } else {
    throw std::invalid_argument("--compact: unknown policy '" + spec +
                                "' (never, end, every:N, free:PCT)");
  }
  return p;
}

// The page sizes a pool takes (zs_pool_config::page_size).
size_t parse_page_size(const std::string& v) {
  const uint64_t size = zsm_cli::parse_size(v, "--page-size", 4096, 65536);
  if (size != 4096 && size != 16384 && size != 65536)
    throw std::invalid_argument("--page-size: " + v + " is not one of 4K, 16K, 64K");
  return size;
}

// Lock shards per class: a power of two up to 64, or 0 (zs_pool_config::nr_shards).
unsigned parse_shards(const std::string& v) {
  const uint64_t shards = parse_count(v, "--shards", 0, 64);
  if ((shards & (shards - 1)) != 0)
    throw std::invalid_argument("--shards: " + v + " is not a power of two (1..64), nor 0");
  return static_cast<unsigned>(shards);
}

using Flag = zsm_cli::Flag<Options>;

const Flag kFlags[] = {
    {"--sizes", "FILE", "workload: sizes and operations on a bare pool (format above)",
     [](Options& o, const std::string& v) {
       o.sizes_file = zsm_cli::existing_path(v, "--sizes", zsm_cli::PathKind::file);
     }},
    {"--files", "DIR[,DIR]", "workload: real files as 4 KiB pages in a zsm::Cache",
     [](Options& o, const std::string& v) {
       o.dirs = split(v, ',');
       for (const std::string& dir : o.dirs)
         zsm_cli::existing_path(dir, "--files", zsm_cli::PathKind::directory);
     }},
    {"--class-table", nullptr, "no workload: print each class's zspage shape and tail waste",
     [](Options& o, const std::string&) { o.class_table = true; }},
    {"--pages", "N", "pages taken from --files (default 5000)",
     [](Options& o, const std::string& v) { o.pages = parse_count(v, "--pages", 1, UINT32_MAX); }},
    {"--codec", "lz4|lz4hc|zstd|none[:LEVEL]", "codec of --files (default lz4)",
     [](Options& o, const std::string& v) { o.codec = zsm_cli::parse_codec(v, "--codec"); }},
    {"--capacity", "BYTES", "cache capacity of --files (default: every page fits uncompressed)",
     [](Options& o, const std::string& v) {
       o.capacity = zsm_cli::parse_size(v, "--capacity", 0, uint64_t{1} << 40);
     }},
    {"--page-size", "4K|16K|64K", "pool page size (default 4K)",
     [](Options& o, const std::string& v) { o.pool.page_size = parse_page_size(v); }},
    {"--chain", "4..16", "pages per zspage at most (default 8)",
     [](Options& o, const std::string& v) {
       o.pool.chain_size = static_cast<unsigned>(parse_count(v, "--chain", 4, 16));
     }},
    {"--shards", "1|2|4|..|64|0", "lock shards per class (default 1, the kernel's one lock per "
     "class; 0: one per CPU)",
     [](Options& o, const std::string& v) { o.pool.nr_shards = parse_shards(v); }},
    {"--compact", "never|end|every:N|free:PCT",
     "the tool's own zs_compact() calls: none (default), once at the end, every N operations, "
     "or when freeable pages reach PCT % of the pages held (checked at each sample)",
     [](Options& o, const std::string& v) { o.compact = parse_compact(v); }},
    {"--trace", "FILE", "write the sampler's rows (op, seconds, pages, live bytes, utilization, "
     "freeable and compacted pages) to FILE",
     [](Options& o, const std::string& v) { o.trace = v; }},
    {"--sample-every", "N", "operations between two samples (default 100)",
     [](Options& o, const std::string& v) {
       o.sample_every = parse_count(v, "--sample-every", 1, UINT64_MAX);
     }},
    {"--seed", "N", "random frees (-PCT%) and file order (default 1)",
     [](Options& o, const std::string& v) { o.seed = parse_count(v, "--seed"); }},
    {"--allocinfo", nullptr, "turn allocation profiling on for the workload and print "
     "/proc/allocinfo lines (when profiling is built in: ZSM_PROFILING)",
     [](Options& o, const std::string&) { o.allocinfo = true; }},
};

constexpr const char* kSynopsis =
    "zsm_stats --sizes=FILE | --files=DIR[,DIR] | --class-table [options]\n"
    "sizes file, one operation a line: SIZE, +SIZE, +SIZExN (store), -ID (free the ID-th object "
    "stored), -PCT% (free PCT % of the live objects at random), compact; '#' comments";

Options parse_options(int argc, char** argv) {
  Options opt;
  zsm_cli::parse<Options>(argc, argv, kSynopsis, kFlags, opt);
  const int workloads = !opt.sizes_file.empty() + !opt.dirs.empty() + opt.class_table;
  if (workloads != 1)
    throw std::invalid_argument("give exactly one of --sizes, --files and --class-table");
  return opt;
}

// The measured run, shared by both workloads: counts operations, takes samples and applies
// the compaction policy.
class Run {
 public:
  Run(zs_pool* pool, const Options& opt, Sampler::LiveBytes live)
      : pool_(pool), opt_(opt), sampler_(pool, std::move(live)) {
    sampler_.sample(0);
  }

  // After each store or free.
  void after_op() {
    ops_++;
    if (opt_.compact.kind == CompactPolicy::Kind::every && ops_ % opt_.compact.every_ops == 0) {
      compact();
    } else if (ops_ % opt_.sample_every == 0) {
      sampler_.sample(ops_);
      if (opt_.compact.kind == CompactPolicy::Kind::free && freeable_share() >= opt_.compact.free_fraction)
        compact();
    }
  }

  void compact() {
    pages_freed_ += zs_compact(pool_);
    compactions_++;
    sampler_.sample(ops_);
  }

  void finish() {
    if (opt_.compact.kind == CompactPolicy::Kind::end) compact();
    if (sampler_.samples().back().op != ops_) sampler_.sample(ops_);
  }

  [[nodiscard]] uint64_t ops() const { return ops_; }
  [[nodiscard]] uint64_t compactions() const { return compactions_; }
  [[nodiscard]] uint64_t pages_freed() const { return pages_freed_; }
  [[nodiscard]] const Sampler& sampler() const { return sampler_; }

 private:
  double freeable_share() const {
    const Sampler::Sample& s = sampler_.samples().back();
    return s.pages == 0 ? 0.0 : static_cast<double>(s.freeable_pages) / static_cast<double>(s.pages);
  }

  zs_pool* pool_;
  const Options& opt_;
  Sampler sampler_;
  uint64_t ops_ = 0;
  uint64_t compactions_ = 0;
  uint64_t pages_freed_ = 0;
};

// One line of a sizes file.
struct SizesOp {
  enum class Kind { store, free_id, free_percent, compact } kind;
  uint64_t value = 0;   // size, object id or percentage
  uint64_t count = 1;   // store: how many objects
};

std::optional<SizesOp> parse_sizes_line(std::string line) {
  line = line.substr(0, line.find('#'));
  line.erase(0, line.find_first_not_of(" \t\r"));
  line.erase(line.find_last_not_of(" \t\r") + 1);
  if (line.empty()) return std::nullopt;
  if (line == "compact") return SizesOp{SizesOp::Kind::compact};
  if (line[0] == '-') {
    if (line.back() == '%') {
      uint64_t pct = parse_count(line.substr(1, line.size() - 2), "percentage");
      if (pct > 100) throw std::invalid_argument("percentage above 100");
      return SizesOp{SizesOp::Kind::free_percent, pct};
    }
    return SizesOp{SizesOp::Kind::free_id, parse_count(line.substr(1), "object id")};
  }
  if (line[0] == '+') line.erase(0, 1);
  const size_t x = line.find('x');
  SizesOp op{SizesOp::Kind::store, parse_count(line.substr(0, x), "size")};
  if (x != std::string::npos) op.count = parse_count(line.substr(x + 1), "count");
  return op;
}

// A bare pool driven by a sizes file. Objects are remembered in store order; a freed one
// keeps its place with handle 0.
class SizesWorkload {
 public:
  SizesWorkload(zs_pool* pool, const Options& opt)
      : pool_(pool), source_(opt.pool.page_size), rng_(opt.seed) {
    for (size_t i = 0; i < source_.size(); i++)
      source_[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  }

  void run_file(const std::string& path, Run& run) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read " + path);
    size_t lineno = 0;
    for (std::string line; std::getline(in, line);) {
      lineno++;
      try {
        if (std::optional<SizesOp> op = parse_sizes_line(line)) apply(*op, run);
      } catch (const std::exception& e) {
        throw std::runtime_error(path + ":" + std::to_string(lineno) + ": " + e.what());
      }
    }
  }

  [[nodiscard]] uint64_t payload_bytes() const { return payload_; }
  [[nodiscard]] uint64_t stores() const { return handles_.size(); }
  [[nodiscard]] uint64_t frees() const { return frees_; }

 private:
  void apply(const SizesOp& op, Run& run) {
    switch (op.kind) {
      case SizesOp::Kind::store:
        for (uint64_t n = 0; n < op.count; n++) store(op.value, run);
        break;
      case SizesOp::Kind::free_id:
        free_object(op.value, run);
        break;
      case SizesOp::Kind::free_percent:
        free_random_share(op.value, run);
        break;
      case SizesOp::Kind::compact:
        run.compact();
        break;
    }
  }

  void store(uint64_t size, Run& run) {
    if (size == 0 || size > source_.size())
      throw std::invalid_argument("size " + std::to_string(size) + " outside 1.." +
                                  std::to_string(source_.size()));
    const unsigned long h = zs_store(pool_, source_.data(), size);
    if (h == 0) throw std::system_error(errno, std::generic_category(), "zs_store");
    handles_.push_back(h);
    sizes_.push_back(size);
    payload_ += size;
    run.after_op();
  }

  void free_object(uint64_t id, Run& run) {
    if (id >= handles_.size() || handles_[id] == 0)
      throw std::invalid_argument("object " + std::to_string(id) + " is not live");
    zs_free(pool_, handles_[id]);
    handles_[id] = 0;
    payload_ -= sizes_[id];
    frees_++;
    run.after_op();
  }

  void free_random_share(uint64_t percent, Run& run) {
    std::vector<uint64_t> live;
    for (uint64_t id = 0; id < handles_.size(); id++)
      if (handles_[id] != 0) live.push_back(id);
    std::shuffle(live.begin(), live.end(), rng_);
    live.resize(live.size() * percent / 100);
    for (uint64_t id : live) free_object(id, run);
  }

  zs_pool* pool_;
  std::vector<std::byte> source_;
  std::mt19937_64 rng_;
  std::vector<unsigned long> handles_;
  std::vector<uint64_t> sizes_;
  uint64_t payload_ = 0;
  uint64_t frees_ = 0;
};

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : sep) + p;
  return s;
}

std::string pool_description(const Options& opt) {
  return std::to_string(opt.pool.page_size) + "-byte pages, chain " +
         std::to_string(opt.pool.chain_size) + ", " + std::to_string(opt.pool.nr_shards) +
         " shard(s) per class";
}

std::string run_description(const Run& run) {
  return std::to_string(run.ops()) + " operations, " + std::to_string(run.compactions()) +
         " compactions by the workload or the tool (" + std::to_string(run.pages_freed()) +
         " pages freed)";
}

void write_trace(const Options& opt, const Run& run, const std::string& workload) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::fopen(opt.trace.c_str(), "w"),
                                                      &std::fclose);
  if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + opt.trace);
  std::fprintf(out.get(), "# zsm_stats trace: %s; %s\n", workload.c_str(),
               pool_description(opt).c_str());
  if (!run.sampler().write_trace(out.get()))
    throw std::runtime_error("writing " + opt.trace + " failed");
}

// The tables after a workload: classes, mm_stat when there is a cache, the summary. The
// slots this thread's cache kept from its frees go back first, so that the tables count
// live objects only.
void print_reports(const Options& opt, zs_pool* pool, const zsm::Cache* cache,
                   uint64_t payload_bytes) {
  zs_drain_thread_caches(pool);
  std::printf("\nclasses:\n");
  zsm::stats::print_classes(pool, stdout);
  if (cache != nullptr) {
    std::printf("\nmm_stat (%s):\n%s\n", zsm::Cache::mm_stat_columns(), cache->mm_stat().c_str());
  }
  std::printf("\nsummary:\n");
  zsm::stats::print_summary(zsm::stats::summarize(pool, payload_bytes), stdout);
  if (opt.allocinfo) {
    std::printf("\nallocinfo:\n");
    zsm::stats::print_allocinfo(stdout);
  }
}

// --allocinfo: profiling on before the workload stores anything.
void start_profiling(const Options& opt) {
  if (opt.allocinfo && zs_alloc_profiling_set(1) < 0)
    throw std::runtime_error("--allocinfo: allocation profiling is not built in (ZSM_PROFILING=OFF)");
}

void run_sizes(const Options& opt) {
  start_profiling(opt);
  zsm::Pool pool("zsm_stats", opt.pool);
  SizesWorkload workload(pool.get(), opt);
  Run run(pool.get(), opt, [&] { return workload.payload_bytes(); });
  workload.run_file(opt.sizes_file, run);
  run.finish();
  const std::string what = "sizes " + opt.sizes_file;
  std::printf("workload: %s: %" PRIu64 " stores, %" PRIu64 " frees; %s\n", what.c_str(),
              workload.stores(), workload.frees(), run_description(run).c_str());
  std::printf("pool: %s\n", pool_description(opt).c_str());
  if (!opt.trace.empty()) write_trace(opt, run, what);
  print_reports(opt, pool.get(), nullptr, workload.payload_bytes());
}

std::string page_key(uint64_t n) { return std::string(reinterpret_cast<const char*>(&n), 8); }

void run_files(const Options& opt) {
  start_profiling(opt);
  zsm::CacheOptions co;
  co.codec = opt.codec;
  co.pool = opt.pool;
  co.capacity_bytes = opt.capacity != 0 ? opt.capacity : (opt.pages + 1024) * 4096 * 2;
  zsm::Cache cache(co);
  Run run(cache.pool(), opt, [&] { return cache.stats().compr_data_size; });

  const auto files = zsm_bench::corpus_files(opt.dirs, opt.seed);
  uint64_t stored = 0;
  zsm_bench::for_each_corpus_page(
      files, opt.pages, 8, [&](const std::filesystem::path&, size_t, const unsigned char* page) {
        cache.put(page_key(stored++),
                  {reinterpret_cast<const std::byte*>(page), zsm_bench::kCorpusPage});
        run.after_op();
        return true;
      });
  if (stored == 0)
    throw std::runtime_error("--files: no page to read in the files under " + join(opt.dirs, ","));
  run.finish();

  const auto codec = zsm::Codec::create(opt.codec);
  const zsm::CacheStats s = cache.stats();
  const std::string what = "files " + join(opt.dirs, ",") + ": " + std::to_string(stored) +
                           " pages of 4 KiB, codec " + std::string(codec->name()) + " level " +
                           std::to_string(codec->level());
  std::printf("workload: %s; %s\n", what.c_str(), run_description(run).c_str());
  std::printf("pool: %s; cache: %" PRIu64 " entries, %" PRIu64 " evicted, ratio %.2f "
              "(orig_data_size / mem_used_total)\n",
              pool_description(opt).c_str(), s.entries, s.evictions,
              static_cast<double>(s.orig_data_size) / std::max<uint64_t>(s.mem_used_total, 1));
  if (!opt.trace.empty()) write_trace(opt, run, what);
  print_reports(opt, cache.pool(), &cache, s.compr_data_size);
}

void run_class_table(const Options& opt) {
  zsm::Pool pool("zsm_stats", opt.pool);
  const auto classes = zsm::stats::class_geometry(pool.get());
  std::printf("# class table: %s; %zu distinct classes, huge from %zu B\n",
              pool_description(opt).c_str(), classes.size(), pool.huge_class_size());
  zsm::stats::print_class_geometry(pool.get(), stdout);
}

}  // namespace

int main(int argc, char** argv) try {
  const Options opt = parse_options(argc, argv);
  if (opt.class_table) run_class_table(opt);
  else if (!opt.sizes_file.empty()) run_sizes(opt);
  else run_files(opt);
  return std::fflush(stdout) == 0 ? 0 : 1;
} catch (const std::invalid_argument& e) {
  return zsm_cli::usage_error("zsm_stats", e);
} catch (const std::exception& e) {
  std::fprintf(stderr, "zsm_stats: %s\n", e.what());
  return 2;
}
