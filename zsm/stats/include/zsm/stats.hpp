// zsm::stats (zsm/stats/, beside the pool): what a program can print about its own pool, in
// the kernel's formats, and a sampler that records how a pool's memory evolves, for plots.
//
// - print_classes: the kernel's debugfs /sys/kernel/debug/zsmalloc/<pool>/classes table (the
//   library's zs_print_classes, unchanged).
// - print_allocinfo: /proc/allocinfo lines, when allocation profiling is built in.
// - summarize / print_summary: pages and bookkeeping held, objects, utilization, compaction.
// - class_geometry / print_class_geometry: each distinct class's zspage shape and the waste at
//   its tail, computed by the pool (never pasted numbers): the data of the waste plot.
// - Sampler: one row per call (op count, seconds, pages held, live bytes, utilization,
//   freeable pages, pages compacted since the last row), written as a gnuplot-ready table.
//
// Everything reads the pool through its public C API (zs_class_stats, zs_get_total_pages,
// zs_pool_stats), which locks one class at a time: any thread may call these while others
// use the pool, and a row is a consistent picture of each class, not of the whole pool. The
// pool must be live; a NULL pool reads as an empty one (print_classes: false). The printers
// return false when the stream's error indicator is set after writing (std::ferror: this
// write failed, or an earlier one did); they do not flush, so a failure still buffered shows
// only later. A NULL stream is false for print_classes and print_allocinfo, undefined (a
// crash) for the others.
// Depends on zsm::zsm only (a cache's zram mm_stat line is zsm::Cache::mm_stat()).
#pragma once

#include <zsm/zsmalloc.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <vector>

namespace zsm::stats {

// The debugfs classes table (zs_print_classes()): a header, one row per distinct class, then
// Total. False, with errno EINVAL, for a NULL pool or stream, or with errno EIO when writing
// fails.
bool print_classes(zs_pool* pool, std::FILE* out);

// /proc/allocinfo (zs_print_allocinfo()): a header, then live bytes and objects per call
// site over every pool of the process, most bytes first (up to `max_sites`, 0 = all). Sites
// appear once profiling has counted an object there (zs_alloc_profiling_set), and stay with
// zero counters when all are freed. Without ZSM_PROFILING it prints one line saying so.
// False, with errno EINVAL, for a NULL stream, or with errno EIO when writing fails.
bool print_allocinfo(std::FILE* out, size_t max_sites = 0);

// The page size a pool was created with (the size of its last class, which is one page); 0
// for a NULL pool.
size_t pool_page_size(zs_pool* pool);

// One distinct size class's shape. Objects of min_payload..max_payload bytes land in it
// (the in-object header and the merged indices below it included).
struct ClassGeometry {
  unsigned index = 0;             // class index (zs_class_stats)
  unsigned size = 0;              // slot size, header included
  unsigned pages_per_zspage = 0;
  unsigned objs_per_zspage = 0;
  size_t zspage_bytes = 0;        // pages_per_zspage * page size
  size_t tail_waste = 0;          // zspage_bytes - objs_per_zspage * size
  size_t min_payload = 0;         // smallest request served here (1 for the first class)
  size_t max_payload = 0;         // largest: size less the header (huge class: the page)
};
// Every distinct class of the pool, smallest first; empty for a NULL pool.
std::vector<ClassGeometry> class_geometry(zs_pool* pool);
// The geometry as a table with a '#' header line, one class per line. False when writing fails.
bool print_class_geometry(zs_pool* pool, std::FILE* out);

// A pool at one moment, from summarize(): what it holds and how well it is used. Each class's
// figures are read under its lock; the summary as a whole is not a snapshot.
struct PoolSummary {
  const char* name = "";                // the pool's name: valid while the pool lives
  size_t page_size = 0;
  unsigned long pages = 0;              // zs_get_total_pages
  size_t bookkeeping_bytes = 0;         // zs_pool_bookkeeping_bytes
  unsigned long objects = 0;            // live objects (obj_used)
  unsigned long slots = 0;              // object slots in the zspages held (obj_allocated)
  uint64_t slot_bytes = 0;              // live objects times their slot size
  std::optional<uint64_t> payload_bytes;  // what the caller stored, when it says
  unsigned long freeable_pages = 0;     // what zs_compact() could free now
  unsigned long pages_compacted = 0;    // freed by compaction over the pool's life
  unsigned classes = 0;                 // distinct classes
  unsigned classes_in_use = 0;          // distinct classes holding a zspage
  size_t huge_class_size = 0;

  // Pages held, in bytes.
  [[nodiscard]] uint64_t held_bytes() const { return uint64_t{pages} * page_size; }
  // Live bytes (the payload when known, else the slots) over the pages held; 0 when no page
  // is held. Above 1 when the caller's payload exceeds the pages (compressed data, say).
  [[nodiscard]] double utilization() const;
};
// Summarizes the pool; `payload_bytes` is what the caller knows it stored, if it does. A NULL
// pool gives an empty summary named "".
PoolSummary summarize(zs_pool* pool, std::optional<uint64_t> payload_bytes = std::nullopt);
// The summary as a few lines of text (pool, held, objects, payload or utilization,
// compaction). False when writing fails.
bool print_summary(const PoolSummary& summary, std::FILE* out);

// Records the pool's state each time sample() is called; the caller chooses when (every N
// operations, after a compaction). Compactions show as pages_compacted growing between two
// rows, whoever called zs_compact (a cache compacts by itself under pressure). The pool must
// outlive the sampler. One Sampler is not synchronised: call it from one thread at a time.
class Sampler {
 public:
  // What counts as live bytes; by default the bytes of the live object slots. Called by
  // sample(), on its thread.
  using LiveBytes = std::function<uint64_t()>;

  // One row of the trace.
  struct Sample {
    uint64_t op = 0;                 // the caller's operation count
    double seconds = 0;              // since the sampler was created
    unsigned long pages = 0;         // pages held (zs_get_total_pages)
    uint64_t held_bytes = 0;         // pages times the page size
    uint64_t live_bytes = 0;         // LiveBytes, or the bytes of the live object slots
    double utilization = 0;          // live_bytes / held_bytes (0 for an empty pool)
    unsigned long freeable_pages = 0;   // what zs_compact() could free now
    unsigned long compacted_pages = 0;  // freed by compaction since the previous sample (the
                                        // first: since the sampler was created)
  };

  // A sampler of `pool` with no rows yet; it reads the pool's page size and pages compacted
  // so far now, and counts seconds from now. `live_bytes` empty = the live slots' bytes.
  explicit Sampler(zs_pool* pool, LiveBytes live_bytes = {});

  // Appends one row for the pool's state now, tagged with the caller's operation count `op`.
  // Throws only what live_bytes throws, or std::bad_alloc.
  void sample(uint64_t op);
  // The rows so far, oldest first. The reference lives as long as the sampler; sample() may
  // move the rows.
  [[nodiscard]] const std::vector<Sample>& samples() const noexcept { return samples_; }
  // The samples as whitespace-separated columns under a '#' header naming them. False when
  // writing fails.
  bool write_trace(std::FILE* out) const;

 private:
  zs_pool* pool_;
  LiveBytes live_bytes_;
  size_t page_size_;
  std::chrono::steady_clock::time_point start_;
  unsigned long last_compacted_;
  std::vector<Sample> samples_;
};

}  // namespace zsm::stats
