/*
 * kservices.h: what a driver of the shimmed kernel may call besides zsmalloc itself: set-up of
 * the page arena and the checks that everything came back (kservices.c). Plain C types only,
 * so C++ drivers include it too.
 */
#ifndef KSERVICES_H
#define KSERVICES_H

#ifdef __cplusplus
extern "C" {
#endif

/* Reserves an arena of `pages` 4 KiB pages (address space, touched on use) and its vmemmap
 * array; installs the trap handler. Returns 0, or -1 when the memory cannot be had. */
int kshim_mm_init(unsigned long pages);
/* Pages handed out and not freed; pages freed in a state the buddy allocator rejects. */
unsigned long kshim_pages_in_use(void);
unsigned long kshim_bad_pages(void);
/* NR_ZSPAGES of the zone statistics. */
long kshim_nr_zspages(void);
/* Objects live in every slab cache together (handles, zspages). */
long kshim_slab_objects(void);
/* Runs the work items queued by schedule_work(); returns how many ran. */
int kshim_run_pending_work(void);
/* Runs the show function of the debugfs file `name` whose private data is `data` (zsmalloc's
 * "classes" file under CONFIG_ZSMALLOC_STAT) into buf; returns its length, or -1 when there is
 * no such file. */
long kshim_debugfs_show(const char *name, const void *data, char *buf, unsigned long size);
/* Calls every registered shrinker's count and scan; returns the sum of what scan freed. */
unsigned long kshim_shrink_all(void);
/* printk() calls and WARN() traps so far. */
unsigned long kshim_printk_calls(void);
unsigned long kshim_warnings(void);

#ifdef __cplusplus
}
#endif

#endif
