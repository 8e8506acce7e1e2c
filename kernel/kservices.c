/*
 * kservices.c: the out-of-line "kernel" that mm/zsmalloc.c calls (kshim.h declares it), compiled
 * with the same kernel flags as zsmalloc.c: a page allocator over one arena with its vmemmap
 * array, a slab allocator, queued spin and rw locks, zone statistics, a workqueue run on
 * demand, shrinker and cpu-hotplug registries, debugfs files whose show function a driver can
 * run, and printk. One CPU: per-CPU data has offset 0. The fast paths keep the kernel's shape
 * (a lock is preempt_disable() and one locked cmpxchg or xadd; an unlock a release store and
 * preempt_enable()); the allocators are simpler than SLUB and the buddy allocator (a LIFO free
 * list each), so their instruction counts are ours, not the kernel's.
 */
#include "kshim.h"
#include "khost.h"
#include "kservices.h"

/* --- the per-CPU state of the one CPU, thread-local --------------------------------------- */

unsigned long kshim_resched_calls; /* reschedules preempt_enable() asked for (never, here) */
#if defined(__x86_64__)
static struct task_struct kshim_init_task = { .comm = "kshim" };
__thread int kshim_preempt_count = PREEMPT_NEED_RESCHED; /* x86: set means "no resched pending" */
__thread unsigned long kshim_this_cpu_off;
__thread struct task_struct *kshim_current_task = &kshim_init_task;

/* The reschedule thunk preempt_enable() calls when the count reaches zero with a reschedule
 * pending (never here: nothing sets one); the return and indirect-branch thunks the kernel's
 * -mfunction-return/-mindirect-branch=thunk-extern code calls. */
__asm__(".text\n"
	".globl kshim_preempt_schedule_thunk\n"
	"kshim_preempt_schedule_thunk:\n\tincq kshim_resched_calls(%rip)\n\tret\n"
	".globl __x86_return_thunk\n"
	"__x86_return_thunk:\n\tret\n\tint3\n"
#define KSHIM_THUNK(reg) ".globl __x86_indirect_thunk_" #reg "\n__x86_indirect_thunk_" #reg ":\n\tjmp *%" #reg "\n"
	KSHIM_THUNK(rax) KSHIM_THUNK(rbx) KSHIM_THUNK(rcx) KSHIM_THUNK(rdx) KSHIM_THUNK(rsi)
	KSHIM_THUNK(rdi) KSHIM_THUNK(rbp) KSHIM_THUNK(r8) KSHIM_THUNK(r9) KSHIM_THUNK(r10)
	KSHIM_THUNK(r11) KSHIM_THUNK(r12) KSHIM_THUNK(r13) KSHIM_THUNK(r14) KSHIM_THUNK(r15));
#define kshim_cpu_relax() __asm__ __volatile__("pause" : : : "memory")
#elif defined(__aarch64__)
/* The task of the one thread, the executable's first thread-local object, so that it sits at
 * the thread pointer + KSHIM_TASK_TP_OFFSET where get_current() looks (checked by
 * kshim_mm_init()); the need-resched bit set: nothing pending. */
__thread struct task_struct kshim_task __attribute__((aligned(16))) = {
	.thread_info = { .preempt_count = PREEMPT_NEED_RESCHED },
	.stack_canary = 0x5a5b5c5d00e1f2a3UL,
	.comm = "kshim",
};

void kshim_preempt_schedule(void)
{
	kshim_resched_calls++;
}
#define kshim_cpu_relax() __asm__ __volatile__("yield" : : : "memory")
#endif

int kshim_cond_resched(void)
{
	return 0;
}

/* --- printk --------------------------------------------------------------------------------- */

static unsigned long printk_calls;

int printk(const char *fmt, ...)
{
	va_list ap;
	printk_calls++;
	va_start(ap, fmt);
	khost_vlog(fmt, ap);
	va_end(ap);
	return 0;
}

