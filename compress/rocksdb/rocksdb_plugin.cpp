// libzsm_rocksdb_plugin.so: zsm:// in RocksDB's default ObjectLibrary from a static
// initializer, so that an unmodified RocksDB program makes a zsm tier from a string:
//
//   LD_PRELOAD=libzsm_rocksdb_plugin.so db_bench --secondary_cache_uri='zsm://32M;codec=lz4' ...
//
// It calls register_ZsmSecondaryCache() (rocksdb_registrar.cpp, which says what the tiers do)
// with "stats": each tier prints its counters at exit unless ZSM_ROCKSDB_STATS=0. A program
// of one's own calls the registrar instead (zsm/rocksdb_secondary_cache.hpp).
//
// Only the static initializer matters here: the library exports nothing (hidden visibility,
// and the static libraries' symbols are not re-exported), so nothing in it can interpose on
// the program's own symbols.
#include <zsm/rocksdb_secondary_cache.hpp>

#include <rocksdb/utilities/object_registry.h>

namespace {

[[maybe_unused]] const int registered =
    register_ZsmSecondaryCache(*rocksdb::ObjectLibrary::Default(), "stats");

}  // namespace
