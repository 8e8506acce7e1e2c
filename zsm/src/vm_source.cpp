// The default page source (design: vm_source.h).
#include "vm_source.h"

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
}  // namespace

VmSource* VmSource::create(size_t page_size, size_t reserve, size_t retain) {
  if (page_size < 4096 || (page_size & (page_size - 1)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  if (reserve == 0) reserve = kDefaultReserve;
  reserve = std::min(reserve, kMaxReserve);
  reserve = std::max((reserve + page_size - 1) / page_size * page_size, page_size);
  // Ask for less when the address space is limited (ulimit -v, strict overcommit).
  for (size_t want = reserve;; want /= 2) {
    size_t len = want + page_size;  // room to align the start to page_size
    void* map = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map != MAP_FAILED) {
      char* base = reinterpret_cast<char*>(
          (reinterpret_cast<uintptr_t>(map) + page_size - 1) & ~(uintptr_t{page_size} - 1));
      auto* vm = new (std::nothrow) VmSource(static_cast<char*>(map), len, base,
                                             want / page_size * page_size, page_size, retain);
      if (vm == nullptr) {
        munmap(map, len);
        errno = ENOMEM;
      }
      return vm;
    }
    if (want / 2 < std::max(kMinReserve, page_size)) break;
  }
  errno = ENOMEM;
  return nullptr;
}

VmSource::VmSource(char* map, size_t map_len, char* base, size_t size, size_t page_size,
                   size_t retain)
    : map_(map), map_len_(map_len), base_(base), size_(size), page_size_(page_size),
      retain_(retain) {}

VmSource::~VmSource() { munmap(map_, map_len_); }

// Makes the next kCommitStep of the range read-write, with room on both stacks for every
// page committed so far, so that free_page() never allocates.
bool VmSource::commit_more() {
  size_t step = std::min(std::max(kCommitStep, page_size_), size_ - committed_);
  if (step == 0) return false;
  size_t pages = (committed_ + step) / page_size_;
  try {
    resident_.reserve(pages);
    released_.reserve(pages);
  } catch (const std::bad_alloc&) {
    return false;
  }
  if (mprotect(base_ + committed_, step, PROT_READ | PROT_WRITE) != 0) return false;
  committed_ += step;
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
    if (bump_ + page_size_ > committed_ && !commit_more()) {
      errno = ENOMEM;
      return nullptr;
    }
    page = base_ + bump_;
    bump_ += page_size_;
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
  return bump_ / page_size_ - released_.size();
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