unsigned long kshim_printk_calls(void) { return printk_calls; }
unsigned long kshim_warnings(void) { return khost_warnings; }

void dump_page(struct page *page, const char *reason)
{
	printk("page:%p pfn:%#lx flags:%#lx mapping:%p index:%#lx private:%#lx type:%#x refcount:%d: %s\n",
	       (void *)page, page_to_pfn(page), page->flags, (void *)page->mapping, page->index,
	       page->private, page->page_type, atomic_read(&page->_refcount), reason);
}

/* --- locks ---------------------------------------------------------------------------------- */

#define QR_BIAS 0x200	/* a reader */
#define QW_WMASK 0x1ff	/* a writer, or one waiting */
#define QW_LOCKED 0xff

void _raw_spin_lock(spinlock_t *lock)
{
	int unlocked = 0;
	preempt_disable();
	if (likely(atomic_try_cmpxchg(&lock->val, &unlocked, 1)))
		return;
	do {
		kshim_cpu_relax();
		unlocked = 0;
	} while (!atomic_try_cmpxchg(&lock->val, &unlocked, 1));
}

int _raw_spin_trylock(spinlock_t *lock)
{
	int unlocked = 0;
	preempt_disable();
	if (atomic_try_cmpxchg(&lock->val, &unlocked, 1))
		return 1;
	preempt_enable();
	return 0;
}

void _raw_spin_unlock(spinlock_t *lock)
{
	smp_store_release((u8 *)&lock->val.counter, 0);
	preempt_enable();
}

void _raw_read_lock(rwlock_t *lock)
{
	preempt_disable();
	if (likely(!(atomic_add_return(QR_BIAS, &lock->cnts) & QW_WMASK)))
		return;
	while (atomic_read(&lock->cnts) & QW_WMASK)
		kshim_cpu_relax();
}

void _raw_read_unlock(rwlock_t *lock)
{
	atomic_sub(QR_BIAS, &lock->cnts);
	preempt_enable();
}

void _raw_write_lock(rwlock_t *lock)
{
	int unlocked = 0;
	preempt_disable();
	if (likely(atomic_try_cmpxchg(&lock->cnts, &unlocked, QW_LOCKED)))
		return;
	do {
		kshim_cpu_relax();
		unlocked = 0;
	} while (!atomic_try_cmpxchg(&lock->cnts, &unlocked, QW_LOCKED));
}

int _raw_write_trylock(rwlock_t *lock)
{
	int unlocked = 0;
	preempt_disable();
	if (atomic_try_cmpxchg(&lock->cnts, &unlocked, QW_LOCKED))
		return 1;
	preempt_enable();
	return 0;
}

void _raw_write_unlock(rwlock_t *lock)
{
	smp_store_release((u8 *)&lock->cnts.counter, 0);
	preempt_enable();
}

/* --- pages: one arena, its vmemmap array, a LIFO free list ---------------------------------- */

/* The arena's first page frame number: pfn 0 is never handed out, as in a real machine. */
#define FIRST_PFN 0x100000UL
static struct page *free_list;	/* linked through page->index */
static unsigned long nr_pages, pages_in_use, bad_pages;
static struct zone the_zone;
static atomic_long_t zone_stats[NR_VM_ZONE_STAT_ITEMS];

#if defined(__x86_64__)
unsigned long vmemmap_base;
unsigned long page_offset_base;

/* The arena and its vmemmap array anywhere (the bases are variables); the first struct page. */
static struct page *map_arena(unsigned long pages)
{
	void *arena = khost_map(pages * PAGE_SIZE);
	struct page *map = khost_map(pages * sizeof(struct page));
	if (!arena || !map)
		return NULL;
	page_offset_base = (unsigned long)arena - FIRST_PFN * PAGE_SIZE;
	vmemmap_base = (unsigned long)(map - FIRST_PFN);
	return map;
}
#elif defined(__aarch64__)
long memstart_addr;

