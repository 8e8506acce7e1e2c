/*
 * zsm cache, C API: the compressed key -> value cache of zsm/cache.hpp for C callers, with
 * its semantics (capacity, eviction, recompression, what a failed call leaves behind).
 * Calls with an int or long result return 0 or a positive value on success and a negative
 * errno on failure (zsm_cache_create() returns NULL and stores the errno in *err):
 *   -EINVAL  bad arguments or options      -E2BIG   value larger than the maximum
 *   -ENAMETOOLONG  key empty or too long   -ENOMEM  no room even after evicting, or no heap
 *   -EBADMSG stored value corrupt (dropped) -ENOBUFS buffer smaller than the value
 *   -ENOENT  no such key
 * zsm_cache_strerror() names each in a line; zsm_cache_last_error() says why the last
 * zsm_cache_create() on the calling thread refused its configuration (the option, its value and
 * the range it wants).
 * Keys are byte strings (key, key_len); a NULL key is a bad argument (-EINVAL; contains: 0),
 * whatever key_len says, and an empty key (key_len 0) is -ENAMETOOLONG. Every call may be made
 * from any thread at once on one cache, except zsm_cache_destroy().
 */
#ifndef ZSM_CACHE_H
#define ZSM_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include <zsm/zsmalloc.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An opaque cache, made by zsm_cache_create() and freed by zsm_cache_destroy(). */
struct zsm_cache;

/* The codecs of zsm::CodecKind; any other value is -EINVAL. */
enum zsm_codec { ZSM_CODEC_LZ4 = 0, ZSM_CODEC_LZ4HC, ZSM_CODEC_ZSTD, ZSM_CODEC_NONE };

/*
 * A zero-filled struct asks for every default (64 MiB, lz4, values up to a page). The ranges
 * are those of zsm::CacheOptions; out of range is -EINVAL.
 */
struct zsm_cache_config {
	size_t capacity_bytes;         /* 0 = 64 MiB; else at least the page size */
	enum zsm_codec codec;
	int level;                     /* 0 = the codec's default (zsm::CodecOptions::level) */
	int recompress;                /* nonzero: recompress with recompress_codec/level */
	enum zsm_codec recompress_codec;
	int recompress_level;
	size_t max_value_size;         /* 0 = the pool's page size; at most 1 MiB */
	size_t max_key_size;           /* 0 = 256; at most half a page */
	unsigned int shards;           /* 0 = 16; a power of two up to 1024 */
	struct zs_pool_config pool;    /* max_pages is ignored: capacity_bytes sets it */
	/* A backing file (zsm/backing_file.hpp): NULL = none. A directory: an unnamed file in it,
	 * which leaves nothing behind. Any other path must not exist (-EEXIST: an existing file,
	 * link, device or FIFO is refused and left as it is): the file is created there and removed
	 * by zsm_cache_destroy() if the path still names it. Its write buffers, 4 batches, must be
	 * at most a quarter of capacity_bytes: capacity_bytes at least 4 MiB with the default
	 * 256 KiB batch, 2 MiB with a 128 KiB one (else -EINVAL). */
	const char *backing_file;
	uint64_t backing_file_capacity;   /* 0 = 256 MiB; at least four 256 KiB batches */
	uint64_t writeback_limit;         /* bytes written per writeback_limit_ms; 0 = no limit */
	unsigned int writeback_limit_ms;  /* 0 = 1000 */
	int backing_file_keep_on_read;    /* nonzero: a hit on file is not put back in memory */
	size_t backing_file_batch_bytes;  /* one write: 0 = 256 KiB; a multiple of 4096, 128 KiB ..
	                                     16 MiB, at least max_key_size + max_value_size + 64 */
};

/* zram's mm_stat columns, then the cache's own counters: those of zsm::CacheStats. */
struct zsm_cache_stats {
	uint64_t orig_data_size, compr_data_size, mem_used_total, mem_limit, mem_used_max;
	uint64_t same_pages, pages_compacted, huge_pages, huge_pages_since;
	uint64_t entries, bytes_held, hits, misses, evictions, recompressed;
	/* The backing file (zeros without one): zram's bd_stat in bytes, then its own counters. */
	uint64_t bd_bytes_on_file, bd_bytes_read, bd_bytes_written;
	uint64_t written_back, file_hits, file_misses;
};

