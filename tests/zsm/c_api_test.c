/*
 * tests/zsm/c_api_test.c: the public API compiled and used as C11 (no C++ in sight): create a pool,
 * store, read back, free, compact, stats, print the classes table to a tmpfile and check its
 * shape, destroy; a pool on a caller-owned page source, and a limited vm source. One function a
 * part; main() runs them and returns nonzero when any check fails.
 */
#include <zsm/zsmalloc.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
				#cond);                                               \
			failures++;                                                   \
		}                                                                     \
	} while (0)

static void fill(unsigned char *buf, size_t n, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = (unsigned char)x;
	}
}

/* Read the whole object back and compare with the pattern. */
static int intact(struct zs_pool *pool, unsigned long h, size_t n, unsigned seed)
{
	unsigned char want[4096], local[4096];
	void *mem;
	int ok;

	fill(want, n, seed);
	mem = zs_obj_read_begin(pool, h, n, local);
	if (!mem)
		return 0;
	ok = memcmp(mem, want, n) == 0;
	zs_obj_read_end(pool, h, n, mem);
	return ok;
}

enum { NOBJ = 3000 };

/* The objects of the store-and-compact parts: a spread of sizes, object i filled with seed i. */
static unsigned long handles[NOBJ];
static size_t sizes[NOBJ];

static void test_class_table(struct zs_pool *pool)
{
	CHECK(strcmp(zs_pool_name(pool), "c-api") == 0);
	CHECK(zs_huge_class_size(pool) == 3625);
	CHECK(zs_class_count(pool) == 255);
	CHECK(zs_lookup_class_index(pool, 3632) == 225);
}

static void test_store_and_read_back(struct zs_pool *pool)
{
	unsigned char buf[4096];
	unsigned i;

	for (i = 0; i < NOBJ; i++) {
		sizes[i] = 1 + (i * 131u) % 4096;
		fill(buf, sizes[i], i);
		handles[i] = zs_store(pool, buf, sizes[i]);
		CHECK(handles[i] != 0);
	}
	for (i = 0; i < NOBJ; i++)
		CHECK(intact(pool, handles[i], sizes[i], i));
}

static void test_malloc_and_write(struct zs_pool *pool)
{
	unsigned char buf[2000];
	unsigned long h = zs_malloc(pool, sizeof buf);

	CHECK(h != 0);
	CHECK(zs_obj_capacity(pool, h) >= sizeof buf);
	fill(buf, sizeof buf, 99999);
	errno = 0;
	zs_obj_write(pool, h, buf, sizeof buf);
	CHECK(errno == 0);
	CHECK(intact(pool, h, sizeof buf, 99999));
	zs_free(pool, h);
}

/* The errors as C sees them (tests/zsm/bad_input_test.cpp holds the whole contract). */
static void test_errors(struct zs_pool *pool)
{
	errno = 0;
	CHECK(zs_malloc(pool, 0) == 0 && errno == EINVAL);
	errno = 0;
	CHECK(zs_malloc(pool, 4097) == 0 && errno == ENOSPC);
	errno = 0;
	CHECK(zs_malloc(NULL, 10) == 0 && errno == EINVAL);
	zs_free(pool, 0);
}

/* Frees every other object and compacts; the survivors intact, the stats agreeing. Returns
 * the number of distinct classes. */
static unsigned test_free_half_and_compact(struct zs_pool *pool)
{
	struct zs_pool_stats ps;
	struct zs_class_stats st;
	unsigned long before, freed, used = 0;
	unsigned distinct = 0, i;

	for (i = 0; i < NOBJ; i += 2)
		zs_free(pool, handles[i]);
	before = zs_get_total_pages(pool);
	freed = zs_compact(pool);
	CHECK(freed > 0);
	CHECK(zs_get_total_pages(pool) == before - freed);
	zs_pool_stats(pool, &ps);
	CHECK(ps.pages_compacted == freed);
	for (i = 1; i < NOBJ; i += 2)
		CHECK(intact(pool, handles[i], sizes[i], i));
	for (i = 0; i < zs_class_count(pool); i++) {
		int rc = zs_class_stats(pool, i, &st);
		CHECK(rc == 0 || rc == 1);
		if (rc == 1) {
			distinct++;
			used += st.obj_used;
		}
	}
	CHECK(distinct == 119);
	CHECK(used == NOBJ / 2);
	errno = 0;
	CHECK(zs_class_stats(pool, 255, &st) == -1 && errno == EINVAL);
	return distinct;
}

