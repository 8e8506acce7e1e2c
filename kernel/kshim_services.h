/*
 * kshim_services.h: the kernel services around the allocator that mm/zsmalloc.c registers with
 * or calls: workqueues, the shrinker, cpu hotplug, debugfs, scatterlists and the movable
 * operations of a page type. Each is modelled as far as the file uses it; the out-of-line
 * parts are in kservices.c. Part of kshim.h, last.
 */
#ifndef KSHIM_SERVICES_H
#define KSHIM_SERVICES_H

#ifndef KSHIM_H
#error "kshim_services.h is part of kshim.h: include that"
#endif

/* --- workqueue, shrinker, cpu hotplug, debugfs ----------------------------------------------- */

struct work_struct;
typedef void (*work_func_t)(struct work_struct *work);
struct work_struct { atomic_long_t data; struct list_head entry; work_func_t func; };
#define INIT_WORK(w, f) \
	do { atomic_long_set(&(w)->data, 0); INIT_LIST_HEAD(&(w)->entry); (w)->func = (f); } while (0)
bool schedule_work(struct work_struct *work);
bool flush_work(struct work_struct *work);
bool cancel_work_sync(struct work_struct *work);

struct shrink_control { gfp_t gfp_mask; int nid; unsigned long nr_to_scan; unsigned long nr_scanned; };
struct shrinker {
	unsigned long (*count_objects)(struct shrinker *, struct shrink_control *);
	unsigned long (*scan_objects)(struct shrinker *, struct shrink_control *);
	long batch;
	int seeks;
	unsigned int flags;
	void *private_data;
	struct list_head list;
};
#define DEFAULT_SEEKS 2
#define SHRINK_STOP (~0UL - 1)
#define SHRINK_EMPTY (~0UL - 1)
__printf(2, 3) int register_shrinker(struct shrinker *shrinker, const char *fmt, ...);
void unregister_shrinker(struct shrinker *shrinker);
__printf(2, 3) struct shrinker *shrinker_alloc(unsigned int flags, const char *fmt, ...);
void shrinker_register(struct shrinker *shrinker);
void shrinker_free(struct shrinker *shrinker);

enum cpuhp_state { CPUHP_INVALID = -1, CPUHP_MM_ZS_PREPARE = 1, CPUHP_ONLINE_DYN = 100 };
int cpuhp_setup_state(enum cpuhp_state state, const char *name, int (*startup)(unsigned int cpu),
		      int (*teardown)(unsigned int cpu));
void cpuhp_remove_state(enum cpuhp_state state);

struct dentry;
struct inode;
struct file;
struct seq_file { char *buf; size_t size; size_t count; void *private; };
struct file_operations { int (*kshim_show)(struct seq_file *, void *); };
__printf(2, 3) void seq_printf(struct seq_file *m, const char *fmt, ...);
void seq_puts(struct seq_file *m, const char *s);
#define DEFINE_SHOW_ATTRIBUTE(name) \
	static const struct file_operations name##_fops = { .kshim_show = name##_show }
bool debugfs_initialized(void);
struct dentry *debugfs_create_dir(const char *name, struct dentry *parent);
struct dentry *debugfs_create_file(const char *name, umode_t mode, struct dentry *parent, void *data,
				   const struct file_operations *fops);
void debugfs_remove_recursive(struct dentry *dentry);
#define debugfs_remove(d) debugfs_remove_recursive(d)

/* Scatterlists: the page pointer with the end mark in its low bits. */
struct scatterlist { unsigned long page_link; unsigned int offset; unsigned int length; };
#define SG_CHAIN 0x01UL
#define SG_END 0x02UL
static inline void sg_init_table(struct scatterlist *sg, unsigned int n)
{
	memset(sg, 0, sizeof(*sg) * n);
	sg[n - 1].page_link |= SG_END;
}
static inline void sg_set_page(struct scatterlist *sg, struct page *page, unsigned int len,
			       unsigned int offset)
{
	sg->page_link = (sg->page_link & (SG_CHAIN | SG_END)) | (unsigned long)page;
	sg->offset = offset;
	sg->length = len;
}
static inline struct scatterlist *sg_next(struct scatterlist *sg)
{
	return (sg->page_link & SG_END) ? NULL : sg + 1;
}

/* The movable operations of a page type (newer kernels register them once). */
int set_movable_ops(const struct movable_operations *ops, unsigned int page_type);

#endif /* KSHIM_SERVICES_H */
