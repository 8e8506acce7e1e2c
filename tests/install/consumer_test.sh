#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds and runs the programs of examples/
# (its CMakeLists.txt on its own, as a project that uses zsm) three times: against the build
# tree through find_package(zsm) (the build tree's export; its statically linked example alone
# is run, since the shared libraries on LD_LIBRARY_PATH are the installed ones), and against
# the installed tree through find_package(zsm) and through pkg-config.
# Where the build has zsm's RocksDB secondary cache (libzsm_rocksdb installed), its example
# (rocksdb_example.cpp) is built and run the same three ways.
# Usage: consumer_test.sh BUILD_DIR SCRATCH_DIR
set -euo pipefail
build="$1" scratch="$2"
examples="$(cd "$(dirname "$0")/../../examples" && pwd)"
rm -rf "$scratch"
prefix="$scratch/prefix"
cmake --install "$build" --prefix "$prefix" > /dev/null
libdir="$(dirname "$(find "$prefix" -name libzsm.so -print -quit)")"
export LD_LIBRARY_PATH="$libdir"
rocksdb=0
[ -e "$libdir/libzsm_rocksdb.a" ] && rocksdb=1

echo "== find_package(zsm), the build tree"
cmake -S "$examples" -B "$scratch/build-tree" -G Ninja -Dzsm_DIR="$build" > /dev/null
cmake --build "$scratch/build-tree" > /dev/null
"$scratch/build-tree/cache_example_static" > /dev/null
((rocksdb == 0)) || "$scratch/build-tree/rocksdb_example_static" > /dev/null

echo "== find_package(zsm)"
cmake -S "$examples" -B "$scratch/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" > /dev/null
cmake --build "$scratch/cmake-build" > /dev/null
"$scratch/cmake-build/quick_start"
"$scratch/cmake-build/region_example"
"$scratch/cmake-build/pool_example" | tail -3
"$scratch/cmake-build/cxx_pool_example"
"$scratch/cmake-build/cache_example"
"$scratch/cmake-build/cache_example_static" > /dev/null
if ((rocksdb)); then
  "$scratch/cmake-build/rocksdb_example"
  "$scratch/cmake-build/rocksdb_example_static" > /dev/null
fi

echo "== find_package(zsm COMPONENTS ...): the components there are found, another is named"
components_project() {  # DIR COMPONENTS...: a project that asks for them, REQUIRED
  local dir="$1"; shift
  mkdir -p "$dir"
  printf 'cmake_minimum_required(VERSION 3.20)\nproject(components LANGUAGES C CXX)\n%s\n' \
    "find_package(zsm 0.1 REQUIRED COMPONENTS $*)" > "$dir/CMakeLists.txt"
}
wanted="zsm cache stats region"
((rocksdb == 0)) || wanted+=" rocksdb"
components_project "$scratch/components-ok" $wanted
cmake -S "$scratch/components-ok" -B "$scratch/components-ok/build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$prefix" > /dev/null
components_project "$scratch/components-bad" cache nosuch
if cmake -S "$scratch/components-bad" -B "$scratch/components-bad/build" -G Ninja \
    -DCMAKE_PREFIX_PATH="$prefix" > "$scratch/components-bad.log" 2>&1; then
  echo "find_package(zsm COMPONENTS nosuch) succeeded"; exit 1
fi
grep -q "component nosuch" "$scratch/components-bad.log" ||
  { echo "find_package(zsm COMPONENTS nosuch) did not name the component:"; cat "$scratch/components-bad.log"; exit 1; }

echo "== pkg-config (programs start without LD_LIBRARY_PATH: the .pc files carry an rpath)"
unset LD_LIBRARY_PATH
export PKG_CONFIG_PATH="$libdir/pkgconfig"
mkdir -p "$scratch/pc-build"
pc_libdir="$(pkg-config --variable=libdir zsm)"
[ "$pc_libdir" = "$(realpath -m "$pc_libdir")" ] && [ "$pc_libdir" = "$(realpath "$libdir")" ] ||
  { echo "pkg-config's libdir is not the installed one, normalised: $pc_libdir"; exit 1; }
cc -std=c11 "$examples/pool_example.c" $(pkg-config --cflags --libs zsm) \
  -o "$scratch/pc-build/pool_example"
c++ -std=c++20 "$examples/cache_example.cpp" $(pkg-config --cflags --libs zsm-cache) \
  -o "$scratch/pc-build/cache_example"
c++ -std=c++20 "$examples/cxx_pool_example.cpp" $(pkg-config --cflags --libs zsm) \
  -o "$scratch/pc-build/cxx_pool_example"
"$scratch/pc-build/pool_example" > /dev/null
"$scratch/pc-build/cxx_pool_example" > /dev/null
"$scratch/pc-build/cache_example"
if ((rocksdb)); then
  c++ -std=c++20 "$examples/rocksdb_example.cpp" $(pkg-config --cflags --libs zsm-rocksdb) \
    -o "$scratch/pc-build/rocksdb_example"
  "$scratch/pc-build/rocksdb_example"
fi

echo "== pkg-config, static (zsm-static, zsm-cache-static: no libzsm*.so needed at run time)"
cc -std=c11 "$examples/pool_example.c" $(pkg-config --cflags --libs zsm-static) \
  -o "$scratch/pc-build/pool_example_static"
c++ -std=c++20 "$examples/cache_example.cpp" \
  $(pkg-config --cflags --libs zsm-cache-static) -o "$scratch/pc-build/cache_example_static"
for program in pool_example_static cache_example_static; do
  if ldd "$scratch/pc-build/$program" | grep -q 'libzsm'; then
    echo "$program links a shared libzsm:"; ldd "$scratch/pc-build/$program"; exit 1
  fi
done
"$scratch/pc-build/pool_example_static" > /dev/null
"$scratch/pc-build/cache_example_static" > /dev/null
echo "consumer builds ran: find_package (build tree, installed tree) and pkg-config"
