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

// Room for one more page at bump_: more of the last reservation made read-write, or a new
// reservation when the last is used up.
bool VmSource::make_room() {
  if (committed_ == reservations_.back().size && !reserve_more()) return false;
  return commit_more();
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

// Makes the next kCommitStep of the last reservation read-write, with room on both stacks for
// every page committed so far, so that free_page() never allocates.
bool VmSource::commit_more() {
  const Reservation& last = reservations_.back();
  size_t step = std::min(std::max(kCommitStep, page_size_), last.size - committed_);
  size_t pages = committed_pages_ + step / page_size_;
  try {
    resident_.reserve(pages);
    released_.reserve(pages);
  } catch (const std::bad_alloc&) {
    return false;
  }
  if (mprotect(last.base + committed_, step, PROT_READ | PROT_WRITE) != 0) return false;
  committed_ += step;
  committed_pages_ = pages;
  return true;
}

void* VmSource::alloc_page() {
  MutexGuard guard(lock_);
  char* page = nullptr;
  if (!resident_.empty()) {
    page = resident_.back();
    resident_.pop_back();
  } else if (!released_.empty()) {
    page = released_.back();
    released_.pop_back();
  } else {
    if (bump_ + page_size_ > committed_ && !make_room()) {
      errno = ENOMEM;
      return nullptr;
    }
    page = reservations_.back().base + bump_;
    bump_ += page_size_;
    bumped_pages_++;
  }
  in_use_++;
  return page;
}

void VmSource::free_page(void* page) {
  MutexGuard guard(lock_);
  resident_.push_back(static_cast<char*>(page));  // capacity reserved in commit_more()
  in_use_--;
  if (resident_.size() > retain_) release_oldest();
}

// Gives the older half of the resident stack back to the OS, in address-sorted runs, so that
// a burst of frees costs a few madvise calls rather than one per page.
void VmSource::release_oldest() {
  size_t n = std::max<size_t>(resident_.size() / 2, resident_.size() - retain_);
  auto first = resident_.begin(), last = resident_.begin() + static_cast<ptrdiff_t>(n);
  std::sort(first, last);
  bool can_release = page_size_ >= os_page_size();
  for (auto run = first; run != last;) {
    auto end = run + 1;
    while (end != last && *end == *(end - 1) + page_size_) ++end;
    if (can_release)
      madvise(*run, static_cast<size_t>(end - run) * page_size_, MADV_DONTNEED);
    run = end;
  }
  released_.insert(released_.end(), first, last);
  resident_.erase(first, last);
}

size_t VmSource::pages_in_use() {
  MutexGuard guard(lock_);
  return in_use_;
}

size_t VmSource::pages_resident() {
  MutexGuard guard(lock_);
  return bumped_pages_ - released_.size();
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
