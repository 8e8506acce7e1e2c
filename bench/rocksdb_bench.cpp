// zsm as RocksDB's secondary cache against RocksDB's own CompressedSecondaryCache, side by
// side in one run (tools/run-rocksdb-bench.sh): one DB of values cut from real files, read
// through the same small primary LRU block cache over each secondary tier in turn, at equal
// capacity, with a Zipf-distributed and a uniform key choice. The zsm tiers: zsm (lz4, every
// block admitted), zsm-2nd (lz4, a block admitted on its second eviction, RocksDB's own rule)
// and zsm-2nd-zstd (zsm-2nd with zstd level 1, or --zsm-codec's codec); with
// --zsm-recompress, the lz4 ones also recompress their blocks from a thread of their own.
//
// The parent builds the DB and a file of the expected values in a temporary folder, then runs
// each (tier, distribution) in a child process of its own (this binary, --child), so that each
// child's RSS growth is its tier's alone. A child opens the DB read-only, warms the caches up,
// times reads at 1 and 2 threads, checks every value read, then counts the blocks its tier
// holds: every secondary tier is wrapped in the same recorder of inserted keys, and each key
// is looked up once more with a create callback that counts and refuses (RocksDB's tier then
// drops the block). Last it destroys the tier and measures what that frees: glibc's heap in
// use (mallinfo2) and RSS, after malloc_trim. Block reads from disk are RocksDB's block-read
// histogram's count (index and filter blocks stay in the table readers, read once at open).
//
// Memory, three readings: what zsm's capacity counts (its bytes_held), the heap chunks RocksDB's
// tier holds (what destroying it frees), and each tier's RSS: the child's RSS growth over the
// reads less that of the child with no secondary tier. --rocksdb-secondary gives RocksDB's tiers
// a capacity of their own. The last tier, rocksdb-lz4-rss, compares at equal RSS in the same
// run: RocksDB's lz4 tier at the capacity at which it should add as much RSS as zsm-2nd, its
// nominal capacity scaled by zsm-2nd's tier RSS over rocksdb-lz4's (its RSS grows about in
// proportion); its row shows the tier RSS it did add.
#include "cli.h"
#include "codec_flag.h"
#include "corpus.h"

#include <zsm/rocksdb_secondary_cache.hpp>
#include <zsm/stats.hpp>

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/statistics.h>
#include <rocksdb/table.h>
#include <rocksdb/version.h>

#include <fcntl.h>
#include <malloc.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

extern char** environ;

