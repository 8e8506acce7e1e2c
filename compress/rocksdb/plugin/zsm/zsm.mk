# zsm's secondary cache built into RocksDB by RocksDB's own make (its plugin/README.md): link
# this folder into a RocksDB tree as plugin/zsm, install zsm (cmake --install, into ZSM_PREFIX),
# then build RocksDB with it:
#
#   ln -s /path/to/zsm/compress/rocksdb/plugin/zsm rocksdb/plugin/zsm
#   make -C rocksdb ROCKSDB_PLUGINS=zsm ZSM_PREFIX=/opt/zsm static_lib db_bench
#
# and zsm://... names a tier (--secondary_cache_uri=zsm://32M) with no LD_PRELOAD: RocksDB's
# build calls zsm_FUNC, the registrar, when its object registry starts. The tier itself is
# zsm's prebuilt libzsm_rocksdb (zsm's code is C++20, RocksDB's build C++17), so it must have
# been built against the headers of the RocksDB it goes into (cmake finds RocksDB by
# pkg-config: point PKG_CONFIG_PATH at that RocksDB's when configuring zsm). Nothing is
# compiled from here: zsm_SOURCES is empty.
ZSM_PREFIX ?= /usr/local
zsm_SOURCES =
zsm_FUNC = register_ZsmSecondaryCache
zsm_LIBS = zsm_rocksdb zsm_cache zsm lz4 zstd xxhash
zsm_LDFLAGS = -L$(ZSM_PREFIX)/lib -Wl,-rpath,$(ZSM_PREFIX)/lib
