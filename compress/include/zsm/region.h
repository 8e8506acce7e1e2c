/*
 * zsm region, C API: compressed memory for a range of the process's own address space,
 * zswap's shape in userspace. zsm_region_create() maps `size` bytes; a program reads and
 * writes them as ordinary memory. At most budget_bytes of them stay resident, decompressed;
 * colder pages are compressed into a zsm pool (and, past its budget, written to an optional
 * backing file) and taken out of the page tables by an evictor thread; the next touch faults,
 * and the page is decompressed and installed by one of the region's handler threads
 * (userfaultfd), or in the SIGBUS mode by the faulting thread itself. A page never written
 * reads as zeros and costs nothing; creation commits no memory the region does not use.
 *
 * The contract (docs/region.md says why):
 * - Any thread may read and write any byte of the region at any time; no write is ever lost.
 * - A syscall that reads or writes an evicted page of the region (read(2) into it, write(2)
 *   from it) succeeds where the kernel lets the handler serve the kernel's own faults (root,
 *   CAP_SYS_PTRACE, /dev/userfaultfd, vm.unprivileged_userfaultfd=1); otherwise, and in the
 *   SIGBUS mode, it fails with EFAULT: zsm_region_pin() keeps a range resident for the length
 *   of such a call. I/O that pins pages (O_DIRECT, io_uring's fixed buffers, vmsplice) never
 *   loses data: where the kernel has UFFDIO_MOVE (6.8+) a pinned page is never taken out (the
 *   kernel refuses to move it); where it has not (or with ZSM_REGION_NO_MOVE), such I/O needs
 *   zsm_region_pin() around it.
 * - fork(): the child gets its parent's region as it was at the fork, copy-on-write, as with
 *   ordinary memory: it reads and writes it, served by a region of its own (its own threads
 *   and, with a backing file, a copy of the file), and neither side sees the other's later
 *   writes. The region's atfork handlers hold faults for the length of the fork. A child of
 *   vfork() or clone() without fork()'s handlers must only exec or _exit.
 * - The region's descriptors (its userfaultfd and backing file) are kept in a descriptor table
 *   of the region's own: a program that closes descriptors it never opened (close_range,
 *   closefrom) loses nothing: the region's calls go on through its own table.
 * - mlock()/mlockall() never populate the region or stop eviction: its range is unlocked again.
 * - A signal handler may touch the region, but must not call these functions.
 * - The program must not munmap, mprotect or madvise the region itself (discard is
 *   MADV_DONTNEED's equivalent).
 * - Pinned pages count against the budget, and at most half of it may be pinned.
 *
 * Errors: calls that return a pointer return NULL and set errno; calls with an int result
 * return 0 or a negative errno:
 *   -EINVAL   bad arguments: NULL region, a range not inside the region, bad options
 *   -ENOMEM   memory short (pin: the pins would pass half the budget)
 *   -EMFILE / -ENFILE  out of descriptors, as themselves
 *   -ENOSYS / -EPERM  userfaultfd not available (the message from zsm_region_last_error()
 *             names the sysctl and the device that allow it)
 *   -EEXIST, -EACCES, ...  the backing file's path refused or unusable (the cold tier's rules:
 *             zsm_region_last_error() names the path and why)
 *   -EBUSY    set_budget below twice the pinned pages   -EOVERFLOW  pins nested 2047 deep
 * Every call may be made from any thread at once on one region, except zsm_region_destroy().
 */
#ifndef ZSM_REGION_H
#define ZSM_REGION_H

#include <stddef.h>
#include <stdint.h>

#include <zsm/cache.h>
#include <zsm/zsmalloc.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An opaque region, made by zsm_region_create() and freed by zsm_region_destroy(). */
struct zsm_region;
struct sigaction; /* <signal.h>'s, for zsm_region_sigbus_action() */

/*
 * A zero-filled struct asks for every default. Out of range is EINVAL at creation.
 */
