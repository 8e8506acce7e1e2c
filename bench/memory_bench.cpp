// zsm_memory_bench: live payload bytes per byte the allocator holds, for zsm, mimalloc, glibc,
// jemalloc and tcmalloc, on a live set whose sizes come from compressing real 4 KiB pages with
// lz4 and zstd.
//
// Corpus: regular files under the given directories (default /usr/lib /usr/share), in a
// shuffled order fixed by the seed, up to 8 pages per file, until --pages pages. As zram
// does, same-filled pages (one repeated 8-byte word) take no allocator memory and are left
// out, and a page that compresses to the huge class size or more is stored raw (4096 B).
//
// What "held" means, per allocator (every figure includes per-object bookkeeping):
//   zsm       pool pages x 4096 + zs_pool_bookkeeping_bytes() (handle cells, zspage metadata,
//             pool structures). Object headers are inside the pages.
//   mimalloc  the committed bytes of every area of a dedicated heap (mi_heap_visit_blocks).
//   glibc     mallinfo2() arena + hblkhd (bytes taken from the OS by sbrk and mmap). glibc's
//             malloc is called by version (variants.h): linking mimalloc makes it the
//             process's malloc.
//   jemalloc  stats.resident after refreshing the statistics ("epoch"): the physically
//             resident pages it has mapped, for data and for its own metadata, including
//             dirty pages not yet returned (stats.active would leave out metadata and dirty
//             pages; stats.mapped, dirty pages).
//   tcmalloc  generic.total_physical_bytes: the heap less the pages returned to the OS, plus
//             metadata (generic.heap_size would count returned pages too).
//   glibc, jemalloc and tcmalloc are measured in a forked child, so that the figures hold
//   this live set and little else, as held bytes less what the allocator held at the child's
//   start that cannot take data (its start-up metadata: jemalloc's 2.7 MB, tcmalloc's 2.6 MB
//   on Debian 12). Free heap pages it held at the start do count: the live set fills them.
// Phases: the full live set; after freeing a random 50 % and letting the allocator return what
// it can (mimalloc: mi_heap_collect; glibc: malloc_trim; jemalloc: thread cache flush and a
// purge of every arena; tcmalloc: MallocExtension_ReleaseFreeMemory); for zsm also after
// zs_compact().
// Output: a table, or JSON with --json.
#include <gperftools/malloc_extension_c.h>
#include <lz4.h>
#include <malloc.h>
#include <mimalloc.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cli.h"
#include "corpus.h"
#include "live_set.h"
#include "variants.h"

namespace zsm_bench {
namespace {

constexpr size_t kPage = 4096;

struct Options {
  size_t pages = 20000;
  unsigned chain = 8;
  uint64_t seed = 1;
  bool json = false;
  std::vector<std::string> roots;
};

struct Result {
  std::string allocator, phase;
  size_t objects = 0, payload = 0, held = 0;
  // zsm only: where the held bytes that are not payload go.
  size_t slot_rounding = 0;   // live slots beyond their payload (8-byte header + class rounding)
  size_t free_slots = 0;      // slots of zspages not holding an object, reserved ones included
  size_t reserved = 0;        // of those, slots the thread's cache keeps for its next stores
  size_t tail_waste = 0;      // zspage bytes after the last slot
  size_t bookkeeping = 0;     // handle cells, zspage metadata, pool structures
};

// Splits a zsm pool's held bytes into the parts of Result.
void zsm_breakdown(zsm::bench_patched::ZsPool* pool, Result& r) {
  size_t slots = 0;
  for (unsigned i = 0; i < zsm::bench_patched::zs_class_count(pool); i++) {
    struct zs_class_stats st{};
    if (zsm::bench_patched::zs_class_stats(pool, i, &st) != 1) continue;
    size_t zspages = st.obj_allocated / st.objs_per_zspage;
    slots += st.obj_used * st.size;
    r.free_slots += (st.obj_allocated - st.obj_used) * st.size;
    r.tail_waste += zspages * (st.pages_per_zspage * kPage - st.objs_per_zspage * st.size);
  }
  // The class statistics count reserved slots as used: they hold no object.
  struct zs_pool_stats ps{};
  zsm::bench_patched::zs_pool_stats(pool, &ps);
  r.reserved = ps.cached_bytes;
  slots -= r.reserved;
  r.free_slots += r.reserved;
  r.slot_rounding = slots - r.payload;
  r.bookkeeping = zsm::bench_patched::zs_pool_bookkeeping_bytes(pool);
}

bool same_filled(const unsigned char* page) {
  uint64_t first, word;
  std::memcpy(&first, page, 8);
  for (size_t off = 8; off < kPage; off += 8) {
    std::memcpy(&word, page + off, 8);
    if (word != first) return false;
  }
  return true;
}

// Reads up to `opt.pages` pages from the corpus, skipping same-filled ones.
std::vector<std::vector<unsigned char>> read_pages(const Options& opt) {
  std::vector<std::vector<unsigned char>> pages;
  for_each_corpus_page(corpus_files(opt.roots, opt.seed), opt.pages, 8,
                       [&](const std::filesystem::path&, size_t, const unsigned char* page) {
                         if (same_filled(page)) return false;
                         pages.emplace_back(page, page + kPage);
                         return true;
                       });
  return pages;
}

// Compressed sizes, as zram would store them: raw pages at or above the huge class size.
std::vector<size_t> compressed_sizes(const std::vector<std::vector<unsigned char>>& pages,
                                     const std::string& codec, size_t huge_class_size) {
  std::vector<size_t> sizes;
  std::vector<char> out(std::max<size_t>(LZ4_compressBound(kPage), ZSTD_compressBound(kPage)));
  ZSTD_CCtx* zstd = ZSTD_createCCtx();
  for (const auto& page : pages) {
    size_t n = codec == "lz4"
                   ? static_cast<size_t>(LZ4_compress_default(
                         reinterpret_cast<const char*>(page.data()), out.data(), kPage,
                         static_cast<int>(out.size())))
                   : ZSTD_compressCCtx(zstd, out.data(), out.size(), page.data(), kPage,
                                       ZSTD_CLEVEL_DEFAULT);
    if (n == 0 || ZSTD_isError(n) || n >= huge_class_size) n = kPage;
    sizes.push_back(n);
  }
  ZSTD_freeCCtx(zstd);
  return sizes;
}

std::vector<size_t> half_to_free(size_t n, uint64_t seed) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; i++) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  order.resize(n / 2);
  return order;
}

