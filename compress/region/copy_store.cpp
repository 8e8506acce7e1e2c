// The copy store (copy_store.h).
#include "copy_store.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <system_error>

#include <unistd.h>

#include "kernel_ordered.h"

namespace zsm::region {
namespace {

// A page's bytes were written by the program's threads and handed over by the kernel (the
// page moved out of the region, or write-protected): an order ThreadSanitizer cannot see, so
// under it the bytes are first copied with its checks off. Elsewhere they are used in place.
const std::byte* stable_bytes(const std::byte* page, std::byte* spare) {
  if constexpr (!kThreadSanitizer) return page;
  ordered_by_kernel([&] { std::memcpy(spare, page, kPageSize); });
  return spare;
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

CopyStore::~CopyStore() {
  zs_destroy_pool(pool_);
  zs_destroy_pool(overflow_);
}

int CopyStore::init(const CopyStoreOptions& o, std::string* why) {
  try {
    codec_ = Codec::create(o.codec);
  } catch (const std::system_error& e) {
    *why = std::string("codec: ") + e.what();
    return -EINVAL;
  }
  zs_pool_config unlimited = o.pool;
  unlimited.max_pages = 0;
  pool_ = zs_create_pool_ex("zsm_region", &o.pool);
  overflow_ = pool_ != nullptr ? zs_create_pool_ex("zsm_region_overflow", &unlimited) : nullptr;
  if (pool_ == nullptr || overflow_ == nullptr) {
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

CopyStore::Compressed CopyStore::compress(const std::byte* page, std::byte* work) const {
  const std::byte* src = stable_bytes(page, work + (work_bytes_ - kPageSize));
  Compressed c;
  if (same_filled(src, &c.word)) {
    c.copy = CopyKind::same;
    return c;
  }
  auto len = codec_->compress({src, kPageSize}, {work, work_bytes_ - kPageSize});
  bool whole = !len || *len >= huge_class_;
  c.copy = whole ? CopyKind::whole : CopyKind::pool;
  c.bytes = whole ? src : work;
  c.length = whole ? kPageSize : *len;
  return c;
}

bool CopyStore::put(const Compressed& c, PageState* st, uint64_t* word, bool past_budget) {
  if (c.copy == CopyKind::same) {
    st->copy = CopyKind::same;
    *word = c.word;
    bump(counters_.stored);  // before its kind, and dropped after it: stats reads the kinds first
    bump(counters_.same);
    return true;
  }
  const bool whole = c.copy == CopyKind::whole;
  bool over = false;
  unsigned long handle = zs_store(pool_, c.bytes, c.length);
  if (handle == 0 && past_budget) {
    handle = zs_store(overflow_, c.bytes, c.length);
    over = true;
  }
  if (handle == 0) return false;
  st->copy = over ? (whole ? CopyKind::overflow_whole : CopyKind::overflow) : c.copy;
  st->comp_len = static_cast<uint16_t>(whole ? 0 : c.length);
  *word = handle;
  bump(counters_.stored);
  bump(counters_.compr_bytes, c.length);
  if (whole) bump(counters_.whole);
  return true;
}

bool CopyStore::store(const std::byte* page, PageState* st, uint64_t* word, std::byte* work, bool past_budget) {
  return put(compress(page, work), st, word, past_budget);
}

void CopyStore::load(uint32_t p, const PageState& st, uint64_t word, std::byte* out, std::byte* file_buf) {
  if (st.copy == CopyKind::same) return fill_words(out, word);
  if (st.copy == CopyKind::file) return load_from_file(p, st, word, out, file_buf);
  const bool whole = kept_whole(st.copy);
  size_t n = whole ? kPageSize : st.comp_len;
  zs_pool* pool = pool_of(st.copy);
  void* mem = zs_obj_read_begin(pool, word, n, file_buf);
  if (whole) {
    std::memcpy(out, mem, kPageSize);
  } else if (codec_->decompress({static_cast<const std::byte*>(mem), n}, {out, kPageSize})) {
    unreadable(p, "has a compressed copy that does not decompress (the pool's memory was overwritten)");
  }
  zs_obj_read_end(pool, word, n, mem);
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
    case CopyKind::overflow:
    case CopyKind::overflow_whole:
      zs_free(pool_of(st->copy), *word);
      drop(counters_.compr_bytes, kept_whole(st->copy) ? kPageSize : st->comp_len);
      if (kept_whole(st->copy)) drop(counters_.whole);
      break;
  }
  drop(counters_.stored);
  st->copy = CopyKind::none;
  st->comp_len = 0;
  *word = 0;
}

bool CopyStore::move_to_file(PageState* st, uint64_t* word, std::byte* buf) {
  bool whole = kept_whole(st->copy);
  size_t n = whole ? kPageSize : st->comp_len;
  zs_pool* pool = pool_of(st->copy);
  void* mem = zs_obj_read_begin(pool, *word, n, buf);
  std::optional<uint64_t> where;
  {
    SpinGuard g(file_lock_);
    where = file_->write({static_cast<const std::byte*>(mem), n});
    counters_.file_bytes.store(file_->live_bytes(), std::memory_order_relaxed);
  }
  zs_obj_read_end(pool, *word, n, mem);
  if (!where) return false;
  zs_free(pool, *word);
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
  zs_compact(overflow_);
}

bool CopyStore::compact_if_fragmented() {
  uint64_t pool = pool_bytes(), held = get(counters_.compr_bytes);
  uint64_t holes = pool > held ? pool - held : 0;
  if (holes < pool / 4 || holes < (256u << 10)) return false;
  zs_compact(pool_);
  zs_compact(overflow_);
  return true;
}

// Without the file's lock: evictor's checks and statistics read it outside the fork gate.
bool CopyStore::file_full() const { return file_->full(); }

// Both pools: what the copies cost.
uint64_t CopyStore::pool_bytes() const {
  return uint64_t{zs_get_total_pages(pool_) + zs_get_total_pages(overflow_)} * pool_page_size_;
}

size_t CopyStore::bookkeeping_bytes() const {
  return zs_pool_bookkeeping_bytes(pool_) + zs_pool_bookkeeping_bytes(overflow_);
}

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
bool CopyStore::pull_into_pool(PageLock& l, std::byte* file_buf, std::byte* page) {
  PageState* st = &l.state_to_change();
  uint64_t* word = &l.copy_word_to_change();
  bool whole = st->comp_len == 0;
  size_t n = whole ? kPageSize : st->comp_len;
  std::byte* bytes = whole ? page : file_buf;
  load_from_file(l.page(), *st, *word, page, file_buf);  // page: the contents; file_buf: the copy
  unsigned long handle = zs_store(pool_, bytes, n);  // the pool where it has room, else the overflow
  bool over = handle == 0;
  if (over) handle = zs_store(overflow_, bytes, n);
  if (handle == 0) return false;
  uint64_t where = *word;
  {
    SpinGuard g(file_lock_);
    file_->release(where, n, true);
    counters_.file_bytes.store(file_->live_bytes(), std::memory_order_relaxed);
  }
  st->copy = whole ? (over ? CopyKind::overflow_whole : CopyKind::whole) : (over ? CopyKind::overflow : CopyKind::pool);
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