namespace {

struct Params {
  // About 150 MiB of values, 42,000 blocks: several times what a 32 MiB tier holds (its
  // blocks compress to about half), so both tiers evict all along.
  size_t keys = 600000;
  size_t primary_bytes = size_t{4} << 20;
  size_t secondary_bytes = size_t{32} << 20;
  size_t rocksdb_secondary_bytes = 0;  // RocksDB's tiers' capacity; 0: secondary_bytes
  size_t reads = 200000;  // per timed phase; the warm-up reads as many as there are keys
  std::string out;        // the .dat file for the plot (parent)
  std::string tiers;      // comma-separated subset of kTiers to run (parent); empty: all
  // The zsm-2nd-zstd tier's codec (a parse_codec() spec); --zsm-codec replaces it, to compare
  // codecs under that tier's name.
  std::string strong_codec = "zstd:1";
  // Empty, or the recompress codec (a parse_codec() spec) of the zsm tiers that store lz4
  // (zsm, zsm-2nd): their child then runs a thread that calls the tier's
  // recompress(kRecompressBatch) every kRecompressPeriod while it reads.
  std::string recompress_codec;
  // The child's job.
  bool child = false;
  std::string dir, tier, dist;
};

const char* const kTiers[] = {"zsm",         "zsm-2nd",           "zsm-2nd-zstd", "rocksdb-lz4",
                              "rocksdb-lz4-split", "none",          "rocksdb-lz4-rss"};
const char* const kDists[] = {"zipf", "uniform"};
bool zsm_tier_name(const std::string& tier) { return tier.starts_with("zsm"); }
constexpr size_t kRecompressBatch = 64;  // blocks a recompress() call tries: a shard's
                                         // write lock is held for about that many re-encodings
constexpr auto kRecompressPeriod = std::chrono::milliseconds(1);
bool recompresses(const Params& p) {
  return !p.recompress_codec.empty() && (p.tier == "zsm" || p.tier == "zsm-2nd");
}
constexpr size_t kBlockSize = 3584;  // blocks within the zsm pool's 4 KiB page: no chains

std::string key_of(size_t i) {
  char key[24];
  std::snprintf(key, sizeof key, "k%010zu", i);
  return key;
}

// Values of 100..400 bytes cut in order from pages of real files (bench/corpus.h).
std::vector<std::string> cut_values(size_t count) {
  std::vector<std::string> values;
  std::mt19937 rng(42);
  std::string pending;
  zsm_bench::for_each_corpus_page(
      zsm_bench::corpus_files(zsm_bench::default_corpus_roots(), 1), SIZE_MAX, 16,
      [&](const std::filesystem::path&, size_t, const unsigned char* page) {
        pending.append(reinterpret_cast<const char*>(page), zsm_bench::kCorpusPage);
        while (values.size() < count) {
          const size_t size = 100 + rng() % 301;
          if (pending.size() < size) break;
          values.push_back(pending.substr(0, size));
          pending.erase(0, size);
        }
        return values.size() < count;
      });
  return values;
}

void write_values(const std::string& path, const std::vector<std::string>& values) {
  std::ofstream out(path, std::ios::binary);
  for (const std::string& v : values) {
    const uint32_t size = static_cast<uint32_t>(v.size());
    out.write(reinterpret_cast<const char*>(&size), sizeof size);
    out.write(v.data(), size);
  }
}

std::vector<std::string> read_values(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> values;
  uint32_t size = 0;
  while (in.read(reinterpret_cast<char*>(&size), sizeof size)) {
    std::string v(size, '\0');
    in.read(v.data(), size);
    values.push_back(std::move(v));
  }
  return values;
}

void check(const rocksdb::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "rocksdb_bench: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

rocksdb::BlockBasedTableOptions table_options(std::shared_ptr<rocksdb::Cache> block_cache) {
  rocksdb::BlockBasedTableOptions table;
  table.block_size = kBlockSize;
  table.block_cache = std::move(block_cache);
  return table;
}

void build_db(const Params& p, const std::vector<std::string>& values) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.compression = rocksdb::kNoCompression;
  options.table_factory.reset(
      rocksdb::NewBlockBasedTableFactory(table_options(rocksdb::NewLRUCache(8 << 20))));
  rocksdb::DB* raw = nullptr;
  check(rocksdb::DB::Open(options, p.dir + "/db", &raw), "open to load");
  std::unique_ptr<rocksdb::DB> db(raw);
  for (size_t i = 0; i < values.size(); ++i) {
    check(db->Put(rocksdb::WriteOptions(), key_of(i), values[i]), "put");
  }
  check(db->Flush(rocksdb::FlushOptions()), "flush");
  check(db->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr), "compact");
}

// Forwards to a secondary tier and records the keys inserted, for the census at the end.
class RecordingTier : public rocksdb::SecondaryCache {
 public:
  explicit RecordingTier(std::shared_ptr<rocksdb::SecondaryCache> inner)
      : inner_(std::move(inner)) {}
  const char* Name() const override { return inner_->Name(); }
  rocksdb::Status Insert(const rocksdb::Slice& key, void* value,
                         const rocksdb::Cache::CacheItemHelper* helper) override {
    {
      std::lock_guard lock(mutex_);
      keys_.insert(key.ToString());
    }
    return inner_->Insert(key, value, helper);
  }
  std::unique_ptr<rocksdb::SecondaryCacheResultHandle> Lookup(
      const rocksdb::Slice& key, const rocksdb::Cache::CreateCallback& create_cb, bool wait,
      bool advise_erase, bool& is_in_sec_cache) override {
    return inner_->Lookup(key, create_cb, wait, advise_erase, is_in_sec_cache);
  }
  bool SupportForceErase() const override { return inner_->SupportForceErase(); }
  void Erase(const rocksdb::Slice& key) override { inner_->Erase(key); }
  void WaitAll(std::vector<rocksdb::SecondaryCacheResultHandle*> handles) override {
    inner_->WaitAll(std::move(handles));
  }

  // Lets the tier go: with the caller's references dropped too, it is destroyed.
  void release_tier() { inner_.reset(); }

  // How many of the keys ever inserted the tier still holds a block for.
  size_t count_held() {
    size_t held = 0;
    const rocksdb::Cache::CreateCallback count = [&held](const void*, size_t, void**, size_t*) {
      ++held;
      return rocksdb::Status::Aborted("census");
    };
    for (const std::string& key : keys_) {
      bool in_sec_cache = false;
      inner_->Lookup(key, count, true, false, in_sec_cache);
    }
    return held;
  }

