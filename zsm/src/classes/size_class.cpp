// Validator and printer for the size-class table (size_class.h).
#include "classes/size_class.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

const char* validate_class_table(const ClassTable& t) {
  if (!valid_geometry(t.page_size, t.chain)) return "page size or chain size out of range";
  if (t.nr_indices == 0 || t.nr_indices > kMaxClassIndices) return "index count out of range";
  uint32_t distinct = 0;
  for (uint32_t i = 0; i < t.nr_indices; i++) {
    const ClassRow& r = t.rows[i];
    if (r.resolve < i || r.resolve >= t.nr_indices) return "merge target is not a larger index";
    if (!t.distinct(r.resolve)) return "merge target is itself merged";
    if (r.pages < 1 || r.pages > t.chain) return "pages per zspage out of range";
    if (r.objs < 1 || uint64_t{r.objs} * r.size > uint64_t{r.pages} * t.page_size)
      return "objects do not fit their zspage";
    if (r.size % 16 != 0 && r.size != t.page_size) return "class size not 16-byte aligned";
    if (t.distinct(i)) distinct++;
    if (i > 0 && t.rows[i - 1].size > r.size) return "class sizes not ascending";
  }
  if (distinct != t.nr_distinct) return "distinct count does not match";
  if (!t.rows[t.nr_indices - 1].huge()) return "the largest class is not huge";
  return nullptr;
}

void print_class_table(const ClassTable& t, FILE* out) {
  std::fprintf(out, "page %u, chain %u: %u indices, %u classes, huge class size %u\n",
               t.page_size, t.chain, t.nr_indices, t.nr_distinct, t.huge_class_size);
  std::fprintf(out, "%5s %6s %5s %6s %6s %6s %6s\n", "index", "size", "pages", "objs", "class",
               "clsize", "waste");
  for (uint32_t i = 0; i < t.nr_indices; i++) {
    uint32_t size = kMinAllocSize + i * t.delta;
    if (size > t.page_size) size = t.page_size;
    const ClassRow& r = t.rows[i];
    std::fprintf(out, "%5u %6u %5u %6u %6u %6u %6u%s\n", i, size, r.pages, r.objs, r.resolve,
                 r.size, r.waste(t.page_size),
                 r.huge() ? " huge" : (t.distinct(i) ? "" : " merged"));
  }
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
