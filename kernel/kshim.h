/*
 * kshim.h: the part of the Linux kernel's API that mm/zsmalloc.c uses, with userspace
 * meanings, so that the kernel's own file compiles unchanged in a process
 * (kernel/kernel_build.py builds it; docs/ab.md, "The A/B on the kernel's own code", says how it is used). Every
 * <linux/...> and <asm/...> header the file includes is a one-line forward to this one, which
 * holds the base (compiler, types, errors, traps, printk, the running thread, per-CPU data) and
 * includes the subsystems in order: kshim_sync.h (locks, lists), kshim_mm.h (pages, kmap, the
 * page allocator, slab) and kshim_services.h (workqueue, shrinker, cpuhp, debugfs). Written
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

/* The subsystems, in the order each builds on the ones before it. */
#include "kshim_sync.h"      /* locks, lists */
#include "kshim_mm.h"        /* pages, the direct map, kmap, the page allocator, slab */
#include "kshim_services.h"  /* workqueue, shrinker, cpu hotplug, debugfs, scatterlists */

#endif /* KSHIM_H */