 private:
  std::shared_ptr<rocksdb::SecondaryCache> inner_;
  std::mutex mutex_;
  std::unordered_set<std::string> keys_;  // each key once: the recorder's memory stays small
};

size_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Picks key indices: Zipf (s = 0.99, as YCSB) over ranks scattered across the key space by a
// fixed permutation, or uniform.
class KeyChooser {
 public:
  KeyChooser(size_t keys, bool zipf) : zipf_(zipf), rank_to_key_(keys) {
    std::iota(rank_to_key_.begin(), rank_to_key_.end(), size_t{0});
    std::shuffle(rank_to_key_.begin(), rank_to_key_.end(), std::mt19937_64(7));
    if (!zipf) return;
    cdf_.resize(keys);
    double sum = 0;
    for (size_t r = 0; r < keys; ++r) cdf_[r] = sum += 1.0 / std::pow(double(r + 1), 0.99);
    for (double& c : cdf_) c /= sum;
  }
  size_t next(std::mt19937_64& rng) const {
    if (!zipf_) return rng() % rank_to_key_.size();
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    const size_t rank = std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
    return rank_to_key_[std::min(rank, rank_to_key_.size() - 1)];
  }

 private:
  bool zipf_;
  std::vector<size_t> rank_to_key_;
  std::vector<double> cdf_;
};

// Blocks read from the DB's file so far (RocksDB's block-read histogram counts each).
uint64_t blocks_read(rocksdb::Statistics& st) {
  rocksdb::HistogramData reads;
  st.histogramData(rocksdb::READ_BLOCK_GET_MICROS, &reads);
  return reads.count;
}

struct ChildResult {
  double ops[2] = {0, 0};       // reads per second at 1 and 2 threads
  uint64_t sec_hits = 0;        // secondary hits in the timed phases
  uint64_t disk_reads = 0;      // data blocks read from the file in the timed phases
  uint64_t mismatches = 0;      // values read back that differ (all phases)
  size_t blocks_held = 0;       // the tier's blocks at the end
  size_t rss_growth = 0;        // RSS after the reads less RSS after open
  size_t tier_bytes = 0;        // zsm: what its capacity counts; RocksDB: tier_heap
  uint64_t refused = 0;         // zsm: blocks refused
};

// Where the zsm tier's memory goes at the end of the reads (to stderr): pool pages against the
// records they hold, the pages compaction could free, the slots per-thread caches reserve.
void print_zsm_memory(const zsm::RocksSecondaryCache& tier, const Params& p) {
  const zsm::RocksSecondaryCacheStats s = tier.stats();
  const zsm::stats::PoolSummary pool = zsm::stats::summarize(tier.pool());
  struct zs_pool_stats ps{};
  zs_pool_stats(tier.pool(), &ps);
  std::fprintf(stderr,
               "%s %s: %llu blocks, %.2f MiB compressed; pool %.2f MiB in %u classes (slots of "
               "live objects %.2f MiB, freeable %.2f MiB, thread caches %.2f MiB), bookkeeping "
               "%.2f MiB, index %.2f MiB; compacted %lu pages, %llu evictions; %llu inserts, "
               "%llu hits, %llu recompressed\n",
               p.tier.c_str(), p.dist.c_str(), (unsigned long long)s.cache.entries,
               double(s.cache.compr_data_size) / (1 << 20), double(pool.held_bytes()) / (1 << 20),
               pool.classes_in_use, double(pool.slot_bytes) / (1 << 20),
               double(pool.freeable_pages * pool.page_size) / (1 << 20),
               double(ps.cached_bytes) / (1 << 20), double(pool.bookkeeping_bytes) / (1 << 20),
               double(s.cache.bytes_held - pool.held_bytes() - pool.bookkeeping_bytes) / (1 << 20),
               pool.pages_compacted, (unsigned long long)s.cache.evictions,
               (unsigned long long)s.inserts, (unsigned long long)s.hits,
               (unsigned long long)s.cache.recompressed);
}

size_t rocksdb_capacity(const Params& p) {
  return p.rocksdb_secondary_bytes != 0 ? p.rocksdb_secondary_bytes : p.secondary_bytes;
}

