#!/usr/bin/env bash
# compress/rocksdb/plugin/zsm as RocksDB's own build takes it (ROCKSDB_PLUGINS=zsm), without
# building RocksDB: zsm installed into a prefix, the folder linked into a stand-in RocksDB tree
# as plugin/zsm, its .mk read by the make expressions RocksDB's Makefile uses for plugins
# (sources, libraries, link flags, the registrar's extern "C" declaration and its builtins
# entry), and a program built from what they give, against Debian's RocksDB headers and
# library, C++17 as RocksDB's build is. The program registers the builtins as RocksDB's object
# registry does, makes a tier from zsm://8M and reads a DB back through it.
#
#   rocksdb_plugins_build_test.sh BUILD_DIR SOURCE_DIR SCRATCH
set -euo pipefail
build="$1" source="$2" scratch="$3"
rm -rf "$scratch"
mkdir -p "$scratch/rocksdb/plugin"
cmake --install "$build" --prefix "$scratch/prefix" > "$scratch/install.log"
ln -s "$source/compress/rocksdb/plugin/zsm" "$scratch/rocksdb/plugin/zsm"
cd "$scratch/rocksdb"

cat > Makefile <<'MK'
ROCKSDB_PLUGINS = zsm
ROCKSDB_PLUGIN_MKS = $(foreach plugin, $(ROCKSDB_PLUGINS), plugin/$(plugin)/*.mk)
include $(ROCKSDB_PLUGIN_MKS)
ROCKSDB_PLUGIN_SOURCES = $(foreach p, $(ROCKSDB_PLUGINS), $(foreach source, $($(p)_SOURCES), plugin/$(p)/$(source)))
ROCKSDB_PLUGIN_LIBS = $(foreach p, $(ROCKSDB_PLUGINS), $(foreach lib, $($(p)_LIBS), -l$(lib)))
ROCKSDB_PLUGIN_W_FUNCS = $(foreach p, $(ROCKSDB_PLUGINS), $(if $($(p)_FUNC), $(p)))
ROCKSDB_PLUGIN_EXTERNS = $(foreach p, $(ROCKSDB_PLUGIN_W_FUNCS), int $($(p)_FUNC)(ROCKSDB_NAMESPACE::ObjectLibrary&, const std::string&);)
ROCKSDB_PLUGIN_BUILTINS = $(foreach p, $(ROCKSDB_PLUGIN_W_FUNCS), {"$(p)", $($(p)_FUNC)},)
ROCKSDB_PLUGIN_LDFLAGS = $(foreach plugin, $(ROCKSDB_PLUGINS), $($(plugin)_LDFLAGS))

builtins.h:
	@echo '#include <rocksdb/utilities/object_registry.h>' > $@
	@echo 'extern "C" { $(ROCKSDB_PLUGIN_EXTERNS) }' >> $@
	@echo 'static const std::pair<const char*, ROCKSDB_NAMESPACE::RegistrarFunc> kBuiltins[] = {$(ROCKSDB_PLUGIN_BUILTINS)};' >> $@
program: builtins.h main.cc
	$(CXX) -std=c++17 -O1 -o $@ main.cc $(ROCKSDB_PLUGIN_SOURCES) $(ROCKSDB_PLUGIN_LDFLAGS) $(ROCKSDB_PLUGIN_LIBS) -lrocksdb -lpthread
MK

cat > main.cc <<'CC'
#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/secondary_cache.h>
#include <rocksdb/table.h>

#include <cstdio>
#include <memory>
#include <string>

#include "builtins.h"

int main(int, char** argv) {
  for (const auto& [name, registrar] : kBuiltins)  // as ObjectRegistry does with its builtins
    ROCKSDB_NAMESPACE::ObjectRegistry::Default()->AddLibrary(name, registrar, "");
  std::shared_ptr<rocksdb::SecondaryCache> tier;
  rocksdb::Status s =
      rocksdb::SecondaryCache::CreateFromString(rocksdb::ConfigOptions(), "zsm://8M", &tier);
  if (!s.ok() || !tier) return std::printf("no tier: %s\n", s.ToString().c_str()), 1;
  rocksdb::LRUCacheOptions primary(256 << 10, 0, false, 0.5);
  primary.secondary_cache = tier;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(primary);
  rocksdb::Options options;
  options.create_if_missing = true;
  options.compression = rocksdb::kNoCompression;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::DB* db = nullptr;
  if (!rocksdb::DB::Open(options, std::string(argv[0]) + ".db", &db).ok()) return 1;
  for (int i = 0; i < 3000; i++)
    db->Put(rocksdb::WriteOptions(), "key" + std::to_string(i), std::string(900, 'v') + std::to_string(i));
  db->Flush(rocksdb::FlushOptions());
  int wrong = 0;
  for (int round = 0; round < 2; round++)
    for (int i = 0; i < 3000; i++) {
      std::string got;
      wrong += !db->Get(rocksdb::ReadOptions(), "key" + std::to_string(i), &got).ok() ||
               got != std::string(900, 'v') + std::to_string(i);
    }
  delete db;
  std::printf("%s: %d values read back wrong\n", tier->Name(), wrong);
  return wrong == 0 ? 0 : 1;
}
CC

make -s program ZSM_PREFIX="$scratch/prefix"
grep -q 'extern "C" { *int register_ZsmSecondaryCache(' builtins.h
./program
echo "plugin build test passed"
