// register_ZsmSecondaryCache(), RocksDB's plugin convention, called by a program of its own (no
// LD_PRELOAD): into a fresh object registry it adds the zsm:// factory, after which
// SecondaryCache::CreateFromString() makes a tier from a URI, a bad URI is refused by name,
// and a real DB reads its blocks back through the tier. Without the registrar the same string
// finds no factory (what a user sees when the plugin is not loaded).
#include <zsm/rocksdb_secondary_cache.hpp>

#include <gtest/gtest.h>
#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/secondary_cache.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/object_registry.h>

#include <filesystem>
#include <memory>
#include <string>

namespace {

// Config options whose registry is a new one, with the registrar's library in it or not.
rocksdb::ConfigOptions options_with(bool registered) {
  rocksdb::ConfigOptions config;
  config.registry = rocksdb::ObjectRegistry::NewInstance();
  if (registered) config.registry->AddLibrary("zsm", register_ZsmSecondaryCache, "");
  return config;
}

TEST(RocksRegistrar, RegistersOneFactory) {
  rocksdb::ObjectLibrary library("test");
  EXPECT_EQ(register_ZsmSecondaryCache(library, ""), 1);
}

// RocksDB 7.8 says OK and makes nothing (db_bench then prints "No secondary cache registered
// matching string: zsm://16M status=OK"): the tier is what tells.
TEST(RocksRegistrar, WithoutItTheUriFindsNoFactory) {
  std::shared_ptr<rocksdb::SecondaryCache> tier;
  rocksdb::Status s =
      rocksdb::SecondaryCache::CreateFromString(options_with(false), "zsm://16M", &tier);
  EXPECT_FALSE(tier) << s.ToString();
}

TEST(RocksRegistrar, ABadUriIsRefusedByName) {
  std::shared_ptr<rocksdb::SecondaryCache> tier;
  rocksdb::Status s = rocksdb::SecondaryCache::CreateFromString(
      options_with(true), "zsm://16M;codec=lz5", &tier);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("lz5"), std::string::npos) << s.ToString();
}

TEST(RocksRegistrar, ADbReadsItsBlocksBackThroughTheTier) {
  std::shared_ptr<rocksdb::SecondaryCache> tier;
  rocksdb::Status s = rocksdb::SecondaryCache::CreateFromString(
      options_with(true), "zsm://8M;codec=lz4", &tier);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(tier);
  EXPECT_STREQ(tier->Name(), "ZsmSecondaryCache");

  rocksdb::LRUCacheOptions primary(256 << 10, 0, false, 0.5);
  primary.secondary_cache = tier;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(primary);
  rocksdb::Options options;
  options.create_if_missing = true;
  options.compression = rocksdb::kNoCompression;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  const std::string path = (std::filesystem::current_path() / "rocksdb_registrar_test.db").string();
  std::filesystem::remove_all(path);
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, path, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  auto value_of = [](int i) { return std::string(900, static_cast<char>('a' + i % 26)) + std::to_string(i); };
  for (int i = 0; i < 4000; i++)
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "key" + std::to_string(i), value_of(i)).ok());
  ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
  for (int round = 0; round < 2; round++)
    for (int i = 0; i < 4000; i++) {
      std::string got;
      ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), "key" + std::to_string(i), &got).ok());
      ASSERT_EQ(got, value_of(i));
    }
  db.reset();
  std::filesystem::remove_all(path);
}

}  // namespace
