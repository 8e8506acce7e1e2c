// What fork() does to a region. The child gets its parent's region as ordinary memory would
// be: the contents at the fork, its own from then on (copy-on-write; neither sees the other's
// later writes). Its pages are served in the child, by a userfaultfd and threads of its own,
// set up by the atfork child handler before fork() returns there:
//   - prepare (the parent, before the fork): every region's fork gate closes, so the copy is
//     taken between changes; a region with a backing file copies it for the child (the parent
//     may reuse its sectors, and the child's copies must not change);
//   - parent: the gates open again; the file copy, now the child's, is closed here;
//   - child: a new userfaultfd takes the old one's number (the inherited one is the parent's:
//     its calls would act on the parent's memory), the region and its probation stage are
//     registered with it, the clean pages are write-protected again (the kernel copied their
//     entries without the protection), the file copy becomes the region's file, and the
//     evictor and handler threads start.
// posix_spawn() and vfork() run no atfork handler: they cost nothing here.
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <system_error>
#include <vector>

#include "exit_watcher.h"
#include "region_core.h"

namespace zsm::region {
namespace {

std::mutex& list_mutex() {
  static std::mutex* m = new std::mutex;  // never destroyed: fork() may come at exit
  return *m;
}
std::vector<Region*>& regions() {
  static auto* list = new std::vector<Region*>;
  return *list;
}

void prepare() {
  list_mutex().lock();
  for (Region* r : regions()) r->fork_prepare();
}

void parent() {
  for (Region* r : regions()) r->fork_parent();
  list_mutex().unlock();
}

void child() {
  forget_handlers_in_child();
  watcher_forget_in_child();
  for (Region* r : regions()) r->fork_child();
  watcher_start_in_child();
  list_mutex().unlock();
}

[[noreturn]] void child_cannot_serve(const std::string& why) {
  std::fprintf(stderr, "zsm region: a child of fork() cannot serve its copy of the region: %s\n", why.c_str());
  std::abort();
}

}  // namespace

void register_for_fork(Region* r) {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(prepare, parent, child); });
  std::lock_guard lock(list_mutex());
  regions().push_back(r);
  watcher_region_made();
}

void unregister_for_fork(Region* r) {
  std::lock_guard lock(list_mutex());
  auto& list = regions();
  auto end = std::remove(list.begin(), list.end(), r);
  if (end != list.end()) watcher_region_gone();
  list.erase(end, list.end());
}

void ForkGate::forker_touched() {
  static const char line[] =
      "zsm region: the thread calling fork() touched evicted region memory after the region's fork() "
      "handler ran (a pthread_atfork prepare handler registered before the region?): it cannot be "
      "served then; stopping rather than wait for ever\n";
  write_to_program_stderr(line, sizeof line - 1);
  std::abort();
}

// The gate closed first; the file copied for the child (and what did not fit brought into the
// pool); then the locks the region takes outside the gate (the budget's retune, the backing
// file's space map), so that no child inherits one held.
void Region::fork_prepare() {
  gate_.close();
  copies_.prepare_thread();  // the copies brought into the pool may be decompressed here
  copies_.prepare_fork();
  pull_copies_the_child_lacks();
  budget_.lock_for_fork();
  copies_.lock_for_fork();
}

// The copies on file past what the child's copy of the file holds, brought into the pool (the
// gate is closed: no one holds a page's lock). A pool with no memory left for them is the
// process out of memory, as the kernel's fork() would be.
void Region::pull_copies_the_child_lacks() {
  std::vector<std::byte> page(kPageSize), file_buf(kPageSize);
  for (uint32_t p = pages_.next_used(0); p != kNoPage && p < npages_; p = pages_.next_used(p + 1)) {
    if (!copies_.child_lacks(pages_.peek(p), pages_.copy_word(p))) continue;
    PageLock l(pages_, p);
    if (copies_.child_lacks(l.state(), l.copy_word()) && !copies_.pull_into_pool(l, file_buf.data(), page.data())) {
      check(-ENOMEM, "bringing a copy on file into the pool for a child of fork()");
    }
  }
}