/* The arena at PAGE_OFFSET and its vmemmap array at VMEMMAP_START (link-time constants), after
 * checking that the task is where get_current() reads it; the first struct page. */
static struct page *map_arena(unsigned long pages)
{
	unsigned long tp;
	__asm__("mrs %0, tpidr_el0" : "=r"(tp));
	if ((unsigned long)&kshim_task != tp + KSHIM_TASK_TP_OFFSET) {
		printk("the task is at thread pointer + %ld, not + %d: link kservices.o before any "
		       "other object with thread-local data\n", (long)((unsigned long)&kshim_task - tp),
		       KSHIM_TASK_TP_OFFSET);
		return NULL;
	}
	memstart_addr = FIRST_PFN * PAGE_SIZE;
	if (!khost_map_at(PAGE_OFFSET, pages * PAGE_SIZE) ||
	    !khost_map_at(VMEMMAP_START, pages * sizeof(struct page)))
		return NULL;
	return (struct page *)VMEMMAP_START;
}
#endif

int kshim_mm_init(unsigned long pages)
{
	struct page *map = map_arena(pages);
	if (!map)
		return -1;
	for (unsigned long i = pages; i-- > 0;) {
		struct page *p = map + i;
		p->index = (unsigned long)free_list;
		free_list = p;
	}
	nr_pages = pages;
	khost_install_traps();
	return 0;
}

unsigned long kshim_pages_in_use(void) { return pages_in_use; }
unsigned long kshim_bad_pages(void) { return bad_pages; }
long kshim_nr_zspages(void) { return atomic_long_read(&zone_stats[NR_ZSPAGES]); }

struct page *alloc_pages(gfp_t gfp, unsigned int order)
{
	struct page *page = free_list;
	if (order != 0 || !page)
		return NULL;
	free_list = (struct page *)page->index;
	page->flags = 0;
	page->compound_head = 0;
	page->lru.prev = NULL;
	page->mapping = NULL;
	page->index = 0;
	page->private = 0;
	atomic_set(&page->_mapcount, -1);
	atomic_set(&page->_refcount, 1);
	page->memcg_data = 0;
	if (gfp & __GFP_ZERO)
		memset(page_address(page), 0, PAGE_SIZE);
	pages_in_use++;
	return page;
}

struct page *__alloc_pages_node_kshim(int nid, gfp_t gfp, unsigned int order)
{
	(void)nid;
	return alloc_pages(gfp, order);
}

/* What the buddy allocator checks of a page it takes back (a "bad page" otherwise). */
static bool page_is_clean(struct page *page)
{
	bool typed = page->page_type == UINT_MAX || (page->page_type >> 24) == PGTY_zsmalloc;
	bool mapping_ok = !page->mapping || ((unsigned long)page->mapping & PAGE_MAPPING_FLAGS);
	return typed && mapping_ok && !(page->flags & ((1UL << PG_locked) | (1UL << PG_private)));
}

static void free_one(struct page *page)
{
	if (!page_is_clean(page)) {
		bad_pages++;
		dump_page(page, "bad page freed");
	}
	page->page_type = UINT_MAX;
	page->mapping = NULL;
	page->index = (unsigned long)free_list;
	free_list = page;
	pages_in_use--;
}

void __free_pages(struct page *page, unsigned int order)
{
	BUG_ON(order != 0);
	if (atomic_dec_and_test(&page->_refcount))
		free_one(page);
}

void __folio_put(struct folio *folio)
{
	free_one(&folio->page);
}

struct zone *page_zone(const struct page *page)
{
	(void)page;
	return &the_zone;
}

void __folio_lock(struct folio *folio)
{
	while (!folio_trylock(folio))
		kshim_cpu_relax();
}

void folio_unlock(struct folio *folio)
{
	clear_bit(PG_locked, &folio->page.flags);
}

void unlock_page(struct page *page)
{
	folio_unlock(page_folio(page));
}

