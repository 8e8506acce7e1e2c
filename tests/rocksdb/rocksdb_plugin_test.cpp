// libzsm_rocksdb_plugin.so as a RocksDB program meets it: loaded with dlopen() (as LD_PRELOAD
// loads it into db_bench), it registers zsm:// with RocksDB's ObjectLibrary, and
// SecondaryCache::CreateFromString() then makes a working tier from a good URI and fails,
// naming the bad part, for a bad one, in every form RocksDB accepts. The one form RocksDB
// cannot fail closed (id=zsm://...;KEY=VALUE) is refused: an error, and a tier that stores
// nothing. The plugin's path comes from the build (ZSM_PLUGIN_PATH).
#include <gtest/gtest.h>
#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/secondary_cache.h>

#include <dlfcn.h>

#include <cstring>
#include <memory>
#include <string>

#include "rocksdb_items.h"

namespace {

using rocksdb::Status;

using zsm_test::Item;
using zsm_test::make_item;
const rocksdb::Cache::CacheItemHelper& kHelper = zsm_test::kItemHelper;

class Plugin : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("ZSM_ROCKSDB_STATS", "0", 1);
    handle_ = dlopen(ZSM_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << dlerror();
  }
  // The status and the tier CreateFromString() gives for `uri`.
  static Status create(const std::string& uri, std::shared_ptr<rocksdb::SecondaryCache>* out) {
    return rocksdb::SecondaryCache::CreateFromString(rocksdb::ConfigOptions(), uri, out);
  }
  // Inserts and looks up one block: whether it came back.
  static bool round_trips(rocksdb::SecondaryCache& tier) {
    Item item{std::string(9000, 'z') + "block"};
    if (!tier.Insert("k", &item, &kHelper).ok()) return false;
    bool in_sec_cache = false;
    auto handle = tier.Lookup("k", make_item(), true, false, in_sec_cache);
    if (!handle) return false;
    std::unique_ptr<Item> got(static_cast<Item*>(handle->Value()));
    return got->data == item.data;
  }
  static void* handle_;
};
void* Plugin::handle_ = nullptr;

TEST_F(Plugin, AGoodUriMakesAWorkingTier) {
  for (const char* uri : {"zsm://8M", "zsm://4096K;codec=zstd:3;admission=every",
                          "zsm://1G;codec=lz4;max_value=16K;page=16K;chain=4;shards=64"}) {
    std::shared_ptr<rocksdb::SecondaryCache> tier;
    Status s = create(uri, &tier);
    ASSERT_TRUE(s.ok()) << uri << ": " << s.ToString();
    ASSERT_TRUE(tier) << uri;
    EXPECT_STREQ(tier->Name(), "ZsmSecondaryCache");
    EXPECT_NE(tier->GetPrintableOptions().find(uri), std::string::npos);
    EXPECT_TRUE(round_trips(*tier)) << uri;
  }
  std::shared_ptr<rocksdb::SecondaryCache> tier;
  ASSERT_TRUE(create("zsm://8M", &tier).ok());
  size_t capacity = 0;
  ASSERT_TRUE(tier->GetCapacity(capacity).ok());
  EXPECT_EQ(capacity, size_t{8} << 20);
}

// Each bad URI fails with nothing in the result, and the message names the bad part.
TEST_F(Plugin, ABadUriFailsClosedNamingTheBadPart) {
  const std::pair<const char*, const char*> cases[] = {
      {"zsm://8Q", "bad capacity '8Q'"},
      {"zsm://", "bad capacity ''"},
      {"zsm://100", "below the pool's page"},
      {"zsm://8M;codec=lz5", "unknown codec 'lz5'"},
      {"zsm://8M;codec=zstd:99", "codec=zstd:99"},
      {"zsm://8M;admission=third", "bad admission in 'admission=third'"},
      {"zsm://8M;max_value=2M", "bad max_value"},
      {"zsm://8M;page=8K", "bad page in 'page=8K'"},
      {"zsm://8M;chain=2", "bad chain"},
      {"zsm://8M;shards=3", "bad shards"},
      {"zsm://8M;colour=blue", "unknown option 'colour'"},
      {"zsm://8M;codec", "bad option 'codec'"},
      {"zsm://8M;codec=lz4;codec=zstd", "option 'codec' given twice"},
      {"zsm://8M;", "bad option ''"},
      {"zsm", "id=zsm;KEY=VALUE form is refused"},
      {"id=zsm;codec=lz5", "id=zsm;KEY=VALUE form is refused"},
      {"id=zsm://8Q", "bad capacity '8Q'"},
  };
  for (const auto& [uri, why] : cases) {
    std::shared_ptr<rocksdb::SecondaryCache> tier;
    Status s = create(uri, &tier);
    EXPECT_FALSE(s.ok()) << uri;
    EXPECT_FALSE(tier) << uri << ": a failed URI must leave no tier";
    EXPECT_NE(s.ToString().find(why), std::string::npos) << uri << ": " << s.ToString();
  }
}

// RocksDB 7.8 makes the tier from the id, puts it in the result, then configures it with the
// rest: a failure there leaves the tier in the result. The plugin refuses the form: the call
// fails naming the options, and the tier left behind stores nothing.
// id=zsm://...;KEY=VALUE: RocksDB makes the tier from the id, then hands it the rest, which
// makes the tier again with those options (the URI's grammar); a bad option fails the call by
// name, and the tier RocksDB leaves behind is off.
TEST_F(Plugin, OptionsAfterIdConfigureTheTierAndABadOneLeavesItOff) {
  std::shared_ptr<rocksdb::SecondaryCache> tier;
  testing::internal::CaptureStderr();
  Status s = create("id=zsm://8M;codec=lz5", &tier);
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("codec"), std::string::npos) << s.ToString();
  EXPECT_NE(said.find("this tier is off"), std::string::npos) << said;
  if (tier) {
    EXPECT_FALSE(round_trips(*tier)) << "the tier left behind must be off";
  }
  tier.reset();
  Status good = create("id=zsm://8M;codec=zstd", &tier);
  ASSERT_TRUE(good.ok()) << good.ToString();
  ASSERT_TRUE(tier);
  EXPECT_TRUE(round_trips(*tier));
  tier.reset();
  ASSERT_TRUE(create("id=zsm://8M", &tier).ok());  // id= without options is the plain form
  EXPECT_TRUE(round_trips(*tier));
}

}  // namespace
