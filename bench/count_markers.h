// Where the instruction counters count: ZSM_COUNT_START() and ZSM_COUNT_STOP() around a
// measured loop (kernel_pair_count.cpp and pair_count.cpp, the drivers built for both
// architectures).
//   x86-64: callgrind's client requests (run under valgrind --tool=callgrind --instr-atstart=no;
//           tools/lib/count_pairs.py), statistics zeroed at the start.
//   arm64:  calls of the functions zsm_count_start() and zsm_count_stop(), which
//           tools/qemu/trace_count.c finds by name in qemu's execution trace
//           (tools/lib/qemu_count.py); they do nothing and are never inlined, and their own
//           instructions are not counted.
// Header-only.
#pragma once

#if defined(__aarch64__)
extern "C" {
__attribute__((noinline, used)) inline void zsm_count_start() { __asm__ __volatile__("" ::: "memory"); }
__attribute__((noinline, used)) inline void zsm_count_stop() { __asm__ __volatile__("" ::: "memory"); }
}
#define ZSM_COUNT_START() zsm_count_start()
#define ZSM_COUNT_STOP() zsm_count_stop()
#else
#include <valgrind/callgrind.h>
#define ZSM_COUNT_START()            \
  do {                               \
    CALLGRIND_ZERO_STATS;            \
    CALLGRIND_START_INSTRUMENTATION; \
  } while (0)
#define ZSM_COUNT_STOP() CALLGRIND_STOP_INSTRUMENTATION
#endif
