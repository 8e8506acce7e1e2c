// libzsm_rocksdb_plugin.so: registers zsm:// in RocksDB's ObjectLibrary from a static
// initializer, so that an unmodified RocksDB program makes a zsm tier from a string:
//
//   LD_PRELOAD=libzsm_rocksdb_plugin.so db_bench --secondary_cache_uri='zsm://32M;codec=lz4' ...
//
// The URI's grammar is ParseZsmUri()'s (zsm/rocksdb_secondary_cache.hpp). The tier is a
// RocksSecondaryCache behind a thin wrapper that adds what a string-made tier needs:
//
// Failing closed. SecondaryCache::CreateFromString() (RocksDB 7.8) accepts three forms:
// - "zsm://..." alone: the whole string is the id and goes to the factory, which parses it; a
//   bad URI makes the factory return nothing with the reason, so the call fails, the result
//   stays empty, and db_bench exits printing the reason.
// - "zsm", or "id=zsm;KEY=VALUE...": the id "zsm" matches the factory too, which refuses it
//   (no capacity), naming the form to write.
// - "id=zsm://...;KEY=VALUE...": RocksDB makes the tier from the id, stores it in the result,
//   and only then hands the other options to the tier's ConfigureOptions(). A failure there
//   makes the status non-OK but leaves the tier in the result, and db_bench checks only the
//   result: this form cannot fail closed. So the tier refuses it whatever the options are:
//   ConfigureOptions() with any option returns InvalidArgument naming them, and turns the
//   tier off (every Insert refused, every Lookup a miss), saying so on stderr.
//
// Counters. Each tier prints, on stderr, its counters and its mm_stat line, one line each,
// when it is destroyed or at process exit, whichever comes first (db_bench and cache_bench
// keep theirs to the end); ZSM_ROCKSDB_STATS=0 in the environment keeps them quiet.
//
// Only the static initializer matters here: the library exports nothing (hidden visibility,
// and the static libraries' symbols are not re-exported), so nothing in it can interpose on
// the program's own symbols.
#include <zsm/rocksdb_secondary_cache.hpp>

#include <rocksdb/utilities/object_registry.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
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

bool stats_wanted() {
  const char* env = std::getenv("ZSM_ROCKSDB_STATS");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

class PluginTier : public rocksdb::SecondaryCache {
 public:
  PluginTier(std::shared_ptr<RocksSecondaryCache> tier, std::string uri)
      : tier_(std::move(tier)), uri_(std::move(uri)) {
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
    if (reported_.exchange(true) || !stats_wanted()) return;
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
  // The id=zsm://...;KEY=VALUE form: refused (see the top of this file).
  rocksdb::Status ConfigureOptions(
      const rocksdb::ConfigOptions& /*config_options*/,
      const std::unordered_map<std::string, std::string>& opts_map,
      std::unordered_map<std::string, std::string>* /*unused*/) override {
    if (opts_map.empty()) return rocksdb::Status::OK();
    std::string given;
    for (const auto& [key, value] : opts_map)
      given += (given.empty() ? "" : ";") + key + "=" + value;
    off_ = true;
    std::fprintf(stderr,
                 "zsm secondary cache: options after id= (%s) are refused, and this tier is "
                 "off: RocksDB keeps a tier whose options failed; write them in the URI, "
                 "zsm://CAPACITY;KEY=VALUE...\n",
                 given.c_str());
    return rocksdb::Status::InvalidArgument(
        "zsm secondary cache: options after id= are refused (" + given +
            "); write them in the URI: zsm://CAPACITY;KEY=VALUE...",
        uri_);
  }

 private:
  std::shared_ptr<RocksSecondaryCache> tier_;
  std::string uri_;
  std::atomic<bool> off_{false}, reported_{false};
};

void report_live_tiers() {
  std::lock_guard guard(live_tiers().lock);
  for (PluginTier* tier : live_tiers().tiers) tier->report();
}

rocksdb::SecondaryCache* make_tier(const std::string& uri,
                                   std::unique_ptr<rocksdb::SecondaryCache>* guard,
                                   std::string* errmsg) {
  std::shared_ptr<RocksSecondaryCache> tier;
  rocksdb::Status status = RocksSecondaryCache::CreateFromUri(uri, &tier);
  if (!status.ok()) {
    *errmsg = status.getState() != nullptr ? status.getState() : status.ToString();
    if (uri == "zsm")
      *errmsg += " (the id=zsm;KEY=VALUE form is refused: write zsm://CAPACITY;KEY=VALUE...)";
    return nullptr;
  }
  guard->reset(new PluginTier(std::move(tier), uri));
  return guard->get();
}

[[maybe_unused]] const bool registered = [] {
  rocksdb::ObjectLibrary::Default()->AddFactory<rocksdb::SecondaryCache>(
      rocksdb::ObjectLibrary::PatternEntry("zsm", true).AddSeparator("://", false), make_tier);
  std::atexit(report_live_tiers);
  return true;
}();

}  // namespace
}  // namespace zsm
