/*
 * kshim_mm.h: the kernel's memory interfaces that mm/zsmalloc.c uses: struct page and its
 * flags, the vmemmap array and the direct map (page <-> address arithmetic in the
 * architecture's shim), kmap, the page allocator, vmstat, and the slab (kmem_cache, kmalloc,
 * vmalloc). The allocators themselves are out-of-line services in kservices.c. Part of
 * kshim.h, after kshim_sync.h.
 */
#ifndef KSHIM_MM_H
#define KSHIM_MM_H

#ifndef KSHIM_H
#error "kshim_mm.h is part of kshim.h: include that"
#endif

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

#endif /* KSHIM_MM_H */
