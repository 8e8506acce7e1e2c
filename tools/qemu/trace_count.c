/*
 * trace_count: exact counts of the arm64 instructions a program runs under qemu-user, per
 * function, from qemu's execution trace. With `qemu-aarch64 -singlestep -d nochain,exec`
 * every translated block is one guest instruction and every execution of one is logged, as
 *   Trace 0: 0x7f0c2c000100 [0000000000000000/0000000000400580/00000001/00000201] function
 * so the lines are the instructions run, each with the function (the ELF symbol) it is in
 * (tools/lib/qemu_count.py runs qemu and this together, and checks the method on a loop of
 * known length: tools/qemu/known_loop.c).
 *
 * Usage: trace_count [START STOP] < TRACE
 * Without markers every line counts. With them, counting starts after the first instruction of
 * the function START has run and stops at the first of STOP; the markers' own instructions
 * are not counted (the drivers call START and STOP around the measured loop, as callgrind's
 * CALLGRIND_START/STOP_INSTRUMENTATION are placed on x86-64). Prints "COUNT FUNCTION" per
 * function counted, then "total COUNT" and "lines COUNT" (every line read), and exits 1 when a
 * marker was given and not seen.
 *
 * Depends on libc only; compiled for the host by qemu_count.py.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 8192 /* distinct functions; far more than any driver runs */

struct slot {
	char *name;
	unsigned long count;
};
static struct slot table[SLOTS];

static unsigned long hash(const char *s)
{
	unsigned long h = 1469598103934665603UL;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211UL;
	return h;
}

static struct slot *slot_of(const char *name)
{
	for (unsigned long i = hash(name) % SLOTS, n = 0; n < SLOTS; i = (i + 1) % SLOTS, n++) {
		if (!table[i].name) {
			table[i].name = strdup(name);
			if (!table[i].name) {
				fprintf(stderr, "trace_count: out of memory\n");
				exit(2);
			}
			return &table[i];
		}
		if (strcmp(table[i].name, name) == 0)
			return &table[i];
	}
	fprintf(stderr, "trace_count: more than %d functions\n", SLOTS);
	exit(2);
}

/* The function a trace line names ("?" when qemu found no symbol), or NULL for another line. */
static char *function_of(char *line)
{
	if (strncmp(line, "Trace ", 6) != 0)
		return NULL;
	char *end = line + strcspn(line, "\n");
	*end = 0;
	char *bracket = strstr(line, "] ");
	if (!bracket)
		return "?";
	return bracket[2] ? bracket + 2 : "?";
}

int main(int argc, char **argv)
{
	if (argc != 1 && argc != 3) {
		fprintf(stderr, "usage: trace_count [START STOP] < TRACE\n");
		return 2;
	}
	const char *start = argc == 3 ? argv[1] : NULL, *stop = argc == 3 ? argv[2] : NULL;
	enum { BEFORE, IN_START, COUNTING, DONE } state = start ? BEFORE : COUNTING;
	unsigned long lines = 0, total = 0;
	static char line[8192];
	while (fgets(line, sizeof line, stdin)) {
		char *fn = function_of(line);
		if (!fn)
			continue;
		lines++;
		if (state == BEFORE && strcmp(fn, start) == 0)
			state = IN_START;
		if (state == IN_START && strcmp(fn, start) != 0)
			state = COUNTING;
		if (state == COUNTING && stop && strcmp(fn, stop) == 0)
			state = DONE;
		if (state != COUNTING)
			continue;
		slot_of(fn)->count++;
		total++;
	}
	for (int i = 0; i < SLOTS; i++)
		if (table[i].name && table[i].count)
			printf("%lu %s\n", table[i].count, table[i].name);
	printf("total %lu\nlines %lu\n", total, lines);
	if (start && state != DONE) {
		fprintf(stderr, "trace_count: marker %s not seen\n", state == BEFORE ? start : stop);
		return 1;
	}
	return 0;
}
