// zsm_demo: a small tour of the C++ API. Stores objects with sizes like those of compressed 4 KiB
// pages, frees a random half, compacts, checks every remaining byte, and prints the pool's
// class table. Usage: zsm_demo [OBJECTS [SEED]] (20000 and 1 by default); --help.
#include <zsm/zsm.hpp>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <vector>

#include "cli.h"

namespace {

// Sizes of compressed 4 KiB pages: mostly 0.3-3 KiB, a tail of incompressible pages.
size_t draw_size(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> pick(0, 99);
  int p = pick(rng);
  if (p < 10) return std::uniform_int_distribution<size_t>(40, 400)(rng);
  if (p < 55) return std::uniform_int_distribution<size_t>(400, 1600)(rng);
  if (p < 90) return std::uniform_int_distribution<size_t>(1600, 3600)(rng);
  return 4096;
}

std::byte pattern(unsigned long seed, size_t i) {
  return static_cast<std::byte>((seed * 2654435761u + i * 40503u) >> 7);
}

struct Object {
  zsm::Handle handle;
  size_t size;
  unsigned long seed;
};

bool check(const Object& o, std::vector<std::byte>& buf) {
  buf.resize(o.size);
  o.handle.read(buf);
  for (size_t i = 0; i < o.size; i++)
    if (buf[i] != pattern(o.seed, i)) return false;
  return true;
}

struct Options {
  size_t count = 20000;
  unsigned long seed = 1;
  int positionals = 0;
};

constexpr const char* kSynopsis =
    "zsm_demo [OBJECTS [SEED]]  (store OBJECTS objects, default 20000, 1..10000000; random "
    "sizes and frees from SEED, default 1)";

void take_positional(Options& o, const std::string& arg) {
  switch (o.positionals++) {
    case 0: o.count = zsm_cli::parse_count(arg, "OBJECTS", 1, 10'000'000); break;
    case 1: o.seed = zsm_cli::parse_count(arg, "SEED"); break;
    default: throw std::invalid_argument("unexpected argument '" + arg + "'");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  try {
    zsm_cli::parse<Options>(argc, argv, kSynopsis, {}, opt, take_positional);
  } catch (const std::invalid_argument& e) {
    return zsm_cli::usage_error("zsm_demo", e);
  }
  const size_t count = opt.count;
  const unsigned long seed = opt.seed;
  std::mt19937_64 rng(seed);
  zsm::Pool pool("demo");

  std::vector<Object> objects;
  std::vector<std::byte> buf;
  size_t payload = 0;
  for (size_t n = 0; n < count; n++) {
    size_t size = draw_size(rng);
    buf.resize(size);
    for (size_t i = 0; i < size; i++) buf[i] = pattern(n, i);
    objects.push_back({pool.store(buf), size, n});
    payload += size;
  }
  auto mib = [](double bytes) { return bytes / (1 << 20); };
  const double page = 4096;
  std::printf("stored %zu objects, %.1f MiB payload in %lu pages (%.1f MiB): %.1f%% used\n",
              count, mib(payload), pool.total_pages(), mib(pool.total_pages() * page),
              100.0 * payload / (pool.total_pages() * page));

  std::shuffle(objects.begin(), objects.end(), rng);
  for (size_t n = 0; n < count / 2; n++) payload -= objects[n].size;
  objects.erase(objects.begin(), objects.begin() + count / 2);
  unsigned long before = pool.total_pages();
  std::printf("freed half: %lu pages hold %.1f MiB payload: %.1f%% used\n", before,
              mib(payload), 100.0 * payload / (before * page));
  unsigned long freed = pool.compact();
  std::printf("zs_compact freed %lu pages: %lu -> %lu pages, %.1f%% used\n", freed, before,
              pool.total_pages(), 100.0 * payload / (pool.total_pages() * page));

  size_t bad = 0;
  for (const Object& o : objects) bad += !check(o, buf);
  std::printf("verified %zu objects after compaction: %zu mismatches\n\n", objects.size(), bad);
  zs_print_classes(pool.get(), stdout);
  return bad == 0 ? 0 : 1;
}