void folio_wait_bit(struct folio *folio, int bit_nr)
{
	while (test_bit(bit_nr, &folio->page.flags))
		kshim_cpu_relax();
}

void __SetPageMovable(struct page *page, const struct movable_operations *mops)
{
	page->mapping = (struct address_space *)((unsigned long)mops | PAGE_MAPPING_MOVABLE);
}

void __ClearPageMovable(struct page *page)
{
	page->mapping = (struct address_space *)PAGE_MAPPING_MOVABLE;
}

bool PageMovable(struct page *page)
{
	unsigned long m = (unsigned long)page->mapping;
	return (m & PAGE_MAPPING_FLAGS) == PAGE_MAPPING_MOVABLE && (m & ~PAGE_MAPPING_FLAGS);
}

void SetPageMovableOps(struct page *page)
{
	page->mapping = (struct address_space *)((unsigned long)page->mapping | PAGE_MAPPING_MOVABLE);
}

void copy_page(void *to, void *from)
{
	memcpy(to, from, PAGE_SIZE);
}

static const struct movable_operations *movable_ops_of_zsmalloc;

int set_movable_ops(const struct movable_operations *ops, unsigned int page_type)
{
	if (page_type != PGTY_zsmalloc)
		return -EINVAL;
	movable_ops_of_zsmalloc = ops;
	return 0;
}

void inc_zone_page_state(struct page *page, enum zone_stat_item item)
{
	(void)page;
	atomic_long_inc(&zone_stats[item]);
}

void dec_zone_page_state(struct page *page, enum zone_stat_item item)
{
	(void)page;
	atomic_long_dec(&zone_stats[item]);
}

void mod_zone_page_state(struct zone *zone, enum zone_stat_item item, long delta)
{
	(void)zone;
	atomic_long_add(delta, &zone_stats[item]);
}

/* --- slab: per cache, a LIFO free list over chunks from the host -------------------------- */

#define SLAB_CHUNK (64 * 1024UL)
struct kmem_cache {
	const char *name;
	unsigned int size;	/* object size, rounded to the alignment */
	void (*ctor)(void *);
	void *free;		/* free objects, linked through their first word */
	void *chunks;		/* chunks from the host, linked through their first word */
	char *bump, *end;	/* the unused rest of the newest chunk */
	long live;
};
static long slab_objects;

struct kmem_cache *kshim_kmem_cache_create(const char *name, unsigned int size, unsigned int align,
					   slab_flags_t flags, void (*ctor)(void *))
{
	struct kmem_cache *c = khost_malloc(sizeof(*c));
	(void)flags;
	if (!c)
		return NULL;
	memset(c, 0, sizeof(*c));
	align = align < 8 ? 8 : align;
	c->name = name;
	c->size = ALIGN(size < 8 ? 8 : size, align);
	c->ctor = ctor;
	return c;
}

void kmem_cache_destroy(struct kmem_cache *c)
{
	if (!c)
		return;
	if (c->live)
		printk("kmem_cache_destroy %s: %ld objects still allocated\n", c->name, c->live);
	while (c->chunks) {
		void *next = *(void **)c->chunks;
		khost_free(c->chunks);
		c->chunks = next;
	}
	khost_free(c);
}

static noinline void *slab_refill(struct kmem_cache *c)
{
	if (c->bump + c->size > c->end) {
		char *chunk = khost_malloc(SLAB_CHUNK);
		if (!chunk)
			return NULL;
		*(void **)chunk = c->chunks;
		c->chunks = chunk;
		c->bump = chunk + 64;
		c->end = chunk + SLAB_CHUNK;
	}
	void *obj = c->bump;
	c->bump += c->size;
	return obj;
}

void *kmem_cache_alloc(struct kmem_cache *c, gfp_t gfp)
{
	void *obj = c->free;
	if (likely(obj))
		c->free = *(void **)obj;
	else if (!(obj = slab_refill(c)))
		return NULL;
	c->live++;
	slab_objects++;
	if (unlikely(gfp & __GFP_ZERO))
		memset(obj, 0, c->size);
	else if (c->ctor)
		c->ctor(obj);
	return obj;
}

