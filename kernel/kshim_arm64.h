/*
 * kshim_arm64.h: the primitives of kernel/kshim.h whose shape is an arm64 kernel build's
 * (included by kshim.h only, when compiling for aarch64). Why the shapes matter is in kshim.h's
 * top comment; what each one is in an arm64 kernel (arch/arm64/include/asm/, as documented
 * there) and here:
 *  - `current` is `mrs sp_el0` in the kernel, one non-volatile instruction the compiler may
 *    reuse. EL0 cannot read sp_el0, so here it is `mrs tpidr_el0` (the thread pointer) and the
 *    task lives at a fixed offset from it (KSHIM_TASK_TP_OFFSET: the first static TLS block of
 *    the executable, checked at start-up by kservices.c), which folds into the loads and stores
 *    that follow as the kernel's field offsets do: the same two instructions for
 *    current->field;
 *  - the preempt count is a field of thread_info at the start of the task (THREAD_INFO_IN_TASK):
 *    preempt_disable() is a load, an add and a store of it (not atomic, as the kernel's);
 *    preempt_enable() decrements the 32-bit count, tests the 64-bit word with the
 *    need-resched bit (set when nothing is pending), reloads and tests once more before the
 *    out-of-line reschedule call, as __preempt_count_dec_and_test() does;
 *  - this_cpu_ptr() adds the per-CPU offset, `mrs tpidr_el1` in the kernel (tpidr_el2 under
 *    VHE), non-volatile with a fake stack read so that barrier() orders it; here
 *    `mrs tpidrro_el0`, which EL0 may read and Linux (and qemu-user) leave at 0: the one CPU's
 *    offset;
 *  - page_address()/virt_to_page() are arithmetic on the link-time constants VMEMMAP_START and
 *    PAGE_OFFSET; their values here keep the kernel's relation (PAGE_OFFSET ==
 *    VMEMMAP_START * 64, so page_address() folds to one shift, as the kernel's does), and
 *    kservices.c maps the vmemmap array and the direct map there. page_to_pfn()/pfn_to_page()
 *    go through the variable memstart_addr (where RAM starts), a load, as the kernel's;
 *  - atomics and atomic bit operations are the kernel's LSE instructions (stadd, ldaddal,
 *    casal, swpal, stset, stclr, ldseta) behind the boot-time choice between LSE and LL/SC: a
 *    branch the kernel patches to a NOP on CPUs with LSE, so each is a NOP and the LSE
 *    instruction inline, with the LL/SC form (here the compiler's exclusive-load loop) compiled
 *    in and never run;
 *  - BUG() and WARN() are `brk #0x800` (BUG_BRK_IMM); a WARN site is recorded in a table and
 *    the SIGTRAP handler resumes after it, as the kernel's brk handler does;
 *  - smp_mb() is `dmb ish`, smp_rmb()/smp_wmb() `dmb ishld`/`dmb ishst`, release stores `stlr`
 *    and acquire loads `ldar`.
 * Needs: kshim.h's compiler macros and types.
 */
#ifndef KSHIM_ARM64_H
#define KSHIM_ARM64_H

/* --- traps --------------------------------------------------------------------------------- */

#define kshim_warn_trap() \
	__asm__ __volatile__("1:\tbrk #0x800\n\t.pushsection kshim_warn_table,\"aw\"\n\t.quad 1b\n\t.popsection" \
			     : : : "memory")
#define BUG() do { __asm__ __volatile__("brk #0x800" : : : "memory"); __builtin_unreachable(); } while (0)

/* --- atomics: LSE behind the patched LSE/LL-SC branch ------------------------------------------ */

/* alternative_has_feature_likely(ARM64_HAS_LSE_ATOMICS) after boot on a CPU with LSE: a NOP
 * that the compiler must still treat as a branch to the LL/SC path. */
static __always_inline bool kshim_uses_lse(void)
{
	__asm__ goto("nop" : : : : llsc);
	return true;
llsc:
	return false;
}
#define KSHIM_LSE ".arch_extension lse\n\t"

