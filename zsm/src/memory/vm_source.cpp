// The default page source (design: vm_source.h).
#include "memory/vm_source.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>

namespace zsm {
inline namespace ZSM_VARIANT_NS {

namespace {
constexpr size_t kCommitStep = size_t{2} << 20;
constexpr size_t kMinReserve = size_t{64} << 20;

size_t os_page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

bool valid_page_size(size_t page_size) {
  return page_size >= 4096 && (page_size & (page_size - 1)) == 0;
}

size_t round_down(size_t bytes, size_t page_size) { return bytes / page_size * page_size; }
}  // namespace

VmSource* VmSource::create(size_t page_size, size_t reserve, size_t limit, size_t retain) {
  if (!valid_page_size(page_size) || (limit != 0 && limit < page_size)) {
    errno = EINVAL;
    return nullptr;
  }
  limit = round_down(limit == 0 ? kMaxLimit : std::min(limit, kMaxLimit), page_size);
  reserve = std::min(reserve == 0 ? kDefaultReserve : reserve, kMaxReserve);
  reserve = round_down(reserve + page_size - 1, page_size);
  auto* vm = new (std::nothrow) VmSource(page_size, reserve, limit, retain);
  if (vm == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  bool reserved;
  {
    MutexGuard guard(vm->lock_);
    reserved = vm->reserve_more();
  }
  if (!reserved) {
    delete vm;
    errno = ENOMEM;
    return nullptr;
  }
  return vm;
}

VmSource::~VmSource() {
  for (const Reservation& r : reservations_) munmap(r.map, r.map_len);
}

// Maps the next reservation: the unit, or what is left below the limit; halves of it down to
// kMinReserve when the OS refuses.
bool VmSource::reserve_more() {
  size_t want = std::min(reserve_, limit_ - reserved_);
  if (want == 0) return false;
  size_t smallest = std::min(want, std::max(kMinReserve, page_size_));
  for (; want >= smallest; want = round_down(want / 2, page_size_)) {
    if (map_reservation(want)) return true;
  }
  return false;
}

// Maps `bytes` (whole pages) PROT_NONE, page-aligned, as the new last reservation.
bool VmSource::map_reservation(size_t bytes) {
  size_t len = bytes + page_size_;  // room to align the start to page_size_
  void* map = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) return false;
  char* base = reinterpret_cast<char*>(
      (reinterpret_cast<uintptr_t>(map) + page_size_ - 1) & ~(uintptr_t{page_size_} - 1));
  try {
    reservations_.push_back({static_cast<char*>(map), len, base, bytes});
  } catch (const std::bad_alloc&) {
    munmap(map, len);
    return false;
  }
  reserved_ += bytes;
  committed_ = 0;
  bump_ = 0;
  return true;
}

// Makes the next kCommitStep of the last reservation read-write.
bool VmSource::commit_more() {
  const Reservation& last = reservations_.back();
  size_t step = std::min(std::max(kCommitStep, page_size_), last.size - committed_);
  if (mprotect(last.base + committed_, step, PROT_READ | PROT_WRITE) != 0) return false;
  committed_ += step;
  return true;
}

// `bytes` more at bump_ in the last reservation, made read-write; false when they do not fit.
bool VmSource::make_room(size_t bytes) {
  if (bump_ + bytes > reservations_.back().size) return false;
  while (bump_ + bytes > committed_)
    if (!commit_more()) return false;
  return true;
}

// Room in both stacks of length n for `more` runs besides those handed out already.
bool VmSource::room_for_runs(size_t n, size_t more) {
  RunStacks& r = runs_[n];
  size_t need = r.handed_out + more;
  if (r.resident.capacity() >= need && r.released.capacity() >= need) return true;
  size_t want = std::max(need, 2 * r.resident.capacity());
  try {
    r.resident.reserve(want);
    r.released.reserve(want);
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

// The pages left in the last reservation, too few for a run, become single free pages (never
// touched, so counted as released), so that moving on to a new reservation wastes none.
bool VmSource::hand_out_tail() {
  size_t tail = (reservations_.back().size - bump_) / page_size_;
  if (tail == 0) return true;
  if (!room_for_runs(1, tail) || !make_room(tail * page_size_)) return false;
  RunStacks& singles = runs_[1];
  for (size_t i = 0; i < tail; i++, bump_ += page_size_)
    singles.released.push_back(reservations_.back().base + bump_);
  singles.handed_out += tail;
  bumped_pages_ += tail;
  released_pages_ += tail;
  return true;
}

// A free run of n pages, backed ones first; nullptr when there is none.
char* VmSource::take_run(size_t n) {
  RunStacks& r = runs_[n];
  std::vector<char*>* from = !r.resident.empty() ? &r.resident : &r.released;
  if (from->empty()) return nullptr;
  char* run = from->back();
  from->pop_back();
  (from == &r.resident ? resident_pages_ : released_pages_) -= n;
  return run;
}

// A run of n pages never handed out, from the last reservation or a new one.
char* VmSource::new_run(size_t n) {
  const size_t bytes = n * page_size_;
  if (bump_ + bytes > reservations_.back().size) {
    if (bytes > reserve_ || !hand_out_tail() || !reserve_more()) return nullptr;
    if (n == 1 && !runs_[1].released.empty()) return take_run(1);  // the tail just handed out
  }
  if (!room_for_runs(n, 1) || !make_room(bytes)) return nullptr;
  char* run = reservations_.back().base + bump_;
  bump_ += bytes;
  bumped_pages_ += n;
  runs_[n].handed_out++;
  return run;
}

// A single page when no single page is free and no new one can be had: the first page of the
// shortest longer free run, whose rest goes back as a run one page shorter.
char* VmSource::page_of_longer_run() {
  for (size_t m = 2; m <= kMaxRun; m++) {
    if (runs_[m].resident.empty() && runs_[m].released.empty()) continue;
    if (!room_for_runs(m - 1, 1) || !room_for_runs(1, 1)) return nullptr;
    bool backed = !runs_[m].resident.empty();
    char* run = take_run(m);
    RunStacks& rest = runs_[m - 1];
    (backed ? rest.resident : rest.released).push_back(run + page_size_);
    (backed ? resident_pages_ : released_pages_) += m - 1;
    rest.handed_out++;
    runs_[1].handed_out++;
    return run;
  }
  return nullptr;
}

void* VmSource::alloc_page() {
  MutexGuard guard(lock_);
  char* page = take_run(1);
  if (page == nullptr) page = new_run(1);
  if (page == nullptr) page = page_of_longer_run();
  if (page == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  in_use_++;
  return page;
}

void* VmSource::alloc_run(size_t n) {
  if (n == 0 || n > kMaxRun) return nullptr;
  MutexGuard guard(lock_);
  char* run = take_run(n);
  if (run == nullptr) run = new_run(n);
  if (run != nullptr) in_use_ += n;
  return run;
}

void VmSource::free_page(void* page) { free_run(page, 1); }

void VmSource::free_run(void* first, size_t n) {
  MutexGuard guard(lock_);
  runs_[n].resident.push_back(static_cast<char*>(first));  // capacity: room_for_runs()
  resident_pages_ += n;
  in_use_ -= n;
  if (resident_pages_ > retain_) release_oldest();
}

// Gives the older half of each length's resident stack back to the OS, in address-sorted
// runs, so that a burst of frees costs a few madvise calls rather than one per page.
void VmSource::release_oldest() {
  bool can_release = page_size_ >= os_page_size();
  for (size_t n = 1; n <= kMaxRun; n++) {
    std::vector<char*>& resident = runs_[n].resident;
    size_t count = (resident.size() + 1) / 2;
    if (count == 0) continue;
    auto first = resident.begin(), last = resident.begin() + static_cast<ptrdiff_t>(count);
    std::sort(first, last);
    const size_t run_bytes = n * page_size_;
    for (auto run = first; run != last;) {
      auto end = run + 1;
      while (end != last && *end == *(end - 1) + run_bytes) ++end;
      if (can_release) madvise(*run, static_cast<size_t>(end - run) * run_bytes, MADV_DONTNEED);
      run = end;
    }
    runs_[n].released.insert(runs_[n].released.end(), first, last);  // capacity: room_for_runs()
    resident.erase(first, last);
    resident_pages_ -= count * n;
    released_pages_ += count * n;
  }
}

size_t VmSource::pages_in_use() {
  MutexGuard guard(lock_);
  return in_use_;
}

size_t VmSource::pages_resident() {
  MutexGuard guard(lock_);
  return bumped_pages_ - released_pages_;
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
