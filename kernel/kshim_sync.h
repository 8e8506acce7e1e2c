/*
 * kshim_sync.h: the kernel's locks and lists, as mm/zsmalloc.c uses them (kshim.h includes it
 * after the base types and the architecture's primitives it builds on). The locks are
 * out-of-line calls into kservices.c, as in a kernel with preemption built in; local_lock() is
 * preempt_disable(); the list operations are inline, as the kernel's are.
 */
#ifndef KSHIM_SYNC_H
#define KSHIM_SYNC_H

#ifndef KSHIM_H
#error "kshim_sync.h is part of kshim.h: include that"
#endif

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

#endif /* KSHIM_SYNC_H */
