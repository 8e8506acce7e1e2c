/*
 * region_preload_probe: a program that knows nothing of zsm and uses every interposed call on
 * large and small blocks, checking what it reads back: patterns written into 64 MiB of large
 * buffers read back intact after the others were written (so, under the preload library with
 * a small budget, after they were evicted); calloc's zeros, also for a block whose pages an
 * earlier free gave back; requests near SIZE_MAX failing; realloc growing and shrinking
 * across the 1 MiB line keeps the bytes;
 * the aligned calls' alignment; malloc_usable_size at least the size asked; two threads
 * allocating, checking and freeing large blocks at once; a forked child that frees the
 * parent's block and allocates its own, leaving the parent's bytes intact. Prints
 * "probe: ok" and exits 0, or names the first check that failed and exits 1. tools/tests/
 * region_preload_test.sh runs it with and without the library.
 */
#define _GNU_SOURCE /* memalign, valloc */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define BUFFERS 16

static int failed(const char *what) {
	printf("probe: FAILED: %s\n", what);
	return 1;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
	for (size_t i = 0; i < n; i += 512)
		p[i] = (unsigned char)(seed * 31 + i / 512);
}

static int same(const unsigned char *p, size_t n, unsigned seed) {
	for (size_t i = 0; i < n; i += 512)
		if (p[i] != (unsigned char)(seed * 31 + i / 512))
			return 0;
	return 1;
}

static int zeros(const unsigned char *p, size_t n) {
	for (size_t i = 0; i < n; i += 256)
		if (p[i] != 0)
			return 0;
	return 1;
}

static int buffers_keep_their_bytes(void) {
	unsigned char *b[BUFFERS];
	for (unsigned i = 0; i < BUFFERS; i++) {
		b[i] = malloc(4 * MIB);
		if (b[i] == NULL)
			return failed("malloc(4 MiB)");
		if (malloc_usable_size(b[i]) < 4 * MIB)
			return failed("malloc_usable_size below the size asked");
		fill(b[i], 4 * MIB, i);
	}
	for (int pass = 0; pass < 2; pass++)
		for (unsigned i = 0; i < BUFFERS; i++)
			if (!same(b[i], 4 * MIB, i))
				return failed("a large buffer read back different");
	for (unsigned i = 0; i < BUFFERS; i++)
		free(b[i]);
	return 0;
}

static int calloc_gives_zeros(void) {
	/* The pages the frees above gave back come out again: they must read as zeros. */
	unsigned char *z = calloc(8, 4 * MIB);
	if (z == NULL)
		return failed("calloc(8, 4 MiB)");
	if (!zeros(z, 32 * MIB))
		return failed("calloc's block is not zeros");
	free(z);
	volatile size_t half = SIZE_MAX / 2; /* not a constant: the compiler would refuse it */
	if (calloc(half, 4) != NULL)
		return failed("calloc overflow did not fail");
	volatile size_t most = SIZE_MAX - 100;
	if (malloc(most) != NULL || malloc(most / 2) != NULL)
		return failed("malloc of nearly SIZE_MAX did not fail");
	unsigned char *big = malloc(2 * MIB);
	if (big == NULL || realloc(big, most) != NULL)
		return failed("realloc to nearly SIZE_MAX did not fail");
	free(big);
	return 0;
}

static int realloc_keeps_bytes(void) {
	unsigned char *p = malloc(512 * 1024);
	if (p == NULL)
		return failed("malloc(512 KiB)");
	fill(p, 512 * 1024, 7);
	size_t sizes[] = {2 * MIB, 9 * MIB, 3 * MIB, 100 * 1024};
	size_t kept = 512 * 1024;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		p = realloc(p, sizes[i]);
		if (p == NULL)
			return failed("realloc");
		if (kept > sizes[i])
			kept = sizes[i];
		if (!same(p, kept, 7))
			return failed("realloc lost bytes");
	}
	free(p);
	return 0;
}

static int aligned_calls(void) {
	void *p = NULL;
	if (posix_memalign(&p, 64 * 1024, 2 * MIB) != 0 || (uintptr_t)p % (64 * 1024) != 0)
		return failed("posix_memalign(64 KiB, 2 MiB)");
	fill(p, 2 * MIB, 3);
	free(p);
	if (posix_memalign(&p, 3, 2 * MIB) == 0)
		return failed("posix_memalign with a bad alignment succeeded");
	void *a = aligned_alloc(2 * MIB, 4 * MIB);
	void *m = memalign(4096, 3 * MIB);
	void *v = valloc(2 * MIB);
	if (a == NULL || (uintptr_t)a % (2 * MIB) != 0 || m == NULL || (uintptr_t)m % 4096 != 0 ||
	    v == NULL || (uintptr_t)v % 4096 != 0)
		return failed("aligned_alloc / memalign / valloc");
	free(a);
	free(m);
	free(v);
	return 0;
}

static int small_blocks(void) {
	char *s = malloc(100);
	if (s == NULL)
		return failed("malloc(100)");
	strcpy(s, "small");
	s = realloc(s, 200);
	if (s == NULL || strcmp(s, "small") != 0)
		return failed("small realloc");
	free(s);
	free(NULL);
	return 0;
}

static void *churn(void *arg) {
	unsigned seed = (unsigned)(uintptr_t)arg;
	for (unsigned i = 0; i < 200; i++) {
		size_t n = (1 + (seed + i) % 3) * MIB;
		unsigned char *p = malloc(n);
		if (p == NULL)
			return "malloc in a thread";
		fill(p, n, seed + i);
		if (!same(p, n, seed + i))
			return "a thread's block read back different";
		free(p);
	}
	return NULL;
}

static int threads_at_once(void) {
	pthread_t t[2];
	void *why[2] = {NULL, NULL};
	for (unsigned i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i * 1000)) != 0)
			return failed("pthread_create");
	for (unsigned i = 0; i < 2; i++)
		pthread_join(t[i], &why[i]);
	for (unsigned i = 0; i < 2; i++)
		if (why[i] != NULL)
			return failed(why[i]);
	return 0;
}

static int fork_leaves_parent_intact(void) {
	unsigned char *mine = malloc(8 * MIB);
	if (mine == NULL)
		return failed("malloc(8 MiB) before fork");
	fill(mine, 8 * MIB, 42);
	fflush(stdout);
	pid_t child = fork();
	if (child < 0)
		return failed("fork");
	if (child == 0) {
		free(mine); /* the parent's block: not the child's to touch */
		unsigned char *own = malloc(4 * MIB);
		if (own == NULL)
			_exit(3);
		fill(own, 4 * MIB, 5);
		_exit(same(own, 4 * MIB, 5) ? 0 : 4);
	}
	int status = 0;
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return failed("the forked child");
	if (!same(mine, 8 * MIB, 42))
		return failed("the parent's block after the child ran");
	free(mine);
	return 0;
}

int main(void) {
	if (buffers_keep_their_bytes() || calloc_gives_zeros() || realloc_keeps_bytes() ||
	    aligned_calls() || small_blocks() || threads_at_once() || fork_leaves_parent_intact())
		return 1;
	printf("probe: ok\n");
	return 0;
}