struct zsm_region_options {
	size_t budget_bytes;        /* most the region keeps resident, decompressed; 0 = a quarter
	                               of the region's size; at least 16 pages */
	enum zsm_codec codec;       /* ZSM_CODEC_LZ4 (default), LZ4HC, ZSTD or NONE */
	int level;                  /* 0 = the codec's default */
	size_t compressed_budget_bytes; /* most the pool holds; 0 = no limit; else at least the
	                               largest zspage of the pool's classes (EINVAL below). Past it,
	                               the copies of stored pages go to the backing file; what the
	                               file cannot take (none, or full) goes to an overflow pool
	                               without a limit: a page never stays decompressed for want of
	                               room (mem_used_total counts both) */
	struct zs_pool_config pool; /* the pool's configuration (max_pages is ignored; nr_shards 0
	                               is one lock shard per CPU, and ZS_POOL_NO_THREAD_CACHE is
	                               always set: a fault server never allocates) */
	/* An optional backing file for pages past compressed_budget_bytes (which it needs), made
	 * by the cold tier's rules (zsm/backing_file.hpp): NULL = none; a directory = an unnamed
	 * file in it; any other path must not exist (EEXIST) and is removed at destroy. Locked
	 * while the region lives. Copies are written in 512-byte sectors, checked by a checksum
	 * when read back; a full file takes no more, and pages stay in the pool. */
	const char *backing_file;
	uint64_t backing_file_capacity; /* most bytes the file holds: 0 = 256 MiB; at most 2 TiB */
	unsigned int fault_around_pages; /* most pages a sequential fault installs: 0 = 16, 1 = off;
	                               at most 64 */
	unsigned int flags;         /* ZSM_REGION_* below; 0 = none */
	int handler_spin_us;        /* with one handler (ZSM_REGION_ONE_HANDLER), after serving it
	                               polls for the next fault this long before it sleeps: 0 =
	                               the default (50), -1 = never spin; at most 10000 */
	int probation_divisor;      /* budget / this many pages of the budget are a probation stage:
	                               evicted dirty pages kept decompressed, unmapped, so that a
	                               touch soon after costs no decompression and tells the policy
	                               the page is in use (a clean page is only dropped: its copy
	                               is valid, and a fault on it soon after marks it instead).
	                               0 = 8, -1 = none; otherwise 2..1024 */
	unsigned int cold_age_ms;   /* 0 = off: pages are compressed only past the budget. Else a
	                               mapped page left untouched (read or written) this long is
	                               compressed whatever the budget, which stays a cap on top:
	                               the evictor moves a slice of the mapped pages out every
	                               tick (a 16th of this, 50 ms..1 s), a touch brings one back
	                               by a fault, and one untouched for this long is compressed
	                               (a clean page, whose copy is valid, is only dropped when
	                               the slice takes it). The slice is what 1 % of a CPU pays
	                               for, the faults' time included (stall_ns). Pages leave the
	                               region then as they do past the budget: a syscall on one
	                               meets what the contract above says of evicted pages.
	                               100..604800000 (a week); needs probation */
	unsigned int stall_target_ppm; /* 0 = the cold age stays as set. Else the cold age is
	                               steered (with cold_age_ms as its start) so that the time
	                               faults spend decompressing pages aging compressed (its
	                               promotions) stays near this share of wall time, in parts
	                               per million: above it the age doubles, under half of it the
	                               age shrinks by a fifth, every 4 s or a quarter of the age,
	                               between min(cold_age_ms, 1 s) and an hour. At most 100000
	                               (10 %); needs cold_age_ms */
	/* Called every report_every_ms (0 = never; else 100..86400000) on the region's evictor
	 * thread, outside every lock, with report_arg: it may call zsm_region_stats(), and must
	 * not touch the region's memory (nor allocate from it). The thread runs on a descriptor
	 * table of its own: the caller's descriptor numbers are not open there (reach a file by
	 * its path, or /proc/self/fd/N, the process's table). */
	void (*report)(void *report_arg);
	void *report_arg;
	unsigned int report_every_ms;
};

/* Serve user-mode faults only (UFFD_USER_MODE_ONLY), as an unprivileged process gets: a
 * syscall that meets an evicted page fails with EFAULT. Without it, kernel-mode handling is
 * used where the kernel grants it, and user mode only where it does not. */
