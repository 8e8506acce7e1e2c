// Invariant checks (design: check.h). With its lock held, a shard must satisfy:
//   lists     every zspage on fullness_list[g] names the class, has fullness g, and its
//             in-use count puts it in group g; prev links mirror next links; bit g of
//             `nonempty` is set exactly when the list is non-empty.
//   hot       the hot zspage (zspage.h, "Lazy fullness"), if any, is on no list, names the
//             class, holds at least one object and has room, and is in its floor group
//             (`fullness`) or above it.
//   stats     stats[g] counts the listed zspages of group g, and the full ones; ZS_OBJS_ALLOCATED
//             is the slots of all of them (full and hot ones included), ZS_OBJS_INUSE their
//             live objects.
//   zspage    the free list visits distinct slots, and free + in use = slots; each live
//             object's header (non-huge classes) names a handle cell of the pool whose obj
//             points back at the object; the reader count is not negative (-1 means a
//             writer, and the only writer, compaction, holds the shard lock meanwhile).
// check_pool() also checks every zspage the pool holds, full ones included (found through
// the metadata arenas), and that their pages add up to zs_get_total_pages().
#include "zspage/check.h"

#include <cstdarg>
#include <cstdio>
#include <vector>

#include "zspage/obj.h"
#include "zspage/report.h"
#include "zspage/zspage.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

namespace {

// Where violations go: printed to `out` (when not null) and counted.
class Findings {
 public:
  explicit Findings(FILE* out) : out_(out) {}
  ZSM_PRINTF_FORMAT(2, 3) void add(const char* fmt, ...) {
    if (count_++ == 0 && out_ == nullptr) {
      va_list args;
      va_start(args, fmt);
      std::vsnprintf(first_, sizeof(first_), fmt, args);
      va_end(args);
    }
    if (out_ == nullptr) return;
    va_list args;
    va_start(args, fmt);
    std::vfprintf(out_, fmt, args);
    va_end(args);
    std::fputc('\n', out_);
  }
  [[nodiscard]] int count() const { return count_; }
  [[nodiscard]] const char* first() const { return first_; }