void Region::fork_parent() {
  copies_.after_fork_in_parent();
  copies_.unlock_after_fork();
  budget_.unlock_after_fork();
  gate_.open();
}

void Region::fork_child() {
  owner_ = getpid();
  forked_child_ = true;
  if (handlers_) handlers_->forget_in_child();
  evictor_->forget_in_child();
  signal_buffers_.reset_in_child();
  const int old = calls_.number();
  // The number takes the child's userfaultfd only while it still names the parent's: a
  // program that closed it may have reused it for a file of its own.
  const bool lost = calls_.lost() || !names_a_userfaultfd(old);
  reserve_.release();  // room for the child's userfaultfd, whatever the program left of its table
  UffdInfo info;
  std::string why;
  if (uffd_open(settings_.uffd, &info, &why) != 0) child_cannot_serve(why);
  if (!lost && info.fd != old) {
    if (dup3(info.fd, old, O_CLOEXEC) < 0) child_cannot_serve(std::string("dup3: ") + std::strerror(errno));
    close_fd(info.fd);
    info.fd = old;
  }
  reserve_.take();  // for this child's own children, as far as its table has room
  calls_ = PageCalls(info);
  if (uffd_register(info.fd, reinterpret_cast<void*>(base_), settings_.size, true, &why) != 0 ||
      (info.can_move &&
       uffd_register(info.fd, reinterpret_cast<void*>(probation_.base()), probation_.bytes(), false, &why) != 0) ||
      (handlers_ && handlers_->reregister(info.fd, &why) != 0)) {
    child_cannot_serve(why);
  }
  reprotect_clean_pages();
  copies_.after_fork_in_child();
  copies_.unlock_after_fork();
  budget_.unlock_after_fork();
  apply_fork_advice_in_child();
  gate_.reset_in_child();  // before the threads: while they start, this thread may serve faults
  start_threads();
}

// MADV_WIPEONFORK's pages read as zeros in the child, MADV_DONTFORK's are absent (discarded and
// inaccessible: a touch is SIGSEGV, as where the kernel maps nothing).
void Region::apply_fork_advice_in_child() {
  if (fork_advice_.empty()) return;
  ForkAdvice in_child;
  fork_advice_.each([&](uint32_t a, uint32_t b, uint8_t flags) {
    if ((flags & (ForkAdvice::kDontFork | ForkAdvice::kWipe)) != 0) {
      for (uint32_t p = pages_.next_used(a); p != kNoPage && p < b; p = pages_.next_used(p + 1)) {
        PageLock l(pages_, p);  // pages of chunks never used are empty: skipped, unread
        discard_page(l);
      }
    }
    if ((flags & ForkAdvice::kDontFork) != 0 && (flags & ForkAdvice::kAbsent) == 0) set_access(a, b, false);
    uint8_t kept = (flags & ForkAdvice::kDontFork) != 0 ? ForkAdvice::kAbsent : flags;
    in_child.set(a, b, kept, true);
  });
  fork_advice_ = in_child;
}

// The clean pages' write protection, which the child's page table lost: runs of them at once.
void Region::reprotect_clean_pages() {
  uint32_t run_start = kNoPage, run = 0;
  auto flush = [&] {
    if (run > 0) check(calls_.write_protect(addr(run_start), size_t{run} * kPageSize, true), "UFFDIO_WRITEPROTECT");
    run = 0;
  };
  for (uint32_t p = pages_.next_mapped(0, npages_); p != kNoPage; p = pages_.next_mapped(p + 1, npages_ - p - 1)) {
    if (p + 1 > npages_) break;
    if (pages_.peek(p).kind != Kind::clean) {
      flush();
      continue;
    }
    if (run > 0 && run_start + run == p) {
      ++run;
    } else {
      flush();
      run_start = p;
      run = 1;
    }
    if (p + 1 == npages_) break;
  }
  flush();
}

}  // namespace zsm::region
