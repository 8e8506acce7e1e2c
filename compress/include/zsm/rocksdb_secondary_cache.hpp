// zsm::RocksSecondaryCache: RocksDB's SecondaryCache (the interface of RocksDB 7.8) on zsm's
// compressed cache (the noexcept core of zsm::Cache, same options and semantics). It owns the translation between the two: RocksDB's item helpers and create
// callbacks on one side, the cache's byte values on the other, and the counters in RocksDB's
// terms.
//
// - Insert() serializes the block with the helper's size and save callbacks into the cache's
//   record buffer, which the cache compresses with the codec of its CacheOptions (lz4 by
//   default; CacheOptions::codec) into its zsm pool; the cache's CLOCK evicts. A block not
//   stored is a Status: the save callback's own when it fails, InvalidArgument for a block
//   above max_value_size or a key the cache refuses, MemoryLimit when it finds no room even
//   after evicting. recompress()
//   re-encodes stored blocks with CacheOptions::recompress_codec, for a caller's thread.
//   Which blocks are admitted is the tier's Admission: every block offered, or (RocksDB's
//   own tier's rule) a block only on its second eviction from the primary cache.
// - Lookup() decompresses into a per-thread buffer and hands it to the create callback; it
//   completes before it returns, so every handle is ready and Wait()/WaitAll() do nothing.
//   With advise_erase the entry is erased after a hit, and is_in_sec_cache says whether the
//   block is still held.
// - Blocks up to the cache's max_value_size are stored: 64 KiB when CacheOptions leave it 0
//   (a block above a pool page is a chain of page-sized objects, see zsm/cache.hpp), at most
//   1 MiB. A larger block is refused with Status::InvalidArgument, counted in
//   inserts_too_large, and the first one is reported on stderr.
// - The capacity is a bound the cache's pool is created with, so SetCapacity() builds a new
//   cache of the new capacity and moves the blocks over (the new one evicts what does not
//   fit); a capacity the cache refuses (below a pool page, zero included) is
//   Status::InvalidArgument from Create() and SetCapacity(), and changes nothing.
// No exception leaves a RocksDB entry point: the adapter calls the cache's noexcept core, whose
// error codes become a Status (Insert, Create, SetCapacity) or a miss (Lookup). Every method may be called from any thread at once.
#pragma once

#include <zsm/cache.hpp>

#include <rocksdb/secondary_cache.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace zsm {

// Which blocks Insert() stores.
enum class Admission {
  // Every block the primary cache evicts.
  every_block,
  // A block only when the primary evicts it a second time (or after a Lookup with
  // advise_erase, which hands the block to the primary), as RocksDB 7.8's
  // CompressedSecondaryCache does with its dummy entries: blocks read once are never
  // compressed. The first eviction only records the key's 64-bit hash in a direct-mapped table
  // (a newer key takes the place of an older one of the same index) of one 8-byte word per KiB
  // of capacity; the table counts against the capacity (the cache gets the rest).
  second_eviction,
};

// The tier's counters in RocksDB's terms, and the cache's own (mm_stat's figures among them).
struct RocksSecondaryCacheStats {
  uint64_t hits = 0;              // lookups that found the block and created the object
  uint64_t misses = 0;            // lookups that did not (absent, corrupt, create failed)
  uint64_t inserts = 0;           // blocks stored
  uint64_t inserts_refused = 0;   // blocks not stored: too large, no room, a save error
  uint64_t inserts_too_large = 0; // of those, blocks above the cache's max_value_size
  uint64_t erases = 0;            // blocks erased, by Erase() or advise_erase
  uint64_t first_evictions = 0;   // Admission::second_eviction: blocks only remembered
  size_t admission_bytes = 0;     // the admission table's size (0 with every_block)
  CacheStats cache;               // the cache underneath (bytes_held, entries, mm_stat's fields)
};

// A tier's settings, as a zsm:// URI gives them (ParseZsmUri()).
struct RocksTierConfig {
  CacheOptions cache;  // capacity_bytes, codec, max_value_size, shards, pool page and chain
  Admission admission = Admission::every_block;
  // Work a tier named by a string does on a thread of its own, since the program that made it
  // (db_bench, say) cannot call it: every this often (0: never), recompress() over every block
  // (needs cache.recompress_codec), and zram's idle writeback, writeback_idle() then
  // mark_idle(), so that blocks not read for a whole period go to the backing file (needs
  // cache.backing_file).
  std::chrono::seconds recompress_every{0};
  std::chrono::seconds idle_writeback_every{0};
};

