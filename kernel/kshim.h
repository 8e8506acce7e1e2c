/*
 * kshim.h: the part of the Linux kernel's API that mm/zsmalloc.c uses, with userspace
 * meanings, so that the kernel's own file compiles unchanged in a process
 * (tools/lib/kernel_build.py builds it; docs/ab.md, "The A/B on the kernel's own code", says how it is used). Every
 * <linux/...> and <asm/...> header the file includes is a one-line forward to this one. Written
 * from what each interface is documented to do; no kernel text is copied here. Out-of-line
 * "kernel" services (page allocator, slab, locks, vmstat, workqueue, shrinker, cpuhp, printk)
 * are in kservices.c; what needs libc is behind khost.h.
 *
 * What must have the shape it has in a kernel build, and why: the A/B this serves is about
 * inlining, and the inliners decide by the size of what they would inline. clang gives
 * obj_malloc() a cost of about 200 against a threshold of 225 at zs_malloc()'s call site, and
 * CONFIG_DEBUG_VM alone takes it past the threshold, so a primitive one instruction larger or
 * smaller than the kernel's moves the verdict. The primitives whose shape is the
 * architecture's (traps, atomics, bit operations, `current`, the preempt count,
 * this_cpu_ptr(), page <-> address arithmetic) are in kshim_x86_64.h and kshim_arm64.h, each
 * with the list of its shapes; on both:
 *  - kmap_atomic() is preempt_disable(), pagefault_disable() and page_address(); kmap_local_page()
 *    is page_address() alone (no highmem on 64-bit kernels);
 *  - spin, rw and queued locks are out-of-line calls (_raw_spin_lock, ...), as in a kernel with
 *    preemption built in (Debian's PREEMPT_DYNAMIC and Android's PREEMPT select the
 *    out-of-line lock and unlock); local_lock() is preempt_disable();
 *  - VM_BUG_ON() and friends compile to nothing without CONFIG_DEBUG_VM; list operations are
 *    inline.
 * The compiler flags (kernel_build.py: -mno-sse, -mno-red-zone, -fno-strict-aliasing,
 * -fconserve-stack, stack protector, return thunks, the ftrace entry NOP, ...) and the kernel
 * config (kconfig.h, generated from the tree's .config, --config FILE or Debian's defaults)
 * matter as much. What is not the kernel's: the costs inside the out-of-line services (our slab
 * and page allocator are shorter than SLUB and the buddy allocator), so instruction counts
 * that include them are the kernel's code plus our services.
 */
#ifndef KSHIM_H
#define KSHIM_H

#include "kconfig.h"

/* --- compiler ------------------------------------------------------------------------------ */

#ifdef CC_USING_PATCHABLE_FUNCTION_ENTRY
#define notrace __attribute__((__patchable_function_entry__(0, 0)))
#else
#define notrace __attribute__((__no_instrument_function__))
#endif
/* As in the kernel: every inline function is gnu_inline, may be unused and is not traced. */
#define inline inline __attribute__((__gnu_inline__, __unused__)) notrace
#define __inline__ inline
#define __always_inline inline __attribute__((__always_inline__))
#define noinline __attribute__((__noinline__))
#define __noreturn __attribute__((__noreturn__))
#define __cold __attribute__((__cold__))
#define __maybe_unused __attribute__((__unused__))
#define __always_unused __attribute__((__unused__))
#define __used __attribute__((__used__))
#define __must_check __attribute__((__warn_unused_result__))
#define __packed __attribute__((__packed__))
#define __aligned(x) __attribute__((__aligned__(x)))
#define __section(s) __attribute__((__section__(s)))
#define __printf(a, b) __attribute__((__format__(printf, a, b)))
#define __init __section(".init.text") __cold
#define __exit __section(".exit.text") __used __cold notrace
#define __initdata
#define __read_mostly
#define __acquires(x)
#define __releases(x)
#define __must_hold(x)
#define __cond_acquires(x)
#define __force
#define __user
#define __iomem
#define __rcu
#define __percpu
#define __bitwise
#define __randomize_layout
#define __counted_by(m)
#define fallthrough __attribute__((__fallthrough__))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define barrier() __asm__ __volatile__("" : : : "memory")
#define READ_ONCE(x) (*(const volatile __typeof__(x) *)&(x))
#define WRITE_ONCE(x, v) do { *(volatile __typeof__(x) *)&(x) = (v); } while (0)
#define data_race(expr) (expr)
#define _RET_IP_ ((unsigned long)__builtin_return_address(0))
#define __stringify_1(x) #x
#define __stringify(x) __stringify_1(x)
#define static_assert(expr, ...) kshim_static_assert(expr, ##__VA_ARGS__, #expr)
#define kshim_static_assert(expr, msg, ...) _Static_assert(expr, msg)