#define ZSM_REGION_USER_MODE_ONLY 0x1u
/* One handler thread for every fault, unpinned, spinning handler_spin_us after serving,
 * instead of one handler pinned to each CPU the process may run on (at most 8): fewer
 * threads, and a cross-CPU wake-up for most faults. */
#define ZSM_REGION_ONE_HANDLER 0x2u
/* The SIGBUS mode: no handler thread; each faulting thread serves its own fault, in a SIGBUS
 * handler the region installs for the process (UFFD_FEATURE_SIGBUS), so no fault waits for a
 * wake-up on another CPU. The handler is chained: a SIGBUS outside every region goes to the
 * disposition it replaced. As with ZSM_REGION_USER_MODE_ONLY, a syscall that meets an evicted
 * page fails with EFAULT (pin first). The program must not replace the SIGBUS handler while
 * such a region lives, and no thread that touches the region may block SIGBUS: the kernel
 * kills a thread that blocks a fault's SIGBUS (creation from such a thread is EINVAL; the
 * preload library keeps SIGBUS unblocked everywhere). A fault installs its page and allocates
 * nothing. Not with ZSM_CODEC_ZSTD (EINVAL: its decompression context is allocated per
 * thread). At most 64 such regions at once (EMFILE). */
#define ZSM_REGION_SELF_SERVE 0x4u
/* budget_bytes bounds everything the region costs: its decompressed pages, the compressed
 * pool and its bookkeeping. The decompressed pages get what the pool and the bookkeeping leave,
 * and at least an eighth of the budget; past compressed_budget_bytes the pool's copies go to
 * the backing file. Without the flag the budget bounds the decompressed pages alone. */
#define ZSM_REGION_BUDGET_ALL 0x8u
/* Take pages out of the region by write-protect, copy and MADV_DONTNEED, as on kernels before
 * 6.8, even where UFFDIO_MOVE is there: for tests and comparisons (see the contract on I/O). */
#define ZSM_REGION_NO_MOVE 0x10u

/*
 * Cumulative statistics, zram's mm_stat in spirit. Read without stopping the region, so
 * counters may lag a fault or a batch in progress: a thread's own faults are counted by the
 * time it runs again, and the evictor's batches once evictor_idle reads 1.
 */
