// The pool's invariants, checked: by zs_check_pool() on demand (check_pool()), and after
// every call that changes a shard in builds with ZSM_DEBUG_INVARIANTS (debug_check_class(),
// an empty stub otherwise, so call sites carry no #if). What is checked is listed in
// check.cpp.
#pragma once

#include <cstdio>

#include "base/compiler.h"
#include "zspage/types.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

// Checks every shard and every zspage of the pool, taking every shard's lock; prints each
// violation to `report` (when not null) and returns how many there are. The caller keeps
// the pool's thread caches blocked, so that no cached store writes a header meanwhile.
int check_pool(ZsPool* pool, FILE* report);

#if ZSM_DEBUG_INVARIANTS
// Checks the shard's lists and statistics, and `touched` (a zspage of the shard, or nullptr)
// in full; reports the first violation through report_invariant().
void debug_check_class(const ZsPool* pool, ClassShard* shard, const ZsPage* touched)
    ZSM_REQUIRES(shard->lock);
#else
inline void debug_check_class(const ZsPool*, ClassShard*, const ZsPage*) {}
#endif

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