/* --- types --------------------------------------------------------------------------------- */

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef signed char s8;
typedef short s16;
typedef int s32;
typedef long long s64;
typedef _Bool bool;
enum { false = 0, true = 1 };
typedef unsigned long size_t;
typedef long ssize_t;
typedef long ptrdiff_t;
typedef unsigned long uintptr_t;
typedef unsigned int gfp_t;
typedef unsigned long pgoff_t;
typedef u64 phys_addr_t;
typedef unsigned int isolate_mode_t;
typedef unsigned short umode_t;
typedef struct { unsigned long pgprot; } pgprot_t;
typedef struct { int counter; } atomic_t;
typedef struct { long counter; } atomic_long_t;
#define ATOMIC_INIT(i) { (i) }
#define NULL ((void *)0)
#define offsetof(t, m) __builtin_offsetof(t, m)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define BITS_PER_LONG 64
#define kshim_ac(x, y) (x##y)
#define _AC(x, y) kshim_ac(x, y)
#define UINT_MAX (~0U)
#define INT_MAX ((int)(~0U >> 1))
#define ULONG_MAX (~0UL)
#define SZ_16M 0x01000000
#define S_IFREG 0100000

/* --- arithmetic ---------------------------------------------------------------------------- */

#define min_t(t, a, b) ({ t kshim_a = (a); t kshim_b = (b); kshim_a < kshim_b ? kshim_a : kshim_b; })
#define max_t(t, a, b) ({ t kshim_a = (a); t kshim_b = (b); kshim_a > kshim_b ? kshim_a : kshim_b; })
#define min(a, b) min_t(__typeof__((a) + (b)), a, b)
#define max(a, b) max_t(__typeof__((a) + (b)), a, b)
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define DIV_ROUND_UP(n, d) (((n) + (d) - 1) / (d))
#define is_power_of_2(n) ((n) != 0 && (((n) & ((n) - 1)) == 0))
#define round_up(x, y) ((((x) - 1) | ((__typeof__(x))((y) - 1))) + 1)
#define ALIGN(x, a) (((x) + ((__typeof__(x))(a) - 1)) & ~((__typeof__(x))(a) - 1))
#define PTR_ALIGN_DOWN(p, a) ((__typeof__(p))((unsigned long)(p) & ~((unsigned long)(a) - 1)))
#define container_of(ptr, type, member) \
	({ void *kshim_mptr = (void *)(ptr); ((type *)((char *)kshim_mptr - offsetof(type, member))); })

/* --- errors -------------------------------------------------------------------------------- */

#define EPERM 1
#define ENOENT 2
#define EINTR 4
#define EIO 5
#define EAGAIN 11
#define ENOMEM 12
#define EBUSY 16
#define EEXIST 17
#define EINVAL 22
#define ENOSPC 28
#define MAX_ERRNO 4095
#define IS_ERR_VALUE(x) unlikely((unsigned long)(void *)(x) >= (unsigned long)-MAX_ERRNO)
static __always_inline void *ERR_PTR(long error) { return (void *)error; }
static __always_inline long PTR_ERR(const void *ptr) { return (long)ptr; }
static __always_inline bool IS_ERR(const void *ptr) { return IS_ERR_VALUE((unsigned long)ptr); }
static __always_inline bool IS_ERR_OR_NULL(const void *ptr)
{
	return unlikely(!ptr) || IS_ERR_VALUE((unsigned long)ptr);
}

/* --- config helpers ------------------------------------------------------------------------ */

#define kshim_arg_placeholder_1 0,
#define kshim_take_second(ignored, val, ...) val
#define kshim_is_defined3(arg1_or_junk) kshim_take_second(arg1_or_junk 1, 0)
#define kshim_is_defined2(val) kshim_is_defined3(kshim_arg_placeholder_##val)
#define IS_ENABLED(option) kshim_is_defined2(option)
#define IS_BUILTIN(option) IS_ENABLED(option)

/* --- the architecture's primitives: traps, atomics, bit operations, current, the preempt count,
 * this_cpu_ptr(), the page <-> address arithmetic ------------------------------------------- */

#if defined(__aarch64__)
#include "kshim_arm64.h"
#elif defined(__x86_64__)
#include "kshim_x86_64.h"
#else
#error "kernel/kshim.h models the x86-64 and arm64 kernels' primitives only"
#endif

/* --- traps: BUG() and WARN() ---------------------------------------------------------------- */