size_t sum_payload(const std::vector<size_t>& sizes, const std::vector<bool>& live) {
  size_t total = 0;
  for (size_t i = 0; i < sizes.size(); i++) total += live[i] ? sizes[i] : 0;
  return total;
}

void measure_zsm(const std::vector<size_t>& sizes, const std::string& set, const Options& opt,
                 std::vector<Result>& out) {
  zs_pool_config cfg{};
  cfg.chain_size = opt.chain;
  auto* pool = cached::create(&cfg);
  const uint64_t seed = opt.seed;
  std::vector<unsigned long> handles;
  std::vector<bool> live(sizes.size(), true);
  for (size_t size : sizes) handles.push_back(cached::store(pool, source_bytes(), size));
  auto held = [&] {
    return cached::total_pages(pool) * kPage + zsm::bench_patched::zs_pool_bookkeeping_bytes(pool);
  };
  auto record = [&](const std::string& phase, size_t objects) {
    Result r{"zsm", set + " " + phase, objects, sum_payload(sizes, live), held()};
    zsm_breakdown(pool, r);
    out.push_back(r);
  };
  record("full", sizes.size());
  for (size_t i : half_to_free(sizes.size(), seed)) {
    cached::free(pool, handles[i]);
    live[i] = false;
  }
  record("half freed", sizes.size() - sizes.size() / 2);
  cached::compact(pool);
  record("half freed + compact", sizes.size() - sizes.size() / 2);
  cached::destroy(pool);
}

size_t mimalloc_committed(mi_heap_t* heap) {
  size_t committed = 0;
  mi_heap_visit_blocks(
      heap, false,
      [](const mi_heap_t*, const mi_heap_area_t* area, void*, size_t, void* arg) {
        *static_cast<size_t*>(arg) += area->committed;
        return true;
      },
      &committed);
  return committed;
}

void measure_mimalloc(const std::vector<size_t>& sizes, const std::string& set, uint64_t seed,
                      std::vector<Result>& out) {
  mi_heap_t* heap = mi_heap_new();
  std::vector<void*> blocks;
  std::vector<bool> live(sizes.size(), true);
  for (size_t size : sizes) {
    blocks.push_back(mi_heap_malloc(heap, size));
    std::memcpy(blocks.back(), source_bytes(), size);
  }
  out.push_back({"mimalloc", set + " full", sizes.size(), sum_payload(sizes, live),
                 mimalloc_committed(heap)});
  for (size_t i : half_to_free(sizes.size(), seed)) {
    mi_free(blocks[i]);
    live[i] = false;
  }
  mi_heap_collect(heap, true);
  out.push_back({"mimalloc", set + " half freed", sizes.size() - sizes.size() / 2,
                 sum_payload(sizes, live), mimalloc_committed(heap), 0, 0, 0, 0});
  mi_heap_destroy(heap);
}