std::shared_ptr<rocksdb::SecondaryCache> make_tier(const Params& p,
                                                   std::shared_ptr<zsm::RocksSecondaryCache>* zsm_tier) {
  if (zsm_tier_name(p.tier)) {
    zsm::CacheOptions options;
    options.capacity_bytes = p.secondary_bytes;
    if (p.tier == "zsm-2nd-zstd") options.codec = zsm::parse_codec(p.strong_codec);
    if (recompresses(p)) options.recompress_codec = zsm::parse_codec(p.recompress_codec);
    const zsm::Admission admission =
        p.tier == "zsm" ? zsm::Admission::every_block : zsm::Admission::second_eviction;
    check(zsm::RocksSecondaryCache::Create(options, zsm_tier, admission), "zsm tier");
    return *zsm_tier;
  }
  if (p.tier == "none") return nullptr;
  rocksdb::CompressedSecondaryCacheOptions options;
  options.capacity = rocksdb_capacity(p);
  options.compression_type = rocksdb::kLZ4Compression;
  options.enable_custom_split_merge = p.tier == "rocksdb-lz4-split";
  return rocksdb::NewCompressedSecondaryCache(options);
}

// A thread that calls the tier's recompress() every kRecompressPeriod from construction to
// destruction.
class Recompressor {
 public:
  explicit Recompressor(zsm::RocksSecondaryCache* tier) {
    thread_ = std::thread([this, tier] {
      while (!stop_.load(std::memory_order_relaxed)) {
        tier->recompress(kRecompressBatch);
        std::this_thread::sleep_for(kRecompressPeriod);
      }
    });
  }
  ~Recompressor() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Reads `count` keys on `threads` threads, checking each value; returns reads per second.
double timed_reads(rocksdb::DB& db, const std::vector<std::string>& values, const KeyChooser& chooser,
                   size_t count, unsigned threads, uint64_t seed, std::atomic<uint64_t>& mismatches) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 16 + t);
      std::string value;
      for (size_t n = 0; n < count / threads; ++n) {
        const size_t i = chooser.next(rng);
        if (!db.Get(rocksdb::ReadOptions(), key_of(i), &value).ok() || value != values[i]) {
          mismatches.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  return double(count / threads * threads) / took.count();
}

double mib(size_t bytes) { return double(bytes) / (1 << 20); }

// The process's memory at one moment: glibc's heap in use (chunk sizes with their headers, all
// arenas, mmapped chunks included) and RSS, read after malloc_trim() has given the heap's free
// pages back, so that RSS counts what is in use and what fragmentation keeps.
struct MemoryNow {
  size_t heap = 0, rss = 0;
};
MemoryNow memory_now() {
  malloc_trim(0);
  const struct mallinfo2 m = mallinfo2();
  return {m.uordblks + m.hblkhd, rss_bytes()};
}

// What the zsm tier holds: the cache's pool pages, pool bookkeeping and index, and the
// admission table; all of it counts against the tier's capacity.
size_t zsm_bytes_held(const zsm::RocksSecondaryCache& tier) {
  const zsm::RocksSecondaryCacheStats s = tier.stats();
  return s.cache.bytes_held + s.admission_bytes;
}

ChildResult run_child(const Params& p) {
  const std::vector<std::string> values = read_values(p.dir + "/values.bin");
  const KeyChooser chooser(values.size(), p.dist == "zipf");
  std::shared_ptr<zsm::RocksSecondaryCache> zsm_tier;
  std::shared_ptr<rocksdb::SecondaryCache> inner = make_tier(p, &zsm_tier);
  std::shared_ptr<RecordingTier> recorder =
      inner ? std::make_shared<RecordingTier>(inner) : nullptr;

  rocksdb::LRUCacheOptions lru;
  lru.capacity = p.primary_bytes;
  lru.secondary_cache = recorder;
  rocksdb::Options options;
  options.statistics = rocksdb::CreateDBStatistics();
  options.table_factory.reset(
      rocksdb::NewBlockBasedTableFactory(table_options(rocksdb::NewLRUCache(lru))));
  options.max_open_files = -1;
  rocksdb::DB* raw = nullptr;
  check(rocksdb::DB::OpenForReadOnly(options, p.dir + "/db", &raw), "open to read");
  std::unique_ptr<rocksdb::DB> db(raw);

  ChildResult r;
  std::atomic<uint64_t> mismatches{0};
  const size_t rss_open = rss_bytes();
  std::optional<Recompressor> recompressor;  // over the warm-up and the timed reads
  if (recompresses(p)) recompressor.emplace(zsm_tier.get());
  timed_reads(*db, values, chooser, values.size(), 1, 1, mismatches);  // warm-up
  rocksdb::Statistics& st = *options.statistics;
  const uint64_t hits0 = st.getTickerCount(rocksdb::SECONDARY_CACHE_HITS);
  const uint64_t disk0 = blocks_read(st);
  r.ops[0] = timed_reads(*db, values, chooser, p.reads, 1, 2, mismatches);
  r.ops[1] = timed_reads(*db, values, chooser, p.reads, 2, 3, mismatches);
  r.sec_hits = st.getTickerCount(rocksdb::SECONDARY_CACHE_HITS) - hits0;
  r.disk_reads = blocks_read(st) - disk0;
  r.rss_growth = rss_bytes() - std::min(rss_bytes(), rss_open);
  recompressor.reset();
  r.mismatches = mismatches.load();
  if (zsm_tier) {
    r.refused = zsm_tier->stats().inserts_refused;
    print_zsm_memory(*zsm_tier, p);
  }
  db.reset();
  if (recorder) {
    const MemoryNow before = memory_now();
    r.blocks_held = recorder->count_held();
    const MemoryNow counted = memory_now();
    const size_t zsm_held = zsm_tier ? zsm_bytes_held(*zsm_tier) : 0;
    recorder->release_tier();
    inner.reset();
    zsm_tier.reset();
    const MemoryNow after = memory_now();
    const size_t tier_heap = before.heap - std::min(before.heap, after.heap);
    const size_t tier_rss = before.rss - std::min(before.rss, after.rss);
    r.tier_bytes = zsm_tier_name(p.tier) ? zsm_held : tier_heap;
    std::fprintf(stderr,
                 "%s %s: %zu blocks; destroying the tier freed %.2f MiB of heap chunks (the "
                 "census's erases %.2f MiB of them) and %.2f MiB of RSS; capacity counted %.2f "
                 "MiB (zsm)\n",
                 p.tier.c_str(), p.dist.c_str(), r.blocks_held, mib(tier_heap),
                 mib(before.heap - std::min(before.heap, counted.heap)), mib(tier_rss),
                 mib(zsm_held));
  }
  return r;
}

void print_child_result(const Params& p, const ChildResult& r) {
  std::printf("%s %s %.0f %.0f %llu %llu %llu %zu %zu %zu %llu\n", p.tier.c_str(), p.dist.c_str(),
              r.ops[0], r.ops[1], (unsigned long long)r.sec_hits,
              (unsigned long long)r.disk_reads, (unsigned long long)r.mismatches, r.blocks_held,
              r.rss_growth, r.tier_bytes, (unsigned long long)r.refused);
}

// Runs this binary as a child for one (tier, distribution); its result line is read back.
std::string run_in_child(const Params& p, const std::string& tier, const std::string& dist) {
  const std::string result = p.dir + "/result-" + tier + "-" + dist;
  std::vector<std::string> args = {"rocksdb_bench", "--child", "--dir=" + p.dir, "--tier=" + tier,
                                   "--dist=" + dist, "--keys=" + std::to_string(p.keys),
                                   "--primary=" + std::to_string(p.primary_bytes),
                                   "--secondary=" + std::to_string(p.secondary_bytes),
                                   "--rocksdb-secondary=" + std::to_string(p.rocksdb_secondary_bytes),
                                   "--reads=" + std::to_string(p.reads),
                                   "--zsm-codec=" + p.strong_codec};
  if (!p.recompress_codec.empty()) args.push_back("--zsm-recompress=" + p.recompress_codec);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, result.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  int status = 0;
  if (posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ) != 0 ||
      waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "rocksdb_bench: the %s/%s child failed\n", tier.c_str(), dist.c_str());
    std::exit(1);
  }
  posix_spawn_file_actions_destroy(&actions);
  std::ifstream in(result);
  std::string line;
  std::getline(in, line);
  return line;
}

