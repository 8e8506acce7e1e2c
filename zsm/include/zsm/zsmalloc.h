/*
 * zsm: the public C API, kernel names (include/linux/zsmalloc.h), usable from C and C++.
 *
 * A pool packs variable-sized objects (1 byte .. one page) into size classes 16 bytes
 * apart (with 4 KiB pages), each class served by "zspages": short chains of pages in which
 * objects sit back to back and may span a page boundary. A store returns a handle, an opaque
 * nonzero unsigned long that stays valid while zs_compact() moves the object. The bytes behind
 * a handle are reached only through zs_obj_read_begin()/zs_obj_read_end() and zs_obj_write().
 *
 * Errors: calls that return a handle return 0 and set errno; pool creation returns NULL and
 * sets errno. Every call may be made from any thread on the same pool.
 *
 * Bad arguments have defined results. A NULL pool or handle 0: calls that return a handle or
 * a pointer return 0/NULL with errno EINVAL, zs_obj_write() sets errno EINVAL, calls with an
 * int result return -1 with errno EINVAL, queries return 0 (zs_pool_name(): ""), and
 * zs_free(), zs_obj_read_end(), zs_pool_stats() and zs_destroy_pool() do nothing; a NULL out
 * pointer is the same. A handle that this pool never returned, has freed, or that belongs to
 * another pool (or to a destroyed one) is undefined behaviour in a default pool; so are
 * zs_obj_read_end() without a read of that handle in progress (never begun, ended already,
 * or a different handle's), and zs_free() of an object while a read of it is in progress:
 * a default pool may then hang (a later read or write of another object of the same zspage
 * waits for ever) or let compaction move an object that is being read. A hardened pool
 * (ZS_POOL_HARDENED) reports each of these and aborts.
 *
 * fork(): a child may go on using every pool it inherited, from its one thread (store, read,
 * write, free, drain, compact, check, statistics, destroy), whatever the parent's other
 * threads were doing with the pools at the fork: the library's fork handlers let no thread
 * be inside a pool's critical sections at the fork, and the child forgets the other
 * threads. What they held: their objects and handles stay as they were; the slots their
 * caches reserved go back to the pool at the child's next drain (zs_compact(),
 * zs_drain_thread_caches(), zs_check_pool(), a store at the memory limit) or destroy; a
 * zspage one of them was adding at that moment is lost to the child (its pages stay in use
 * at the page source, not counted by zs_get_total_pages()); a read one had begun never
 * ends, so compaction leaves that zspage where it is. fork() must not be called from inside
 * a page source's callback. A page source of the caller's must itself be fit for the child
 * (the library's zs_vm_source is, when only pools call it).
 *
 * No call is async-signal-safe: a signal handler must not call into a pool that the code it
 * interrupted may be calling (a drain there would wait for ever for the interrupted store).
 *
 * Differences from the kernel are listed in docs/design.md ("What differs from the kernel").
 */
#ifndef ZSM_ZSMALLOC_H
#define ZSM_ZSMALLOC_H

#include <stddef.h>
#include <stdio.h>

#include <zsm/version.h>

