// register_ZsmSecondaryCache(): zsm:// in a RocksDB ObjectLibrary, so that a program, RocksDB's
// own tools, or a RocksDB built with ROCKSDB_PLUGINS=zsm makes a zsm tier from a string
// (SecondaryCache::CreateFromString(), db_bench's --secondary_cache_uri). The URI's grammar is
// ParseZsmUri()'s (zsm/rocksdb_secondary_cache.hpp). The tier is a RocksSecondaryCache behind a
// thin wrapper that adds what a string-made tier needs:
//
// Failing closed. SecondaryCache::CreateFromString() (RocksDB 7.8) accepts three forms:
// - "zsm://..." alone: the whole string is the id and goes to the factory, which parses it; a
//   bad URI makes the factory return nothing with the reason, so the call fails, the result
//   stays empty, and db_bench exits printing the reason.
// - "zsm", or "id=zsm;KEY=VALUE...": the id "zsm" matches the factory too, which refuses it
//   (no capacity), naming the form to write.
// - "id=zsm://...;KEY=VALUE...": RocksDB makes the tier from the id, stores it in the result,
//   and only then hands the other options to the tier's ConfigureOptions(), which makes the
//   tier again from the URI with them (the same grammar). A failure there makes the status
//   non-OK but leaves the tier in the result, and db_bench checks only the result: this form
//   cannot fail closed. So a bad option turns the tier off (every Insert refused, every
//   Lookup a miss), saying so on stderr with the reason.
//
// Counters. With the registrar's argument "stats" (the LD_PRELOAD plugin's), or
// ZSM_ROCKSDB_STATS set to anything but 0, each tier prints on stderr its counters and its
// mm_stat line, one line each, when it is destroyed or at process exit, whichever comes first
// (db_bench and cache_bench keep theirs to the end); ZSM_ROCKSDB_STATS=0 keeps them quiet.
#include <zsm/rocksdb_secondary_cache.hpp>

#include <rocksdb/utilities/object_registry.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace zsm {
namespace {

class PluginTier;

// The tiers alive, for the report at exit. Never destroyed: a tier may outlive static
// destructors (RocksDB's own globals hold caches).
struct LiveTiers {
  std::mutex lock;
  std::set<PluginTier*> tiers;
};
LiveTiers& live_tiers() {
  static LiveTiers* live = new LiveTiers;
  return *live;
}

// Whether a tier made with the registrar's `arg` prints its counters: arg "stats" asks for
// them, and ZSM_ROCKSDB_STATS in the environment overrides it (0: never, anything else: always).
bool stats_wanted(const std::string& arg) {
  const char* env = std::getenv("ZSM_ROCKSDB_STATS");
  if (env != nullptr) return std::strcmp(env, "0") != 0;
  return arg == "stats";
}

class PluginTier : public rocksdb::SecondaryCache {
 public:
  PluginTier(std::shared_ptr<RocksSecondaryCache> tier, std::string uri, bool report)
      : tier_(std::move(tier)), uri_(std::move(uri)), report_(report) {
    std::lock_guard guard(live_tiers().lock);
    live_tiers().tiers.insert(this);
  }
  ~PluginTier() override {
    {
      std::lock_guard guard(live_tiers().lock);
      live_tiers().tiers.erase(this);
    }
    report();
  }

  const char* Name() const override { return tier_->Name(); }
  rocksdb::Status Insert(const rocksdb::Slice& key, void* value,
                         const rocksdb::Cache::CacheItemHelper* helper) override {
    if (off_) return rocksdb::Status::InvalidArgument("zsm secondary cache: turned off");
    return tier_->Insert(key, value, helper);
  }
  std::unique_ptr<rocksdb::SecondaryCacheResultHandle> Lookup(
      const rocksdb::Slice& key, const rocksdb::Cache::CreateCallback& create_cb, bool wait,
      bool advise_erase, bool& is_in_sec_cache) override {
    is_in_sec_cache = false;
    if (off_) return nullptr;
    return tier_->Lookup(key, create_cb, wait, advise_erase, is_in_sec_cache);
  }
  bool SupportForceErase() const override { return tier_->SupportForceErase(); }
  void Erase(const rocksdb::Slice& key) override { tier_->Erase(key); }
  void WaitAll(std::vector<rocksdb::SecondaryCacheResultHandle*> handles) override {
    tier_->WaitAll(std::move(handles));
  }
  rocksdb::Status SetCapacity(size_t capacity) override { return tier_->SetCapacity(capacity); }
  rocksdb::Status GetCapacity(size_t& capacity) override { return tier_->GetCapacity(capacity); }
  std::string GetPrintableOptions() const override {
    return "    uri : " + uri_ + "\n" + tier_->GetPrintableOptions();
  }

