// The region's life (create, destroy) and its range calls (region_core.h). A range call locks
// each page it changes, in ascending order, inside the fork gate with every signal blocked.
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "region_core.h"

namespace zsm::region {
namespace {

// Buffers for a range call's installs: fault_around pages and one for file reads.
struct OwnBuffers {
  explicit OwnBuffers(unsigned fault_around) : pages(std::max(fault_around, 1u) * kPageSize), file(kPageSize) {}
  ServeBuffers view() { return {pages.data(), file.data()}; }
  std::vector<std::byte> pages, file;
};

}  // namespace

Region::RangeCall::RangeCall(Region& r) : r_(r) {
  r_.copies_.prepare_thread();  // before any page's lock (copy_store.h)
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &saved_);
  r_.gate_.enter();
}

Region::RangeCall::~RangeCall() {
  r_.gate_.leave();
  pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
}

void Region::RangeCall::wait_for_room(uint32_t seen) {
  r_.gate_.leave();
  r_.evictor_wake_.notify();
  r_.budget_.wait_for_room(seen);
  r_.gate_.enter();
}

Region::Region(const Settings& s) : settings_(s) {}

std::unique_ptr<Region> Region::create(const Settings& s, int* err, std::string* why) {
  std::unique_ptr<Region> r(new Region(s));
  *err = r->init(why);
  if (*err != 0) return nullptr;
  return r;
}

// What follows from the budget in pages outside it: probation's size, and the refault window
// (half the budget: the policy simulator's best of budget/8, /4 and /2, docs/region.md "Clean
// pages").
void Region::follow_budget(uint32_t budget_pages) {
  probation_.set_target(settings_.probation_divisor == 0 ? 0 : budget_pages / settings_.probation_divisor);
  probation_.set_refault_window(budget_pages / 2);
}

