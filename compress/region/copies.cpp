// A page's copy (region_core.h): one 8-byte word repeated over the page is kept as that word
// (zram's same-filled pages), a page that compresses to less than the pool's huge class
// size is a pool object of its compressed bytes, any other is a pool object of the whole page
// (zram's huge pages). Called with the region's lock held.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "region_core.h"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ZSM_REGION_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define ZSM_REGION_TSAN 1
#endif
#ifdef ZSM_REGION_TSAN
extern "C" void __tsan_ignore_thread_begin(void);
extern "C" void __tsan_ignore_thread_end(void);
#endif

namespace zsm::region {
namespace {

// A mapped page's bytes were written by the program's threads before the kernel ordered them
// with this read: the write protection (its TLB flush) or the fault the handler read.
// ThreadSanitizer cannot see that order, so this read is hidden from it.
void copy_ordered_by_kernel(std::byte* out, const std::byte* page) {
#ifdef ZSM_REGION_TSAN
  __tsan_ignore_thread_begin();
#endif
  std::memcpy(out, page, kPageSize);
#ifdef ZSM_REGION_TSAN
  __tsan_ignore_thread_end();
#endif
}

bool same_filled(const std::byte* page, unsigned long* word) {
  uint64_t first;
  std::memcpy(&first, page, sizeof first);
  for (size_t off = sizeof first; off < kPageSize; off += sizeof first) {
    uint64_t w;
    std::memcpy(&w, page + off, sizeof w);
    if (w != first) return false;
  }
  *word = first;
  return true;
}

void fill_words(std::byte* out, uint64_t word) {
  for (size_t off = 0; off < kPageSize; off += sizeof word) std::memcpy(out + off, &word, sizeof word);
}

}  // namespace

// Copies mapped (and write-protected) page p's bytes out of the region.
void Region::read_page(uint32_t p, std::byte* out) const { copy_ordered_by_kernel(out, page(p)); }

// Makes p's copy from src (its bytes read out of the region, or its probation slot); false
// when the pool is full.
bool Region::store_copy(uint32_t p, const std::byte* src) {
  PageState& st = pages_[p];
  unsigned long word;
  if (same_filled(src, &word)) {
    st.copy = static_cast<uint32_t>(CopyKind::same);
    st.has_copy = 1;
    copies_[p] = word;
    counters_.same.fetch_add(1, std::memory_order_relaxed);
    counters_.stored.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  auto len = codec_->compress({src, kPageSize}, compress_buf_);
  bool whole = !len || *len >= zs_huge_class_size(pool_);
  const void* bytes = whole ? static_cast<const void*>(src) : compress_buf_.data();
  size_t n = whole ? kPageSize : *len;
  unsigned long handle = zs_store(pool_, bytes, n);
  if (handle == 0) return false;
  st.copy = static_cast<uint32_t>(whole ? CopyKind::whole : CopyKind::pool);
  st.has_copy = 1;
  st.comp_len = static_cast<uint32_t>(whole ? 0 : n);
  copies_[p] = handle;
  counters_.compr_bytes.fetch_add(n, std::memory_order_relaxed);
  if (whole) counters_.whole.fetch_add(1, std::memory_order_relaxed);
  counters_.stored.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// Writes p's contents from its copy into out (a page).
void Region::load_copy(uint32_t p, std::byte* out) {
  const PageState& st = pages_[p];
  auto kind = static_cast<CopyKind>(st.copy);
  if (kind == CopyKind::same) return fill_words(out, copies_[p]);
  size_t n = kind == CopyKind::whole ? kPageSize : st.comp_len;
  void* mem = zs_obj_read_begin(pool_, copies_[p], n, compress_buf_.data());
  if (kind == CopyKind::whole) {
    std::memcpy(out, mem, kPageSize);
  } else if (codec_->decompress({static_cast<const std::byte*>(mem), n}, {out, kPageSize})) {
    std::fprintf(stderr, "zsm region: page %u's compressed copy does not decompress\n", p);
    std::abort();  // the pool's memory was overwritten: nothing can serve this page
  }
  zs_obj_read_end(pool_, copies_[p], n, mem);
}

void Region::free_copy(uint32_t p) {
  PageState& st = pages_[p];
  auto kind = static_cast<CopyKind>(st.copy);
  if (kind == CopyKind::same) {
    counters_.same.fetch_sub(1, std::memory_order_relaxed);
  } else {
    zs_free(pool_, copies_[p]);
    counters_.compr_bytes.fetch_sub(kind == CopyKind::whole ? kPageSize : st.comp_len,
                                    std::memory_order_relaxed);
    if (kind == CopyKind::whole) counters_.whole.fetch_sub(1, std::memory_order_relaxed);
  }
  counters_.stored.fetch_sub(1, std::memory_order_relaxed);
  st.copy = 0;
  st.has_copy = 0;
  st.comp_len = 0;
  copies_[p] = 0;
}

}  // namespace zsm::region