#define BUG_ON(cond) do { if (unlikely(cond)) BUG(); } while (0)
#define WARN_ON(cond) \
	({ int kshim_warn = !!(cond); if (unlikely(kshim_warn)) kshim_warn_trap(); unlikely(kshim_warn); })
#define WARN_ON_ONCE(cond) WARN_ON(cond)
#define WARN(cond, ...) WARN_ON(cond)
#define WARN_ONCE(cond, ...) WARN_ON(cond)
#define BUILD_BUG_ON_INVALID(e) ((void)(sizeof((long)(e))))
#define BUILD_BUG_ON(cond) \
	do { extern void kshim_build_bug(void) __attribute__((__error__("BUILD_BUG_ON failed: " #cond))); \
	     if (cond) kshim_build_bug(); } while (0)
#define BUILD_BUG() BUILD_BUG_ON(1)

struct page;
void dump_page(struct page *page, const char *reason);
#ifdef CONFIG_DEBUG_VM
#define VM_BUG_ON(cond) BUG_ON(cond)
#define VM_BUG_ON_PAGE(cond, page) \
	do { if (unlikely(cond)) { dump_page(page, "VM_BUG_ON_PAGE(" __stringify(cond) ")"); BUG(); } } while (0)
#define VM_BUG_ON_FOLIO(cond, folio) VM_BUG_ON_PAGE(cond, &(folio)->page)
#define VM_WARN_ON(cond) (void)WARN_ON(cond)
#define VM_WARN_ON_ONCE(cond) (void)WARN_ON_ONCE(cond)
#define VM_WARN_ON_ONCE_PAGE(cond, page) (void)WARN_ON_ONCE(cond)
#define VM_WARN_ON_FOLIO(cond, folio) (void)WARN_ON(cond)
#define VM_WARN_ON_ONCE_FOLIO(cond, folio) (void)WARN_ON_ONCE(cond)
#else
#define VM_BUG_ON(cond) BUILD_BUG_ON_INVALID(cond)
#define VM_BUG_ON_PAGE(cond, page) VM_BUG_ON(cond)
#define VM_BUG_ON_FOLIO(cond, folio) VM_BUG_ON(cond)
#define VM_WARN_ON(cond) BUILD_BUG_ON_INVALID(cond)
#define VM_WARN_ON_ONCE(cond) BUILD_BUG_ON_INVALID(cond)
#define VM_WARN_ON_ONCE_PAGE(cond, page) BUILD_BUG_ON_INVALID(cond)
#define VM_WARN_ON_FOLIO(cond, folio) BUILD_BUG_ON_INVALID(cond)
#define VM_WARN_ON_ONCE_FOLIO(cond, folio) BUILD_BUG_ON_INVALID(cond)
#endif

/* --- printk and module boilerplate ----------------------------------------------------------- */

__printf(1, 2) int printk(const char *fmt, ...);
#ifndef pr_fmt
#define pr_fmt(fmt) fmt
#endif
#define pr_err(fmt, ...) printk("error: " pr_fmt(fmt), ##__VA_ARGS__)
#define pr_warn(fmt, ...) printk("warning: " pr_fmt(fmt), ##__VA_ARGS__)
#define pr_info(fmt, ...) printk("info: " pr_fmt(fmt), ##__VA_ARGS__)
#define pr_debug(fmt, ...) do { } while (0)
#define pr_warn_once pr_warn
/* Each expands to a declaration, so that the `;` after it stays legal at file scope. */
#define kshim_declaration_sink extern int kshim_declaration_sink_unused
#define MODULE_LICENSE(x) kshim_declaration_sink
#define MODULE_AUTHOR(x) kshim_declaration_sink
#define MODULE_DESCRIPTION(x) kshim_declaration_sink
#define MODULE_ALIAS(x) kshim_declaration_sink
#define MODULE_IMPORT_NS(x) kshim_declaration_sink
#define EXPORT_SYMBOL(sym) kshim_declaration_sink
#define EXPORT_SYMBOL_GPL(sym) kshim_declaration_sink
#define THIS_MODULE ((struct module *)0)
/* The driver calls kshim_module_init()/kshim_module_exit() (renamed per build with the rest). */
#define module_init(fn) int kshim_module_init(void) { return fn(); } kshim_declaration_sink
#define module_exit(fn) void kshim_module_exit(void) { fn(); } kshim_declaration_sink
struct module;

/* --- strings ------------------------------------------------------------------------------- */

void *memcpy(void *dst, const void *src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
void *memset(void *s, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
int strcmp(const char *a, const char *b);
int snprintf(char *buf, size_t size, const char *fmt, ...) __printf(3, 4);
int sprintf(char *buf, const char *fmt, ...) __printf(2, 3);
#define memcpy(d, s, n) __builtin_memcpy(d, s, n)
#define memset(s, c, n) __builtin_memset(s, c, n)


/* --- the running thread: preemption, page faults, current ------------------------------------ */

#define SOFTIRQ_MASK 0x0000ff00
#define HARDIRQ_MASK 0x000f0000
#define NMI_MASK 0x00f00000
#define in_interrupt() (preempt_count() & (NMI_MASK | HARDIRQ_MASK | SOFTIRQ_MASK))
#define in_task() (!in_interrupt())
#define might_sleep() do { } while (0)
#define might_lock(l) do { } while (0)
#define lockdep_assert_held(l) do { (void)(l); } while (0)
int kshim_cond_resched(void);
#define cond_resched() kshim_cond_resched()

static __always_inline void pagefault_disable(void)
{
	current->pagefault_disabled++;
	barrier();
}
static __always_inline void pagefault_enable(void)
{
	barrier();
	current->pagefault_disabled--;
}

/* --- per-CPU data: one CPU, offset 0, reached by the kernel's add of this_cpu_off ----------- */

#define DEFINE_PER_CPU(type, name) __typeof__(type) name
#define DECLARE_PER_CPU(type, name) extern __typeof__(type) name
#define raw_cpu_ptr(ptr) this_cpu_ptr(ptr)
#define per_cpu_ptr(ptr, cpu) ({ (void)(cpu); (ptr); })
#define per_cpu(var, cpu) (*per_cpu_ptr(&(var), cpu))
#define get_cpu_ptr(ptr) ({ preempt_disable(); this_cpu_ptr(ptr); })
#define put_cpu_ptr(ptr) do { (void)(ptr); preempt_enable(); } while (0)
#define get_cpu_var(var) (*({ preempt_disable(); this_cpu_ptr(&(var)); }))
#define put_cpu_var(var) do { (void)&(var); preempt_enable(); } while (0)
#define smp_processor_id() 0
#define raw_smp_processor_id() 0
#define num_possible_cpus() 1
#define for_each_possible_cpu(cpu) for ((cpu) = 0; (cpu) < 1; (cpu)++)
#define for_each_online_cpu(cpu) for_each_possible_cpu(cpu)

/* --- locks: out-of-line calls, as in the kernel's build -------------------------------------- */

struct lock_class_key { };
struct lockdep_map { };
#define lockdep_init_map(map, name, key, sub) do { (void)(map); (void)(key); } while (0)
#define rwsem_acquire(map, sub, try, ip) do { } while (0)
#define rwsem_acquire_read(map, sub, try, ip) do { } while (0)
#define rwsem_release(map, ip) do { } while (0)
#define lock_acquired(map, ip) do { } while (0)
#define lock_contended(map, ip) do { } while (0)
#define SINGLE_DEPTH_NESTING 1

typedef struct { atomic_t val; } spinlock_t;		/* a queued spinlock's word */
typedef struct { atomic_t cnts; spinlock_t wait_lock; } rwlock_t; /* a queued rwlock */
#define __SPIN_LOCK_UNLOCKED(name) { ATOMIC_INIT(0) }
#define DEFINE_SPINLOCK(name) spinlock_t name = __SPIN_LOCK_UNLOCKED(name)
void _raw_spin_lock(spinlock_t *lock);
void _raw_spin_unlock(spinlock_t *lock);
int _raw_spin_trylock(spinlock_t *lock);
void _raw_read_lock(rwlock_t *lock);
void _raw_read_unlock(rwlock_t *lock);
void _raw_write_lock(rwlock_t *lock);
void _raw_write_unlock(rwlock_t *lock);
int _raw_write_trylock(rwlock_t *lock);
#define spin_lock_init(l) do { atomic_set(&(l)->val, 0); } while (0)
#define spin_lock(l) _raw_spin_lock(l)
#define spin_unlock(l) _raw_spin_unlock(l)
#define spin_trylock(l) _raw_spin_trylock(l)
#define spin_lock_nested(l, sub) _raw_spin_lock(((void)(sub), (l)))
#define spin_is_locked(l) (atomic_read(&(l)->val) != 0)
#define spin_is_contended(l) ((atomic_read(&(l)->val) & ~0xffffU) != 0) /* tail: waiters queued */
#define rwlock_is_contended(l) spin_is_locked(&(l)->wait_lock) /* someone waits for the rwlock */
#define assert_spin_locked(l) BUG_ON(!spin_is_locked(l))
#define rwlock_init(l) do { atomic_set(&(l)->cnts, 0); spin_lock_init(&(l)->wait_lock); } while (0)
#define read_lock(l) _raw_read_lock(l)
#define read_unlock(l) _raw_read_unlock(l)
#define write_lock(l) _raw_write_lock(l)
#define write_unlock(l) _raw_write_unlock(l)
#define write_trylock(l) _raw_write_trylock(l)
#define write_lock_nested(l, sub) _raw_write_lock(((void)(sub), (l)))

typedef struct { } local_lock_t;
#define INIT_LOCAL_LOCK(lockname) { }
#define local_lock_init(l) do { (void)(l); } while (0)
#define local_lock(l) do { preempt_disable(); (void)this_cpu_ptr(l); } while (0)
#define local_unlock(l) do { (void)this_cpu_ptr(l); preempt_enable(); } while (0)

/* --- lists ---------------------------------------------------------------------------------- */

struct list_head { struct list_head *next, *prev; };
struct hlist_node { struct hlist_node *next, **pprev; };
#define LIST_HEAD_INIT(name) { &(name), &(name) }
#define LIST_HEAD(name) struct list_head name = LIST_HEAD_INIT(name)
#define LIST_POISON1 ((void *)0xdead000000000100UL)
#define LIST_POISON2 ((void *)0xdead000000000122UL)
static inline void INIT_LIST_HEAD(struct list_head *l)
{
	WRITE_ONCE(l->next, l);
	WRITE_ONCE(l->prev, l);
}
static inline void kshim_list_link(struct list_head *n, struct list_head *prev, struct list_head *next)
{
	next->prev = n;
	n->next = next;
	n->prev = prev;
	WRITE_ONCE(prev->next, n);
}
static inline void kshim_list_unlink(struct list_head *prev, struct list_head *next)
{
	next->prev = prev;
	WRITE_ONCE(prev->next, next);
}
static inline void list_add(struct list_head *n, struct list_head *head) { kshim_list_link(n, head, head->next); }
static inline void list_add_tail(struct list_head *n, struct list_head *head) { kshim_list_link(n, head->prev, head); }
static inline void list_del(struct list_head *e)
{
	kshim_list_unlink(e->prev, e->next);
	e->next = LIST_POISON1;
	e->prev = LIST_POISON2;
}
static inline void list_del_init(struct list_head *e)
{
	kshim_list_unlink(e->prev, e->next);
	INIT_LIST_HEAD(e);
}
static inline void list_move(struct list_head *e, struct list_head *head)
{
	kshim_list_unlink(e->prev, e->next);
	list_add(e, head);
}
static inline void list_move_tail(struct list_head *e, struct list_head *head)
{
	kshim_list_unlink(e->prev, e->next);
	list_add_tail(e, head);
}
static inline int list_empty(const struct list_head *head) { return READ_ONCE(head->next) == head; }
static inline int list_is_last(const struct list_head *e, const struct list_head *head) { return e->next == head; }
static inline void list_splice_init(struct list_head *list, struct list_head *head)
{
	if (!list_empty(list)) {
		struct list_head *first = list->next, *last = list->prev, *at = head->next;
		first->prev = head;
		head->next = first;
		last->next = at;
		at->prev = last;
		INIT_LIST_HEAD(list);
	}
}
#define list_entry(ptr, type, member) container_of(ptr, type, member)
#define list_first_entry(ptr, type, member) list_entry((ptr)->next, type, member)
#define list_last_entry(ptr, type, member) list_entry((ptr)->prev, type, member)
#define list_next_entry(pos, member) list_entry((pos)->member.next, __typeof__(*(pos)), member)
#define list_first_entry_or_null(ptr, type, member) \
	({ struct list_head *kshim_h = (ptr); struct list_head *kshim_n = READ_ONCE(kshim_h->next); \
	   kshim_h != kshim_n ? list_entry(kshim_n, type, member) : NULL; })
#define list_entry_is_head(pos, head, member) (&(pos)->member == (head))
#define list_for_each_entry(pos, head, member) \
	for (pos = list_first_entry(head, __typeof__(*pos), member); \
	     !list_entry_is_head(pos, head, member); pos = list_next_entry(pos, member))
#define list_for_each_entry_safe(pos, n, head, member) \
	for (pos = list_first_entry(head, __typeof__(*pos), member), n = list_next_entry(pos, member); \
	     !list_entry_is_head(pos, head, member); pos = n, n = list_next_entry(n, member))

/* --- memory: pages, the vmemmap array and the direct map ------------------------------------- */

#define PAGE_SHIFT 12
#define PAGE_SIZE (_AC(1, UL) << PAGE_SHIFT)
#define PAGE_MASK (~(PAGE_SIZE - 1))
#define MAX_POSSIBLE_PHYSMEM_BITS 52
#define offset_in_page(p) ((unsigned long)(p) & ~PAGE_MASK)
#define NUMA_NO_NODE (-1)

/* struct page as a 64-bit kernel lays it out (64 bytes): the fields zsmalloc and its zpdesc
 * overlay use are at the kernel's offsets. */
struct address_space;
struct page {
	unsigned long flags;
	union {
		struct {
			union {
				struct list_head lru;
				struct { void *kshim_lru_next; unsigned long kshim_lru_prev; };
			};
			struct address_space *mapping;
			union { pgoff_t index; unsigned long share; };
			unsigned long private;
		};
		struct { unsigned long compound_head; };
	};
	union { atomic_t _mapcount; unsigned int page_type; };
	atomic_t _refcount;
	unsigned long memcg_data;
};
_Static_assert(sizeof(struct page) == 64, "struct page is 64 bytes in a 64-bit kernel");
struct folio { struct page page; };
struct zone { int kshim_id; };


/* Page flag bits, as the kernel numbers them. */
enum pageflags {
	PG_locked = 0, PG_referenced, PG_uptodate, PG_dirty, PG_lru, PG_active, PG_workingset,
	PG_waiters, PG_error, PG_slab, PG_owner_priv_1, PG_arch_1, PG_reserved, PG_private,
	PG_private_2, PG_writeback, PG_head, PG_mappedtodisk, PG_reclaim,
	PG_isolated = PG_reclaim,
};
#define PAGE_MAPPING_ANON 0x1
#define PAGE_MAPPING_MOVABLE 0x2
#define PAGE_MAPPING_FLAGS (PAGE_MAPPING_ANON | PAGE_MAPPING_MOVABLE)

static __always_inline unsigned long kshim_compound_head(const struct page *page)
{
	unsigned long head = READ_ONCE(page->compound_head);
	if (unlikely(head & 1))
		return head - 1;
	return (unsigned long)page;
}
#define compound_head(page) ((__typeof__(page))kshim_compound_head(page))
#define page_folio(p) ((struct folio *)kshim_compound_head(p))
#define folio_page(folio, n) (&(folio)->page + (n))
#define page_private(page) ((page)->private)
#define set_page_private(page, v) do { (page)->private = (v); } while (0)

static __always_inline int PagePrivate(const struct page *page) { return test_bit(PG_private, &page->flags); }
static __always_inline void SetPagePrivate(struct page *page) { set_bit(PG_private, &page->flags); }
static __always_inline void ClearPagePrivate(struct page *page) { clear_bit(PG_private, &page->flags); }
static __always_inline void __SetPagePrivate(struct page *page) { __set_bit(PG_private, &page->flags); }
static __always_inline void __ClearPagePrivate(struct page *page) { __clear_bit(PG_private, &page->flags); }
static __always_inline int PageIsolated(const struct page *page) { return test_bit(PG_isolated, &page->flags); }
static __always_inline bool folio_test_locked(const struct folio *folio)
{
	return test_bit(PG_locked, &folio->page.flags);
}
static __always_inline int PageLocked(const struct page *page)
{
	return folio_test_locked(page_folio(page));
}
static __always_inline void page_mapcount_reset(struct page *page) { atomic_set(&page->_mapcount, -1); }

/* Page types in the upper byte of page_type (a page that has none reads UINT_MAX). */
#define PGTY_zsmalloc 0xf6
static __always_inline bool PageZsmalloc(const struct page *page)
{
	return data_race(page->page_type >> 24) == PGTY_zsmalloc;
}
static __always_inline void __SetPageZsmalloc(struct page *page)
{
	VM_BUG_ON_PAGE(page->page_type != UINT_MAX, page);
	page->page_type = (unsigned int)PGTY_zsmalloc << 24;
}
static __always_inline void __ClearPageZsmalloc(struct page *page)
{
	VM_BUG_ON_PAGE(!PageZsmalloc(page), page);
	page->page_type = UINT_MAX;
}

/* Movable pages: the mapping word holds the movable operations, tagged. */
enum migrate_mode { MIGRATE_ASYNC, MIGRATE_SYNC_LIGHT, MIGRATE_SYNC, MIGRATE_SYNC_NO_COPY };
#define MIGRATEPAGE_SUCCESS 0
struct movable_operations {
	bool (*isolate_page)(struct page *, isolate_mode_t);
	int (*migrate_page)(struct page *dst, struct page *src, enum migrate_mode mode);
	void (*putback_page)(struct page *);
};
void __SetPageMovable(struct page *page, const struct movable_operations *mops);
void __ClearPageMovable(struct page *page);
bool PageMovable(struct page *page);
void SetPageMovableOps(struct page *page);

/* Locking and references. */
static __always_inline bool folio_trylock(struct folio *folio)
{
	return likely(!test_and_set_bit_lock(PG_locked, &folio->page.flags));
}
void __folio_lock(struct folio *folio);
void folio_unlock(struct folio *folio);
void folio_wait_bit(struct folio *folio, int bit_nr);
static __always_inline void folio_lock(struct folio *folio)
{
	might_sleep();
	if (!folio_trylock(folio))
		__folio_lock(folio);
}
static __always_inline void folio_wait_locked(struct folio *folio)
{
	if (folio_test_locked(folio))
		folio_wait_bit(folio, PG_locked);
}
#define trylock_page(page) folio_trylock(page_folio(page))
#define lock_page(page) folio_lock(page_folio(page))
void unlock_page(struct page *page);
#define wait_on_page_locked(page) folio_wait_locked(page_folio(page))
void __folio_put(struct folio *folio);
static __always_inline void folio_get(struct folio *folio)
{
	VM_BUG_ON_FOLIO(atomic_read(&folio->page._refcount) <= 0, folio);
	atomic_inc(&folio->page._refcount);
}
static __always_inline void folio_put(struct folio *folio)
{
	if (atomic_dec_and_test(&folio->page._refcount))
		__folio_put(folio);
}
#define get_page(page) folio_get(page_folio(page))
#define put_page(page) folio_put(page_folio(page))

/* Allocation (the buddy allocator's interface; our pages come from one arena). */
#define ___GFP_DMA 0x01u
#define ___GFP_HIGHMEM 0x02u
#define ___GFP_DMA32 0x04u
#define ___GFP_MOVABLE 0x08u
#define ___GFP_RECLAIMABLE 0x10u
#define ___GFP_HIGH 0x20u
#define ___GFP_IO 0x40u
#define ___GFP_FS 0x80u
#define ___GFP_ZERO 0x100u
#define ___GFP_ATOMIC 0x200u
#define ___GFP_DIRECT_RECLAIM 0x400u
#define ___GFP_KSWAPD_RECLAIM 0x800u
#define ___GFP_NOWARN 0x2000u
#define ___GFP_RETRY_MAYFAIL 0x4000u
#define ___GFP_NOFAIL 0x8000u
#define ___GFP_NORETRY 0x10000u
#define ___GFP_COMP 0x40000u
#define ___GFP_NOMEMALLOC 0x80000u
#define __GFP_DMA ((gfp_t)___GFP_DMA)
#define __GFP_HIGHMEM ((gfp_t)___GFP_HIGHMEM)
#define __GFP_DMA32 ((gfp_t)___GFP_DMA32)
#define __GFP_MOVABLE ((gfp_t)___GFP_MOVABLE)
#define __GFP_RECLAIMABLE ((gfp_t)___GFP_RECLAIMABLE)
#define __GFP_HIGH ((gfp_t)___GFP_HIGH)
#define __GFP_IO ((gfp_t)___GFP_IO)
#define __GFP_FS ((gfp_t)___GFP_FS)
#define __GFP_ZERO ((gfp_t)___GFP_ZERO)
#define __GFP_ATOMIC ((gfp_t)___GFP_ATOMIC)
#define __GFP_DIRECT_RECLAIM ((gfp_t)___GFP_DIRECT_RECLAIM)
#define __GFP_KSWAPD_RECLAIM ((gfp_t)___GFP_KSWAPD_RECLAIM)
#define __GFP_RECLAIM ((gfp_t)(___GFP_DIRECT_RECLAIM | ___GFP_KSWAPD_RECLAIM))
#define __GFP_NOWARN ((gfp_t)___GFP_NOWARN)
#define __GFP_RETRY_MAYFAIL ((gfp_t)___GFP_RETRY_MAYFAIL)
#define __GFP_NOFAIL ((gfp_t)___GFP_NOFAIL)
#define __GFP_NORETRY ((gfp_t)___GFP_NORETRY)
#define __GFP_COMP ((gfp_t)___GFP_COMP)
#define __GFP_NOMEMALLOC ((gfp_t)___GFP_NOMEMALLOC)
#define GFP_ATOMIC (__GFP_HIGH | __GFP_ATOMIC | __GFP_KSWAPD_RECLAIM)
#define GFP_KERNEL (__GFP_RECLAIM | __GFP_IO | __GFP_FS)
#define GFP_NOWAIT (__GFP_KSWAPD_RECLAIM)
#define GFP_NOIO (__GFP_RECLAIM)
#define GFP_HIGHUSER_MOVABLE (GFP_KERNEL | __GFP_HIGHMEM | __GFP_MOVABLE)
struct page *alloc_pages(gfp_t gfp, unsigned int order);
struct page *__alloc_pages_node_kshim(int nid, gfp_t gfp, unsigned int order);
static inline struct page *alloc_pages_node(int nid, gfp_t gfp, unsigned int order)
{
	return __alloc_pages_node_kshim(nid, gfp, order);
}
#define alloc_page(gfp) alloc_pages(gfp, 0)
void __free_pages(struct page *page, unsigned int order);
#define __free_page(page) __free_pages(page, 0)
struct zone *page_zone(const struct page *page);

/* kmap without highmem (64-bit kernels): the direct map is always there. */
static __always_inline void *kmap_atomic(struct page *page)
{
	preempt_disable();
	pagefault_disable();
	return page_address(page);
}
static __always_inline void kshim_kunmap_atomic(const void *addr)
{
	(void)addr;
	pagefault_enable();
	preempt_enable();
}
#define kunmap_atomic(addr) kshim_kunmap_atomic(addr)
static __always_inline void *kmap_local_page(struct page *page) { return page_address(page); }
#define kmap_local_folio(folio, off) ((char *)page_address(&(folio)->page) + (off))
#define kunmap_local(addr) do { (void)(addr); } while (0)
static __always_inline void memcpy_from_page(char *to, struct page *page, size_t offset, size_t len)
{
	char *from = kmap_local_page(page);
	VM_BUG_ON(offset + len > PAGE_SIZE);
	memcpy(to, from + offset, len);
	kunmap_local(from);
}
static __always_inline void memcpy_to_page(struct page *page, size_t offset, const char *from, size_t len)
{
	char *to = kmap_local_page(page);
	VM_BUG_ON(offset + len > PAGE_SIZE);
	memcpy(to + offset, from, len);
	kunmap_local(to);
}
void copy_page(void *to, void *from);
#define kmsan_copy_page_meta(dst, src) do { (void)(dst); (void)(src); } while (0)
#define kmap(page) page_address(page)
#define kunmap(page) do { (void)(page); } while (0)

/* Zone statistics (vmstat). */
enum zone_stat_item { NR_FREE_PAGES, NR_ZSPAGES, NR_VM_ZONE_STAT_ITEMS };
void inc_zone_page_state(struct page *page, enum zone_stat_item item);
void dec_zone_page_state(struct page *page, enum zone_stat_item item);
void mod_zone_page_state(struct zone *zone, enum zone_stat_item item, long delta);

/* --- slab ------------------------------------------------------------------------------------ */

struct kmem_cache;
typedef unsigned int slab_flags_t;
#define SLAB_HWCACHE_ALIGN 0x2000u
#define SLAB_PANIC 0x40000u
#define SLAB_ACCOUNT 0x4000000u
struct kmem_cache *kshim_kmem_cache_create(const char *name, unsigned int size, unsigned int align,
					   slab_flags_t flags, void (*ctor)(void *));
#define kmem_cache_create(name, size, align, flags, ctor) \
	kshim_kmem_cache_create(name, size, align, flags, ctor)
void kmem_cache_destroy(struct kmem_cache *cache);
void *kmem_cache_alloc(struct kmem_cache *cache, gfp_t gfp);
void kmem_cache_free(struct kmem_cache *cache, void *obj);
static __always_inline void *kmem_cache_zalloc(struct kmem_cache *k, gfp_t gfp)
{
	return kmem_cache_alloc(k, gfp | __GFP_ZERO);
}
void *kmalloc(size_t size, gfp_t gfp);
void kfree(const void *p);
char *kstrdup(const char *s, gfp_t gfp);
static __always_inline void *kzalloc(size_t size, gfp_t gfp) { return kmalloc(size, gfp | __GFP_ZERO); }
/* kzalloc_obj(VAR_OR_TYPE[, gfp]): a zeroed object of that size, GFP_KERNEL by default. */
#define kshim_default_gfp(...) kshim_take_second(ignored, ##__VA_ARGS__, GFP_KERNEL)
#define kzalloc_obj(var_or_type, ...) kzalloc(sizeof(var_or_type), kshim_default_gfp(__VA_ARGS__))
static __always_inline void *kcalloc(size_t n, size_t size, gfp_t gfp)
{
	return (size && n > ~0UL / size) ? NULL : kzalloc(n * size, gfp);
}
#define kmalloc_array(n, size, gfp) kcalloc(n, size, gfp)
void *vmalloc(unsigned long size);
void vfree(const void *p);

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

#endif /* KSHIM_H */