#ifdef __cplusplus
extern "C" {
#endif

struct zs_pool;

/*
 * Cumulative pool statistics: the kernel's struct zs_pool_stats, and how often the lock
 * shards were contended (zsm's own; each shard counts under its lock, and the sum is read
 * without it, so it may lag a call in progress).
 */
struct zs_pool_stats {
	unsigned long pages_compacted; /* pages freed by zs_compact() over the pool's life */
	unsigned long lock_waits;      /* store and free lock acquisitions that found the lock held */
	unsigned long shard_moves;     /* stores that moved to another shard of their class */
	unsigned long cached_objs;     /* object slots threads' caches reserve now (freed objects
	                                  kept for the next store on the thread; see
	                                  ZS_POOL_NO_THREAD_CACHE) */
	unsigned long cached_bytes;    /* the bytes of those slots */
	unsigned long cached_bytes_per_thread; /* the most one thread's cache may reserve here */
	unsigned long thread_cache_bytes; /* the caches' own memory: each thread's magazines for
	                                  this pool (malloc'd; not in zs_pool_bookkeeping_bytes()) */
};

/*
 * A source of pages for a pool. alloc_page returns one page of the pool's page size, aligned
 * to that size, or NULL when it has none; free_page takes back a page alloc_page returned.
 * Both may be called from any thread, but the pool serialises its calls into one source.
 * Tests wrap the default source to fail on the N-th page. The pool calls them with locks of
 * its own held, never with a lock that other pools share: a source may call into any other
 * pool (store, free, read, statistics, zs_compact(), zs_drain_thread_caches(), create,
 * destroy), but not into the pool that called it, nor into one whose own source calls back
 * into that pool (a cycle); those deadlock.
 *
 * A zspage takes its pages one by one from such a source. Where they come out adjacent (each
 * page right after the one before) the pool stores into the zspage as into one range; where
 * they do not, a store into it takes a few more instructions and splits objects at page ends.
 * The default source and a zs_vm_source (given through zs_vm_source_ops()) hand each zspage
 * one run of adjacent pages.
 */
struct zs_page_source {
	void *(*alloc_page)(void *ctx);
	void (*free_page)(void *ctx, void *page);
	void *ctx;
};

/*
 * Pool configuration. A zero-filled struct asks for every default.
 */
struct zs_pool_config {
	size_t page_size;          /* 4096 (default, 0), 16384 or 65536 */
	unsigned int chain_size;   /* max pages per zspage, 4..16; 0 = 8 (CONFIG_ZSMALLOC_CHAIN_SIZE) */
	unsigned long max_pages;   /* memory limit in pages: allocation fails with ENOMEM past it; 0 = none */
	const struct zs_page_source *page_source; /* NULL = a reserved virtual range owned by the pool */
	unsigned int nr_shards;    /* lock shards per size class, a power of two up to 64; 0 = one per CPU
	                              (up to 16); 1 = the kernel's single lock per class */
	unsigned int flags;        /* ZS_POOL_* below; 0 = none */
};

/*
 * Hardened pool: every call that takes a handle checks that this pool handed it out and that
 * it is still allocated, and reads and writes are checked against the size the object was
 * allocated with. Each thread's reads in progress are recorded: zs_obj_read_end() must end
 * one of them (a read is ended on the thread that began it), and zs_free() of an object the
 * thread is reading is refused. A violation
 * (double free, a handle never returned or from another pool or a destroyed one, a read or
 * write past the object's size, an unmatched zs_obj_read_end(), a free of an object being
 * read) is reported on stderr and aborts the process, before anything in the pool is
 * changed. Without the flag these are undefined behaviour. Limits: a thread may have at most
 * 32 reads in progress at once (one more is reported); a free by another thread of an object
 * being read is reported at that read's zs_obj_read_end() (unless a new store has taken the
 * same slot and handle meanwhile); a destroyed hardened pool's handles are recognised as
 * foreign until 65535 more hardened pools have been created in the process. A
 * hardened pool's handles are not addresses (the top bits tag the pool). The cost is a few
 * instructions per call (docs/build.md, "Hardened pools").
 */
#define ZS_POOL_HARDENED 0x1u

/*
 * No per-thread caches: every zs_store() and zs_free() takes its class's lock and updates its
 * zspage, as the kernel does (with nr_shards = 1, the kernel's design exactly). By default a
 * thread keeps the slots of objects it frees, up to 4 KiB per size class (at most 32 slots,
 * classes above 4 KiB not at all), and its next stores into those classes reuse them without
 * a lock. The slots stay counted in use until a store takes them, the thread exits, or the
 * pool needs them: zs_compact(), zs_check_pool(), zs_drain_thread_caches() and a pool at its
 * memory limit take every thread's reserved slots back first. Until then the class
 * statistics count them as used, and zs_pool_stats() says how many there are. Hardened
 * pools keep no per-thread caches.
 */
#define ZS_POOL_NO_THREAD_CACHE 0x2u

/* Kernel constants for 4 KiB pages and the default chain of 8. */
#define ZS_HANDLE_SIZE 8u            /* in-object header of a non-huge object */
#define ZS_MIN_ALLOC_SIZE 32u
#define ZS_MIN_CHAIN_SIZE 4u
#define ZS_MAX_CHAIN_SIZE 16u
#define ZS_DEFAULT_CHAIN_SIZE 8u
#define ZS_NR_FULLNESS_GROUPS 12    /* ZS_INUSE_RATIO_0, _10 .. _99, _100 */

/*
 * Create a pool with the default configuration (4 KiB pages, chain 8). Returns NULL with
 * errno set (ENOMEM) on failure. `name` is copied; NULL is treated as "".
 */
struct zs_pool *zs_create_pool(const char *name);

/*
 * Create a pool from `cfg` (NULL = defaults). Returns NULL with errno EINVAL for a page size
 * other than 4096/16384/65536, a chain size outside 4..16 or a shard count that is not a
 * power of two up to 64, ENOMEM when memory is short.
 */
struct zs_pool *zs_create_pool_ex(const char *name, const struct zs_pool_config *cfg);

/*
 * Destroy a pool and everything in it: every page goes back to the page source and every
 * handle becomes invalid. Live objects are allowed (a cache tearing down); NULL is a no-op.
 */
void zs_destroy_pool(struct zs_pool *pool);

/* The name the pool was created with. */
const char *zs_pool_name(struct zs_pool *pool);

/*
 * Allocate an object of `size` bytes (contents undefined). Returns a nonzero handle, or 0
 * with errno EINVAL (NULL pool or size 0), ENOSPC (size above one page) or ENOMEM (no page,
 * or the pool's memory limit reached, and no slot of the object's class free anywhere in the
 * pool: the slots threads' caches reserve are taken back, and every shard of the class is
 * tried, before a store fails).
 */
unsigned long zs_malloc(struct zs_pool *pool, size_t size);

/*
 * zs_malloc() and zs_obj_write() in one call, under one lock acquisition: allocate `size`
 * bytes and copy them from `src`. Same errors as zs_malloc(), plus EINVAL for a NULL src.
 */
unsigned long zs_store(struct zs_pool *pool, const void *src, size_t size);

/*
 * Free the object behind `handle`. Handle 0 and a NULL pool are no-ops. Freeing a handle
 * twice, one from another pool, or one whose object is being read, is undefined behaviour.
 */
void zs_free(struct zs_pool *pool, unsigned long handle);

/*
 * Copy `size` bytes from `src` into the object, from its first byte. A size above the
 * object's capacity (see zs_obj_capacity()) writes nothing and sets errno to EINVAL; size 0
 * does nothing. In a hardened pool, a size above what the object was allocated with aborts.
 */
void zs_obj_write(struct zs_pool *pool, unsigned long handle, const void *src, size_t size);

/*
 * Begin reading the first `mem_len` bytes of an object. Returns a pointer straight into the
 * pool when those bytes lie in one page, otherwise copies them into `local_copy` (which must
 * hold mem_len bytes) and returns local_copy. The object cannot move until zs_obj_read_end();
 * other threads may store, free and compact meanwhile. Returns NULL with errno EINVAL when
 * mem_len exceeds the object's capacity; no read is then in progress. In a hardened pool,
 * a mem_len above what the object was allocated with aborts instead.
 */
void *zs_obj_read_begin(struct zs_pool *pool, unsigned long handle, size_t mem_len,
			void *local_copy);

/*
 * End a read begun by zs_obj_read_begin(); `mem` is the pointer it returned. Reads may nest
 * (several at once, of one handle too); each read_begin takes one read_end. One without a
 * read of the handle in progress is undefined behaviour (a hardened pool reports it).
 */
void zs_obj_read_end(struct zs_pool *pool, unsigned long handle, size_t mem_len, void *mem);

/*
 * Copy `n` bytes from `src` to `dst` (which must not overlap) as the pool copies object bytes
 * into and out of its pages: on x86-64 with vector moves stored aligned to `dst`, never with
 * `rep movsb`, which some C libraries choose from about 2 KiB up and which is several times
 * slower on AMD Zen when `dst` and `src` are misaligned to each other, as object payloads
 * are (8 bytes past a 16-byte boundary); the C library's memcpy on other architectures. For
 * a caller's copy out of the pointer zs_obj_read_begin() returns.
 */
void zs_memcpy(void *dst, const void *src, size_t n);

/* Bytes the object can hold: its class size less the 8-byte header (huge objects: the page). */
size_t zs_obj_capacity(struct zs_pool *pool, unsigned long handle);

/*
 * Objects of this many bytes or more are "huge": they take a zspage of one page each.
 * zram stores pages that compress to this size or more uncompressed. Per pool (the kernel
 * keeps one global value, set by the first pool).
 */
size_t zs_huge_class_size(struct zs_pool *pool);

/*
 * Index of the size class that serves a `size`-byte request, without the header added
 * (as the kernel's zs_lookup_class_index). Merged indices return the class they merge into;
 * a size above a page gives the huge class, as a page does.
 */
unsigned int zs_lookup_class_index(struct zs_pool *pool, unsigned int size);

/* Pages held by the pool: the sum of pages_per_zspage over every zspage it holds. */
unsigned long zs_get_total_pages(struct zs_pool *pool);

/*
 * Move objects from the sparsest zspages of each class into the fullest and free the
 * zspages left empty. Takes back the slots threads' caches reserve first. Returns the pages
 * freed by this call, those included (0 at once if another compaction of this pool is
 * running), and adds them to pages_compacted. Every handle stays valid.
 */
unsigned long zs_compact(struct zs_pool *pool);

/*
 * Take back every slot that threads' caches reserve in the pool (ZS_POOL_NO_THREAD_CACHE),
 * as if the objects had been freed without a cache; zspages left empty are freed, one spare
 * per class kept. Afterwards, until the next zs_free(), zs_get_total_pages() and the class
 * statistics count no reserved slot. Waits for threads inside a store or free of the pool.
 */
void zs_drain_thread_caches(struct zs_pool *pool);

/*
 * Bytes the pool holds besides its pages: handle cells, zspage metadata and its own
 * structures (memory touched, not address space reserved). zs_get_total_pages() times the
 * page size plus this is everything the pool costs, but for one table that all pools of a
 * geometry share, kept until the process exits: (page size / 16 + 2) * 4 bytes (1 KiB at
 * 4 KiB pages) per geometry in use.
 */
size_t zs_pool_bookkeeping_bytes(struct zs_pool *pool);

/* Copy the pool's cumulative statistics into `stats`. */
void zs_pool_stats(struct zs_pool *pool, struct zs_pool_stats *stats);

/*
 * One row of the kernel's debugfs "classes" file: a distinct size class and its zspages.
 */
struct zs_class_stats {
	unsigned int index;            /* class index (0 .. zs_class_count()-1) */
	unsigned int size;             /* object slot size, header included */
	unsigned int pages_per_zspage;
	unsigned int objs_per_zspage;
	unsigned long zspages[ZS_NR_FULLNESS_GROUPS]; /* zspages per fullness group: 0%, 10% .. 99%, 100% */
	unsigned long obj_allocated;   /* object slots in all zspages of the class */
	unsigned long obj_used;        /* live objects, and slots threads' caches reserve */
	unsigned long pages_used;      /* obj_allocated / objs_per_zspage * pages_per_zspage */
	unsigned long freeable;        /* pages zs_compact() could free now */
	unsigned long prof_objs;       /* live objects allocated while profiling was on */
	unsigned long prof_bytes;      /* their bytes, as requested */
};

/* Number of class indices (255 with 4 KiB pages). */
unsigned int zs_class_count(struct zs_pool *pool);

/*
 * Fill `out` for class index `index`. Returns 1 when `index` is a distinct class, 0 when it
 * is merged into a larger one (out then describes that class), -1 with errno EINVAL when it
 * is out of range.
 */
int zs_class_stats(struct zs_pool *pool, unsigned int index, struct zs_class_stats *out);

/*
 * Print the kernel's debugfs "classes" table for the pool: one row per distinct class, then
 * a Total row. Returns 0, or -1 with errno set when writing fails.
 */
int zs_print_classes(struct zs_pool *pool, FILE *out);

/*
 * Check the pool's invariants: every zspage's free list and in-use count, its fullness group
 * and list, the class statistics, every live object's header and handle, and the pages held
 * against the zspages found. Each violation is printed to `report` (when not NULL). Returns
 * 0 when all hold, -1 with errno EUCLEAN when one does not (EINVAL for a NULL pool). Takes
 * each class's locks in turn: call it while no other thread uses the pool, or the page count
 * may be caught mid-change. Builds with ZSM_DEBUG_INVARIANTS run the per-class part of this
 * check after every call that changes a class, and abort on the first violation.
 */
int zs_check_pool(struct zs_pool *pool, FILE *report);

/*
 * Allocation profiling, after the kernel's memory allocation profiling (alloc tags,
 * /proc/allocinfo). Built in with the CMake option ZSM_PROFILING (default ON), off at run
 * time until zs_alloc_profiling_set(1). While it is on, each zs_malloc() or zs_store() adds
 * the object's size and one call to the counters of its call site and its size class; the
 * free takes them off again, whenever it happens and wherever compaction has moved the object.
 * Objects allocated while profiling was off are never counted, even when freed while it is on.
 *
 * Call sites: zs_malloc() and zs_store() are macros that give each call site a static
 * struct zs_alloc_tag (file, line, function) and call zs_malloc_tagged()/zs_store_tagged().
 * Define ZSM_NO_ALLOC_TAGS before including this header to call the plain functions, whose
 * objects are counted under one "<untagged>" site. Tags are process-wide, like the kernel's.
 */
struct zs_alloc_tag {
	const char *file;
	const char *func;
	unsigned int line;
	/* The library's, updated atomically: do not write. */
	unsigned int registered;
	unsigned long bytes;             /* live bytes allocated here */
	unsigned long calls;             /* live objects allocated here */
	struct zs_alloc_tag *next;       /* the library's list of tags seen */
};

/* Allocate or store as zs_malloc()/zs_store(), counting the object under `tag` (NULL =
 * "<untagged>"). */
unsigned long zs_malloc_tagged(struct zs_pool *pool, size_t size, struct zs_alloc_tag *tag);
unsigned long zs_store_tagged(struct zs_pool *pool, const void *src, size_t size,
			      struct zs_alloc_tag *tag);

/*
 * Turn profiling on (1) or off (0), from any thread, while pools are in use. Returns the
 * previous state, or -1 with errno EOPNOTSUPP when the library was built without
 * ZSM_PROFILING.
 */
int zs_alloc_profiling_set(int enabled);

/* 1 when profiling is on, 0 when it is off or not built in. */
int zs_alloc_profiling_enabled(void);

/* One call site's counters, as zs_alloc_info_read() reports them. */
struct zs_alloc_info {
	const char *file;
	const char *func;
	unsigned int line;
	unsigned long bytes;
	unsigned long calls;
};

/*
 * Copy up to `max` call sites, most live bytes first, into `out`; returns how many sites
 * have been seen in all (which may exceed max). Sites whose objects have all been freed are
 * included with zero counters, as in /proc/allocinfo.
 */
size_t zs_alloc_info_read(struct zs_alloc_info *out, size_t max);

/*
 * Print up to `max` call sites (0 = all), most live bytes first, in the form of
 * /proc/allocinfo: a header, then "bytes calls file:line func:function" per site. Returns 0,
 * or -1 with errno set (EINVAL for a NULL stream, EIO when writing fails).
 */
int zs_print_allocinfo(FILE *out, size_t max);

/* A static tag for the call site (a GNU statement expression, as in the kernel). */
#define ZS_ALLOC_TAG_HERE()                                                        \
	({                                                                         \
		static struct zs_alloc_tag zs_alloc_tag_ = {__FILE__, __func__, __LINE__, \
							  0, 0, 0, 0};             \
		&zs_alloc_tag_;                                                    \
	})
#if !defined(ZSM_NO_ALLOC_TAGS)
#define zs_malloc(pool, size) zs_malloc_tagged((pool), (size), ZS_ALLOC_TAG_HERE())
#define zs_store(pool, src, size) zs_store_tagged((pool), (src), (size), ZS_ALLOC_TAG_HERE())
#endif

/*
 * The default page source on its own, for wrapping (tests, limits, accounting). It reserves
 * address space in reservations of `reserve_bytes` each (0 = 16 GiB; capped at 1 TiB and
 * rounded up to whole pages), mapping another each time the last is used up, up to
 * ZS_VM_SOURCE_MAX_BYTES in all, and hands out pages from them. It keeps up to
 * `retain_pages` freed pages resident for reuse and gives the rest back to the OS with
 * madvise; freed pages, from any reservation, are reused before new ones are taken. Its
 * alloc_page fails (NULL, errno ENOMEM) when every page below the limit is in use, or when
 * the OS refuses a new reservation (and its halves, down to 64 MiB). Returns NULL with errno
 * set (EINVAL for a page size that is not a power of two of at least 4096, ENOMEM when the
 * first reservation cannot be made). A NULL vm source has no pages in use or resident,
 * destroying it does nothing, and its ops have NULL callbacks, which pool creation refuses
 * (EINVAL).
 */
struct zs_vm_source;
struct zs_vm_source *zs_vm_source_create(size_t page_size, size_t reserve_bytes,
					 size_t retain_pages);

/*
 * The most address space a vm source reserves: 128 TiB, the user address space of x86-64 and
 * arm64 with 48-bit addresses. More than one pool can use: a pool holds at most 2^30 objects
 * (its handle cells), each at most a page (docs/design.md, "Limits").
 */
#define ZS_VM_SOURCE_MAX_BYTES ((size_t)1 << 47)

struct zs_vm_source_config {
	size_t page_size;     /* a power of two of at least 4096 */
	size_t reserve_bytes; /* address space per reservation, at most 1 TiB (larger values are
	                         capped), rounded up to whole pages; 0 = 16 GiB. Each reservation
	                         costs a mapping or two (vm.max_map_count): small ones are for tests */
	size_t limit_bytes;   /* address space of all reservations together, rounded down to whole
	                         pages; 0 or more than ZS_VM_SOURCE_MAX_BYTES = ZS_VM_SOURCE_MAX_BYTES */
	size_t retain_pages;  /* freed pages kept resident for reuse; 0 = none */
};

/*
 * zs_vm_source_create() with a limit on its address space: past limit_bytes in all, no
 * reservation is made (the last is cut to fit), so alloc_page fails with ENOMEM once every
 * page below the limit is in use. Same errors, plus EINVAL for a NULL cfg or a limit_bytes
 * below one page.
 */
struct zs_vm_source *zs_vm_source_create_ex(const struct zs_vm_source_config *cfg);
/* Unmap the source's whole range. Every pool using it must have been destroyed first. */
void zs_vm_source_destroy(struct zs_vm_source *vm);
/* The source as a struct zs_page_source, for zs_pool_config.page_source or for wrapping. */
struct zs_page_source zs_vm_source_ops(struct zs_vm_source *vm);
/* Pages handed out and not yet returned. */
size_t zs_vm_source_pages_in_use(struct zs_vm_source *vm);
/* Pages currently backed by memory (in use or retained), as opposed to released. */
size_t zs_vm_source_pages_resident(struct zs_vm_source *vm);

#ifdef __cplusplus
}
#endif

#endif /* ZSM_ZSMALLOC_H */