struct Row {
  std::string tier, dist;
  double ops1 = 0, ops2 = 0;
  uint64_t sec_hits = 0, disk_reads = 0, mismatches = 0;
  size_t blocks = 0, rss = 0, tier_bytes = 0;
  uint64_t refused = 0;
};

Row parse_row(const std::string& line) {
  Row r;
  char tier[32], dist[32];
  unsigned long long hits, disk, mism, refused;
  if (std::sscanf(line.c_str(), "%31s %31s %lf %lf %llu %llu %llu %zu %zu %zu %llu", tier, dist,
                  &r.ops1, &r.ops2, &hits, &disk, &mism, &r.blocks, &r.rss, &r.tier_bytes,
                  &refused) != 11) {
    std::fprintf(stderr, "rocksdb_bench: bad child line '%s'\n", line.c_str());
    std::exit(1);
  }
  r.tier = tier, r.dist = dist, r.sec_hits = hits, r.disk_reads = disk, r.mismatches = mism;
  r.refused = refused;
  return r;
}

double hit_ratio(const Row& r) {
  const uint64_t lookups = r.sec_hits + r.disk_reads;
  return lookups ? double(r.sec_hits) / double(lookups) : 0.0;
}

// The row of `tier` and `dist` run so far, or nullptr.
const Row* find_row(const std::vector<Row>& rows, const std::string& tier, const std::string& dist) {
  for (const Row& r : rows) {
    if (r.tier == tier && r.dist == dist) return &r;
  }
  return nullptr;
}

