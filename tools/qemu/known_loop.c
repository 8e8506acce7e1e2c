/*
 * known_loop: the check of the arm64 counting method (tools/lib/qemu_count.py, ctest
 * qemu_count): known_loop(n) runs a loop body of exactly KNOWN_LOOP_BODY instructions n times
 * between the counters' markers, so a correct count is KNOWN_LOOP_BODY * n plus a constant (the
 * call and return around the loop), and two runs that differ by n iterations differ by exactly
 * KNOWN_LOOP_BODY * n instructions in all. Usage: known_loop N.
 */
#include <stdlib.h>

#define KNOWN_LOOP_BODY 6

__attribute__((noinline)) void zsm_count_start(void) { __asm__ __volatile__("" ::: "memory"); }
__attribute__((noinline)) void zsm_count_stop(void) { __asm__ __volatile__("" ::: "memory"); }

__attribute__((noinline)) void known_loop(long n)
{
	__asm__ __volatile__("1:\n\t"
			     "add x9, x9, #1\n\t"
			     "add x10, x10, #2\n\t"
			     "eor x11, x11, x9\n\t"
			     "nop\n\t"
			     "subs %0, %0, #1\n\t"
			     "b.ne 1b"
			     : "+r"(n) : : "x9", "x10", "x11", "cc");
}

int main(int argc, char **argv)
{
	long n = argc == 2 ? atol(argv[1]) : 0;
	if (n <= 0)
		return 2;
	zsm_count_start();
	known_loop(n);
	zsm_count_stop();
	return 0;
}
