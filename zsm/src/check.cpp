// Invariant checks (design: check.h). With its class lock held, a class must satisfy:
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
//             writer, and the only writer, compaction, holds the class lock meanwhile).
// zs_check_pool() also checks every zspage the pool holds, full ones included (found through
// the metadata arenas), and that their pages add up to zs_get_total_pages().
#include "check.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <vector>

#include "obj.h"
#include "pool.h"
#include "report.h"
#include "thread_cache.h"
#include "zspage.h"

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
void check_zspage(const ZsPool* pool, const ClassShard* cls, const ZsPage* zspage, Findings& f) {
  const ClassGeometry g = cls->geom;
  const uint32_t objs = cls->objs_per_zspage;
  if (zspage->cls.load(std::memory_order_relaxed) != cls)
    f.add("class %u: zspage %p names another class", cls->index, static_cast<const void*>(zspage));
  if (zspage->inuse > objs) f.add("class %u: zspage in use %u > %u slots", cls->index, zspage->inuse, objs);
  if (zspage->lock.count() < 0)
    f.add("class %u: zspage %p has reader count %d with no writer (a read ended twice?)",
          cls->index, static_cast<const void*>(zspage), zspage->lock.count());
  std::vector<bool> is_free(objs);
  uint32_t nr_free = 0;
  for (uint32_t idx = zspage->freeobj; idx != kFreeListEnd;) {
    if (idx >= objs || is_free[idx]) {
      f.add("class %u: free list reaches slot %u twice or out of range", cls->index, idx);
      return;
    }
    is_free[idx] = true;
    nr_free++;
    idx = static_cast<uint32_t>(*obj_word(obj_location(g, zspage, idx)) >> OBJ_TAG_BITS);
  }
  if (nr_free + zspage->inuse != objs)
    f.add("class %u: %u free + %u in use != %u slots", cls->index, nr_free, zspage->inuse, objs);
  if (is_huge(g)) return;
  for (uint32_t idx = 0; idx < objs; idx++) {
    if (is_free[idx]) continue;
    unsigned long header = *obj_word(obj_location(g, zspage, idx));
    unsigned long handle = header_to_handle(header);
    if ((header & OBJ_ALLOCATED_TAG) == 0 || !pool->cells.is_cell(handle)) {
      f.add("class %u: live slot %u has header %#lx", cls->index, idx, header);
      continue;
    }
    unsigned long obj = handle_to_cell(handle)->load(std::memory_order_relaxed) & ~kObjProfiled;
    if (obj != location_to_obj(zspage, idx))
      f.add("class %u: handle %#lx of slot %u holds obj %#lx", cls->index, handle, idx, obj);
  }
}

// Zspages and objects a class's lists hold.
struct ListTotals {
  unsigned long zspages[NR_FULLNESS_GROUPS] = {};
  unsigned long inuse = 0;
};

// The class's fullness lists; fully checks each listed zspage when `deep`.
ListTotals check_lists(const ZsPool* pool, ClassShard* cls, bool deep, Findings& f)
    ZSM_REQUIRES(cls->lock) {
  ListTotals totals;
  for (int fg = ZS_INUSE_RATIO_0; fg < ZS_INUSE_RATIO_100; fg++) {
    const ZsPage* prev = nullptr;
    for (const ZsPage* zspage = cls->fullness_list[fg]; zspage != nullptr; zspage = zspage->next) {
      if (totals.zspages[fg] > cls->stats[fg]) {
        f.add("class %u: list %d longer than its count %lu", cls->index, fg, cls->stats[fg]);
        break;
      }
      if (zspage == cls->hot) f.add("class %u: the hot zspage is on list %d", cls->index, fg);
      if (zspage->prev != prev || zspage->fullness != fg || get_fullness_group(cls, zspage) != fg)
        f.add("class %u: zspage in list %d has prev %p, group %u, in use %u", cls->index, fg,
              static_cast<const void*>(zspage->prev), zspage->fullness, zspage->inuse);
      if (deep) check_zspage(pool, cls, zspage, f);
      totals.zspages[fg]++;
      totals.inuse += zspage->inuse;
      prev = zspage;
    }
    if (totals.zspages[fg] != cls->stats[fg])
      f.add("class %u: list %d holds %lu zspages, counted %lu", cls->index, fg,
            totals.zspages[fg], cls->stats[fg]);
    if (((cls->nonempty >> fg) & 1) != (cls->fullness_list[fg] != nullptr ? 1 : 0))
      f.add("class %u: nonempty bit %d wrong", cls->index, fg);
  }
  return totals;
}

// The class's hot zspage, if any; fully checked when `deep`.
void check_hot(const ZsPool* pool, const ClassShard* cls, bool deep, Findings& f)
    ZSM_REQUIRES(cls->lock) {
  const ZsPage* hot = cls->hot;
  if (hot == nullptr) return;
  if (hot->inuse == 0 || hot->inuse >= cls->objs_per_zspage || hot->fullness >= ZS_INUSE_RATIO_100 ||
      hot->inuse < cls->fullness_lo[hot->fullness])
    f.add("class %u: hot zspage holds %u of %u objects, floor group %u", cls->index, hot->inuse,
          cls->objs_per_zspage, hot->fullness);
  else if (deep)
    check_zspage(pool, cls, hot, f);
}

