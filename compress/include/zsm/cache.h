/*
 * zsm cache, C API: the compressed key -> value cache of zsm/cache.hpp for C callers.
 * Every call returns 0 or a positive value on success and a negative errno on failure:
 *   -EINVAL  bad arguments or options      -E2BIG   value larger than the maximum
 *   -ENAMETOOLONG  key empty or too long   -ENOMEM  no room even after evicting
 *   -EBADMSG stored value corrupt (dropped) -ENOBUFS buffer smaller than the value
 *   -ENOENT  no such key
 */
#ifndef ZSM_CACHE_H
#define ZSM_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include <zsm/zsmalloc.h>

#ifdef __cplusplus
extern "C" {
#endif

struct zsm_cache;

enum zsm_codec { ZSM_CODEC_LZ4 = 0, ZSM_CODEC_LZ4HC, ZSM_CODEC_ZSTD, ZSM_CODEC_NONE };

/* A zero-filled struct asks for every default (64 MiB, lz4, values up to a page). */
struct zsm_cache_config {
	size_t capacity_bytes;         /* 0 = 64 MiB */
	enum zsm_codec codec;
	int level;                     /* 0 = the codec's default */
	int recompress;                /* nonzero: recompress with recompress_codec/level */
	enum zsm_codec recompress_codec;
	int recompress_level;
	size_t max_value_size;         /* 0 = the pool's page size */
	size_t max_key_size;           /* 0 = 256 */
	unsigned int shards;           /* 0 = 16 */
	struct zs_pool_config pool;
};

/* zram's mm_stat columns, then the cache's own counters. */
struct zsm_cache_stats {
	uint64_t orig_data_size, compr_data_size, mem_used_total, mem_limit, mem_used_max;
	uint64_t same_pages, pages_compacted, huge_pages, huge_pages_since;
	uint64_t entries, bytes_held, hits, misses, evictions, recompressed;
};

/* NULL (and *err set to a negative errno when err is not NULL) on failure. */
struct zsm_cache *zsm_cache_create(const struct zsm_cache_config *cfg, int *err);
void zsm_cache_destroy(struct zsm_cache *cache);

int zsm_cache_put(struct zsm_cache *cache, const void *key, size_t key_len, const void *value,
		  size_t value_len);
/* Copies the value into buf and returns its length; -ENOENT when absent. */
long zsm_cache_get(struct zsm_cache *cache, const void *key, size_t key_len, void *buf,
		   size_t buf_len);
/* 0 when erased, -ENOENT when absent. */
int zsm_cache_erase(struct zsm_cache *cache, const void *key, size_t key_len);
/* 1 when present, 0 when not. */
int zsm_cache_contains(struct zsm_cache *cache, const void *key, size_t key_len);
void zsm_cache_clear(struct zsm_cache *cache);
/* Values moved to a smaller class (at most max_entries tried). */
long zsm_cache_recompress(struct zsm_cache *cache, size_t max_entries);
void zsm_cache_stats(struct zsm_cache *cache, struct zsm_cache_stats *out);
/* The pool behind the cache, for zs_print_classes() and friends. */
struct zs_pool *zsm_cache_pool(struct zsm_cache *cache);

#ifdef __cplusplus
}
#endif

#endif /* ZSM_CACHE_H */