// The plot's data (tools/plots/rocksdb.gp): a line per tier, the distributions side by side.
void write_dat(const std::string& path, const std::vector<Row>& rows) {
  std::FILE* dat = std::fopen(path.c_str(), "w");
  if (dat == nullptr) return;
  std::fprintf(dat, "# tier zipf:reads/s@1 reads/s@2 hit_ratio blocks_held "
                    "uniform:reads/s@1 reads/s@2 hit_ratio blocks_held\n");
  for (const char* tier : kTiers) {
    if (std::none_of(rows.begin(), rows.end(), [&](const Row& r) { return r.tier == tier; })) {
      continue;  // not run (--tiers)
    }
    std::fprintf(dat, "%s", tier);
    for (const char* dist : kDists) {
      const Row* row = find_row(rows, tier, dist);
      if (row == nullptr) {
        std::fprintf(dat, " - - - -");  // not run for this key choice (rocksdb-lz4-rss)
      } else {
        std::fprintf(dat, " %.0f %.0f %.4f %zu", row->ops1, row->ops2, hit_ratio(*row),
                     row->blocks);
      }
    }
    std::fprintf(dat, "\n");
  }
  std::fclose(dat);
}

// The tier that compares at equal RSS: RocksDB's lz4 tier at zsm-2nd's RSS.
constexpr const char* kRssMatchedTier = "rocksdb-lz4-rss";

// RocksDB's lz4 tier at the capacity at which it adds as much RSS as zsm-2nd, for `dist`:
// a first try at rocksdb-lz4's capacity scaled by zsm-2nd's tier RSS over rocksdb-lz4's (each
// less the RSS of no tier); when that adds more than 3 % too much or too little, a second try
// on the line through the two (capacity, RSS) points, if it rises, kept within half and
// twice the first. Returns the row of the try closer to zsm-2nd's RSS (RSS varies by a MiB or
// two from run to run), each try noted; nothing, and a note saying why, when those three rows
// were not run or grew no RSS.
std::optional<Row> run_at_zsm_rss(const Params& p, const std::vector<Row>& rows,
                                  const std::string& dist, std::vector<std::string>* notes) {
  const Row* zsm = find_row(rows, "zsm-2nd", dist);
  const Row* rocks = find_row(rows, "rocksdb-lz4", dist);
  const Row* none = find_row(rows, "none", dist);
  if (zsm == nullptr || rocks == nullptr || none == nullptr || zsm->rss <= none->rss ||
      rocks->rss <= none->rss) {
    notes->push_back(std::string(kRssMatchedTier) + " " + dist +
                     ": not run (it needs zsm-2nd, rocksdb-lz4 and none, with RSS grown)");
    return std::nullopt;
  }
  const auto tier_rss = [&](const Row& r) { return double(r.rss - std::min(r.rss, none->rss)); };
  const double target = tier_rss(*zsm);
  const double cap0 = double(rocksdb_capacity(p)), rss0 = tier_rss(*rocks);
  Params matched = p;  // a capacity of 0 would read as "unset": at least one byte
  matched.rocksdb_secondary_bytes = size_t(std::max(cap0 * target / rss0, 1.0));
  Row row = parse_row(run_in_child(matched, kRssMatchedTier, dist));
  const auto note = [&](const Row& r) {
    char line[192];
    std::snprintf(line, sizeof line, "%s %s: at %.2f MiB it added %.2f MiB of RSS (zsm-2nd: %.2f)",
                  kRssMatchedTier, dist.c_str(), mib(matched.rocksdb_secondary_bytes),
                  mib(size_t(tier_rss(r))), mib(size_t(target)));
    notes->push_back(line);
  };
  note(row);
  const double cap1 = double(matched.rocksdb_secondary_bytes), rss1 = tier_rss(row);
  const double slope = cap1 != cap0 ? (rss1 - rss0) / (cap1 - cap0) : 0;  // RSS per byte
  if (std::abs(rss1 - target) > 0.03 * target && slope > 0) {
    matched.rocksdb_secondary_bytes =
        size_t(std::max(std::clamp(cap1 + (target - rss1) / slope, cap1 / 2, cap1 * 2), 1.0));
    Row second = parse_row(run_in_child(matched, kRssMatchedTier, dist));
    note(second);
    if (std::abs(tier_rss(second) - target) < std::abs(rss1 - target)) row = second;
  }
  return row;
}