static void check_table_header(const char *line)
{
	static const char *const columns[] = {"class", "size", "obj_allocated", "obj_used",
					      "pages_used", "pages_per_zspage", "freeable"};
	for (size_t c = 0; c < sizeof columns / sizeof columns[0]; c++)
		CHECK(strstr(line, columns[c]) != NULL);
}

/* The classes table: a header, one row per distinct class, a Total row (blank lines aside). */
static void test_classes_table(struct zs_pool *pool, unsigned distinct)
{
	char line[512];
	unsigned lines = 0, total_lines = 0;
	FILE *f = tmpfile();

	CHECK(f != NULL);
	if (!f)
		return;
	CHECK(zs_print_classes(pool, f) == 0);
	rewind(f);
	while (fgets(line, sizeof line, f)) {
		if (line[0] == '\n')
			continue; /* the kernel prints a blank line before Total */
		if (++lines == 1)
			check_table_header(line);
		if (strstr(line, "Total"))
			total_lines++;
	}
	CHECK(lines == distinct + 2);
	CHECK(total_lines == 1);
	fclose(f);
}

static void test_free_the_rest(struct zs_pool *pool)
{
	for (unsigned i = 1; i < NOBJ; i += 2)
		zs_free(pool, handles[i]);
	zs_compact(pool);
	CHECK(zs_get_total_pages(pool) == 0);
}

/* A pool on a caller-owned default page source, destroyed with a live object. */
static void test_pool_on_own_vm_source(void)
{
	struct zs_vm_source *vm = zs_vm_source_create(4096, 0, 0);
	struct zs_pool_config cfg;
	struct zs_page_source src;
	struct zs_pool *pool;
	unsigned char buf[777];
	unsigned long h;

	CHECK(vm != NULL);
	if (vm) {
		src = zs_vm_source_ops(vm);
		memset(&cfg, 0, sizeof cfg);
		cfg.page_source = &src;
		pool = zs_create_pool_ex("c-src", &cfg);
		CHECK(pool != NULL);
		if (pool) {
			fill(buf, sizeof buf, 5);
			h = zs_store(pool, buf, sizeof buf);
			CHECK(h != 0);
			CHECK(zs_vm_source_pages_in_use(vm) == zs_get_total_pages(pool));
			CHECK(intact(pool, h, sizeof buf, 5));
			zs_destroy_pool(pool);
		}
		CHECK(zs_vm_source_pages_in_use(vm) == 0);
		zs_vm_source_destroy(vm);
	}
	errno = 0;
	CHECK(zs_vm_source_create(3000, 0, 0) == NULL && errno == EINVAL);
}

/* A vm source of two-page reservations limited to three pages. */
static void test_limited_vm_source(void)
{
	struct zs_vm_source_config vcfg = {4096, 8192, 3 * 4096, 0};
	struct zs_vm_source *vm = zs_vm_source_create_ex(&vcfg);
	struct zs_page_source src;
	void *pages[3];
	unsigned i;

	CHECK(vm != NULL);
	if (!vm)
		return;
	src = zs_vm_source_ops(vm);
	for (i = 0; i < 3; i++) {
		pages[i] = src.alloc_page(src.ctx);
		CHECK(pages[i] != NULL);
	}
	errno = 0;
	CHECK(src.alloc_page(src.ctx) == NULL && errno == ENOMEM);
	for (i = 0; i < 3; i++)
		if (pages[i])
			src.free_page(src.ctx, pages[i]);
	CHECK(zs_vm_source_pages_in_use(vm) == 0);
	zs_vm_source_destroy(vm);
}

int main(void)
{
	struct zs_pool_config cfg;
	struct zs_pool *pool;

	memset(&cfg, 0, sizeof cfg);
	cfg.chain_size = 8;
	pool = zs_create_pool_ex("c-api", &cfg);
	CHECK(pool != NULL);
	if (!pool)
		return 1;
	test_class_table(pool);
	test_store_and_read_back(pool);
	test_malloc_and_write(pool);
	test_errors(pool);
	test_classes_table(pool, test_free_half_and_compact(pool));
	test_free_the_rest(pool);
	zs_destroy_pool(pool);
	zs_destroy_pool(NULL);

	test_pool_on_own_vm_source();
	test_limited_vm_source();

	if (failures)
		fprintf(stderr, "c_api_test: %d check(s) failed\n", failures);
	else
		printf("c_api_test: all checks passed\n");
	return failures ? 1 : 0;
}