void kmem_cache_free(struct kmem_cache *c, void *obj)
{
	*(void **)obj = c->free;
	c->free = obj;
	c->live--;
	slab_objects--;
}

long kshim_slab_objects(void) { return slab_objects; }

/* kmalloc: the host's malloc, with the size kept in front for __GFP_ZERO and kfree. */
void *kmalloc(size_t size, gfp_t gfp)
{
	unsigned long *p = khost_malloc(size + 16);
	if (!p)
		return NULL;
	p[0] = size;
	if (gfp & __GFP_ZERO)
		memset(p + 2, 0, size);
	return p + 2;
}

void kfree(const void *ptr)
{
	if (ptr)
		khost_free((unsigned long *)ptr - 2);
}

char *kstrdup(const char *s, gfp_t gfp)
{
	size_t n;
	char *d;
	if (!s)
		return NULL;
	n = strlen(s) + 1;
	d = kmalloc(n, gfp);
	if (d)
		memcpy(d, s, n);
	return d;
}

void *vmalloc(unsigned long size) { return kmalloc(size, GFP_KERNEL); }
void vfree(const void *p) { kfree(p); }

/* --- workqueue: queued, run by flush_work() or the driver ------------------------------------ */

static LIST_HEAD(pending_work);

bool schedule_work(struct work_struct *work)
{
	if (atomic_long_read(&work->data))
		return false;
	atomic_long_set(&work->data, 1);
	list_add_tail(&work->entry, &pending_work);
	return true;
}

static void run_work(struct work_struct *work)
{
	list_del_init(&work->entry);
	atomic_long_set(&work->data, 0);
	work->func(work);
}

bool flush_work(struct work_struct *work)
{
	if (!atomic_long_read(&work->data))
		return false;
	run_work(work);
	return true;
}

bool cancel_work_sync(struct work_struct *work)
{
	if (!atomic_long_read(&work->data))
		return false;
	list_del_init(&work->entry);
	atomic_long_set(&work->data, 0);
	return true;
}

int kshim_run_pending_work(void)
{
	int n = 0;
	while (!list_empty(&pending_work)) {
		run_work(list_first_entry(&pending_work, struct work_struct, entry));
		n++;
	}
	return n;
}

/* --- shrinkers -------------------------------------------------------------------------------- */

static LIST_HEAD(shrinkers);

int register_shrinker(struct shrinker *s, const char *fmt, ...)
{
	(void)fmt;
	list_add_tail(&s->list, &shrinkers);
	return 0;
}

void unregister_shrinker(struct shrinker *s)
{
	if (s->list.next)
		list_del_init(&s->list);
}

struct shrinker *shrinker_alloc(unsigned int flags, const char *fmt, ...)
{
	struct shrinker *s = kzalloc(sizeof(*s), GFP_KERNEL);
	(void)fmt;
	if (s)
		s->flags = flags;
	return s;
}

void shrinker_register(struct shrinker *s)
{
	list_add_tail(&s->list, &shrinkers);
}

void shrinker_free(struct shrinker *s)
{
	if (!s)
		return;
	unregister_shrinker(s);
	kfree(s);
}

unsigned long kshim_shrink_all(void)
{
	unsigned long freed = 0;
	struct shrinker *s;
	list_for_each_entry(s, &shrinkers, list) {
		struct shrink_control sc = { .gfp_mask = GFP_KERNEL, .nr_to_scan = 128 };
		if (s->count_objects(s, &sc) == 0)
			continue;
		unsigned long r = s->scan_objects(s, &sc);
		if (r != SHRINK_STOP)
			freed += r;
	}
	return freed;
}

/* --- cpu hotplug: the one CPU comes up when a state is set up -------------------------------- */

static struct { enum cpuhp_state state; int (*teardown)(unsigned int); } hp_states[8];