// Whether --tiers names `tier` (no --tiers: every tier).
bool selected(const Params& p, const std::string& tier) {
  return p.tiers.empty() || ("," + p.tiers + ",").find("," + tier + ",") != std::string::npos;
}

int run_parent(Params p) {
  char dir[] = "/tmp/zsm-rocksdb-bench-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  p.dir = dir;
  const std::vector<std::string> values = cut_values(p.keys);
  p.keys = values.size();
  size_t bytes = 0;
  for (const auto& v : values) bytes += v.size();
  write_values(p.dir + "/values.bin", values);
  build_db(p, values);
  std::printf("RocksDB %d.%d.%d; %zu keys, %.1f MiB of values cut from /usr/lib and /usr/share; "
              "blocks of %zu B, uncompressed on disk; primary LRU %.1f MiB; secondary tiers "
              "%.1f MiB (RocksDB's %.1f MiB); %zu reads per timed phase; zsm-2nd-zstd's codec "
              "%s%s%s\n",
              ROCKSDB_MAJOR, ROCKSDB_MINOR, ROCKSDB_PATCH, p.keys, mib(bytes), kBlockSize,
              mib(p.primary_bytes), mib(p.secondary_bytes),
              mib(rocksdb_capacity(p)),
              p.reads, p.strong_codec.c_str(),
              p.recompress_codec.empty() ? "" : "; zsm and zsm-2nd recompress with ",
              p.recompress_codec.c_str());
  std::vector<Row> rows;
  std::vector<std::string> notes;
  for (const char* dist : kDists) {
    for (const char* tier : kTiers) {
      if (!selected(p, tier)) continue;
      if (std::string(tier) != kRssMatchedTier) {
        rows.push_back(parse_row(run_in_child(p, tier, dist)));
      } else if (std::optional<Row> matched = run_at_zsm_rss(p, rows, dist, &notes)) {
        rows.push_back(*matched);
      }
    }
  }
  std::filesystem::remove_all(p.dir);
  for (const std::string& note : notes) std::printf("%s\n", note.c_str());

  std::map<std::string, const Row*> none;
  for (const Row& r : rows) {
    if (r.tier == "none") none[r.dist] = &r;
  }
  std::printf("%-18s %-8s %10s %10s %8s %7s %9s %8s %9s %9s %8s %9s %7s\n", "tier", "keys",
              "reads/s@1", "reads/s@2", "sec hit", "blocks", "tier MiB", "blk/MiB", "RSS +MiB",
              "tier RSS", "blk/RSS", "disk avd", "differ");
  uint64_t differ = 0;
  for (const Row& r : rows) {
    const Row* base = none.count(r.dist) ? none[r.dist] : nullptr;
    char held[16] = "-", tier_mib[16] = "-", per_mib[16] = "-", tier_rss[16] = "-",
         per_rss[16] = "-", avoided[24] = "-";
    if (r.tier != "none") {
      std::snprintf(held, sizeof held, "%zu", r.blocks);
      std::snprintf(tier_mib, sizeof tier_mib, "%.2f", mib(r.tier_bytes));
      std::snprintf(per_mib, sizeof per_mib, "%.0f", r.blocks / std::max(mib(r.tier_bytes), 1e-9));
    }
    if (r.tier != "none" && base != nullptr) {
      const double rss = mib(r.rss - std::min(r.rss, base->rss));
      std::snprintf(tier_rss, sizeof tier_rss, "%.2f", rss);
      std::snprintf(per_rss, sizeof per_rss, "%.0f", r.blocks / std::max(rss, 1e-9));
    }
    if (base != nullptr) {
      std::snprintf(avoided, sizeof avoided, "%lld",
                    (long long)base->disk_reads - (long long)r.disk_reads);
    }
    std::printf("%-18s %-8s %10.0f %10.0f %7.1f%% %7s %9s %8s %9.2f %9s %8s %9s %7llu\n",
                r.tier.c_str(), r.dist.c_str(), r.ops1, r.ops2, 100 * hit_ratio(r), held,
                tier_mib, per_mib, mib(r.rss), tier_rss, per_rss, avoided,
                (unsigned long long)r.mismatches);
    if (r.refused) std::printf("  (zsm refused %llu blocks above a page)\n", (unsigned long long)r.refused);
    differ += r.mismatches;
  }
  if (!p.out.empty()) write_dat(p.out, rows);
  std::printf("values read back that differ: %llu\n", (unsigned long long)differ);
  return differ == 0 ? 0 : 1;
}

