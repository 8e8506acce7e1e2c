// The pool's invariants, checked: by zs_check_pool() on demand, and after every call that
// changes a class in builds with ZSM_DEBUG_INVARIANTS (debug_check_class(), an empty stub
// otherwise, so call sites carry no #if). What is checked is listed in check.cpp.
#pragma once

#include "compiler.h"
#include "pool_types.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

#if ZSM_DEBUG_INVARIANTS
// Checks the class's lists and statistics, and `touched` (a zspage of the class, or nullptr)
// in full; reports the first violation through report_invariant().
void debug_check_class(const ZsPool* pool, ClassShard* cls, const ZsPage* touched)
    ZSM_REQUIRES(cls->lock);
#else
inline void debug_check_class(const ZsPool*, ClassShard*, const ZsPage*) {}
#endif

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
