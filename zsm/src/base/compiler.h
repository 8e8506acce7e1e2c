// Role macros: every compiler attribute the library uses is spelled here, once, by role.
//
// The inline policy (CMake ZSM_INLINE_POLICY -> ZSM_INLINE_POLICY_PATCHED) changes what the
// hot/cold role macros expand to and nothing else. One macro per helper group:
//   ZSM_OBJ_HELPER    obj_malloc, obj_free   patched: always-inline   baseline: plain static
//   ZSM_WRITE_HELPER  obj_write              patched: always-inline   baseline: plain static
//   ZSM_ZSPAGE_HELPER alloc_zspage           patched: noinline        baseline: plain static
// Each can be overridden with -D (e.g. -DZSM_WRITE_HELPER= to measure obj_malloc/obj_free
// alone, as the kernel mail's first patch did), so another attribute can be A/B-tested
// without editing the source (see docs/ab.md).
// The thread-safety macros expand to clang's capability attributes (-Wthread-safety) and to
// nothing elsewhere.
#pragma once

#ifndef ZSM_INLINE_POLICY_PATCHED
#define ZSM_INLINE_POLICY_PATCHED 1
#endif

// The namespace that holds one compiled variant of the allocator; see zsm/CMakeLists.txt.
#ifndef ZSM_VARIANT_NS
#define ZSM_VARIANT_NS patched
#endif

#if ZSM_INLINE_POLICY_PATCHED
#define ZSM_POLICY_HOT inline __attribute__((always_inline))
#define ZSM_POLICY_COLD __attribute__((noinline))
#else
#define ZSM_POLICY_HOT
#define ZSM_POLICY_COLD
#endif
#ifndef ZSM_OBJ_HELPER
#define ZSM_OBJ_HELPER ZSM_POLICY_HOT
#endif
#ifndef ZSM_WRITE_HELPER
#define ZSM_WRITE_HELPER ZSM_POLICY_HOT
#endif
#ifndef ZSM_ZSPAGE_HELPER
#define ZSM_ZSPAGE_HELPER ZSM_POLICY_COLD
#endif

// Roles that do not change with the inline policy:
//   ZSM_ALWAYS_INLINE  code written once but meant to sit in its callers (zs_malloc and
//                      zs_store share one body; the lookups inline into every API call)
//   ZSM_COLD_PATH      rare and cold: refills, shard moves, fatal reports
//   ZSM_OFF_FAST_PATH  kept out of its caller's fast path but not cold (not optimised for
//                      size): the stores of hardened pools, the locked path behind a cache
//   ZSM_COPY_FUNCTION  the payload copy (copy.h): never inlined, so that the instruction
//                      counts can leave it out by name, as they leave memcpy out
//   ZSM_TARGET_AVX2    compiled for AVX2 in a library built for baseline x86-64; called
//                      only where the CPU has it
#ifndef ZSM_ALWAYS_INLINE
#define ZSM_ALWAYS_INLINE inline __attribute__((always_inline))
#endif
#ifndef ZSM_COLD_PATH
#define ZSM_COLD_PATH __attribute__((noinline, cold))
#endif
#ifndef ZSM_OFF_FAST_PATH
#define ZSM_OFF_FAST_PATH __attribute__((noinline))
#endif
#define ZSM_COPY_FUNCTION __attribute__((noinline))
#define ZSM_TARGET_AVX2 __attribute__((target("avx2")))

// A printf-like function whose format is argument `fmt` and whose arguments start at `args`.
#define ZSM_PRINTF_FORMAT(fmt, args) __attribute__((format(printf, fmt, args)))
// A thread_local reached with one load from the thread pointer, in the shared library too
// (initial-exec: a libzsm.so loaded by dlopen() takes it from the static TLS reserve).
#define ZSM_INITIAL_EXEC_TLS __attribute__((tls_model("initial-exec")))

// Allocation profiling (pool/profile.h): ZSM_PROFILING compiles it in; its hooks, run behind one
// cheap check, are out of line unless ZSM_PROFILING_INLINE asks for them inline (the A/B of
// the kernel's "uninline code gated by mem_alloc_profiling_key" patch).
#ifndef ZSM_PROFILING
#define ZSM_PROFILING 0
#endif
#ifndef ZSM_PROFILING_INLINE
#define ZSM_PROFILING_INLINE 0
#endif
#ifndef ZSM_PROFILE_HOOK
#if ZSM_PROFILING_INLINE
#define ZSM_PROFILE_HOOK inline __attribute__((always_inline))
#else
#define ZSM_PROFILE_HOOK inline __attribute__((noinline))
#endif
#endif

// ZSM_DEBUG_INVARIANTS: check a class's invariants after every call that changes it.
#ifndef ZSM_DEBUG_INVARIANTS
#define ZSM_DEBUG_INVARIANTS 0
#endif

// Functions the public API exports from the shared library.
#ifndef ZSM_API
#define ZSM_API __attribute__((visibility("default")))
#endif

#define ZSM_LIKELY(x) __builtin_expect(!!(x), 1)
#define ZSM_UNLIKELY(x) __builtin_expect(!!(x), 0)

#if defined(__clang__)
#define ZSM_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define ZSM_THREAD_ANNOTATION(x)
#endif
#define ZSM_CAPABILITY(name) ZSM_THREAD_ANNOTATION(capability(name))
#define ZSM_GUARDED_BY(lock) ZSM_THREAD_ANNOTATION(guarded_by(lock))
#define ZSM_PT_GUARDED_BY(lock) ZSM_THREAD_ANNOTATION(pt_guarded_by(lock))
#define ZSM_REQUIRES(...) ZSM_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ZSM_ACQUIRE(...) ZSM_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ZSM_RELEASE(...) ZSM_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define ZSM_TRY_ACQUIRE(...) ZSM_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define ZSM_EXCLUDES(...) ZSM_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ZSM_NO_THREAD_SAFETY_ANALYSIS ZSM_THREAD_ANNOTATION(no_thread_safety_analysis)
#define ZSM_SCOPED_CAPABILITY ZSM_THREAD_ANNOTATION(scoped_lockable)
