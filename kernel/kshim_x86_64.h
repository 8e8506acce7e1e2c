/*
 * kshim_x86_64.h: the primitives of kernel/kshim.h whose shape is an x86-64 kernel build's
 * (included by kshim.h only). Why the shapes matter is in kshim.h's top comment: the A/B is
 * about inlining, and the inliners decide by size, so each primitive here has the instructions
 * the kernel's has:
 *  - preempt_disable()/preempt_enable() are one `incl`/`decl` of a thread-local count (the
 *    kernel's per-CPU __preempt_count, %gs there, %fs here), preempt_enable() with the
 *    kernel's `je` to an out-of-line reschedule thunk; the count starts at the kernel's
 *    "no reschedule pending" bit so that the branch is not taken;
 *  - `current` is one non-volatile load of a thread-local pointer, so the compiler may reuse
 *    it as it reuses the kernel's;
 *  - this_cpu_ptr() is one `add` of a thread-local per-CPU offset (the kernel's this_cpu_off);
 *  - page_to_pfn()/page_address() go through the variables vmemmap_base and
 *    page_offset_base, as with the kernel's randomised memory layout (a load and arithmetic,
 *    not a constant folded into an address);
 *  - BUG() and WARN() are `ud2` (a WARN site is recorded in a table, and the SIGILL handler
 *    resumes after it, as the kernel's trap handler does);
 *  - atomics are the compiler's builtins (locked instructions, as the kernel's), page flag
 *    updates single locked instructions.
 * Needs: kshim.h's compiler macros and types.
 */
#ifndef KSHIM_X86_64_H
#define KSHIM_X86_64_H

/* --- traps --------------------------------------------------------------------------------- */

/* A WARN site: ud2 with its address in the kshim_warn_table section (the kernel's bug table);
 * khost's SIGILL handler reports it and resumes after the ud2. */
#define kshim_warn_trap() \
	__asm__ __volatile__("1:\tud2\n\t.pushsection kshim_warn_table,\"aw\"\n\t.quad 1b\n\t.popsection" \
			     : : : "memory")
#define BUG() do { __asm__ __volatile__("ud2" : : : "memory"); __builtin_unreachable(); } while (0)

/* --- atomics: locked instructions; the compiler's builtins emit them ------------------------ */