/*
 * Create a cache from `cfg` (NULL = defaults). Returns it and sets *err to 0, or returns NULL
 * and sets *err to -EINVAL (bad options, including codec, level and pool configuration) or
 * -ENOMEM (memory short). err may be NULL.
 */
struct zsm_cache *zsm_cache_create(const struct zsm_cache_config *cfg, int *err);

/*
 * Destroy the cache, its entries and its pool (zsm_cache_pool() then dangles). NULL is a
 * no-op. Must not overlap any other call on the cache.
 */
void zsm_cache_destroy(struct zsm_cache *cache);

/*
 * Store value_len bytes from `value` under the key, replacing any value there, evicting other
 * entries to make room. Returns 0, or -EINVAL (NULL cache, or NULL value with value_len != 0),
 * -ENAMETOOLONG (key empty or longer than max_key_size), -E2BIG (value above max_value_size)
 * or -ENOMEM (no room even after evicting every other entry: the key then has no value, and
 * other entries may have been evicted). value_len 0 stores an empty value.
 */
int zsm_cache_put(struct zsm_cache *cache, const void *key, size_t key_len, const void *value,
		  size_t value_len);

/*
 * Copy the value into buf and return its length. Returns -ENOENT when the key is absent,
 * -ENOBUFS (nothing copied) when buf_len is below the value's length (a buffer of
 * max_value_size bytes always suffices), -EBADMSG when the stored value does not decompress
 * (the entry is then dropped), -EINVAL for a NULL cache or a NULL buf with buf_len != 0.
 */
long zsm_cache_get(struct zsm_cache *cache, const void *key, size_t key_len, void *buf,
		   size_t buf_len);

/* Remove the key's entry. Returns 0, -ENOENT when absent, -EINVAL for a NULL cache or key, or
 * -ENOMEM when the heap is short. */
int zsm_cache_erase(struct zsm_cache *cache, const void *key, size_t key_len);

/* 1 when the key has an entry, 0 when not or for a NULL cache or key, -ENOMEM when the heap is
 * short. Counts no hit or miss. */
int zsm_cache_contains(struct zsm_cache *cache, const void *key, size_t key_len);

/* Remove every entry and compact the pool; the counters are kept. NULL is a no-op. */
void zsm_cache_clear(struct zsm_cache *cache);

/*
 * Recompress up to max_entries values not yet tried with the recompress codec (see
 * zsm::Cache::recompress()). Returns how many moved to a smaller class: 0 when the cache has
 * no recompress codec; -EINVAL for a NULL cache, -ENOMEM when the heap is short.
 */
long zsm_cache_recompress(struct zsm_cache *cache, size_t max_entries);

/*
 * One line for a result of these calls: "no such key" for -ENOENT, and so on; "success" for 0,
 * strerror(-err) for another negative errno (a backing file's), "unknown error" for a positive
 * value. Never NULL; do not modify or free it.
 */
const char *zsm_cache_strerror(int err);

/*
 * Why the last zsm_cache_create() on the calling thread failed, e.g. "backing_file buffers
 * ((1 + write_queue_batches) x batch_bytes = 1048576 bytes): want at most a quarter of
 * capacity_bytes"; "" when it succeeded or none was made. Valid until the thread's next
 * zsm_cache_create().
 */
const char *zsm_cache_last_error(void);

/* Copy the cache's counters into `out`. Does nothing when cache or out is NULL. */
void zsm_cache_stats(struct zsm_cache *cache, struct zsm_cache_stats *out);

/*
 * zram's idle writeback: mark every entry idle (a put or get of an entry clears its mark),
 * then write the entries still idle, and not referenced since CLOCK last passed them, to the
 * backing file and free them from memory. zsm_cache_writeback_idle() returns how many it
 * wrote (0 without a backing file) or -EINVAL for a NULL cache.
 */
void zsm_cache_mark_idle(struct zsm_cache *cache);
long zsm_cache_writeback_idle(struct zsm_cache *cache);
/* Wait until everything staged for the backing file is on it (no-op without one, or NULL). */
void zsm_cache_flush_backing_file(struct zsm_cache *cache);

/*
 * The pool behind the cache, for zs_print_classes() and friends (NULL for a NULL cache); owned
 * by the cache, valid until zsm_cache_destroy(). Read it only: do not store into it or free.
 */
struct zs_pool *zsm_cache_pool(struct zsm_cache *cache);

#ifdef __cplusplus
}
#endif

#endif /* ZSM_CACHE_H */
