// Compaction (mm/zsmalloc.c's __zs_compact): moves objects out of a class's sparsest zspages
// into its fullest ones and frees what empties, one class at a time, with every lock shard of
// the class held, so that objects move between shards. Only a zspage no reader holds is
// emptied (its lock is taken for write with a try), and the shards' locks are dropped between
// destinations whenever a store or free waits, so compaction never stalls the fast path for
// long. zs_compact() runs one compaction at a time per pool. It first takes back every slot
// the threads' caches reserve (tcache/thread_cache.h), so that no slot it moves is reserved,
// and keeps the caches blocked until it is done. Uses the zspage layer's helpers
// (zspage/zspage.h) and the caches' drain; nothing else of pool/.
#include "pool/pool.h"

#include <sched.h>

#include <algorithm>

#include "base/copy.h"
#include "tcache/thread_cache.h"
#include "zspage/check.h"
#include "zspage/zspage.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

namespace {

// The lock shards of one class, compacted as one: the kernel's algorithm runs over the union
// of their lists with every shard's lock held, so objects move between shards and no shard
// keeps a half-empty zspage that another shard could take in.
struct ClassShards {
  ClassShard* first;
  uint32_t count;
  ClassShard* begin() const { return first; }
  ClassShard* end() const { return first + count; }
};

// Locks the class's shards and puts their hot zspages back on the lists, which compaction
// searches for the sparsest and fullest zspages (zspage/zspage.h, "Lazy fullness").
void lock_shards(ClassShards shards) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (ClassShard& shard : shards) {
    shard.lock.lock();  // in index order, the only multi-lock path
    put_back_hot(&shard);
  }
}

void unlock_shards(const ZsPool* pool, ClassShards shards) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (ClassShard& shard : shards) {
    debug_check_class(pool, &shard, nullptr);
    shard.lock.unlock();
  }
}

bool shards_contended(ClassShards shards) {
  for (ClassShard& shard : shards)
    if (shard.lock.is_contended()) return true;
  return false;
}

// zs_can_compact() over all shards of the class.
unsigned long shards_can_compact(ClassShards shards) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  unsigned long allocated = 0, inuse = 0;
  for (ClassShard& shard : shards) {
    allocated += shard.stats[ZS_OBJS_ALLOCATED];
    inuse += shard.stats[ZS_OBJS_INUSE];
  }
  return can_compact_pages(allocated, inuse, shards.first);
}

// isolate_dst_zspage(): the fullest non-full, non-empty zspage of any shard, off its list.
ZsPage* isolate_dst_zspage(ClassShards shards) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (int fg = ZS_INUSE_RATIO_99; fg >= ZS_INUSE_RATIO_10; fg--) {
    for (ClassShard& shard : shards) {
      if (ZsPage* zspage = shard.fullness_list[fg].front()) {
        remove_zspage(&shard, zspage);
        return zspage;
      }
    }
  }
  return nullptr;
}

// isolate_src_zspage(): the emptiest non-empty zspage of any shard, off its list.
ZsPage* isolate_src_zspage(ClassShards shards) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  for (int fg = ZS_INUSE_RATIO_10; fg <= ZS_INUSE_RATIO_99; fg++) {
    for (ClassShard& shard : shards) {
      if (ZsPage* zspage = shard.fullness_list[fg].front()) {
        remove_zspage(&shard, zspage);
        return zspage;
      }
    }
  }
  return nullptr;
}

// The shard an isolated zspage belongs to (its shard is stable under the shard's lock).
inline ClassShard* owner(const ZsPage* zspage) {
  return zspage->shard.load(std::memory_order_relaxed);
}

// zs_object_copy(): copies the payload of one slot to another, page by page on both sides.
void copy_object(ClassGeometry g, const ZsPage* dst, uint32_t dst_idx, const ZsPage* src,
                 uint32_t src_idx) {
  size_t d = size_t{dst_idx} * g.size + g.payload_offset;
  size_t s = size_t{src_idx} * g.size + g.payload_offset;
  size_t left = g.size - g.payload_offset;
  while (left > 0) {
    Location to = zspage_location(g, dst, d), from = zspage_location(g, src, s);
    size_t n = std::min({left, g.page_size() - to.offset, g.page_size() - from.offset});
    copy_payload(to.page + to.offset, from.page + from.offset, n);
    d += n;
    s += n;
    left -= n;
  }
}

