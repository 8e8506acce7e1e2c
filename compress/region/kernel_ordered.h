// Memory whose order the kernel gives: a page the program's threads wrote, handed to the
// region's threads by a write protection or a move out of the region. ThreadSanitizer cannot
// see that order, so under it the region's accesses to such memory are hidden from its checks.
#pragma once

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ZSM_REGION_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define ZSM_REGION_TSAN 1
#endif
#ifdef ZSM_REGION_TSAN
extern "C" void __tsan_ignore_thread_begin(void);
extern "C" void __tsan_ignore_thread_end(void);
#endif

namespace zsm::region {

#ifdef ZSM_REGION_TSAN
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

// Runs `access` (on memory the kernel ordered) out of ThreadSanitizer's sight.
template <class Access>
void ordered_by_kernel(Access&& access) {
#ifdef ZSM_REGION_TSAN
  __tsan_ignore_thread_begin();
#endif
  access();
#ifdef ZSM_REGION_TSAN
  __tsan_ignore_thread_end();
#endif
}

}  // namespace zsm::region