// The zsm:// URI: the one grammar of a zsm tier named by a string (RocksDB's
// SecondaryCache::CreateFromString() through the registrar or the plugin, db_bench's
// --secondary_cache_uri).
//
//   zsm://CAPACITY[;KEY=VALUE]...      or      zsm://capacity=SIZE[;KEY=VALUE]...
//
// CAPACITY is the tier's bytes (pool, index, admission table), at least a pool page. A SIZE is
// a decimal integer with an optional suffix K, M or G (KiB, MiB, GiB; lower case too).
// Each KEY at most once, in any order:
//   capacity=SIZE     the capacity, when the first part is not (RocksDB's own key)
//   codec=SPEC        lz4 (default), lz4:ACCELERATION, lz4hc[:LEVEL], zstd[:LEVEL] or none
//                     (zsm::parse_codec(); levels checked by Codec::create())
//   compression_type=TYPE  RocksDB's name of the codec, as its compressed tier takes it:
//                     kLZ4Compression, kLZ4HCCompression, kZSTD or kNoCompression (not with
//                     codec=)
//   admission=WHICH   every (default: every block the primary evicts) or second (a block only
//                     on its second eviction, RocksDB's compressed tier's rule)
//   max_value=SIZE    the largest block stored, 1 .. 1M (default 64K); a larger block is
//                     refused, counted (inserts_too_large) and reported on stderr once
//   page=SIZE         the pool's page size: 4K (default), 16K or 64K. Blocks above a page are
//                     chains of page-sized objects, so a larger page is not needed for large
//                     blocks; it makes fewer, larger objects (and zspages up to chain pages).
//   chain=N           pages per zspage, 4..16 (default 8)
//   shards=N          index shards, a power of two 1..1024 (default 16)
//   recompress=SPEC   the codec of recompress() (CacheOptions::recompress_codec), e.g. zstd:19
//   recompress_every=SECONDS  recompress every block this often, on the tier's own thread
//                     (needs recompress=)
//   file=PATH         a backing file (docs/cold-tier.md): blocks the tier's memory evicts go
//                     to it compressed and lookups read them back, so the tier is RocksDB's
//                     compressed tier and flash tier in one. A directory (an unnamed file in
//                     it), or a path that does not exist yet (created, removed at exit)
//   file_size=SIZE    the file's capacity, at least 2M (default 256M)
//   writeback_limit=SIZE  bytes written to the file a second at most (default: no limit)
//   idle_writeback=SECONDS  zram's idle writeback this often, on the tier's own thread: blocks
//                     not read for a whole period go to the file (needs file=)
// E.g. zsm://32M, zsm://1G;codec=zstd:3;admission=second,
// zsm://capacity=33554432;compression_type=kLZ4Compression,
// zsm://32M;file=/mnt/ssd;file_size=1G;idle_writeback=60. A bad URI is
// Status::InvalidArgument whose message names the bad part and quotes the URI.
rocksdb::Status ParseZsmUri(const std::string& uri, RocksTierConfig* out);

// The adapter (see the top of this header). Made by Create(); shared with RocksDB through
// LRUCacheOptions::secondary_cache.
class RocksSecondaryCache : public rocksdb::SecondaryCache {
 public:
  // The largest block stored when CacheOptions::max_value_size is 0.
  static constexpr size_t kDefaultMaxBlock = size_t{64} << 10;

  // A tier of options.capacity_bytes on a cache made with `options` (less the admission
  // table, see Admission); Status::InvalidArgument (and *out untouched) when the cache refuses
  // them, e.g. a capacity below the pool's page size. The tier's blocks are what RocksDB's
  // primary cache let go of, so they enter unreferenced (CacheOptions::insert_referenced is
  // set false): a block no lookup wants again is the first to go.
  static rocksdb::Status Create(const CacheOptions& options,
                                std::shared_ptr<RocksSecondaryCache>* out,
                                Admission admission = Admission::every_block);

  // A tier made from a zsm:// URI (ParseZsmUri()); Status::InvalidArgument naming the bad
  // part when the URI is bad.
  static rocksdb::Status CreateFromUri(const std::string& uri,
                                       std::shared_ptr<RocksSecondaryCache>* out);
  // A tier of `config` (Create() of its cache options and admission), with its periodic work
  // (RocksTierConfig) on a thread of its own when any is asked for.
  static rocksdb::Status Create(const RocksTierConfig& config,
                                std::shared_ptr<RocksSecondaryCache>* out);

