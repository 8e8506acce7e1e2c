/* The cache's C API from C: put/get/erase/contains, errors as negative errno (each error
 * code of the cache's core, mapped once), stats, and codec fields outside the enum. */
#include <zsm/cache.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "c_check.h"

int main(void)
{
	struct zsm_cache_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.capacity_bytes = 4u << 20;
	cfg.codec = ZSM_CODEC_ZSTD;
	int err = 1;
	struct zsm_cache *cache = zsm_cache_create(&cfg, &err);
	CHECK(cache != NULL && err == 0);

	char value[4096], out[4096];
	for (size_t i = 0; i < sizeof(value); i++)
		value[i] = "zsmalloc "[i % 9];
	CHECK(zsm_cache_put(cache, "page-1", 6, value, sizeof(value)) == 0);
	CHECK(zsm_cache_get(cache, "page-1", 6, out, sizeof(out)) == (long)sizeof(value));
	CHECK(memcmp(out, value, sizeof(value)) == 0);
	CHECK(zsm_cache_contains(cache, "page-1", 6) == 1);
	CHECK(zsm_cache_get(cache, "page-1", 6, out, 10) == -ENOBUFS);
	CHECK(zsm_cache_get(cache, "nope", 4, out, sizeof(out)) == -ENOENT);
	CHECK(zsm_cache_put(cache, "big", 3, value, 4096) == 0);
	CHECK(zsm_cache_put(cache, "", 0, value, 10) == -ENAMETOOLONG);
	/* A NULL key is a bad pointer, as a NULL cache is: -EINVAL (contains: 0), any length. */
	CHECK(zsm_cache_put(cache, NULL, 0, value, 10) == -EINVAL);
	CHECK(zsm_cache_put(cache, NULL, 6, value, 10) == -EINVAL);
	CHECK(zsm_cache_get(cache, NULL, 6, out, sizeof(out)) == -EINVAL);
	CHECK(zsm_cache_erase(cache, NULL, 6) == -EINVAL);
	CHECK(zsm_cache_contains(cache, NULL, 6) == 0);
	static char huge[8192];
	CHECK(zsm_cache_put(cache, "huge", 4, huge, sizeof(huge)) == -E2BIG);

	struct zsm_cache_stats st;
	zsm_cache_stats(cache, &st);
	CHECK(st.entries == 2 && st.orig_data_size == 8192 && st.compr_data_size < 1024);
	CHECK(st.bytes_held <= cfg.capacity_bytes && st.mem_limit == cfg.capacity_bytes);
	CHECK(zsm_cache_erase(cache, "page-1", 6) == 0);
	CHECK(zsm_cache_erase(cache, "page-1", 6) == -ENOENT);
	zsm_cache_clear(cache);
	CHECK(zs_get_total_pages(zsm_cache_pool(cache)) == 0);
	zsm_cache_destroy(cache);

	cfg.shards = 3;
	CHECK(zsm_cache_create(&cfg, &err) == NULL && err == -EINVAL);

	/* A C caller may store any int in an enum field: values outside the enumerators are
	 * -EINVAL, never undefined behaviour in the library (UBSan builds check the loads). */
	const int bad_codecs[] = {4, 7, -1, 255, 1 << 30};
	for (size_t i = 0; i < sizeof(bad_codecs) / sizeof(bad_codecs[0]); i++) {
		memset(&cfg, 0, sizeof(cfg));
		cfg.codec = (enum zsm_codec)bad_codecs[i];
		err = 1;
		CHECK(zsm_cache_create(&cfg, &err) == NULL && err == -EINVAL);
		memset(&cfg, 0, sizeof(cfg));
		cfg.recompress = 1;
		cfg.recompress_codec = (enum zsm_codec)bad_codecs[i];
		err = 1;
		CHECK(zsm_cache_create(&cfg, &err) == NULL && err == -EINVAL);
	}
	/* No room even in an empty cache: a capacity of one page, below the cache's own
	 * bookkeeping. The put is -ENOMEM and leaves the key absent; the calls that cannot fail
	 * say 0. */
	memset(&cfg, 0, sizeof(cfg));
	cfg.capacity_bytes = 4096;
	cache = zsm_cache_create(&cfg, &err);
	CHECK(cache != NULL && err == 0);
	CHECK(zsm_cache_put(cache, "k", 1, value, 100) == -ENOMEM);
	CHECK(zsm_cache_contains(cache, "k", 1) == 0);
	CHECK(zsm_cache_get(cache, "k", 1, out, sizeof(out)) == -ENOENT);
	CHECK(zsm_cache_recompress(cache, 10) == 0);   /* no recompress codec */
	CHECK(zsm_cache_writeback_idle(cache) == 0);   /* no backing file */
	zsm_cache_destroy(cache);

	/* A backing file that cannot be opened: its errno, negated. */
	memset(&cfg, 0, sizeof(cfg));
	cfg.backing_file = "/nonexistent-zsm-dir/backing";
	err = 1;
	CHECK(zsm_cache_create(&cfg, &err) == NULL && err == -ENOENT);
	CHECK(strstr(zsm_cache_last_error(), "/nonexistent-zsm-dir") != NULL);

	/* A backing file at 2 MiB: the default batch's buffers pass a quarter of the capacity,
	 * and the reason says so; a 128 KiB batch fits. */
	memset(&cfg, 0, sizeof(cfg));
	cfg.capacity_bytes = 2u << 20;
	cfg.backing_file = ".";
	CHECK(zsm_cache_create(&cfg, &err) == NULL && err == -EINVAL);
	CHECK(strstr(zsm_cache_last_error(), "a quarter of capacity_bytes") != NULL);
	cfg.backing_file_batch_bytes = 128u << 10;
	cache = zsm_cache_create(&cfg, &err);
	CHECK(cache != NULL && err == 0);
	CHECK(strcmp(zsm_cache_last_error(), "") == 0);
	CHECK(zsm_cache_put(cache, "k", 1, value, 100) == 0);
	zsm_cache_destroy(cache);
	cfg.backing_file_batch_bytes = 1000; /* not a multiple of 4096 */
	CHECK(zsm_cache_create(&cfg, &err) == NULL && err == -EINVAL);
	CHECK(strstr(zsm_cache_last_error(), "batch_bytes") != NULL);

	/* Every documented result has its line. */
	CHECK(strcmp(zsm_cache_strerror(0), "success") == 0);
	CHECK(strcmp(zsm_cache_strerror(-ENOENT), "no such key") == 0);
	CHECK(strstr(zsm_cache_strerror(-E2BIG), "max_value_size") != NULL);
	CHECK(strstr(zsm_cache_strerror(-ENAMETOOLONG), "max_key_size") != NULL);
	CHECK(strcmp(zsm_cache_strerror(-EACCES), strerror(EACCES)) == 0);
	CHECK(strcmp(zsm_cache_strerror(12345), "unknown error") == 0);

	printf("cache C API: all checks passed\n");
	return 0;
}