struct zsm_region_stats {
	uint64_t size_bytes;         /* the region's size */
	uint64_t budget_bytes;       /* the resident budget in effect */
	uint64_t resident_bytes;     /* pages mapped now, decompressed */
	uint64_t stored_pages;       /* pages with a copy held (evicted, or mapped clean) */
	uint64_t orig_data_size;     /* their uncompressed bytes (stored_pages * page size) */
	uint64_t compr_data_size;    /* their compressed bytes in the pool (not the file's) */
	uint64_t mem_used_total;     /* the pool's pages, in bytes (what compressed storage costs) */
	uint64_t same_pages;         /* stored pages of one repeated word, kept without a pool object */
	uint64_t huge_pages;         /* stored pages that did not compress (kept whole) */
	uint64_t faults;             /* faults served */
	uint64_t zero_faults;        /* of them, pages never written (a zero page installed) */
	uint64_t fault_around_pages; /* pages installed ahead of a fault */
	uint64_t evictions;          /* pages compressed and dropped (after probation, if any) */
	uint64_t clean_evictions;    /* pages dropped again without compressing (copy still valid) */
	uint64_t refaults;           /* faults on a page evicted before, served from its copy */
	uint64_t written_back;       /* copies written to the backing file (cumulative) */
	uint64_t read_back;          /* pages read back from the backing file (cumulative) */
	uint64_t bd_bytes_on_file;   /* the backing file's live bytes, in whole sectors */
	uint64_t wp_faults;          /* write faults on write-protected pages (clean ones, victims) */
	uint64_t pinned_pages;       /* pages pinned now */
	uint64_t user_mode_only;     /* 1: kernel-mode accesses to evicted pages get EFAULT */
	uint64_t probation_bytes;    /* pages in probation now (unmapped, decompressed), in bytes;
	                                resident_bytes + probation_bytes <= budget_bytes */
	uint64_t probation_faults;   /* faults served from probation (no decompression) */
	uint64_t resident_limit_bytes; /* the decompressed pages' budget in effect (with
	                                ZSM_REGION_BUDGET_ALL: what the pool and bookkeeping leave) */
	uint64_t hard_limit_bytes;   /* most that resident + probation reach while the evictor works:
	                                the limit above plus what faults may run ahead of it */
	uint64_t bookkeeping_bytes;  /* the pool's metadata and the region's tables for pages in use */
	uint64_t io_pinned_skips;    /* evictions refused: the page was pinned for I/O (it stayed) */
	uint64_t budget_waits;       /* faults that waited for the evictor at the hard limit */
	uint64_t over_budget_pages;  /* pages installed past the hard limit while the evictor could
	                                free nothing (every page pinned, the pool full, no file) */
	uint64_t evictor_runs;       /* batches the evictor ran */
	uint64_t clock_sweep_ns;     /* the CLOCK hand's scanning time over its last whole turn */
	uint64_t pages_move;         /* 1: pages leave and come back by UFFDIO_MOVE; 0: copied */
	uint64_t peak_decompressed_bytes; /* the most resident + probation ever held (at faults) */
	uint64_t peak_pool_bytes;    /* the pool's most (at the evictor's batches) */
	uint64_t peak_total_bytes;   /* the most of everything the region costs: decompressed pages,
	                                the pool and bookkeeping (at the evictor's batches) */
	uint64_t evictor_idle;       /* 1: the evictor sleeps with nothing owed, its batches all
	                                counted above; the counters stand still until the program
	                                touches the region or changes its budget (never with aging) */
	uint64_t aged_pages;         /* pages moved out by aging (cold_age_ms) to learn their age */
	uint64_t cold_evictions;     /* of the evictions and clean evictions, pages left untouched
	                                for the cold age */
	uint64_t aging_turn_ms;      /* the wall time of CLOCK's last whole turn while aging: a
	                                mapped page's idle age is known from this on */
	uint64_t stall_ns;           /* time faults spent bringing pages back (from probation, the
	                                pool or the file, waits for room included): the program's
	                                stall, summed over its threads */
	uint64_t promotion_stall_ns; /* of stall_ns, faults that decompressed (from the pool or
	                                the file): what the cold age's steering reads */
	uint64_t cold_age_ms;        /* the cold age now (steered, with stall_target_ppm) */
	uint64_t saved_byte_seconds; /* memory saved (the bytes of the pages held only as copies,
	                                less the pool's) summed over time at aging's ticks (0
	                                without aging) */
	uint64_t held_byte_seconds;  /* the pages' bytes (resident, probation, held as copies), summed
	                                the same way: saved over held is the time-averaged share
	                                saved, saved over the time the average bytes */
	uint64_t kept_incompressible; /* cold pages aging put back in the region rather than
	                                store: they compressed to more than 73 % of a page */
	uint64_t clean_pages;        /* mapped pages whose copy is still valid (read back, not
	                                written since): counted in stored_pages and in
	                                resident_bytes both; stored_pages less these are the pages
	                                held only as copies */
};

/* Create a region of `size` bytes (rounded up to whole pages). NULL + errno on failure. */
struct zsm_region *zsm_region_create(size_t size, const struct zsm_region_options *opts);

/* Unmap the region and free all it holds. NULL is a no-op. Must not overlap another call. */
void zsm_region_destroy(struct zsm_region *region);

/* The region's first byte (page aligned), or NULL for a NULL region. */
void *zsm_region_base(struct zsm_region *region);

/* The region's size in bytes, or 0 for a NULL region. */
size_t zsm_region_size(struct zsm_region *region);

/* Fill *out. -EINVAL for a NULL region or out. */
int zsm_region_stats(struct zsm_region *region, struct zsm_region_stats *out);