// A general-purpose allocator measured in a child process: how to allocate and free, how many
// bytes it holds now, how many of those are free heap pages ready for data, and how to make it
// return what it can after the frees.
struct ChildAllocator {
  const char* name;
  void* (*malloc)(size_t);
  void (*free)(void*);
  size_t (*held)();
  size_t (*free_pages)();
  void (*release)();
};

size_t glibc_held() {
  struct mallinfo2 mi = mallinfo2();
  return mi.arena + mi.hblkhd;
}
size_t glibc_free_pages() { return mallinfo2().fordblks; }
void glibc_release() { malloc_trim(0); }

// A jemalloc statistic, read after refreshing the statistics.
size_t jemalloc_stat(const std::string& name) {
  uint64_t epoch = 1;
  size_t value = 0, len = sizeof(value);
  mallctl("epoch", nullptr, nullptr, &epoch, sizeof(epoch));
  if (mallctl(name.c_str(), &value, &len, nullptr, 0) != 0) return 0;
  return value;
}
const std::string kJemallocAllArenas = std::to_string(MALLCTL_ARENAS_ALL);
size_t jemalloc_held() { return jemalloc_stat("stats.resident"); }
size_t jemalloc_free_pages() {
  return jemalloc_stat("stats.arenas." + kJemallocAllArenas + ".pdirty") *
         jemalloc_stat("arenas.page");
}
void jemalloc_release() {
  const std::string purge_all = "arena." + kJemallocAllArenas + ".purge";
  mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);
  mallctl(purge_all.c_str(), nullptr, nullptr, nullptr, 0);
}

size_t tcmalloc_property(const char* name) {
  size_t value = 0;
  MallocExtension_GetNumericProperty(name, &value);
  return value;
}
size_t tcmalloc_held() { return tcmalloc_property("generic.total_physical_bytes"); }
size_t tcmalloc_free_pages() { return tcmalloc_property("tcmalloc.pageheap_free_bytes"); }

constexpr ChildAllocator kChildAllocators[] = {
    {"glibc", glibc_malloc, glibc_free, glibc_held, glibc_free_pages, glibc_release},
    {"jemalloc", jemalloc_malloc, jemalloc_free, jemalloc_held, jemalloc_free_pages,
     jemalloc_release},
    {"tcmalloc", tc_malloc, tc_free, tcmalloc_held, tcmalloc_free_pages,
     MallocExtension_ReleaseFreeMemory},
};

// In the child: stores the live set, frees half, and writes both figures to `fd`.
[[noreturn]] void measure_in_child(const ChildAllocator& a, const std::vector<size_t>& sizes,
                                   uint64_t seed, int fd) {
  std::vector<size_t> order = half_to_free(sizes.size(), seed);
  std::vector<void*> blocks;
  blocks.reserve(sizes.size());
  const size_t start_metadata = a.held() - a.free_pages();
  for (size_t size : sizes) {
    blocks.push_back(a.malloc(size));
    std::memcpy(blocks.back(), source_bytes(), size);
  }
  size_t full = a.held() - start_metadata;
  for (size_t i : order) a.free(blocks[i]);
  a.release();
  size_t half = a.held() - start_metadata;
  size_t msg[2] = {full, half};
  ssize_t written = write(fd, msg, sizeof(msg));
  _exit(written == sizeof(msg) ? 0 : 1);
}

// Runs measure_in_child in a forked child and records its two results.
void measure_forked(const ChildAllocator& a, const std::vector<size_t>& sizes,
                    const std::string& set, uint64_t seed, std::vector<Result>& out) {
  int fds[2];
  if (pipe(fds) != 0) return;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    measure_in_child(a, sizes, seed, fds[1]);
  }
  close(fds[1]);
  size_t msg[2] = {0, 0};
  ssize_t got = read(fds[0], msg, sizeof(msg));
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  if (got != sizeof(msg)) return;
  std::vector<bool> live(sizes.size(), true);
  out.push_back({a.name, set + " full", sizes.size(), sum_payload(sizes, live), msg[0], 0, 0, 0, 0});
  for (size_t i : half_to_free(sizes.size(), seed)) live[i] = false;
  out.push_back({a.name, set + " half freed", sizes.size() - sizes.size() / 2,
                 sum_payload(sizes, live), msg[1], 0, 0, 0, 0});
}