// migrate_zspage(): moves live objects from src to dst until src is empty or dst is full.
// src is write-locked, so no reader is inside it; readers of dst are undisturbed. The two may
// belong to different shards, whose in-use counts move with the objects.
void migrate_zspage(ZsPage* src, ZsPage* dst) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  ClassShard* from = owner(src);
  ClassShard* to = owner(dst);
  ZSM_DCHECK(from->index == to->index);  // shards of one class
  const ClassGeometry geom = from->geom;
  uint32_t moved = 0;
  for (uint32_t obj_idx = 0; obj_idx < from->objs_per_zspage; obj_idx++) {
    if (src->inuse == 0 || dst->inuse == from->objs_per_zspage) break;
    unsigned long header = *obj_word(obj_location(geom, src, obj_idx));
    if ((header & OBJ_ALLOCATED_TAG) == 0) continue;
    unsigned long handle = header_to_handle(header);
    unsigned long obj = obj_malloc(geom, dst, header).obj;
    copy_object(geom, dst, obj_to_idx(obj), src, obj_idx);
    unsigned long profiled = handle_to_cell(handle)->load(std::memory_order_relaxed) & kObjProfiled;
    record_obj(handle, obj | profiled);
    obj_free(geom, src, obj_idx);
    moved++;
  }
  from->stats[ZS_OBJS_INUSE] -= moved;
  to->stats[ZS_OBJS_INUSE] += moved;
}

// Puts an isolated zspage back on its shard's lists; frees it if it is empty. Returns the
// pages freed.
unsigned long putback_or_free(ZsPool* pool, ZsPage* zspage) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  ClassShard* shard = owner(zspage);
  if (putback_zspage(shard, zspage) != ZS_INUSE_RATIO_0) return 0;
  remove_zspage(shard, zspage);
  free_zspage(pool, shard, zspage);
  return shard->pages_per_zspage;
}

// __zs_compact(): compacts one class, all its shards together; returns the pages freed. Like
// the kernel, it keeps one destination until it is full, and stops at the first source a
// reader holds.
unsigned long compact_class(ZsPool* pool, ClassShards shards) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  lock_shards(shards);
  unsigned long freed = 0;
  for (ClassShard& shard : shards) freed += free_empty_zspages(pool, &shard);
  ZsPage* dst = nullptr;
  while (shards_can_compact(shards) > 0) {
    if (dst == nullptr && (dst = isolate_dst_zspage(shards)) == nullptr) break;
    ZsPage* src = isolate_src_zspage(shards);
    if (src == nullptr) break;
    if (!src->lock.try_write()) {
      putback_zspage(owner(src), src);
      break;
    }
    migrate_zspage(src, dst);
    src->lock.write_unlock();
    freed += putback_or_free(pool, src);
    if (dst->inuse == shards.first->objs_per_zspage || shards_contended(shards)) {
      putback_zspage(owner(dst), dst);
      dst = nullptr;
      unlock_shards(pool, shards);  // let stores and frees of this class in
      sched_yield();
      lock_shards(shards);
    }
  }
  if (dst != nullptr) putback_zspage(owner(dst), dst);
  unlock_shards(pool, shards);
  return freed;
}

}  // namespace

unsigned long zs_compact(ZsPool* pool) {
  if (pool == nullptr || pool->compaction.in_progress.exchange(true, std::memory_order_acquire))
    return 0;
  unsigned long freed = 0;
  const uint32_t nr_shards = pool->fast.shard_mask + 1;
  freed += block_and_drain_thread_caches(pool);  // no slot it moves may be reserved
  for (uint32_t c = 0; c < pool->classes.nr_class_shards; c += nr_shards)
    freed += compact_class(pool, {&pool->classes.class_shards[c], nr_shards});
  unblock_thread_caches(pool);
  pool->compaction.pages_compacted.fetch_add(freed, std::memory_order_relaxed);
  pool->compaction.in_progress.store(false, std::memory_order_release);
  return freed;
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
