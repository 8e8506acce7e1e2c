// A page's copy (region_core.h): one 8-byte word repeated over the page is kept as that word
// (zram's same-filled pages), a page that compresses to less than the pool's huge class
// size is a pool object of its compressed bytes, any other is a pool object of the whole page
// (zram's huge pages). With a backing file, pool copies move to it when the pool is full
// (region_core.h says which). Called with the region's lock held.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

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

// Pool copies the backing file takes in one batch, before the pool is compacted.
constexpr uint32_t kWritebackBatch = 64;
// Batches a store may write back before it gives up (the file is full, or holds no more).
constexpr int kWritebackTries = 4;

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
  if (pool_refused_) return false;  // nothing freed since the pool (and file) refused a copy
  auto len = codec_->compress({src, kPageSize}, compress_buf_);
  bool whole = !len || *len >= zs_huge_class_size(pool_);
  const void* bytes = whole ? static_cast<const void*>(src) : compress_buf_.data();
  size_t n = whole ? kPageSize : *len;
  unsigned long handle = zs_store(pool_, bytes, n);
  for (int tries = 0; handle == 0 && file_ && tries < kWritebackTries && write_back_batch(); ++tries) {
    handle = zs_store(pool_, bytes, n);
  }
  if (handle == 0) {
    pool_refused_ = true;
    return false;
  }
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
  if (kind == CopyKind::file) return load_from_file(p, out);
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
  } else if (kind == CopyKind::file) {
    file_->release(copies_[p], st.comp_len == 0 ? kPageSize : st.comp_len, !serving_signal_);
    counters_.file_bytes.store(file_->live_bytes(), std::memory_order_relaxed);
    if (st.comp_len == 0) counters_.whole.fetch_sub(1, std::memory_order_relaxed);
  } else {
    zs_free(pool_, copies_[p]);
    counters_.compr_bytes.fetch_sub(kind == CopyKind::whole ? kPageSize : st.comp_len,
                                    std::memory_order_relaxed);
    if (kind == CopyKind::whole) counters_.whole.fetch_sub(1, std::memory_order_relaxed);
  }
  counters_.stored.fetch_sub(1, std::memory_order_relaxed);
  pool_refused_ = pool_refused_ && kind == CopyKind::same;  // room made: the next store may fit
  st.copy = 0;
  st.has_copy = 0;
  st.comp_len = 0;
  copies_[p] = 0;
}

// p's copy read back from the backing file. A read that fails, or finds other bytes than
// were written, leaves nothing to serve the page with: the process stops, as the kernel's
// swap-in of an unreadable page kills the process that faults on it.
void Region::load_from_file(uint32_t p, std::byte* out) {
  const PageState& st = pages_[p];
  bool whole = st.comp_len == 0;
  std::span<std::byte> bytes{whole ? out : file_buf_.data(), whole ? kPageSize : st.comp_len};
  if (!file_->read(copies_[p], bytes)) {
    std::fprintf(stderr, "zsm region: page %u cannot be read back from the backing file "
                 "(an I/O error, or its bytes changed on disk)\n", p);
    std::abort();
  }
  if (!whole && codec_->decompress(bytes, {out, kPageSize})) {
    std::fprintf(stderr, "zsm region: page %u's copy from the backing file does not decompress\n", p);
    std::abort();
  }
  counters_.read_back.fetch_add(1, std::memory_order_relaxed);
}

// p has just become stored: the write-back hand passes it over once (region_core.h).
void Region::mark_stored(uint32_t p) {
  set_kind(p, Kind::stored);
  pages_[p].referenced = 1;
}

// Moves one batch of pool copies to the backing file, then compacts the pool; false when
// none could be moved. The copies are stored pages' (each passed over once first), or the
// eviction in progress's victims' (when the batch is larger than the pool).
bool Region::write_back_batch() {
  if (file_->full() || counters_.compr_bytes.load(std::memory_order_relaxed) == 0) return false;
  uint32_t written = 0;
  for (uint64_t steps = 0; steps < 2 * uint64_t{npages_} && written < kWritebackBatch; ++steps) {
    uint32_t p = writeback_hand_;
    writeback_hand_ = writeback_hand_ + 1 == npages_ ? 0 : writeback_hand_ + 1;
    const PageState& st = pages_[p];
    auto copy = static_cast<CopyKind>(st.copy);
    bool stored = kind(p) == Kind::stored;
    if (!(stored || st.victim) || !st.has_copy || (copy != CopyKind::pool && copy != CopyKind::whole)) {
      continue;
    }
    if (stored && st.referenced) {
      pages_[p].referenced = 0;
      continue;
    }
    if (!write_back(p)) break;
    ++written;
  }
  if (written == 0) return false;
  file_->end_batch();
  zs_compact(pool_);
  return true;
}

// Moves stored page p's pool copy to the backing file; false when the file cannot take it.
bool Region::write_back(uint32_t p) {
  PageState& st = pages_[p];
  bool whole = static_cast<CopyKind>(st.copy) == CopyKind::whole;
  size_t n = whole ? kPageSize : st.comp_len;
  void* mem = zs_obj_read_begin(pool_, copies_[p], n, file_buf_.data());
  auto where = file_->write({static_cast<const std::byte*>(mem), n});
  zs_obj_read_end(pool_, copies_[p], n, mem);
  if (!where) return false;
  zs_free(pool_, copies_[p]);
  counters_.compr_bytes.fetch_sub(n, std::memory_order_relaxed);
  st.copy = static_cast<uint32_t>(CopyKind::file);
  st.comp_len = static_cast<uint32_t>(whole ? 0 : n);
  copies_[p] = *where;
  counters_.written_back.fetch_add(1, std::memory_order_relaxed);
  counters_.file_bytes.store(file_->live_bytes(), std::memory_order_relaxed);
  return true;
}

}  // namespace zsm::region
