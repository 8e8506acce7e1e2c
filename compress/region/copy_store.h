// The copy store: pages' copies over the zsm pool and the backing file. One 8-byte word
// repeated over a page is kept as that word (zram's same-filled pages); a page that compresses
// to less than the pool's huge class size (and than a page) is a pool object of its compressed
// bytes; any other is a pool object of the whole page (zram's huge pages). With a backing
// file, the evictor moves pool copies to it when the pool nears its budget. The pool holds at
// most its budget (its page limit: compressed_budget_bytes); a copy it has no room for that no
// file can take (none, or full) goes to a second pool without a limit, the overflow, rather
// than the page staying decompressed; write-back takes its copies as it takes the pool's.
//
// Who calls: the evictor stores (it alone compresses) and moves copies to the file; fault
// servers load and free (a SIGBUS handler among them: nothing here allocates on those paths
// but the file's free list, which keeps room ahead); range calls store, load and free. Each
// call is about one page whose lock the caller holds (page_table.h), so a copy is never used
// by two at once. The pool is thread-safe (its own shards); the file's space map takes a
// spin lock; its reads take none.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <zsm/codec.hpp>
#include <zsm/zsmalloc.h>

#include "counters.h"
#include "descriptors.h"
#include "futex.h"
#include "owned_file.h"
#include "page_file.h"
#include "page_table.h"
#include "uffd.h"

namespace zsm::region {

struct CopyStoreOptions {
  CodecOptions codec;
  zs_pool_config pool{};  // max_pages: the pool's budget (0 = none)
  std::string file;       // "" = no backing file
  uint64_t file_capacity = 0;
};

class CopyStore {
 public:
  CopyStore(Counters& counters) : counters_(counters) {}
  ~CopyStore();
  CopyStore(const CopyStore&) = delete;
  CopyStore& operator=(const CopyStore&) = delete;

  // 0, or -errno with *why (the pool's configuration, the codec's options, the file's path).
  int init(const CopyStoreOptions& o, std::string* why);

  // The calling thread's codec contexts, made now: every thread that stores or loads under a
  // page's lock calls it first (zsm/codec.hpp says why), before it takes one. Making them
  // allocates, and a program's own malloc may call back into the region from that allocation
  // (madvise() of its region memory): that inner call, which stores nothing, goes on without.
  void prepare_thread() const {
    static thread_local bool preparing = false;
    if (preparing) return;
    preparing = true;
    codec_->prepare_thread();
    preparing = false;
  }

  // A buffer of this many bytes holds a compressed page (store's `work`).
  size_t work_bytes() const { return work_bytes_; }

  // Makes a copy of `page` (4096 bytes) into *st and *word; false when the pool is at its
  // budget (unless `past_budget`: the file cannot take the overflow, and the pool holds it
  // rather than the page staying decompressed) or out of memory. `work`: work_bytes() of the
  // caller's.
  bool store(const std::byte* page, PageState* st, uint64_t* word, std::byte* work, bool past_budget = false);
  // store() in two steps, for a caller that may try the pool more than once (the evictor,
  // making room in it): the page compressed into `work` (or found same-filled, or kept whole),
  // then put in the pool, within its budget or past it.
  struct Compressed {
    CopyKind copy = CopyKind::none;  // same, pool or whole
    const std::byte* bytes = nullptr;
    size_t length = 0;
    uint64_t word = 0;  // same-filled: the word
  };
  Compressed compress(const std::byte* page, std::byte* work) const;
  // Into the pool; with `past_budget`, into the overflow pool where the pool has no room.
  bool put(const Compressed& c, PageState* st, uint64_t* word, bool past_budget);
  // Writes the page's contents from its copy into `out` (a page); `file_buf` a page of the
  // caller's. A copy that cannot be read or decompressed stops the process (page_file.h).
  void load(uint32_t p, const PageState& st, uint64_t word, std::byte* out, std::byte* file_buf);
  // Frees the copy. With may_allocate false (a signal handler) the file's free list takes the
  // sectors only while it has room.
  void free(PageState* st, uint64_t* word, bool may_allocate);

  // The backing file, if any: moves a pool copy there (false when the file is full).
  bool has_file() const { return file_ != nullptr; }
  bool move_to_file(PageState* st, uint64_t* word, std::byte* buf);
  // After a batch of moves: the file's pages leave the page cache, the pool is compacted.
  void end_writeback_batch();
  // Compacts the pool when a quarter of it (and 256 KiB) holds no copy: frees of copies leave
  // holes in its zspages, which a region that faults and evicts at a high rate makes faster
  // than write-back's compaction takes them back, and with ZSM_REGION_BUDGET_ALL every byte of
  // them is taken from the decompressed pages. Whether it compacted.
  bool compact_if_fragmented();
  bool file_full() const;

  // The calls above for a page of the region, whose lock the caller holds.
  bool put(const Compressed& c, PageLock& l, bool past_budget) {
    return put(c, &l.state_to_change(), &l.copy_word_to_change(), past_budget);
  }
  void load(const PageLock& l, std::byte* out, std::byte* file_buf) {
    load(l.page(), l.state(), l.copy_word(), out, file_buf);
  }
  void free(PageLock& l, bool may_allocate) { free(&l.state_to_change(), &l.copy_word_to_change(), may_allocate); }
  bool move_to_file(PageLock& l, std::byte* buf) {
    return move_to_file(&l.state_to_change(), &l.copy_word_to_change(), buf);
  }

  // The pool's bytes now, and its budget (0: none).
  uint64_t pool_bytes() const;
  uint64_t pool_budget_bytes() const { return pool_budget_; }
  size_t pool_page_size() const { return pool_page_size_; }
  size_t bookkeeping_bytes() const;
  // The largest zspage, in bytes, of the classes a copy may use (a page at most).
  size_t largest_zspage_bytes() const;

  // fork(): the child's copy of the file, made before the fork; adopted in the child. Where the
  // file system could not take all of it (or the copy could not be made), the copies it lacks
  // (child_lacks) are brought back into the pool before the fork (pull_into_pool), for the
  // parent and the child alike; a child without a copy has no file.
  void prepare_fork();
  bool child_lacks(const PageState& st, uint64_t word) const;
  bool pull_into_pool(PageLock& l, std::byte* file_buf, std::byte* page);
  void after_fork_in_parent();
  void after_fork_in_child();
  // fork(): the file's space map locked across it (its lock is taken outside the fork gate).
  void lock_for_fork() { file_lock_.lock(); }
  void unlock_after_fork() { file_lock_.unlock(); }
  // The file's descriptor, once the keeper holds it too.
  void keep_file_descriptor(pid_t keeper);
  int file_descriptor() const { return file_ ? file_->fd() : -1; }

 private:
  void load_from_file(uint32_t p, const PageState& st, uint64_t word, std::byte* out, std::byte* file_buf);

  Counters& counters_;
  std::unique_ptr<Codec> codec_;
  zs_pool* pool_ = nullptr;      // at most its budget (max_pages)
  zs_pool* overflow_ = nullptr;  // what the pool and the file have no room for
  zs_pool* pool_of(CopyKind k) const { return k == CopyKind::overflow || k == CopyKind::overflow_whole ? overflow_ : pool_; }
  size_t pool_page_size_ = 4096;
  uint64_t pool_budget_ = 0;
  size_t huge_class_ = 0;
  size_t work_bytes_ = 0;
  std::unique_ptr<PageFile> file_;
  KeptFd file_fd_;
  mutable SpinLock file_lock_;  // the file's space map (write, release, end_batch)
  PageFile::ChildCopy child_copy_;
};

}  // namespace zsm::region
