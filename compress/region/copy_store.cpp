// The copy store (copy_store.h).
#include "copy_store.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <system_error>

#include <unistd.h>

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

// A page's bytes were written by the program's threads and handed over by the kernel (the
// page moved out of the region, or write-protected): an order ThreadSanitizer cannot see, so
// under it the bytes are first copied with its checks off. Elsewhere they are used in place.
const std::byte* stable_bytes(const std::byte* page, std::byte* spare) {
#ifdef ZSM_REGION_TSAN
  __tsan_ignore_thread_begin();
  std::memcpy(spare, page, kPageSize);
  __tsan_ignore_thread_end();
  return spare;
#else
  (void)spare;
  return page;
#endif
}

bool same_filled(const std::byte* page, uint64_t* word) {
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

[[noreturn]] void unreadable(uint32_t p, const char* why) {
  char line[300];
  int n = std::snprintf(line, sizeof line, "zsm region: page %u %s\n", p, why);
  if (n > 0) write_to_program_stderr(line, std::min<size_t>(static_cast<size_t>(n), sizeof line - 1));
  std::abort();  // nothing can serve the page: as the kernel kills a process whose swap-in fails
}

}  // namespace

CopyStore::~CopyStore() { zs_destroy_pool(pool_); }

int CopyStore::init(const CopyStoreOptions& o, std::string* why) {
  try {
    codec_ = Codec::create(o.codec);
  } catch (const std::system_error& e) {
    *why = std::string("codec: ") + e.what();
    return -EINVAL;
  }
  // The pool's budget is the region's to keep (store): past it, copies go to the file, and
  // the pool itself has no limit, so that it can hold what the file cannot take.
  zs_pool_config unlimited = o.pool;
  unlimited.max_pages = 0;
  pool_ = zs_create_pool_ex("zsm_region", &unlimited);
  if (pool_ == nullptr) {
    *why = std::string("the pool's configuration was refused: ") + std::strerror(errno);
    return -errno;
  }
  pool_page_size_ = o.pool.page_size == 0 ? 4096 : o.pool.page_size;
  pool_budget_ = uint64_t{o.pool.max_pages} * pool_page_size_;
  huge_class_ = std::min(zs_huge_class_size(pool_), kPageSize);
  work_bytes_ = std::max(codec_->bound(kPageSize), kPageSize) + kPageSize;
  if (!o.file.empty()) {
    try {
      file_ = std::make_unique<PageFile>(o.file, o.file_capacity);
    } catch (const std::system_error& e) {
      *why = e.what();
      return -e.code().value();
    }
    file_fd_ = KeptFd(file_->fd(), 0);
  }
  return 0;
}

bool CopyStore::store(const std::byte* page, PageState* st, uint64_t* word, std::byte* work, bool past_budget) {
  const std::byte* src = stable_bytes(page, work + (work_bytes_ - kPageSize));
  uint64_t w;
  if (same_filled(src, &w)) {
    st->copy = CopyKind::same;
    *word = w;
    bump(counters_.stored);  // before its kind, and dropped after it: stats reads the kinds first
    bump(counters_.same);
    return true;
  }
  auto len = codec_->compress({src, kPageSize}, {work, work_bytes_ - kPageSize});
  bool whole = !len || *len >= huge_class_;
  size_t n = whole ? kPageSize : *len;
  unsigned long handle = zs_store(pool_, whole ? static_cast<const void*>(src) : work, n);
  if (handle == 0) return false;
  if (!past_budget && pool_budget_ != 0 && pool_bytes() > pool_budget_) {  // zram's check: after
    zs_free(pool_, handle);  // a zspage it had to add goes with it
    return false;
  }
  st->copy = whole ? CopyKind::whole : CopyKind::pool;
  st->comp_len = static_cast<uint16_t>(whole ? 0 : n);
  *word = handle;
  bump(counters_.stored);
  bump(counters_.compr_bytes, n);
  if (whole) bump(counters_.whole);
  return true;
}

void CopyStore::load(uint32_t p, const PageState& st, uint64_t word, std::byte* out, std::byte* file_buf) {
  if (st.copy == CopyKind::same) return fill_words(out, word);
  if (st.copy == CopyKind::file) return load_from_file(p, st, word, out, file_buf);
  size_t n = st.copy == CopyKind::whole ? kPageSize : st.comp_len;
  void* mem = zs_obj_read_begin(pool_, word, n, file_buf);
  if (st.copy == CopyKind::whole) {
    std::memcpy(out, mem, kPageSize);
  } else if (codec_->decompress({static_cast<const std::byte*>(mem), n}, {out, kPageSize})) {
    unreadable(p, "has a compressed copy that does not decompress (the pool's memory was overwritten)");
  }
  zs_obj_read_end(pool_, word, n, mem);
}

// A read that fails, or finds other bytes than were written, is tried once more through the
// keeper's descriptor (the program may have closed the file's and reused its number).
void CopyStore::load_from_file(uint32_t p, const PageState& st, uint64_t word, std::byte* out,
                               std::byte* file_buf) {
  bool whole = st.comp_len == 0;
  std::span<std::byte> bytes{whole ? out : file_buf, whole ? kPageSize : st.comp_len};
  int rc = file_fd_.call([&](int fd) { return PageFile::read_at(fd, word, bytes) ? 0 : -EIO; },
                         [](int r) { return r != 0; });
  if (rc != 0) unreadable(p, "cannot be read back from the backing file (an I/O error, or its bytes changed on disk)");
  if (!whole && codec_->decompress(bytes, {out, kPageSize})) {
    unreadable(p, "has a copy in the backing file that does not decompress");
  }
  bump(counters_.read_back);
}

