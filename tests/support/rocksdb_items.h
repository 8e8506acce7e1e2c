// tests/support/rocksdb_items.h: the primary cache's objects of the RocksDB tests
// (rocksdb_test.cpp, rocksdb_plugin_test.cpp): an Item whose persistable data is its string, its
// CacheItemHelper, and the create callback that makes one from a block.
#pragma once

#include <rocksdb/cache.h>

#include <cstring>
#include <string>

namespace zsm_test {

struct Item {
  std::string data;
};

inline size_t item_size(void* obj) { return static_cast<Item*>(obj)->data.size(); }
inline rocksdb::Status item_save(void* obj, size_t offset, size_t length, void* out) {
  std::memcpy(out, static_cast<Item*>(obj)->data.data() + offset, length);
  return rocksdb::Status::OK();
}
inline void item_delete(const rocksdb::Slice& /*key*/, void* obj) {
  delete static_cast<Item*>(obj);
}

inline const rocksdb::Cache::CacheItemHelper kItemHelper(item_size, item_save, item_delete);

// A create callback that makes an Item; the number of calls goes to *calls when given.
inline rocksdb::Cache::CreateCallback make_item(int* calls = nullptr) {
  return [calls](const void* buf, size_t size, void** out, size_t* charge) {
    if (calls) ++*calls;
    *out = new Item{std::string(static_cast<const char*>(buf), size)};
    *charge = size;
    return rocksdb::Status::OK();
  };
}

}  // namespace zsm_test