#define kshim_atomic_ops(name, T, V)								\
static __always_inline V name##_read(const T *v) { return READ_ONCE(v->counter); }		\
static __always_inline void name##_set(T *v, V i) { WRITE_ONCE(v->counter, i); }		\
static __always_inline void name##_add(V i, T *v) { __atomic_fetch_add(&v->counter, i, __ATOMIC_SEQ_CST); } \
static __always_inline void name##_sub(V i, T *v) { __atomic_fetch_sub(&v->counter, i, __ATOMIC_SEQ_CST); } \
static __always_inline void name##_inc(T *v) { name##_add(1, v); }				\
static __always_inline void name##_dec(T *v) { name##_sub(1, v); }				\
static __always_inline V name##_add_return(V i, T *v) { return __atomic_add_fetch(&v->counter, i, __ATOMIC_SEQ_CST); } \
static __always_inline V name##_sub_return(V i, T *v) { return __atomic_sub_fetch(&v->counter, i, __ATOMIC_SEQ_CST); } \
static __always_inline V name##_inc_return(T *v) { return name##_add_return(1, v); }	\
static __always_inline V name##_dec_return(T *v) { return name##_sub_return(1, v); }	\
static __always_inline bool name##_dec_and_test(T *v) { return name##_sub_return(1, v) == 0; } \
static __always_inline V name##_xchg(T *v, V i) { return __atomic_exchange_n(&v->counter, i, __ATOMIC_SEQ_CST); } \
static __always_inline V name##_cmpxchg(T *v, V old, V new_)				\
{ __atomic_compare_exchange_n(&v->counter, &old, new_, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return old; } \
static __always_inline bool name##_try_cmpxchg(T *v, V *old, V new_)			\
{ return __atomic_compare_exchange_n(&v->counter, old, new_, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); }
kshim_atomic_ops(atomic, atomic_t, int)
kshim_atomic_ops(atomic_long, atomic_long_t, long)
#define atomic_read_acquire(v) __atomic_load_n(&(v)->counter, __ATOMIC_ACQUIRE)
#define atomic_set_release(v, i) __atomic_store_n(&(v)->counter, i, __ATOMIC_RELEASE)
#define smp_mb() __asm__ __volatile__("lock; addl $0,-4(%%rsp)" : : : "memory", "cc")
#define smp_rmb() barrier()
#define smp_wmb() barrier()
#define smp_store_release(p, v) do { barrier(); WRITE_ONCE(*(p), v); } while (0)
#define smp_load_acquire(p) ({ __typeof__(*(p)) kshim_v = READ_ONCE(*(p)); barrier(); kshim_v; })

/* Bit operations on unsigned long words (x86: locked byte/bit instructions). */
static __always_inline bool test_bit(long nr, const volatile unsigned long *addr)
{
	return (addr[nr >> 6] >> (nr & 63)) & 1;
}
static __always_inline void set_bit(long nr, volatile unsigned long *addr)
{
	__asm__ __volatile__("lock orb %b1, %0" : "+m"(*((volatile char *)addr + (nr >> 3)))
			     : "iq"((char)(1 << (nr & 7))) : "memory");
}
static __always_inline void clear_bit(long nr, volatile unsigned long *addr)
{
	__asm__ __volatile__("lock andb %b1, %0" : "+m"(*((volatile char *)addr + (nr >> 3)))
			     : "iq"((char)~(1 << (nr & 7))) : "memory");
}
static __always_inline void __set_bit(long nr, volatile unsigned long *addr)
{
	addr[nr >> 6] |= 1UL << (nr & 63);
}
static __always_inline void __clear_bit(long nr, volatile unsigned long *addr)
{
	addr[nr >> 6] &= ~(1UL << (nr & 63));
}
static __always_inline bool test_and_set_bit_lock(long nr, volatile unsigned long *addr)
{
	bool old;
	__asm__ __volatile__("lock btsq %2, %0" : "+m"(*addr), "=@ccc"(old) : "Ir"(nr) : "memory");
	return old;
}

/* --- the running thread: preemption and current ----------------------------------------------- */

/* The per-CPU variables of the kernel's x86-64 build, thread-local here (local-exec TLS: one
 * %fs-relative instruction each). Defined in kservices.c. */
extern __thread int kshim_preempt_count;
extern __thread unsigned long kshim_this_cpu_off;
struct task_struct;
extern __thread struct task_struct *kshim_current_task;

#define PREEMPT_NEED_RESCHED 0x80000000

struct task_struct {
	int pagefault_disabled;
	int pid;
	char comm[16];
};

static __always_inline struct task_struct *get_current(void)
{
	struct task_struct *t;
	__asm__("movq %%fs:kshim_current_task@tpoff, %0" : "=r"(t));
	return t;
}
#define current get_current()

static __always_inline int preempt_count(void)
{
	int pc;
	__asm__ __volatile__("movl %%fs:kshim_preempt_count@tpoff, %0" : "=r"(pc));
	return pc & ~PREEMPT_NEED_RESCHED;
}
#define preempt_disable() \
	do { __asm__ __volatile__("incl %%fs:kshim_preempt_count@tpoff" : : : "memory"); barrier(); } while (0)
#define preempt_enable_no_resched() \
	do { barrier(); __asm__ __volatile__("decl %%fs:kshim_preempt_count@tpoff" : : : "memory"); } while (0)
static __always_inline void kshim_preempt_enable(void)
{
	barrier();
	__asm__ goto("decl %%fs:kshim_preempt_count@tpoff\n\tje %l[resched]" : : : "memory", "cc" : resched);
	return;
resched:
	__asm__ __volatile__("call kshim_preempt_schedule_thunk" : : : "memory", "cc");
}
#define preempt_enable() kshim_preempt_enable()
/* --- per-CPU data: one CPU, offset 0, reached by the kernel's add of this_cpu_off ----------- */

#define this_cpu_ptr(ptr) \
	({ unsigned long kshim_p; \
	   __asm__("addq %%fs:kshim_this_cpu_off@tpoff, %0" : "=r"(kshim_p) : "0"((unsigned long)(ptr))); \
	   (__typeof__(ptr))kshim_p; })

/* --- the vmemmap array and the direct map, at randomised bases ------------------------------- */

extern unsigned long vmemmap_base;
extern unsigned long page_offset_base;
#define vmemmap ((struct page *)vmemmap_base)
#define PAGE_OFFSET page_offset_base
#define page_to_pfn(page) ((unsigned long)((page) - vmemmap))
#define pfn_to_page(pfn) (vmemmap + (pfn))
#define __va(x) ((void *)((unsigned long)(x) + PAGE_OFFSET))
#define PFN_PHYS(x) ((phys_addr_t)(x) << PAGE_SHIFT)
#define page_to_virt(page) __va(PFN_PHYS(page_to_pfn(page)))
#define page_address(page) page_to_virt(page)
#define virt_to_page(addr) pfn_to_page(((unsigned long)(addr) - PAGE_OFFSET) >> PAGE_SHIFT)

#endif /* KSHIM_X86_64_H */