void print(const std::vector<Result>& results, size_t pages, bool json) {
  if (json) {
    std::printf("{\n  \"pages_read\": %zu,\n  \"results\": [\n", pages);
    for (size_t i = 0; i < results.size(); i++) {
      const Result& r = results[i];
      std::printf("    {\"allocator\": \"%s\", \"phase\": \"%s\", \"objects\": %zu, "
                  "\"payload_bytes\": %zu, \"held_bytes\": %zu, \"efficiency\": %.4f, "
                  "\"slot_rounding\": %zu, \"free_slots\": %zu, \"tail_waste\": %zu, "
                  "\"bookkeeping\": %zu, \"reserved\": %zu}%s\n",
                  r.allocator.c_str(), r.phase.c_str(), r.objects, r.payload, r.held,
                  r.held ? static_cast<double>(r.payload) / r.held : 0.0, r.slot_rounding,
                  r.free_slots, r.tail_waste, r.bookkeeping, r.reserved,
                  i + 1 < results.size() ? "," : "");
    }
    std::printf("  ]\n}\n");
    return;
  }
  std::printf("%zu pages of real files; live payload bytes / bytes held\n", pages);
  std::printf("%-10s %-26s %9s %13s %13s %10s   %s\n", "allocator", "live set", "objects",
              "payload B", "held B", "live/held",
              "zsm overhead per object: rounding+header / free slots / tail / bookkeeping");
  for (const Result& r : results) {
    std::printf("%-10s %-26s %9zu %13zu %13zu %9.1f%%", r.allocator.c_str(), r.phase.c_str(),
                r.objects, r.payload, r.held, r.held ? 100.0 * r.payload / r.held : 0.0);
    if (r.allocator == "zsm")
      std::printf("   %.1f / %.1f / %.1f / %.1f B", 1.0 * r.slot_rounding / r.objects,
                  1.0 * r.free_slots / r.objects, 1.0 * r.tail_waste / r.objects,
                  1.0 * r.bookkeeping / r.objects);
    std::printf("\n");
  }
}

}  // namespace
}  // namespace zsm_bench

namespace zsm_bench {
namespace {

const zsm_cli::Flag<Options> kFlags[] = {
    {"--pages", "N", "pages read from the files (default 20000)",
     [](Options& o, const std::string& v) { o.pages = zsm_cli::parse_count(v, "--pages", 1, UINT32_MAX); }},
    {"--seed", "N", "order of the files and of the frees (default 1)",
     [](Options& o, const std::string& v) { o.seed = zsm_cli::parse_count(v, "--seed"); }},
    {"--chain", "4..16", "pages per zspage at most (default 8)",
     [](Options& o, const std::string& v) {
       o.chain = static_cast<unsigned>(zsm_cli::parse_count(v, "--chain", 4, 16));
     }},
    {"--json", nullptr, "print JSON instead of a table",
     [](Options& o, const std::string&) { o.json = true; }},
};
constexpr const char* kSynopsis = "zsm_memory_bench [options] [DIR...]  (pages from the files "
                                  "under DIR, default /usr/lib /usr/share)";

}  // namespace
}  // namespace zsm_bench

int main(int argc, char** argv) try {
  using namespace zsm_bench;
  Options opt;
  zsm_cli::parse<Options>(argc, argv, kSynopsis, kFlags, opt, [](Options& o, const std::string& dir) {
    o.roots.push_back(zsm_cli::existing_path(dir, "DIR", zsm_cli::PathKind::directory));
  });
  if (opt.roots.empty()) opt.roots = default_corpus_roots();
  auto pages = read_pages(opt);
  if (pages.empty()) {
    std::fprintf(stderr, "no pages found under the given directories\n");
    return 1;
  }
  zs_pool_config cfg{};
  cfg.chain_size = opt.chain;
  auto* probe = patched::create(&cfg);
  if (probe == nullptr) {
    std::fprintf(stderr, "bad --chain (4..16)\n");
    return 2;
  }
  size_t huge = zsm::bench_patched::zs_huge_class_size(probe);
  patched::destroy(probe);

  std::vector<Result> results;
  for (const char* codec : {"lz4", "zstd"}) {
    std::vector<size_t> sizes = compressed_sizes(pages, codec, huge);
    measure_zsm(sizes, codec, opt, results);
    measure_mimalloc(sizes, codec, opt.seed, results);
    for (const ChildAllocator& a : kChildAllocators) measure_forked(a, sizes, codec, opt.seed, results);
  }
  print(results, pages.size(), opt.json);
  return 0;
} catch (const std::invalid_argument& e) {
  return zsm_cli::usage_error("zsm_memory_bench", e);
}