// The tiers of a --tiers list, each checked against kTiers.
std::string parse_tiers(const std::string& list) {
  std::string names;
  for (const char* tier : kTiers) names += std::string(names.empty() ? "" : ", ") + tier;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string tier = list.substr(at, comma - at);
    if (std::find(std::begin(kTiers), std::end(kTiers), tier) == std::end(kTiers))
      throw std::invalid_argument("--tiers: unknown tier '" + tier + "' (the tiers: " + names + ")");
    at = comma + 1;
  }
  return list;
}

constexpr uint64_t kMostBytes = uint64_t{1} << 36;

const zsm_cli::Flag<Params> kFlags[] = {
    {"--keys", "N", "keys in the DB, values of 100..400 B (default 600000)",
     [](Params& p, const std::string& v) { p.keys = zsm_cli::parse_count(v, "--keys", 1, 100'000'000); }},
    {"--primary", "BYTES", "the primary LRU block cache (default 4M)",
     [](Params& p, const std::string& v) {
       p.primary_bytes = zsm_cli::parse_size(v, "--primary", 64 << 10, kMostBytes);
     }},
    {"--secondary", "BYTES", "each secondary tier's capacity (default 32M)",
     [](Params& p, const std::string& v) {
       p.secondary_bytes = zsm_cli::parse_size(v, "--secondary", 64 << 10, kMostBytes);
     }},
    {"--rocksdb-secondary", "BYTES", "RocksDB's tiers' capacity (default 0: --secondary's)",
     [](Params& p, const std::string& v) {
       p.rocksdb_secondary_bytes = zsm_cli::parse_size(v, "--rocksdb-secondary", 0, kMostBytes);
     }},
    {"--reads", "N", "reads per timed phase (default 200000)",
     [](Params& p, const std::string& v) { p.reads = zsm_cli::parse_count(v, "--reads", 1, 1'000'000'000); }},
    {"--tiers", "LIST", "the tiers to run, comma-separated (default all: zsm, zsm-2nd, "
     "zsm-2nd-zstd, rocksdb-lz4, rocksdb-lz4-split, none, rocksdb-lz4-rss)",
     [](Params& p, const std::string& v) { p.tiers = parse_tiers(v); }},
    {"--zsm-codec", "SPEC", "zsm-2nd-zstd's codec (default zstd:1)",
     [](Params& p, const std::string& v) {
       zsm_cli::parse_codec(v, "--zsm-codec");
       p.strong_codec = v;
     }},
    {"--zsm-recompress", "SPEC", "zsm and zsm-2nd recompress their blocks with SPEC",
     [](Params& p, const std::string& v) {
       zsm_cli::parse_codec(v, "--zsm-recompress");
       p.recompress_codec = v;
     }},
    {"--out", "FILE.dat", "the plot's data (tools/plots/rocksdb.gp)",
     [](Params& p, const std::string& v) { p.out = v; }},
    // A child's job (run_in_child()).
    {"--child", nullptr, nullptr, [](Params& p, const std::string&) { p.child = true; }},
    {"--dir", "DIR", nullptr, [](Params& p, const std::string& v) { p.dir = v; }},
    {"--tier", "TIER", nullptr, [](Params& p, const std::string& v) { p.tier = v; }},
    {"--dist", "DIST", nullptr, [](Params& p, const std::string& v) { p.dist = v; }},
};
constexpr const char* kSynopsis = "zsm_rocksdb_bench [options]";

}  // namespace

int main(int argc, char** argv) try {
  Params p;
  zsm_cli::parse<Params>(argc, argv, kSynopsis, kFlags, p);
  if (p.child) {
    print_child_result(p, run_child(p));
    return 0;
  }
  return run_parent(p);
} catch (const std::invalid_argument& e) {
  return zsm_cli::usage_error("zsm_rocksdb_bench", e);
}
