// zsm::stats (stats.hpp): the kernel-format printers, the pool summary and the sampler, all
// computed from the pool's public C API. Every per-class figure comes from zs_class_stats on
// the distinct classes only (a merged index describes the class it merges into, and counting
// it again would count that class twice).
#include <zsm/stats.hpp>

#include <cinttypes>
#include <utility>

namespace zsm::stats {
namespace {

// Calls fn(stats) for each distinct class of the pool, smallest first.
template <typename Fn>
void for_each_distinct_class(zs_pool* pool, Fn fn) {
  const unsigned count = zs_class_count(pool);
  for (unsigned i = 0; i < count; i++) {
    struct zs_class_stats s{};
    if (zs_class_stats(pool, i, &s) == 1) fn(s);
  }
}

bool wrote(std::FILE* out) { return std::ferror(out) == 0; }

double ratio(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

// A huge class holds one object per one-page zspage, without the in-object header.
bool is_huge(const struct zs_class_stats& s) {
  return s.pages_per_zspage == 1 && s.objs_per_zspage == 1;
}

// Bytes of the live slots and pages compaction could free, over every class.
struct Occupancy {
  uint64_t slot_bytes = 0;
  unsigned long freeable_pages = 0;
};

Occupancy occupancy(zs_pool* pool) {
  Occupancy o;
  for_each_distinct_class(pool, [&](const struct zs_class_stats& s) {
    o.slot_bytes += uint64_t{s.obj_used} * s.size;
    o.freeable_pages += s.freeable;
  });
  return o;
}

unsigned long pages_compacted(zs_pool* pool) {
  struct zs_pool_stats ps{};
  zs_pool_stats(pool, &ps);
  return ps.pages_compacted;
}

}  // namespace

bool print_classes(zs_pool* pool, std::FILE* out) { return zs_print_classes(pool, out) == 0; }

bool print_allocinfo(std::FILE* out, size_t max_sites) {
  return zs_print_allocinfo(out, max_sites) == 0;
}

size_t pool_page_size(zs_pool* pool) {
  struct zs_class_stats last{};
  zs_class_stats(pool, zs_class_count(pool) - 1, &last);
  return last.size;
}

std::vector<ClassGeometry> class_geometry(zs_pool* pool) {
  const size_t page_size = pool_page_size(pool);
  std::vector<ClassGeometry> rows;
  size_t prev_max_payload = 0;
  for_each_distinct_class(pool, [&](const struct zs_class_stats& s) {
    ClassGeometry g;
    g.index = s.index;
    g.size = s.size;
    g.pages_per_zspage = s.pages_per_zspage;
    g.objs_per_zspage = s.objs_per_zspage;
    g.zspage_bytes = s.pages_per_zspage * page_size;
    g.tail_waste = g.zspage_bytes - size_t{s.objs_per_zspage} * s.size;
    g.min_payload = prev_max_payload + 1;
    g.max_payload = is_huge(s) ? s.size : s.size - ZS_HANDLE_SIZE;
    prev_max_payload = g.max_payload;
    rows.push_back(g);
  });
  return rows;
}

bool print_class_geometry(zs_pool* pool, std::FILE* out) {
  if (out == nullptr) return false;
  std::fprintf(out, "# %5s %5s %16s %15s %12s %10s %11s %11s\n", "index", "size",
               "pages_per_zspage", "objs_per_zspage", "zspage_bytes", "tail_waste",
               "min_payload", "max_payload");
  for (const ClassGeometry& g : class_geometry(pool))
    std::fprintf(out, "  %5u %5u %16u %15u %12zu %10zu %11zu %11zu\n", g.index, g.size,
                 g.pages_per_zspage, g.objs_per_zspage, g.zspage_bytes, g.tail_waste,
                 g.min_payload, g.max_payload);
  return wrote(out);
}

double PoolSummary::utilization() const {
  return ratio(payload_bytes.value_or(slot_bytes), held_bytes());
}

PoolSummary summarize(zs_pool* pool, std::optional<uint64_t> payload_bytes) {
  PoolSummary s;
  s.name = zs_pool_name(pool);
  s.page_size = pool_page_size(pool);
  s.pages = zs_get_total_pages(pool);
  s.bookkeeping_bytes = zs_pool_bookkeeping_bytes(pool);
  s.payload_bytes = payload_bytes;
  s.pages_compacted = pages_compacted(pool);
  s.huge_class_size = zs_huge_class_size(pool);
  for_each_distinct_class(pool, [&](const struct zs_class_stats& c) {
    s.objects += c.obj_used;
    s.slots += c.obj_allocated;
    s.slot_bytes += uint64_t{c.obj_used} * c.size;
    s.freeable_pages += c.freeable;
    s.classes++;
    s.classes_in_use += c.pages_used > 0 ? 1 : 0;
  });
  return s;
}

bool print_summary(const PoolSummary& s, std::FILE* out) {
  if (out == nullptr) return false;
  std::fprintf(out, "pool \"%s\": %zu-byte pages, %u size classes (%u in use), objects of %zu B "
               "and more stored whole (huge)\n",
               s.name, s.page_size, s.classes, s.classes_in_use, s.huge_class_size);
  std::fprintf(out, "held: %lu pages = %" PRIu64 " B, plus %zu B of bookkeeping\n", s.pages,
               s.held_bytes(), s.bookkeeping_bytes);
  std::fprintf(out, "objects: %lu live in %lu slots, %" PRIu64
               " B of slots (headers and class rounding included)\n",
               s.objects, s.slots, s.slot_bytes);
  if (s.payload_bytes)
    std::fprintf(out, "payload: %" PRIu64 " B; utilization %.1f %% (payload / pages held), "
                 "%.1f %% with the bookkeeping\n",
                 *s.payload_bytes, 100 * s.utilization(),
                 100 * ratio(*s.payload_bytes, s.held_bytes() + s.bookkeeping_bytes));
  else
    std::fprintf(out, "utilization %.1f %% (live slots / pages held)\n", 100 * s.utilization());
  std::fprintf(out, "compaction: %lu pages freeable now, %lu pages freed so far\n",
               s.freeable_pages, s.pages_compacted);
  return wrote(out);
}

Sampler::Sampler(zs_pool* pool, LiveBytes live_bytes)
    : pool_(pool),
      live_bytes_(std::move(live_bytes)),
      page_size_(pool_page_size(pool)),
      start_(std::chrono::steady_clock::now()),
      last_compacted_(pages_compacted(pool)) {}

void Sampler::sample(uint64_t op) {
  Sample s;
  s.op = op;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  s.pages = zs_get_total_pages(pool_);
  s.held_bytes = uint64_t{s.pages} * page_size_;
  Occupancy o = occupancy(pool_);
  s.live_bytes = live_bytes_ ? live_bytes_() : o.slot_bytes;
  s.utilization = ratio(s.live_bytes, s.held_bytes);
  s.freeable_pages = o.freeable_pages;
  const unsigned long compacted = pages_compacted(pool_);
  s.compacted_pages = compacted - last_compacted_;
  last_compacted_ = compacted;
  samples_.push_back(s);
}

bool Sampler::write_trace(std::FILE* out) const {
  if (out == nullptr) return false;
  std::fprintf(out, "# %10s %10s %8s %12s %12s %11s %8s %9s\n", "op", "seconds", "pages",
               "held_bytes", "live_bytes", "utilization", "freeable", "compacted");
  for (const Sample& s : samples_)
    std::fprintf(out, "  %10" PRIu64 " %10.6f %8lu %12" PRIu64 " %12" PRIu64 " %11.4f %8lu %9lu\n",
                 s.op, s.seconds, s.pages, s.held_bytes, s.live_bytes, s.utilization,
                 s.freeable_pages, s.compacted_pages);
  return wrote(out);
}

}  // namespace zsm::stats