// The class's object counts against its lists, full zspages (on none: counted only) and the
// hot zspage (neither listed nor counted).
void check_stats(ClassShard* cls, const ListTotals& totals, Findings& f) ZSM_REQUIRES(cls->lock) {
  unsigned long zspages = cls->stats[ZS_INUSE_RATIO_100] + (cls->hot != nullptr ? 1 : 0);
  for (int fg = ZS_INUSE_RATIO_0; fg < ZS_INUSE_RATIO_100; fg++) zspages += totals.zspages[fg];
  unsigned long unlisted_objs = cls->stats[ZS_INUSE_RATIO_100] * cls->objs_per_zspage +
                            (cls->hot != nullptr ? cls->hot->inuse : 0);
  if (cls->stats[ZS_OBJS_ALLOCATED] != zspages * cls->objs_per_zspage)
    f.add("class %u: %lu slots counted, %lu zspages hold %lu", cls->index,
          cls->stats[ZS_OBJS_ALLOCATED], zspages, zspages * cls->objs_per_zspage);
  if (cls->stats[ZS_OBJS_INUSE] != totals.inuse + unlisted_objs)
    f.add("class %u: %lu objects counted, zspages hold %lu", cls->index,
          cls->stats[ZS_OBJS_INUSE], totals.inuse + unlisted_objs);
}

void lock_all_classes(ZsPool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (uint32_t c = 0; c < pool->nr_class_shards; c++) pool->class_shards[c].lock.lock();
}

void unlock_all_classes(ZsPool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (uint32_t c = 0; c < pool->nr_class_shards; c++) pool->class_shards[c].lock.unlock();
}

// Every zspage the metadata arenas hold for a class, full ones included, and their pages.
void check_all_zspages(ZsPool* pool, Findings& f) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  unsigned long pages = 0;
  std::vector<unsigned long> full(pool->nr_class_shards);
  for (uint32_t shard = 0; shard <= pool->shard_mask; shard++) {
    ShardArenas& arenas = pool->arenas[shard];
    MutexGuard guard(arenas.lock);
    for (RecordArena* arena : arenas.meta) {
      if (arena == nullptr) continue;
      arena->for_each_record([&](void* record) ZSM_NO_THREAD_SAFETY_ANALYSIS {  // every class lock is held
        auto* zspage = static_cast<ZsPage*>(record);
        ClassShard* cls = zspage->cls.load(std::memory_order_relaxed);
        if (cls == nullptr) return;
        pages += zspage->nr_pages;
        // Listed or hot: checked with its class.
        if (zspage->fullness != ZS_INUSE_RATIO_100 || zspage == cls->hot) return;
        check_zspage(pool, cls, zspage, f);
        full[cls - pool->class_shards]++;
      });
    }
  }
  for (uint32_t c = 0; c < pool->nr_class_shards; c++) {
    if (full[c] != pool->class_shards[c].stats[ZS_INUSE_RATIO_100])
      f.add("class %u: %lu full zspages found, %lu counted", pool->class_shards[c].index, full[c],
            pool->class_shards[c].stats[ZS_INUSE_RATIO_100]);
  }
  if (pages != pool->pages_allocated.load(std::memory_order_relaxed))
    f.add("zspages hold %lu pages, the pool counts %lu", pages,
          pool->pages_allocated.load(std::memory_order_relaxed));
}

}  // namespace

#if ZSM_DEBUG_INVARIANTS
void debug_check_class(const ZsPool* pool, ClassShard* cls, const ZsPage* touched) {
  Findings f(nullptr);
  check_stats(cls, check_lists(pool, cls, false, f), f);
  check_hot(pool, cls, false, f);
  if (touched != nullptr && touched->cls.load(std::memory_order_relaxed) == cls)
    check_zspage(pool, cls, touched, f);
  if (f.count() != 0) report_invariant(pool, f.first());
}
#endif

int zs_check_pool(ZsPool* pool, FILE* report) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  if (pool == nullptr) {
    errno = EINVAL;
    return -1;
  }
  Findings f(report);
  block_and_drain_thread_caches(pool);  // no cached store writes a header while we look
  lock_all_classes(pool);
  for (uint32_t c = 0; c < pool->nr_class_shards; c++) {
    ClassShard* cls = &pool->class_shards[c];
    check_stats(cls, check_lists(pool, cls, true, f), f);
    check_hot(pool, cls, true, f);
  }
  check_all_zspages(pool, f);
  unlock_all_classes(pool);
  unblock_thread_caches(pool);
  if (f.count() == 0) return 0;
  errno = EUCLEAN;
  return -1;
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
