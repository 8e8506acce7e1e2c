// zsm_copy_bench: the copy alone, the C library's memcpy against zsm's copy_payload()
// (zsm/src/base/copy.cpp), at the places zsm's objects really take (Google Benchmark).
//
// For each of the pair benchmark's sizes (live_set.h), the payload slots of as many zspages of
// the size's class as the pair benchmark's live set of kLiveObjects objects fills (slot size
// and pages per zspage from a real pool of the patched variant): slot k of a zspage has its
// payload at k * slot size + 8 (the 8-byte object header), so it is 8 bytes past a 16-byte
// boundary, at whatever offset in its page the class gives it. The slots that lie in one page
// are the "inpage" runs, those that cross a page boundary the "split" runs, copied in two
// parts at the boundary as zs_store and zs_obj_read_begin copy them. Each iteration copies
// one slot, in an order shuffled once (the pair benchmark's victims are random), so the
// pages are as far from the core as in the pair benchmark (0.4-3.3 MB). The other side is a
// page-aligned buffer, as a caller's page buffer is (zram's per-CPU buffers; the pair
// benchmark's source, 64 KiB from mimalloc, is page-aligned too). That alignment matters on
// AMD Zen with glibc 2.36, whose memcpy takes `rep movsb` from 2112 B: docs/benchmarks.md
// ("The copy into and out of pages") has the figures.
//
// Names: copy/<into|out>/<inpage|split>/<memcpy|zsm|unaligned_sse2|aligned_sse2|
// unaligned_avx2|aligned_avx2>/<size>; into = from the caller's buffer into the page (a store),
// out = from the page into the caller's buffer (a read's copy-out). zsm is copy_payload() as
// the pool calls it; the others are its two shapes above 128 B (a trip count of the length
// alone, or stores aligned to the destination) in its two widths, run alone (avx2 only where
// the CPU has it).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <zsm/version.h>

#include "driver_args.h"
#include "live_set.h"
#include "variants.h"
#define ZSM_VARIANT_NS bench_patched
#include "base/copy.h"
#undef ZSM_VARIANT_NS

namespace zsm_bench {
namespace {

namespace zp = zsm::bench_patched;
constexpr size_t kPage = 4096;

using CopyFn = void (*)(void*, const void*, size_t);

void libc_memcpy(void* d, const void* s, size_t n) { std::memcpy(d, s, n); }

struct Slot {
  size_t offset;  // of the payload in the zspage
  size_t first;   // bytes of it in its first page (== size when it does not cross)
};

struct Zspages {
  size_t pages = 0;                 // in all
  std::vector<Slot> inpage, split;  // offsets from the first page, shuffled
};

// The payload slots of the zspages that kLiveObjects objects of `size` bytes fill.
Zspages zspages_of(size_t size) {
  zp::ZsPool* pool = zp::zs_create_pool("copy_bench", nullptr);
  struct zs_class_stats cls{};
  // The class of an object of `size` payload bytes holds them and their header.
  const auto stored = static_cast<unsigned>(size + ZS_HANDLE_SIZE);
  zp::zs_class_stats(pool, zp::zs_lookup_class_index(pool, stored), &cls);
  zp::zs_destroy_pool(pool);
  size_t zspages = (kLiveObjects + cls.objs_per_zspage - 1) / cls.objs_per_zspage;
  Zspages z;
  z.pages = zspages * cls.pages_per_zspage;
  for (size_t zspage = 0; zspage < zspages; zspage++) {
    for (size_t k = 0; k < cls.objs_per_zspage; k++) {
      size_t offset = zspage * cls.pages_per_zspage * kPage + k * cls.size + ZS_HANDLE_SIZE;
      size_t first = std::min(size, kPage - offset % kPage);
      (first == size ? z.inpage : z.split).push_back({offset, first});
    }
  }
  XorShift rng(size);
  for (std::vector<Slot>* slots : {&z.inpage, &z.split})
    for (size_t i = slots->size(); i > 1; i--) std::swap((*slots)[i - 1], (*slots)[rng.next() % i]);
  return z;
}

struct AlignedBuffer {
  explicit AlignedBuffer(size_t align, size_t n)
      : p(static_cast<char*>(std::aligned_alloc(align, n))) {
    std::memset(p, 0x5a, n);
  }
  ~AlignedBuffer() { std::free(p); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  char* p;
};

template <bool kInto>
void BM_Copy(benchmark::State& state, CopyFn copy, bool split) {
  const size_t size = static_cast<size_t>(state.range(0));
  Zspages z = zspages_of(size);
  const std::vector<Slot>& slots = split ? z.split : z.inpage;
  if (slots.empty()) {
    state.SkipWithError("no such slot in this class");
    return;
  }
  AlignedBuffer page(kPage, z.pages * kPage), buffer(kPage, kPage);
  size_t i = 0;
  for (auto _ : state) {
    const Slot& slot = slots[i];
    i = i + 1 == slots.size() ? 0 : i + 1;
    char* obj = page.p + slot.offset;
    // The object's header, written just before the payload as zs_store writes it.
    if (kInto) std::memcpy(obj - 8, &slot.offset, 8);
    // Two copies where the slot crosses a page, the part in the next page first, as zsm does.
    if (slot.first < size) {
      if (kInto)
        copy(obj + slot.first, buffer.p + slot.first, size - slot.first);
      else
        copy(buffer.p + slot.first, obj + slot.first, size - slot.first);
    }
    if (kInto)
      copy(obj, buffer.p, slot.first);
    else
      copy(buffer.p, obj, slot.first);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * size));
}

void register_copies(const char* impl, CopyFn copy) {
  for (bool split : {false, true}) {
    for (bool into : {true, false}) {
      std::string name = std::string("copy/") + (into ? "into/" : "out/") +
                         (split ? "split/" : "inpage/") + impl;
      auto* b = benchmark::RegisterBenchmark(
          name.c_str(), [copy, split, into](benchmark::State& state) {
            if (into)
              BM_Copy<true>(state, copy, split);
            else
              BM_Copy<false>(state, copy, split);
          });
      for (size_t size : kSizes) b->Arg(static_cast<int64_t>(size));
    }
  }
}

}  // namespace
}  // namespace zsm_bench

int main(int argc, char** argv) {
  using namespace zsm_bench;
  if (zsm_driver::answered_version(argc, argv, "zsm_copy_bench " ZSM_VERSION_STRING)) return 0;
  register_copies("memcpy", libc_memcpy);
  register_copies("zsm", zp::copy_payload);
#if defined(__x86_64__)
  register_copies("unaligned_sse2", zp::copy_payload_unaligned_sse2);
  register_copies("aligned_sse2", zp::copy_payload_aligned_sse2);
  if (zp::copy_payload_avx2_usable()) {
    register_copies("unaligned_avx2", zp::copy_payload_unaligned_avx2);
    register_copies("aligned_avx2", zp::copy_payload_aligned_avx2);
  }
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