/*
 * Range calls: [addr, addr + len) must lie inside the region (-EINVAL otherwise); addr and len
 * are widened to whole pages.
 * - prefetch: make the range resident now (within the budget).
 * - evict: compress the range's pages and drop them (as MADV_PAGEOUT); their contents stay;
 *   pinned pages are skipped.
 * - discard: drop the range's contents (as MADV_DONTNEED): the pages read as zeros after.
 * - pin / unpin: keep the range resident and writable until unpinned (pins nest); for
 *   syscalls that must not meet an evicted page. A pinned range counts against the budget;
 *   at most half the budget may be pinned (-ENOMEM), a range of one page (a futex word for a
 *   wait) up to all of it but one page. unpin of a page not pinned: -EINVAL, nothing changed.
 */
int zsm_region_prefetch(struct zsm_region *region, void *addr, size_t len);
int zsm_region_evict(struct zsm_region *region, void *addr, size_t len);
int zsm_region_discard(struct zsm_region *region, void *addr, size_t len);
int zsm_region_pin(struct zsm_region *region, void *addr, size_t len);
int zsm_region_unpin(struct zsm_region *region, void *addr, size_t len);

/*
 * madvise(2) on region memory, as the kernel serves it on private anonymous memory: addr must be
 * page aligned (-EINVAL), len is rounded up to whole pages (0: nothing). MADV_DONTNEED,
 * MADV_DONTNEED_LOCKED and MADV_FREE discard (zeros after); MADV_WILLNEED and MADV_POPULATE_*
 * prefetch; MADV_PAGEOUT evicts; MADV_WIPEONFORK / MADV_KEEPONFORK and MADV_DONTFORK /
 * MADV_DOFORK say what a child of fork() gets there (zeros; nothing: a touch is SIGSEGV), as on
 * ordinary memory; the hints (NORMAL, RANDOM, SEQUENTIAL, HUGEPAGE, NOHUGEPAGE, DONTDUMP,
 * DODUMP, MERGEABLE, UNMERGEABLE, COLD) are taken and change nothing. MADV_REMOVE (shared
 * memory only) and advice unknown here are -EINVAL, MADV_HWPOISON and MADV_SOFT_OFFLINE -EPERM.
 */
int zsm_region_advise(struct zsm_region *region, void *addr, size_t len, int advice);

/*
 * The range as if unmapped and mapped again (the preload library's munmap): discarded, its
 * fork advice cleared, and accessible again where a MADV_DONTFORK range was absent from this
 * child of fork().
 */
int zsm_region_reset(struct zsm_region *region, void *addr, size_t len);

/* Change the resident budget (bytes, at least 16 pages); evicts at once if above it. */
int zsm_region_set_budget(struct zsm_region *region, size_t budget_bytes);

/*
 * Why the last zsm_region_create() on this thread failed, in one line (the sysctl or device
 * that would allow userfaultfd, the option out of range, ...); "" if it did not.
 */
const char *zsm_region_last_error(void);

/*
 * The descriptors the region holds in the process's table (its userfaultfd, its backing
 * file, and two it reserves so that a child of fork() can open its own userfaultfd when the
 * program has filled its table): up to n into fds; how many it holds. A program that closes every descriptor it did
 * not open may leave these (closing them loses nothing: the region's own threads keep copies,
 * but its calls then borrow those, which is slower). -EINVAL for a NULL region.
 */
int zsm_region_descriptors(struct zsm_region *region, int *fds, int n);

/*
 * The SIGBUS mode's handler passes every SIGBUS that is not a region's fault to the disposition
 * it replaced. A program that wants a SIGBUS handler of its own while such a region lives sets
 * it here instead of with sigaction(): `act` (NULL: unchanged) becomes that disposition, and
 * the one before goes to *old (NULL: not wanted). 0, or -EINVAL when no region was ever made
 * in the SIGBUS mode. The preload library routes the program's sigaction(SIGBUS) here.
 */
int zsm_region_sigbus_action(const struct sigaction *act, struct sigaction *old);

/*
 * 1 on the threads the regions run (the evictor, the handler threads), else 0. Memory a region
 * holds must never be given to them: they would fault on the region they serve. An allocator
 * that places memory in a region (the preload library) gives these threads memory from
 * elsewhere.
 */
int zsm_region_internal_thread(void);

#ifdef __cplusplus
}
#endif

#endif /* ZSM_REGION_H */