void CopyStore::free(PageState* st, uint64_t* word, bool may_allocate) {
  switch (st->copy) {
    case CopyKind::none: return;
    case CopyKind::same: drop(counters_.same); break;
    case CopyKind::file: {
      SpinGuard g(file_lock_);
      file_->release(*word, st->comp_len == 0 ? kPageSize : st->comp_len, may_allocate);
      counters_.file_bytes.store(file_->live_bytes(), std::memory_order_relaxed);
      if (st->comp_len == 0) drop(counters_.whole);
      break;
    }
    case CopyKind::pool:
    case CopyKind::whole:
      zs_free(pool_, *word);
      drop(counters_.compr_bytes, st->copy == CopyKind::whole ? kPageSize : st->comp_len);
      if (st->copy == CopyKind::whole) drop(counters_.whole);
      break;
  }
  drop(counters_.stored);
  st->copy = CopyKind::none;
  st->comp_len = 0;
  *word = 0;
}

bool CopyStore::move_to_file(PageState* st, uint64_t* word, std::byte* buf) {
  bool whole = st->copy == CopyKind::whole;
  size_t n = whole ? kPageSize : st->comp_len;
  void* mem = zs_obj_read_begin(pool_, *word, n, buf);
  std::optional<uint64_t> where;
  {
    SpinGuard g(file_lock_);
    where = file_->write({static_cast<const std::byte*>(mem), n});
    counters_.file_bytes.store(file_->live_bytes(), std::memory_order_relaxed);
  }
  zs_obj_read_end(pool_, *word, n, mem);
  if (!where) return false;
  zs_free(pool_, *word);
  drop(counters_.compr_bytes, n);
  st->copy = CopyKind::file;
  st->comp_len = static_cast<uint16_t>(whole ? 0 : n);
  *word = *where;
  bump(counters_.written_back);
  return true;
}

void CopyStore::end_writeback_batch() {
  {
    SpinGuard g(file_lock_);
    file_->end_batch();
  }
  zs_compact(pool_);
}

bool CopyStore::compact_if_fragmented() {
  uint64_t pool = pool_bytes(), held = get(counters_.compr_bytes);
  uint64_t holes = pool > held ? pool - held : 0;
  if (holes < pool / 4 || holes < (256u << 10)) return false;
  zs_compact(pool_);
  return true;
}

bool CopyStore::file_full() const {
  SpinGuard g(file_lock_);
  return file_->full();
}

uint64_t CopyStore::pool_bytes() const { return uint64_t{zs_get_total_pages(pool_)} * pool_page_size_; }

size_t CopyStore::bookkeeping_bytes() const { return zs_pool_bookkeeping_bytes(pool_); }

size_t CopyStore::largest_zspage_bytes() const {
  unsigned top = zs_lookup_class_index(pool_, kPageSize);
  size_t most = 0;
  for (unsigned i = 0; i <= top; ++i) {
    struct zs_class_stats st {};
    if (zs_class_stats(pool_, i, &st) >= 0) most = std::max<size_t>(most, size_t{st.pages_per_zspage} * pool_page_size_);
  }
  return most;
}

void CopyStore::prepare_fork() {
  if (!file_) return;
  child_copy_ = file_->copy_for_child();
  if (child_copy_.error != 0) {
    char line[600];
    int n = std::snprintf(line, sizeof line,
                          "zsm region: %s; the child gets the %llu bytes copied, and the copies past them "
                          "are brought back into the pool\n",
                          child_copy_.why.c_str(), static_cast<unsigned long long>(child_copy_.bytes));
    if (n > 0) write_to_program_stderr(line, std::min<size_t>(static_cast<size_t>(n), sizeof line - 1));
  }
}

bool CopyStore::child_lacks(const PageState& st, uint64_t word) const {
  return st.copy == CopyKind::file && child_copy_.error != 0 &&
         !PageFile::within(word, st.comp_len == 0 ? kPageSize : st.comp_len, child_copy_.bytes);
}

// The copy read back from the file and stored in the pool as it was (compressed, or whole),
// past the pool's budget. False when the pool has no memory for it.
bool CopyStore::pull_into_pool(uint32_t p, PageState* st, uint64_t* word, std::byte* file_buf, std::byte* page) {
  bool whole = st->comp_len == 0;
  size_t n = whole ? kPageSize : st->comp_len;
  std::byte* bytes = whole ? page : file_buf;
  load_from_file(p, *st, *word, page, file_buf);  // page: the contents; file_buf: the copy
  unsigned long handle = zs_store(pool_, bytes, n);
  if (handle == 0) return false;
  uint64_t where = *word;
  {
    SpinGuard g(file_lock_);
    file_->release(where, n, true);
    counters_.file_bytes.store(file_->live_bytes(), std::memory_order_relaxed);
  }
  st->copy = whole ? CopyKind::whole : CopyKind::pool;
  *word = handle;
  bump(counters_.compr_bytes, n);
  return true;
}

void CopyStore::after_fork_in_parent() { child_copy_ = PageFile::ChildCopy(); }

// A child with no copy of the file keeps no file: every copy it holds is in the pool.
void CopyStore::after_fork_in_child() {
  if (!file_) return;
  if (child_copy_.file.fd() < 0) {
    file_->adopt_in_child(detail::OwnedFile());
    file_.reset();
    file_fd_ = KeptFd();
    return;
  }
  file_->adopt_in_child(std::move(child_copy_.file));
  file_fd_ = KeptFd(file_->fd(), 0);
}

void CopyStore::keep_file_descriptor(pid_t keeper) { file_fd_.set_keeper(keeper); }

}  // namespace zsm::region
