// Example: zsm's RocksDB secondary cache under a RocksDB block cache, from an installed zsm.
// Makes the tier from a zsm:// URI, hangs it under an LRU cache, stores and reads a block
// through the tier, and prints the tier's mm_stat line.
#include <zsm/rocksdb_secondary_cache.hpp>

#include <rocksdb/cache.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

namespace {
const std::string block = [] {
  std::string s;
  while (s.size() < 9000) s += "zsm block ";
  return s;
}();
size_t size_of(void*) { return block.size(); }
rocksdb::Status save(void*, size_t offset, size_t length, void* out) {
  std::memcpy(out, block.data() + offset, length);
  return rocksdb::Status::OK();
}
void drop(const rocksdb::Slice&, void*) {}
}  // namespace

int main() {
  std::shared_ptr<zsm::RocksSecondaryCache> tier;
  rocksdb::Status s = zsm::RocksSecondaryCache::CreateFromUri("zsm://8M;codec=zstd:3", &tier);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  rocksdb::LRUCacheOptions lru;
  lru.capacity = 1 << 20;
  lru.secondary_cache = tier;
  std::shared_ptr<rocksdb::Cache> cache = rocksdb::NewLRUCache(lru);

  const rocksdb::Cache::CacheItemHelper helper(size_of, save, drop);
  bool ok = tier->Insert("block", const_cast<std::string*>(&block), &helper).ok();
  bool in_sec_cache = false;
  auto handle = tier->Lookup(
      "block",
      [](const void* buf, size_t size, void** out, size_t* charge) {
        *out = new std::string(static_cast<const char*>(buf), size);
        *charge = size;
        return rocksdb::Status::OK();
      },
      true, false, in_sec_cache);
  ok = ok && handle != nullptr;
  if (handle) {
    std::unique_ptr<std::string> got(static_cast<std::string*>(handle->Value()));
    ok = ok && *got == block;
  }
  std::printf("rocksdb tier mm_stat %s\n", tier->mm_stat().c_str());
  return ok && cache != nullptr ? 0 : 1;
}