int cpuhp_setup_state(enum cpuhp_state state, const char *name, int (*startup)(unsigned int),
		      int (*teardown)(unsigned int))
{
	(void)name;
	for (unsigned int i = 0; i < ARRAY_SIZE(hp_states); i++) {
		if (hp_states[i].teardown)
			continue;
		int ret = startup ? startup(0) : 0;
		if (ret)
			return ret;
		hp_states[i].state = state;
		hp_states[i].teardown = teardown;
		return state == CPUHP_ONLINE_DYN ? (int)(CPUHP_ONLINE_DYN + i) : 0;
	}
	return -ENOSPC;
}

void cpuhp_remove_state(enum cpuhp_state state)
{
	for (unsigned int i = 0; i < ARRAY_SIZE(hp_states); i++) {
		if (hp_states[i].teardown && hp_states[i].state == state) {
			hp_states[i].teardown(0);
			hp_states[i].teardown = NULL;
		}
	}
}

/* --- debugfs: a flat table of files whose show function a driver runs ----------------------- */

struct dentry {
	const char *name;
	struct dentry *parent;
	void *data;
	const struct file_operations *fops;
};
static struct dentry *dentries[64];

bool debugfs_initialized(void) { return true; }

static struct dentry *new_dentry(const char *name, struct dentry *parent, void *data,
				 const struct file_operations *fops)
{
	for (unsigned int i = 0; i < ARRAY_SIZE(dentries); i++) {
		if (dentries[i])
			continue;
		struct dentry *d = kzalloc(sizeof(*d), GFP_KERNEL);
		if (!d)
			return ERR_PTR(-ENOMEM);
		d->name = kstrdup(name, GFP_KERNEL);
		d->parent = parent;
		d->data = data;
		d->fops = fops;
		dentries[i] = d;
		return d;
	}
	return ERR_PTR(-ENOSPC);
}

struct dentry *debugfs_create_dir(const char *name, struct dentry *parent)
{
	return new_dentry(name, parent, NULL, NULL);
}

struct dentry *debugfs_create_file(const char *name, umode_t mode, struct dentry *parent, void *data,
				   const struct file_operations *fops)
{
	(void)mode;
	return new_dentry(name, parent, data, fops);
}

static bool is_under(const struct dentry *d, const struct dentry *root)
{
	for (; d; d = d->parent)
		if (d == root)
			return true;
	return false;
}

void debugfs_remove_recursive(struct dentry *root)
{
	if (IS_ERR_OR_NULL(root))
		return;
	for (int pass = 0; pass < 2; pass++) {	/* children first, so is_under() can walk up */
		for (unsigned int i = 0; i < ARRAY_SIZE(dentries); i++) {
			struct dentry *d = dentries[i];
			if (!d || !is_under(d, root) || (pass == 0 && d == root))
				continue;
			dentries[i] = NULL;
			kfree(d->name);
			kfree(d);
		}
	}
}

void seq_printf(struct seq_file *m, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (m->count < m->size) {
		int n = khost_vformat(m->buf + m->count, m->size - m->count, fmt, ap);
		m->count = n < 0 ? m->size : (m->count + n < m->size ? m->count + n : m->size);
	}
	va_end(ap);
}

void seq_puts(struct seq_file *m, const char *s)
{
	seq_printf(m, "%s", s);
}

long kshim_debugfs_show(const char *name, const void *data, char *buf, unsigned long size)
{
	for (unsigned int i = 0; i < ARRAY_SIZE(dentries); i++) {
		struct dentry *d = dentries[i];
		if (!d || !d->fops || d->data != data || strcmp(d->name, name))
			continue;
		struct seq_file m = { .buf = buf, .size = size, .private = d->data };
		if (size)
			buf[0] = 0;
		d->fops->kshim_show(&m, NULL);
		if (m.count < size)
			buf[m.count] = 0;
		return (long)m.count;
	}
	return -1;
}