int Region::init(std::string* why) {
  owner_ = getpid();
  npages_ = static_cast<uint32_t>(settings_.size / kPageSize);
  if (!pages_.allocate(npages_)) {
    *why = "mmap of the region's page table failed";
    return -errno;
  }
  CopyStoreOptions co{settings_.codec, settings_.pool, settings_.backing_file, settings_.backing_file_capacity};
  if (int rc = copies_.init(co, why); rc != 0) return rc;
  if (int rc = check_pool_budget(why); rc != 0) return rc;
  // Room for probation's pages and the holes between them (a span of victims passes over
  // unmapped pages, and their slots stay holes until the tail passes): virtual, a slot costs
  // memory only while a page is in it.
  uint32_t most = settings_.probation_divisor == 0 ? 0 : npages_ / settings_.probation_divisor;
  uint32_t capacity = 8 * std::max(most, 64u) + 1024;
  if (int rc = probation_.init(capacity, why); rc != 0) return rc;
  budget_.set_follow(settings_.fault_around, [this](uint32_t pages) { follow_budget(pages); });
  budget_.apply(settings_.budget_pages);
  if (settings_.budget_all) {
    budget_.count_everything(uint64_t{settings_.budget_pages} * kPageSize);
    bookkeeping_.store(bookkeeping_bytes(), std::memory_order_relaxed);
    budget_.retune(others_bytes());
  }
  void* m = map_unlocked(settings_.size);
  if (m == nullptr) {
    *why = "mmap of the region failed";
    return -errno;
  }
  base_ = reinterpret_cast<uintptr_t>(m);
  if (int rc = open_userfaultfd(why); rc != 0) return rc;
  if (!reserve_.take()) {
    *why = "no descriptor left to reserve for a child of fork(): the process or the system is out of file descriptors";
    return -errno;
  }
  const bool self_serve = settings_.uffd.sigbus;
  server_ = std::make_unique<FaultServer>(parts_, base_, settings_.fault_around, self_serve);
  evictor_ = std::make_unique<Evictor>(parts_, base_, npages_);
  evictor_->set_range(base_, settings_.size);
  evictor_->set_before_batch([this] { before_batch(); });
  evictor_->set_cold_age(settings_.cold_age_ms);
  evictor_->set_stall_target(settings_.stall_target_ppm);
  evictor_->set_report(settings_.report_every_ms, settings_.report);
  if (settings_.cold_age_ms != 0) probation_.keep_fill_times();
  if (budget_.counts_everything()) evictor_->set_pool_grew([this] { budget_.retune(others_bytes()); });
  if (self_serve) {
    if (sigbus_blocked_here()) {
      *why = "the SIGBUS mode: the calling thread blocks SIGBUS, and the kernel kills a thread that "
             "blocks it on its first fault (unblock SIGBUS in every thread that touches the region)";
      return -EINVAL;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (!signal_buffers_.init(static_cast<size_t>(std::max(16L, 2 * cpus)), std::max(settings_.fault_around, 1u))) {
      *why = "mmap of the SIGBUS handler's buffers failed";
      return -errno;
    }
  } else {
    Handlers::Config hc{base_, settings_.size, settings_.fault_around, settings_.one_handler, settings_.spin_us};
    handlers_ = std::make_unique<Handlers>(*server_, calls_, hc);
    if (int rc = handlers_->init(calls_.number(), why); rc != 0) return rc;
  }
  start_threads();
  if (self_serve && !register_self_serving(this, why)) return -errno;
  register_for_fork(this);
  return 0;
}

// A pool budget smaller than one zspage of the largest class a copy may need holds nothing
// that does not compress: every such page would stay resident past the budget.
int Region::check_pool_budget(std::string* why) const {
  uint64_t budget = copies_.pool_budget_bytes();
  size_t zspage = copies_.largest_zspage_bytes();
  if (budget == 0 || budget >= zspage) return 0;
  *why = "compressed_budget_bytes (" + std::to_string(budget) + ") is below one zspage of the pool's "
         "largest class (" + std::to_string(zspage) + " bytes with these pool pages): the pool could "
         "not hold a page that does not compress";
  return -EINVAL;
}

// The userfaultfd, the region registered with it, and the probation stage too where pages
// move (UFFDIO_MOVE moves only between ranges of one userfaultfd).
int Region::open_userfaultfd(std::string* why) {
  UffdInfo info;
  if (int rc = uffd_open(settings_.uffd, &info, why); rc != 0) return rc;
  calls_ = PageCalls(info);
  if (int rc = uffd_register(info.fd, reinterpret_cast<void*>(base_), settings_.size, true, why); rc != 0) return rc;
  if (info.can_move) {
    int rc = uffd_register(info.fd, reinterpret_cast<void*>(probation_.base()), probation_.bytes(), false, why);
    if (rc != 0) return rc;
  }
  return 0;
}

// The threads, started and waited for. A new thread's first steps in glibc (start_thread's
// __ctype_init) read the locale's LC_CTYPE data: where a program keeps its heap in the region
// (the preload library) and loaded a locale, those bytes are region memory, and in a child of
// fork() no handler runs yet to serve them. So, until every thread has started, this thread
// serves the faults the userfaultfd holds itself.
void Region::start_threads() {
  copies_.prepare_thread();  // this thread may serve faults while the others start
  evictor_->start([this](pid_t tid) { keeper_start(tid); });
  auto all_running = [this] { return evictor_->tid() != 0 && (!handlers_ || handlers_->running()); };
  while (!all_running()) {
    if (!handlers_ || !handlers_->serve_one(1)) sched_yield();
  }
  if (handlers_) handlers_->block_in_read();
}

// On the evictor's thread, before anything else: the keeper's descriptor table, and the
// handler threads started from it, so that they share it (descriptors.h).
void Region::keeper_start(pid_t tid) {
  bool own_table = make_files_private({calls_.number(), copies_.file_descriptor()});
  if (own_table) mark_private_files();
  calls_.set_keeper(tid);
  copies_.keep_file_descriptor(tid);
  if (handlers_) handlers_->start(own_table);
}

int Region::descriptors(int* fds, int n) const {
  int held = 0;
  for (int fd : {calls_.lost() ? -1 : calls_.number(), copies_.file_descriptor()}) {
    if (fd < 0) continue;
    if (held < n) fds[held] = fd;
    ++held;
  }
  return held + reserve_.numbers(fds + std::min(held, n), std::max(n - held, 0));
}

// Before each evictor batch: the pool compacted where frees left it holey, the bookkeeping
// counted again, the peaks of the pool and of everything, and the budget retuned.
void Region::before_batch() {
  copies_.compact_if_fragmented();
  uint64_t pool = copies_.pool_bytes();
  bookkeeping_.store(bookkeeping_bytes(), std::memory_order_relaxed);
  raise_to(counters_.peak_pool, pool);
  const uint64_t others = pool + bookkeeping_.load(std::memory_order_relaxed);
  raise_to(counters_.peak_total, budget_.used() * kPageSize + others);
  budget_.retune(others);
}

size_t Region::bookkeeping_bytes() const {
  return copies_.bookkeeping_bytes() + (get(counters_.resident) + get(counters_.probation) + get(counters_.stored)) * 17;
}

// What the region costs besides its decompressed pages: the pool, and the bookkeeping as the
// last batch counted it (ZSM_REGION_BUDGET_ALL's retune, budget.h).
uint64_t Region::others_bytes() const {
  return copies_.pool_bytes() + bookkeeping_.load(std::memory_order_relaxed);
}

// Debug builds, at teardown (no thread left to change a page): the counters say what the page
// table says, the mapped bits agree with the kinds, and the budget's pages in use are the
// pages mapped, in probation, and in stale slots not yet dropped. A difference is a bug in a
// writer of those fields: stop. (A child of fork() may count a pin more than its table shows:
// a pin of one page is counted before its page says so, outside the fork gate.)
void Region::check_counts() {
#ifndef NDEBUG
  uint64_t mapped = 0, parked = 0, pinned = 0, copies = 0, clean = 0;
  for (uint32_t p = pages_.next_used(0); p != kNoPage && p < npages_; p = pages_.next_used(p + 1)) {
    PageState s = pages_.peek(p);
    if (s.mapped() != pages_.is_mapped(p)) {
      std::fprintf(stderr, "zsm region: page %u's mapped bit disagrees with its kind %d\n", p, int(s.kind));
      std::abort();
    }
    mapped += s.mapped();
    parked += s.kind == Kind::probation;
    pinned += s.pins > 0;
    copies += s.has_copy();
    clean += s.kind == Kind::clean;
  }
  const struct {
    const char* what;
    uint64_t table, counted;
    bool may_count_more;
  } counts[] = {{"resident", mapped, get(counters_.resident), false},
                {"probation", parked, get(counters_.probation), false},
                {"pinned", pinned, get(counters_.pinned), forked_child_},
                {"stored", copies, get(counters_.stored), false},
                {"clean", clean, get(counters_.clean), false},
                {"budget used", mapped + parked + probation_.stale_slots(), budget_.used(), false}};
  for (const auto& c : counts) {
    if (c.table != c.counted && !(c.may_count_more && c.counted > c.table)) {
      std::fprintf(stderr, "zsm region: %s pages: the page table has %llu, the counter %llu\n", c.what,
                   static_cast<unsigned long long>(c.table), static_cast<unsigned long long>(c.counted));
      std::abort();
    }
  }
#endif
}

Region::~Region() {
  if (getpid() != owner_) return;  // a child made without fork()'s handlers: nothing here is its own
  unregister_for_fork(this);
  if (settings_.uffd.sigbus) unregister_self_serving(this);
  if (handlers_) handlers_->stop();
  if (evictor_) evictor_->stop();
  if (npages_ != 0 && server_) check_counts();
  if (calls_.number() >= 0 && !calls_.lost() && names_a_userfaultfd(calls_.number())) {
    close_fd(calls_.number());  // the range is unregistered
  }
  if (base_ != 0) unmap(reinterpret_cast<void*>(base_), settings_.size);
}

void Region::serve_own_fault(uintptr_t a, bool write) {
  auto p = static_cast<uint32_t>((a - base_) / kPageSize);
  size_t i = signal_buffers_.acquire();
  FaultServer::Fault f{p, write, false, static_cast<uint64_t>(pthread_self())};
  server_->serve(f, signal_buffers_.at(i), true);
  signal_buffers_.release(i);
}

int Region::prefetch(uint32_t first, uint32_t count) {
  OwnBuffers own(settings_.fault_around);
  ServeBuffers b = own.view();
  {
    RangeCall call(*this);
    for (uint32_t p = first; p < first + count && budget_.used() < budget_.limit(); ++p) {
      PageLock l(pages_, p);
      if ((l.state().kind == Kind::probation || l.state().kind == Kind::stored) && budget_.try_take(1)) {
        server_->install(l, false, b);
      }
    }
  }
  server_->poke_evictor();
  return 0;
}

int Region::evict(uint32_t first, uint32_t count) {
  std::vector<std::byte> work(Evictor::work_bytes(copies_));
  RangeCall call(*this);
  for (uint32_t p = first; p < first + count; ++p) {
    PageLock l(pages_, p);
    if (l.state().kind == Kind::probation) {
      evictor_->retire_now(l, work.data());
    } else if (l.state().mapped() && l.state().pins == 0) {
      evictor_->evict_now(l, work.data());
    }
  }
  return 0;
}

// A page's contents dropped: it reads as zeros. A pinned page is mapped and writable, and
// stays: it is zeroed in place.
void Region::discard_page(PageLock& l) {
  if (l.state().pins > 0) {
    std::memset(reinterpret_cast<void*>(addr(l.page())), 0, kPageSize);
    return;
  }
  if (l.state().mapped()) check(drop_pages(addr(l.page()), kPageSize), "madvise(MADV_DONTNEED)");
  moves_.forget(l, true);
}

int Region::discard(uint32_t first, uint32_t count) {
  RangeCall call(*this);
  for (uint32_t p = first; p < first + count; ++p) {
    if (!pages_.chunk_used(p)) {  // empty pages, and their table never read
      p = std::min(first + count, (p / PageTable::kChunkPages + 1) * PageTable::kChunkPages) - 1;
      continue;
    }
    PageLock l(pages_, p);
    discard_page(l);
  }
  return 0;
}

// The pages that may be pinned at once: half the budget, so that faults always find room;
// a single page (a futex word for the length of a wait, which must not fail) up to all but one.
uint64_t Region::pin_limit(uint32_t count) const {
  uint64_t limit = budget_.limit();
  return count == 1 ? std::max<uint64_t>(limit, 1) - 1 : limit / 2;
}

int Region::pin(uint32_t first, uint32_t count) {
  if (count == 1) {  // a futex word, a small struct: a page in use, pinned in one compare-and-swap
    if (get(counters_.pinned) + 1 <= pin_limit(1) && moves_.pin_unlocked(pages_, first, +1) >= 0) return 0;
  }
  uint64_t newly = 0;
  for (uint32_t p = first; p < first + count; ++p) {
    PageState s = pages_.peek(p);
    if (s.pins == kMaxPins) return -EOVERFLOW;
    if (s.pins == 0) ++newly;
  }
  if (get(counters_.pinned) + newly > pin_limit(count)) return -ENOMEM;
  OwnBuffers own(settings_.fault_around);
  ServeBuffers b = own.view();
  {
    RangeCall call(*this);
    for (uint32_t p = first; p < first + count; ++p) {
      uint32_t seen = budget_.room_seq();
      PageLock l(pages_, p);
      if (l.state().pins == kMaxPins) return -EOVERFLOW;
      if (!l.state().mapped() && !budget_.try_take(1)) {  // a pinned page is resident within the budget too
        l.release();
        call.wait_for_room(seen);
        --p;
        continue;
      }
      // Writable: a syscall may write it, and must meet no fault it could not have served.
      server_->install(l, true, b);
      moves_.pin(l);
    }
  }
  server_->poke_evictor();
  return 0;
}

int Region::unpin(uint32_t first, uint32_t count) {
  if (count == 1) {
    if (moves_.pin_unlocked(pages_, first, -1) >= 1) return 0;
  }
  for (uint32_t p = first; p < first + count; ++p) {
    if (pages_.peek(p).pins == 0) return -EINVAL;
  }
  RangeCall call(*this);
  for (uint32_t p = first; p < first + count; ++p) {
    PageLock l(pages_, p);
    moves_.unpin(l);
  }
  return 0;
}

constexpr int kMadvSoftOffline = 101;  // <linux/mman.h>'s, which glibc's <sys/mman.h> lacks

// madvise(2)'s advice, as the kernel serves it on private anonymous memory (region.h).
int Region::advise(uint32_t first, uint32_t count, int advice) {
  switch (advice) {
    case MADV_NORMAL: case MADV_RANDOM: case MADV_SEQUENTIAL: case MADV_HUGEPAGE: case MADV_NOHUGEPAGE:
    case MADV_DONTDUMP: case MADV_DODUMP: case MADV_MERGEABLE: case MADV_UNMERGEABLE: case MADV_COLD:
      return 0;  // hints about what the kernel does with pages the region keeps: nothing to change
    case MADV_WILLNEED: case MADV_POPULATE_READ: case MADV_POPULATE_WRITE: return prefetch(first, count);
    case MADV_PAGEOUT: return evict(first, count);
    case MADV_DONTNEED: case MADV_DONTNEED_LOCKED: case MADV_FREE: return discard(first, count);
    case MADV_WIPEONFORK: set_fork_advice(first, count, ForkAdvice::kWipe, true); return 0;
    case MADV_KEEPONFORK: set_fork_advice(first, count, ForkAdvice::kWipe, false); return 0;
    case MADV_DONTFORK: set_fork_advice(first, count, ForkAdvice::kDontFork, true); return 0;
    case MADV_DOFORK: set_fork_advice(first, count, ForkAdvice::kDontFork, false); return 0;
    case MADV_HWPOISON: case kMadvSoftOffline: return -EPERM;
    default: return -EINVAL;  // MADV_REMOVE (shared memory only), and advice this kernel-less memory lacks
  }
}

void Region::set_fork_advice(uint32_t first, uint32_t count, uint8_t flag, bool on) {
  RangeCall call(*this);
  SpinGuard g(advice_lock_);
  fork_advice_.set(first, first + count, flag, on);
}

// As unmapped and mapped again: zeros, no advice, and accessible again where a DONTFORK range
// was absent from this child.
int Region::reset(uint32_t first, uint32_t count) {
  discard(first, count);
  RangeCall call(*this);
  SpinGuard g(advice_lock_);
  fork_advice_.each([&](uint32_t a, uint32_t b, uint8_t flags) {
    if ((flags & ForkAdvice::kAbsent) != 0 && a < first + count && b > first) {
      set_access(std::max(a, first), std::min(b, first + count), true);
    }
  });
  fork_advice_.set(first, first + count, ForkAdvice::kWipe | ForkAdvice::kDontFork | ForkAdvice::kAbsent, false);
  return 0;
}

void Region::set_access(uint32_t first, uint32_t end, bool accessible) {
  check(protect(reinterpret_cast<void*>(addr(first)), size_t{end - first} * kPageSize,
                accessible ? PROT_READ | PROT_WRITE : PROT_NONE),
        "mprotect of a range absent from a child of fork()");
}

int Region::set_budget(uint32_t pages) {
  if (get(counters_.pinned) > pages / 2) return -EBUSY;
  budget_.set(pages, others_bytes());
  evictor_wake_.notify();
  evictor_->wait_until_within_budget();
  return 0;
}

void Region::stats(struct zsm_region_stats* out) const {
  *out = {};
  out->evictor_idle = evictor_->idle() ? 1 : 0;  // first: the counters below include its batches
  out->size_bytes = settings_.size;
  out->budget_bytes = budget_.counts_everything() ? budget_.total() : uint64_t{budget_.limit()} * kPageSize;
  out->resident_bytes = get(counters_.resident) * kPageSize;
  out->same_pages = get(counters_.same);  // the kinds before the whole, as a store counts them
  out->huge_pages = get(counters_.whole);
  out->stored_pages = get(counters_.stored);
  out->orig_data_size = out->stored_pages * kPageSize;
  out->compr_data_size = get(counters_.compr_bytes);
  out->mem_used_total = copies_.pool_bytes();
  out->faults = get(counters_.faults);
  out->zero_faults = get(counters_.zero_faults);
  out->fault_around_pages = get(counters_.fault_around);
  out->evictions = get(counters_.evictions);
  out->clean_evictions = get(counters_.clean_evictions);
  out->refaults = get(counters_.refaults);
  out->wp_faults = get(counters_.wp_faults);
  out->pinned_pages = get(counters_.pinned);
  out->user_mode_only = calls_.info().user_mode_only ? 1 : 0;
  out->probation_bytes = get(counters_.probation) * kPageSize;
  out->probation_faults = get(counters_.probation_faults);
  out->written_back = get(counters_.written_back);
  out->read_back = get(counters_.read_back);
  out->bd_bytes_on_file = get(counters_.file_bytes);
  out->resident_limit_bytes = uint64_t{budget_.limit()} * kPageSize;
  out->hard_limit_bytes = (uint64_t{budget_.limit()} + budget_.slack()) * kPageSize;
  out->bookkeeping_bytes = bookkeeping_bytes();
  out->peak_decompressed_bytes = get(counters_.peak_used);
  out->peak_pool_bytes = get(counters_.peak_pool);
  out->peak_total_bytes = get(counters_.peak_total);
  out->io_pinned_skips = get(counters_.io_pinned);
  out->budget_waits = get(counters_.budget_waits);
  out->over_budget_pages = get(counters_.over_budget);
  out->evictor_runs = get(counters_.evictor_runs);
  out->clock_sweep_ns = get(counters_.sweep_ns);
  out->pages_move = calls_.can_move() ? 1 : 0;
  out->aged_pages = get(counters_.aged);
  out->cold_evictions = get(counters_.cold_evictions);
  out->aging_turn_ms = get(counters_.aging_turn_ms);
  out->stall_ns = get(counters_.stall_ns);
  out->promotion_stall_ns = get(counters_.promotion_stall_ns);
  out->cold_age_ms = get(counters_.cold_age_ms);
  out->saved_byte_seconds = get(counters_.saved_kib_ms) / 1000 * 1024;
  out->held_byte_seconds = get(counters_.held_kib_ms) / 1000 * 1024;
  out->clean_pages = get(counters_.clean);
  out->kept_incompressible = get(counters_.kept_incompressible);
}

}  // namespace zsm::region