#define kshim_atomic_ops(name, T, V, w)								\
static __always_inline V name##_read(const T *v) { return READ_ONCE(v->counter); }		\
static __always_inline void name##_set(T *v, V i) { WRITE_ONCE(v->counter, i); }		\
static __always_inline void name##_add(V i, T *v)						\
{												\
	if (kshim_uses_lse())									\
		__asm__ __volatile__(KSHIM_LSE "stadd %" w "[i], %[v]" : [v] "+Q"(v->counter) : [i] "r"(i)); \
	else											\
		__atomic_fetch_add(&v->counter, i, __ATOMIC_RELAXED);				\
}												\
static __always_inline void name##_sub(V i, T *v) { name##_add(-i, v); }			\
static __always_inline void name##_inc(T *v) { name##_add(1, v); }				\
static __always_inline void name##_dec(T *v) { name##_add(-1, v); }				\
static __always_inline V name##_add_return(V i, T *v)						\
{												\
	V old;											\
	if (!kshim_uses_lse())									\
		return __atomic_add_fetch(&v->counter, i, __ATOMIC_SEQ_CST);			\
	__asm__ __volatile__(KSHIM_LSE "ldaddal %" w "[i], %" w "[old], %[v]"			\
			     : [v] "+Q"(v->counter), [old] "=r"(old) : [i] "r"(i) : "memory");	\
	return old + i;										\
}												\
static __always_inline V name##_sub_return(V i, T *v) { return name##_add_return(-i, v); }	\
static __always_inline V name##_inc_return(T *v) { return name##_add_return(1, v); }	\
static __always_inline V name##_dec_return(T *v) { return name##_add_return(-1, v); }	\
static __always_inline bool name##_dec_and_test(T *v) { return name##_add_return(-1, v) == 0; } \
static __always_inline V name##_xchg(T *v, V i)						\
{												\
	V old;											\
	if (!kshim_uses_lse())									\
		return __atomic_exchange_n(&v->counter, i, __ATOMIC_SEQ_CST);			\
	__asm__ __volatile__(KSHIM_LSE "swpal %" w "[i], %" w "[old], %[v]"			\
			     : [v] "+Q"(v->counter), [old] "=r"(old) : [i] "r"(i) : "memory");	\
	return old;										\
}												\
static __always_inline V name##_cmpxchg(T *v, V old, V new_)				\
{												\
	if (!kshim_uses_lse()) {								\
		__atomic_compare_exchange_n(&v->counter, &old, new_, 0, __ATOMIC_SEQ_CST,	\
					    __ATOMIC_SEQ_CST);					\
		return old;									\
	}											\
	__asm__ __volatile__(KSHIM_LSE "casal %" w "[old], %" w "[new_], %[v]"			\
			     : [v] "+Q"(v->counter), [old] "+r"(old) : [new_] "r"(new_) : "memory"); \
	return old;										\
}												\
static __always_inline bool name##_try_cmpxchg(T *v, V *old, V new_)			\
{												\
	V expected = *old, seen = name##_cmpxchg(v, expected, new_);				\
	if (unlikely(seen != expected))								\
		*old = seen;									\
	return likely(seen == expected);							\
}
kshim_atomic_ops(atomic, atomic_t, int, "w")
kshim_atomic_ops(atomic_long, atomic_long_t, long, "x")
#define atomic_read_acquire(v) smp_load_acquire(&(v)->counter)
#define atomic_set_release(v, i) smp_store_release(&(v)->counter, i)
#define smp_mb() __asm__ __volatile__("dmb ish" : : : "memory")
#define smp_rmb() __asm__ __volatile__("dmb ishld" : : : "memory")
#define smp_wmb() __asm__ __volatile__("dmb ishst" : : : "memory")
#define smp_store_release(p, v) do { __atomic_store_n(p, v, __ATOMIC_RELEASE); } while (0)
#define smp_load_acquire(p) __atomic_load_n(p, __ATOMIC_ACQUIRE)

/* Bit operations on unsigned long words: the generic atomic bitops over atomic_long_t. */
static __always_inline bool test_bit(long nr, const volatile unsigned long *addr)
{
	return (addr[nr >> 6] >> (nr & 63)) & 1;
}
static __always_inline void kshim_long_or(unsigned long mask, volatile unsigned long *p)
{
	if (kshim_uses_lse())
		__asm__ __volatile__(KSHIM_LSE "stset %x[i], %[v]" : [v] "+Q"(*p) : [i] "r"(mask));
	else
		__atomic_fetch_or(p, mask, __ATOMIC_RELAXED);
}
static __always_inline void set_bit(long nr, volatile unsigned long *addr)
{
	kshim_long_or(1UL << (nr & 63), addr + (nr >> 6));
}
static __always_inline void clear_bit(long nr, volatile unsigned long *addr)
{
	volatile unsigned long *p = addr + (nr >> 6);
	unsigned long mask = 1UL << (nr & 63);
	if (kshim_uses_lse())
		__asm__ __volatile__(KSHIM_LSE "stclr %x[i], %[v]" : [v] "+Q"(*p) : [i] "r"(mask));
	else
		__atomic_fetch_and(p, ~mask, __ATOMIC_RELAXED);
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
	volatile unsigned long *p = addr + (nr >> 6);
	unsigned long mask = 1UL << (nr & 63), old;
	if (READ_ONCE(*p) & mask)
		return true;
	if (kshim_uses_lse())
		__asm__ __volatile__(KSHIM_LSE "ldseta %x[i], %x[old], %[v]"
				     : [v] "+Q"(*p), [old] "=r"(old) : [i] "r"(mask) : "memory");
	else
		old = __atomic_fetch_or(p, mask, __ATOMIC_ACQUIRE);
	return (old & mask) != 0;
}

