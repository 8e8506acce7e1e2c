/* Example: the pool from C. First the README's example: one object stored, read back (in
 * place, as it lies in one page) and freed. Then objects of compressed-page sizes: one read
 * back, half freed, the pool compacted and its class table printed. */
#include <zsm/zsmalloc.h>

#include <stdio.h>
#include <string.h>

/* The README's example: 1 when the object read back is the one stored. */
static int one_object(struct zs_pool *pool)
{
	const char msg[] = "compressed bytes would go here";
	unsigned long h = zs_store(pool, msg, sizeof msg); /* 0 + errno on failure */
	if (h == 0)
		return 0;

	char scratch[sizeof msg]; /* used only if the object spans two pages */
	const char *p = zs_obj_read_begin(pool, h, sizeof msg, scratch);
	int same = memcmp(p, msg, sizeof msg) == 0;
	zs_obj_read_end(pool, h, sizeof msg, (void *)p);

	zs_free(pool, h);
	return same;
}

int main(void)
{
	struct zs_pool *pool = zs_create_pool("example");
	if (pool == NULL) {
		perror("zs_create_pool");
		return 1;
	}
	int ok = one_object(pool);

	static unsigned long handles[1000];
	char data[3000], scratch[3000];
	for (int i = 0; i < 1000; i++) {
		size_t size = 200 + (size_t)(i * 37) % 2800;
		memset(data, 'a' + i % 26, size);
		handles[i] = zs_store(pool, data, size);
		if (handles[i] == 0) {
			perror("zs_store");
			return 1;
		}
	}
	const char *p = zs_obj_read_begin(pool, handles[7], 100, scratch);
	ok = ok && p != NULL && p[0] == 'a' + 7 && p[99] == 'a' + 7;
	zs_obj_read_end(pool, handles[7], 100, (void *)p);

	for (int i = 0; i < 1000; i += 2)
		zs_free(pool, handles[i]);
	unsigned long before = zs_get_total_pages(pool);
	unsigned long freed = zs_compact(pool);
	printf("pages %lu -> %lu after zs_compact freed %lu\n", before, zs_get_total_pages(pool), freed);
	zs_print_classes(pool, stdout);
	for (int i = 1; i < 1000; i += 2)
		zs_free(pool, handles[i]);
	zs_destroy_pool(pool);
	return ok ? 0 : 1;
}