  ~RocksSecondaryCache() override;
  const char* Name() const override { return "ZsmSecondaryCache"; }
  rocksdb::Status Insert(const rocksdb::Slice& key, void* value,
                         const rocksdb::Cache::CacheItemHelper* helper) override;
  std::unique_ptr<rocksdb::SecondaryCacheResultHandle> Lookup(
      const rocksdb::Slice& key, const rocksdb::Cache::CreateCallback& create_cb, bool wait,
      bool advise_erase, bool& is_in_sec_cache) override;
  bool SupportForceErase() const override { return true; }
  void Erase(const rocksdb::Slice& key) override;
  // Lookups complete synchronously: every handle is ready.
  void WaitAll(std::vector<rocksdb::SecondaryCacheResultHandle*> /*handles*/) override {}
  rocksdb::Status SetCapacity(size_t capacity) override;
  rocksdb::Status GetCapacity(size_t& capacity) override;
  // The capacity, the codec and the mm_stat line.
  std::string GetPrintableOptions() const override;

  // Cache::recompress(max_entries) on the cache underneath: re-encodes up to max_entries
  // blocks not yet tried with the options' recompress_codec, keeping each only where it moves
  // to a smaller size class; returns how many moved (0 without a recompress_codec). For a
  // caller's own thread, e.g. a periodic one: it takes each shard's write lock in turn.
  size_t recompress(size_t max_entries);

  [[nodiscard]] RocksSecondaryCacheStats stats() const;
  // zram's mm_stat line of the cache underneath (Cache::mm_stat()).
  [[nodiscard]] std::string mm_stat() const;
  // zram's bd_stat line of its backing file (Cache::bd_stat(); zeros without one).
  [[nodiscard]] std::string bd_stat() const;
  // The cache's pool, for reading (zsm::stats); valid until SetCapacity() replaces the cache
  // or the tier is destroyed.
  [[nodiscard]] zs_pool* pool() const;

 private:
  RocksSecondaryCache(std::unique_ptr<detail::CacheCore> cache, size_t capacity,
                      Admission admission);
  // Admission::second_eviction: true when the key was remembered (and forgets it), else
  // remembers it.
  bool seen_before(const rocksdb::Slice& key);
  void remember(const rocksdb::Slice& key);
  std::atomic<uint64_t>& admission_word(uint64_t hash);  // the table's word for a key's hash
  [[nodiscard]] size_t admission_bytes() const;
  void refuse_too_large(size_t size, size_t max_value_size);
  rocksdb::Status insert_status(std::error_code ec, size_t size, const rocksdb::Status& saved);
  std::unique_ptr<rocksdb::SecondaryCacheResultHandle> create_from_cache(
      const rocksdb::Slice& key, const rocksdb::Cache::CreateCallback& create_cb);
  void start_periodic_work(std::chrono::seconds recompress_every,
                           std::chrono::seconds idle_writeback_every);
  void stop_periodic_work();

  // cache_ is replaced only by SetCapacity(), under the write lock; every other call reads.
  mutable std::shared_mutex cache_lock_;
  std::unique_ptr<detail::CacheCore> cache_;  // the cache's noexcept core (cache_core.h)
  size_t capacity_;  // the tier's: the cache's and the admission table's
  Admission admission_;
  // Admission::second_eviction: hashes of keys evicted once (0: none), a power of two long.
  std::vector<std::atomic<uint64_t>> evicted_once_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, inserts_{0}, inserts_refused_{0}, erases_{0},
      first_evictions_{0}, inserts_too_large_{0};
  // The periodic work's thread (RocksTierConfig), stopped by the destructor; none in a child
  // of fork(), whose copy is left alone (the thread is the parent's).
  std::mutex work_lock_;
  std::condition_variable work_wake_;
  bool work_stop_ = false;
  std::thread worker_;
  pid_t worker_pid_ = 0;
};

}  // namespace zsm

namespace rocksdb {
class ObjectLibrary;
}  // namespace rocksdb

// RocksDB's plugin registrar (a rocksdb::RegistrarFunc, object_registry.h): adds the zsm://
// factory of SecondaryCache to `library` and returns 1, the factories it added. Call it once
// before a string names a zsm tier, with
//   register_ZsmSecondaryCache(*rocksdb::ObjectLibrary::Default(), "");
// or rocksdb::ObjectRegistry::Default()->AddLibrary("zsm", register_ZsmSecondaryCache, "").
// `arg` "stats" makes each tier print its counters on stderr at exit (ZSM_ROCKSDB_STATS
// overrides: 0 never, else always). A RocksDB built with ROCKSDB_PLUGINS=zsm calls it itself
// (compress/rocksdb/plugin/zsm/), and libzsm_rocksdb_plugin.so from a static initializer.
extern "C" int register_ZsmSecondaryCache(rocksdb::ObjectLibrary& library, const std::string& arg);