/* --- the running thread: thread_info in the task, the task beside the thread pointer -------- */

#define PREEMPT_NEED_RESCHED (1UL << 32)	/* set: no reschedule pending */
struct thread_info {
	unsigned long flags;
	union {
		u64 preempt_count;
		struct { u32 count; u32 need_resched; } preempt;
	};
	u32 cpu;
};
struct task_struct {
	struct thread_info thread_info;
	int pagefault_disabled;
	int pid;
	unsigned long stack_canary;	/* KSHIM_TASK_CANARY_OFFSET: read by -mstack-protector-guard */
	char comm[16];
};
/* Where the task is relative to the thread pointer, and the canary in it: kernel_build.py passes
 * their sum to -mstack-protector-guard-offset, kservices.c checks the first at start-up. */
#define KSHIM_TASK_TP_OFFSET 16
#define KSHIM_TASK_CANARY_OFFSET 32
_Static_assert(offsetof(struct task_struct, stack_canary) == KSHIM_TASK_CANARY_OFFSET,
	       "the stack protector reads the canary at this offset");

static __always_inline struct task_struct *get_current(void)
{
	unsigned long tp;
	__asm__("mrs %0, tpidr_el0" : "=r"(tp));
	return (struct task_struct *)(tp + KSHIM_TASK_TP_OFFSET);
}
#define current get_current()
#define current_thread_info() (&current->thread_info)

static __always_inline int preempt_count(void)
{
	return READ_ONCE(current_thread_info()->preempt.count);
}
static __always_inline void kshim_preempt_count_add(int val)
{
	u32 pc = READ_ONCE(current_thread_info()->preempt.count);
	WRITE_ONCE(current_thread_info()->preempt.count, pc + val);
}
static __always_inline bool kshim_preempt_count_dec_and_test(void)
{
	struct thread_info *ti = current_thread_info();
	u64 pc = READ_ONCE(ti->preempt_count);
	WRITE_ONCE(ti->preempt.count, (u32)--pc);
	return !pc || !READ_ONCE(ti->preempt_count);
}
void kshim_preempt_schedule(void);
#define preempt_disable() do { kshim_preempt_count_add(1); barrier(); } while (0)
#define preempt_enable_no_resched() do { barrier(); kshim_preempt_count_add(-1); } while (0)
static __always_inline void kshim_preempt_enable(void)
{
	barrier();
	if (unlikely(kshim_preempt_count_dec_and_test()))
		kshim_preempt_schedule();
}
#define preempt_enable() kshim_preempt_enable()

/* --- per-CPU data: one CPU, offset 0 ----------------------------------------------------------- */

register unsigned long kshim_current_stack_pointer __asm__("sp");
static __always_inline unsigned long kshim_my_cpu_offset(void)
{
	unsigned long off;
	__asm__("mrs %0, tpidrro_el0" : "=r"(off) : "Q"(*(const unsigned long *)kshim_current_stack_pointer));
	return off;
}
#define this_cpu_ptr(ptr) ((__typeof__(ptr))((unsigned long)(ptr) + kshim_my_cpu_offset()))

/* --- the vmemmap array and the direct map, at link-time constants ------------------------------ */

/* kservices.c maps the vmemmap array at VMEMMAP_START and the arena (the direct map) at
 * PAGE_OFFSET; memstart_addr is the arena's first physical address. */
#define VMEMMAP_START 0x100000000UL
#define PAGE_OFFSET 0x4000000000UL
_Static_assert(PAGE_OFFSET == VMEMMAP_START * 64, "the kernel's relation: vmemmap covers the direct map");
extern long memstart_addr;
#define vmemmap ((struct page *)VMEMMAP_START - (memstart_addr >> PAGE_SHIFT))
#define page_to_pfn(page) ((unsigned long)((page) - vmemmap))
#define pfn_to_page(pfn) (vmemmap + (pfn))
#define __va(x) ((void *)(((unsigned long)(x) - memstart_addr) | PAGE_OFFSET))
#define PFN_PHYS(x) ((phys_addr_t)(x) << PAGE_SHIFT)
#define page_to_virt(page) \
	({ u64 kshim_idx = ((u64)(page) - VMEMMAP_START) / sizeof(struct page); \
	   (void *)(PAGE_OFFSET + kshim_idx * PAGE_SIZE); })
#define page_address(page) page_to_virt(page)
#define virt_to_page(addr) \
	({ u64 kshim_idx = ((u64)(addr) - PAGE_OFFSET) / PAGE_SIZE; \
	   (struct page *)(VMEMMAP_START + kshim_idx * sizeof(struct page)); })

#endif /* KSHIM_ARM64_H */