 private:
  FILE* out_;
  int count_ = 0;
  char first_[256] = {};
};

// The zspage's free list, its in-use count and its live objects' headers and cells.
void check_zspage(const ZsPool* pool, const ClassShard* shard, const ZsPage* zspage, Findings& f) {
  const ClassGeometry g = shard->geom;
  const uint32_t objs = shard->objs_per_zspage;
  if (zspage->shard.load(std::memory_order_relaxed) != shard)
    f.add("class %u: zspage %p names another shard", shard->index,
          static_cast<const void*>(zspage));
  if (zspage->inuse > objs)
    f.add("class %u: zspage in use %u > %u slots", shard->index, zspage->inuse, objs);
  if (zspage->lock.count() < 0)
    f.add("class %u: zspage %p has reader count %d with no writer (a read ended twice?)",
          shard->index, static_cast<const void*>(zspage), zspage->lock.count());
  if (zspage->layout & kPagesContiguous) {
    for (uint32_t i = 1; i < zspage->nr_pages; i++)
      if (zspage->pages()[i] != zspage->pages()[0] + size_t{i} * g.page_size()) {
        f.add("class %u: zspage %p is marked contiguous but its page %u is not adjacent",
              shard->index, static_cast<const void*>(zspage), i);
        break;
      }
  }
  std::vector<bool> is_free(objs);
  uint32_t nr_free = 0;
  for (uint32_t idx = zspage->freeobj; idx != kFreeListEnd;) {
    if (idx >= objs || is_free[idx]) {
      f.add("class %u: free list reaches slot %u twice or out of range", shard->index, idx);
      return;
    }
    is_free[idx] = true;
    nr_free++;
    idx = static_cast<uint32_t>(*obj_word(obj_location(g, zspage, idx)) >> OBJ_TAG_BITS);
  }
  if (nr_free + zspage->inuse != objs)
    f.add("class %u: %u free + %u in use != %u slots", shard->index, nr_free, zspage->inuse, objs);
  if (is_huge(g)) return;
  for (uint32_t idx = 0; idx < objs; idx++) {
    if (is_free[idx]) continue;
    unsigned long header = *obj_word(obj_location(g, zspage, idx));
    unsigned long handle = header_to_handle(header);
    if ((header & OBJ_ALLOCATED_TAG) == 0 || !pool->metadata.cells.is_cell(handle)) {
      f.add("class %u: live slot %u has header %#lx", shard->index, idx, header);
      continue;
    }
    unsigned long obj = handle_to_cell(handle)->load(std::memory_order_relaxed) & ~kObjProfiled;
    if (obj != location_to_obj(zspage, idx))
      f.add("class %u: handle %#lx of slot %u holds obj %#lx", shard->index, handle, idx, obj);
  }
}

// Zspages and objects a shard's lists hold.
struct ListTotals {
  unsigned long zspages[NR_FULLNESS_GROUPS] = {};
  unsigned long inuse = 0;
};

// The shard's fullness lists; fully checks each listed zspage when `deep`.
ListTotals check_lists(const ZsPool* pool, ClassShard* shard, bool deep, Findings& f)
    ZSM_REQUIRES(shard->lock) {
  ListTotals totals;
  for (int fg = ZS_INUSE_RATIO_0; fg < ZS_INUSE_RATIO_100; fg++) {
    const ZsPage* prev = nullptr;
    for (const ZsPage* zspage : shard->fullness_list[fg]) {
      if (totals.zspages[fg] > shard->stats[fg]) {
        f.add("class %u: list %d longer than its count %lu", shard->index, fg, shard->stats[fg]);
        break;
      }
      if (zspage == shard->hot) f.add("class %u: the hot zspage is on list %d", shard->index, fg);
      if (zspage->links.prev != prev || zspage->fullness != fg ||
          get_fullness_group(shard, zspage) != fg)
        f.add("class %u: zspage in list %d has prev %p, group %u, in use %u", shard->index, fg,
              static_cast<const void*>(zspage->links.prev), zspage->fullness, zspage->inuse);
      if (deep) check_zspage(pool, shard, zspage, f);
      totals.zspages[fg]++;
      totals.inuse += zspage->inuse;
      prev = zspage;
    }
    if (totals.zspages[fg] != shard->stats[fg])
      f.add("class %u: list %d holds %lu zspages, counted %lu", shard->index, fg,
            totals.zspages[fg], shard->stats[fg]);
    if (((shard->nonempty >> fg) & 1) != (shard->fullness_list[fg].empty() ? 0 : 1))
      f.add("class %u: nonempty bit %d wrong", shard->index, fg);
  }
  return totals;
}

// The shard's hot zspage, if any; fully checked when `deep`.
void check_hot(const ZsPool* pool, const ClassShard* shard, bool deep, Findings& f)
    ZSM_REQUIRES(shard->lock) {
  const ZsPage* hot = shard->hot;
  if (hot == nullptr) return;
  if (hot->inuse == 0 || hot->inuse >= shard->objs_per_zspage ||
      hot->fullness >= ZS_INUSE_RATIO_100 ||
      hot->inuse < shard->fullness_lo[hot->fullness])
    f.add("class %u: hot zspage holds %u of %u objects, floor group %u", shard->index, hot->inuse,
          shard->objs_per_zspage, hot->fullness);
  else if (deep)
    check_zspage(pool, shard, hot, f);
}

// The shard's object counts against its lists, full zspages (on none: counted only) and the
// hot zspage (neither listed nor counted).
void check_stats(ClassShard* shard, const ListTotals& totals, Findings& f)
    ZSM_REQUIRES(shard->lock) {
  unsigned long zspages = shard->stats[ZS_INUSE_RATIO_100] + (shard->hot != nullptr ? 1 : 0);
  for (int fg = ZS_INUSE_RATIO_0; fg < ZS_INUSE_RATIO_100; fg++) zspages += totals.zspages[fg];
  unsigned long unlisted_objs = shard->stats[ZS_INUSE_RATIO_100] * shard->objs_per_zspage +
                            (shard->hot != nullptr ? shard->hot->inuse : 0);
  if (shard->stats[ZS_OBJS_ALLOCATED] != zspages * shard->objs_per_zspage)
    f.add("class %u: %lu slots counted, %lu zspages hold %lu", shard->index,
          shard->stats[ZS_OBJS_ALLOCATED], zspages, zspages * shard->objs_per_zspage);
  if (shard->stats[ZS_OBJS_INUSE] != totals.inuse + unlisted_objs)
    f.add("class %u: %lu objects counted, zspages hold %lu", shard->index,
          shard->stats[ZS_OBJS_INUSE], totals.inuse + unlisted_objs);
}

void lock_all_classes(ZsPool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (uint32_t c = 0; c < pool->classes.nr_class_shards; c++)
    pool->classes.class_shards[c].lock.lock();
}

void unlock_all_classes(ZsPool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (uint32_t c = 0; c < pool->classes.nr_class_shards; c++)
    pool->classes.class_shards[c].lock.unlock();
}

// Every zspage the metadata arenas hold for a class, full ones included, and their pages.
void check_all_zspages(ZsPool* pool, Findings& f) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  unsigned long pages = 0;
  std::vector<unsigned long> full(pool->classes.nr_class_shards);
  for (uint32_t s = 0; s <= pool->fast.shard_mask; s++) {
    ShardArenas& arenas = pool->metadata.arenas[s];
    MutexGuard guard(arenas.lock);
    for (MetadataArena* arena : arenas.meta) {
      if (arena == nullptr) continue;
      // Every shard's lock is held.
      arena->for_each_block([&](void* block) ZSM_NO_THREAD_SAFETY_ANALYSIS {
        auto* zspage = static_cast<ZsPage*>(block);
        ClassShard* shard = zspage->shard.load(std::memory_order_relaxed);
        if (shard == nullptr) return;
        pages += zspage->nr_pages;
        // Listed or hot: checked with its class.
        if (zspage->fullness != ZS_INUSE_RATIO_100 || zspage == shard->hot) return;
        check_zspage(pool, shard, zspage, f);
        full[shard - pool->classes.class_shards]++;
      });
    }
  }
  for (uint32_t c = 0; c < pool->classes.nr_class_shards; c++) {
    if (full[c] != pool->classes.class_shards[c].stats[ZS_INUSE_RATIO_100])
      f.add("class %u: %lu full zspages found, %lu counted", pool->classes.class_shards[c].index,
            full[c], pool->classes.class_shards[c].stats[ZS_INUSE_RATIO_100]);
  }
  if (pages != pool->pages.allocated.load(std::memory_order_relaxed))
    f.add("zspages hold %lu pages, the pool counts %lu", pages,
          pool->pages.allocated.load(std::memory_order_relaxed));
}

}  // namespace

#if ZSM_DEBUG_INVARIANTS
void debug_check_class(const ZsPool* pool, ClassShard* shard, const ZsPage* touched) {
  Findings f(nullptr);
  check_stats(shard, check_lists(pool, shard, false, f), f);
  check_hot(pool, shard, false, f);
  if (touched != nullptr && touched->shard.load(std::memory_order_relaxed) == shard)
    check_zspage(pool, shard, touched, f);
  if (f.count() != 0) report_invariant(pool, f.first());
}
#endif

int check_pool(ZsPool* pool, FILE* report) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  Findings f(report);
  lock_all_classes(pool);
  for (uint32_t c = 0; c < pool->classes.nr_class_shards; c++) {
    ClassShard* shard = &pool->classes.class_shards[c];
    check_stats(shard, check_lists(pool, shard, true, f), f);
    check_hot(pool, shard, true, f);
  }
  check_all_zspages(pool, f);
  unlock_all_classes(pool);
  return f.count();
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