  // Prints the two lines once (see the top of this file).
  void report() {
    if (!report_ || reported_.exchange(true)) return;
    const RocksSecondaryCacheStats s = tier_->stats();
    std::fprintf(stderr,
                 "zsm tier %s: hits %llu misses %llu inserts %llu refused %llu too_large %llu "
                 "erases %llu first_evictions %llu entries %llu bytes_held %llu pool_bytes %llu "
                 "compr_bytes %llu\n",
                 uri_.c_str(), static_cast<unsigned long long>(s.hits),
                 static_cast<unsigned long long>(s.misses),
                 static_cast<unsigned long long>(s.inserts),
                 static_cast<unsigned long long>(s.inserts_refused),
                 static_cast<unsigned long long>(s.inserts_too_large),
                 static_cast<unsigned long long>(s.erases),
                 static_cast<unsigned long long>(s.first_evictions),
                 static_cast<unsigned long long>(s.cache.entries),
                 static_cast<unsigned long long>(s.cache.bytes_held),
                 static_cast<unsigned long long>(s.cache.mem_used_total),
                 static_cast<unsigned long long>(s.cache.compr_data_size));
    std::fprintf(stderr, "zsm tier %s: mm_stat %s\n", uri_.c_str(), tier_->mm_stat().c_str());
    if (s.cache.backing_file.memory_bytes != 0)  // a backing file: zram's bd_stat, and its hits
      std::fprintf(stderr, "zsm tier %s: bd_stat %s file_hits %llu file_misses %llu\n",
                   uri_.c_str(), tier_->bd_stat().c_str(),
                   static_cast<unsigned long long>(s.cache.backing_file.hits),
                   static_cast<unsigned long long>(s.cache.backing_file.misses));
  }

 protected:
  // The id=zsm://...;KEY=VALUE form (see the top of this file): the options join the URI's
  // own, and the tier is made again from the whole (nothing is in it yet); a bad one turns
  // the tier off.
  rocksdb::Status ConfigureOptions(
      const rocksdb::ConfigOptions& /*config_options*/,
      const std::unordered_map<std::string, std::string>& opts_map,
      std::unordered_map<std::string, std::string>* /*unused*/) override {
    if (opts_map.empty()) return rocksdb::Status::OK();
    std::string uri = uri_;
    for (const auto& [key, value] : std::map<std::string, std::string>(opts_map.begin(), opts_map.end()))
      uri += ";" + key + "=" + value;
    std::shared_ptr<RocksSecondaryCache> tier;
    rocksdb::Status status = RocksSecondaryCache::CreateFromUri(uri, &tier);
    if (!status.ok()) {
      off_ = true;
      std::fprintf(stderr, "zsm secondary cache: %s; this tier is off (RocksDB keeps a tier "
                           "whose options failed): it stores nothing\n",
                   status.ToString().c_str());
      return status;
    }
    tier_ = std::move(tier);
    uri_ = std::move(uri);
    return rocksdb::Status::OK();
  }

 private:
  std::shared_ptr<RocksSecondaryCache> tier_;
  std::string uri_;
  const bool report_;
  std::atomic<bool> off_{false}, reported_{false};
};

void report_live_tiers() {
  std::lock_guard guard(live_tiers().lock);
  for (PluginTier* tier : live_tiers().tiers) tier->report();
}

rocksdb::SecondaryCache* make_tier(const std::string& uri,
                                   std::unique_ptr<rocksdb::SecondaryCache>* guard,
                                   std::string* errmsg, bool report) {
  std::shared_ptr<RocksSecondaryCache> tier;
  rocksdb::Status status = RocksSecondaryCache::CreateFromUri(uri, &tier);
  if (!status.ok()) {
    *errmsg = status.getState() != nullptr ? status.getState() : status.ToString();
    if (uri == "zsm")
      *errmsg += " (the id=zsm;KEY=VALUE form is refused: write zsm://CAPACITY;KEY=VALUE...)";
    return nullptr;
  }
  guard->reset(new PluginTier(std::move(tier), uri, report));
  return guard->get();
}


}  // namespace
}  // namespace zsm

extern "C" int register_ZsmSecondaryCache(rocksdb::ObjectLibrary& library, const std::string& arg) {
  const bool report = zsm::stats_wanted(arg);
  library.AddFactory<rocksdb::SecondaryCache>(
      rocksdb::ObjectLibrary::PatternEntry("zsm", true).AddSeparator("://", false),
      [report](const std::string& uri, std::unique_ptr<rocksdb::SecondaryCache>* guard,
               std::string* errmsg) { return zsm::make_tier(uri, guard, errmsg, report); });
  static std::once_flag at_exit;
  if (report) std::call_once(at_exit, [] { std::atexit(zsm::report_live_tiers); });
  return 1;
}
