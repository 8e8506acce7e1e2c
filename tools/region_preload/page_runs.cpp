// PageRuns (page_runs.h): first fit over a sorted array of free runs. The array's worst case
// is one free run per two pages (free and used pages alternating), so it is reserved at that
// size and never grows; both tables are MAP_NORESERVE mappings, costing only what is touched.
#include "page_runs.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace zsm_preload {

namespace {

void* map_table(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

}  // namespace

PageRuns::~PageRuns() {
  if (free_ != nullptr) munmap(free_, capacity_ * sizeof(Run));
  if (length_at_ != nullptr) munmap(length_at_, pages_ * sizeof(uint32_t));
}

bool PageRuns::init(void* base, size_t pages, size_t page_size) {
  const auto b = reinterpret_cast<uintptr_t>(base);
  if (free_ != nullptr || pages == 0 || page_size == 0 || (page_size & (page_size - 1)) != 0 ||
      b % page_size != 0 || pages > UINT32_MAX) {
    errno = EINVAL;
    return false;
  }
  capacity_ = pages / 2 + 1;
  free_ = static_cast<Run*>(map_table(capacity_ * sizeof(Run)));
  length_at_ = static_cast<uint32_t*>(map_table(pages * sizeof(uint32_t)));
  if (free_ == nullptr || length_at_ == nullptr) return false;  // the destructor unmaps
  base_ = b;
  pages_ = pages;
  page_size_ = page_size;
  free_[0] = {0, pages};
  runs_ = 1;
  return true;
}

void* PageRuns::allocate(size_t pages, size_t align_pages) {
  if (pages == 0 || pages > pages_ || align_pages == 0 || align_pages > pages_) return nullptr;
  for (size_t i = 0; i < runs_; i++) {
    const Run run = free_[i];
    const size_t first = round_up(base_ / page_size_ + run.first, align_pages) - base_ / page_size_;
    if (first + pages > run.first + run.pages) continue;
    const Run before{run.first, first - run.first};
    const Run after{first + pages, run.first + run.pages - (first + pages)};
    erase_run(i);
    if (after.pages != 0) insert_run(i, after);
    if (before.pages != 0) insert_run(i, before);
    length_at_[first] = static_cast<uint32_t>(pages);
    return address(first);
  }
  return nullptr;
}

bool PageRuns::starts_allocation(const void* p) const {
  return contains(p) && (reinterpret_cast<uintptr_t>(p) - base_) % page_size_ == 0 &&
         length_at_[page_index(p)] != 0;
}

size_t PageRuns::pages_of(const void* p) const {
  return starts_allocation(p) ? length_at_[page_index(p)] : 0;
}

PageRuns::Run PageRuns::release(void* p) {
  if (!starts_allocation(p)) return {0, 0};
  const size_t first = page_index(p);
  const Run run{first, length_at_[first]};
  length_at_[first] = 0;
  insert_free(run);
  return run;
}

bool PageRuns::grow(void* p, size_t pages) {
  const size_t have = pages_of(p);
  if (have == 0 || pages < have || pages > pages_) return false;
  if (pages == have) return true;
  const size_t end = page_index(p) + have;
  for (size_t i = 0; i < runs_; i++) {
    if (free_[i].first != end) continue;
    const size_t more = pages - have;
    if (free_[i].pages < more) return false;
    free_[i].first += more;
    free_[i].pages -= more;
    if (free_[i].pages == 0) erase_run(i);
    length_at_[page_index(p)] = static_cast<uint32_t>(pages);
    return true;
  }
  return false;
}

PageRuns::Run PageRuns::shrink(void* p, size_t pages) {
  const size_t have = pages_of(p);
  if (have == 0 || pages == 0 || pages >= have) return {0, 0};
  const size_t first = page_index(p);
  length_at_[first] = static_cast<uint32_t>(pages);
  const Run tail{first + pages, have - pages};
  insert_free(tail);
  return tail;
}

void PageRuns::unmap(const void* p, size_t pages) {
  const size_t first = page_index(p);
  const size_t end = first + pages < pages_ ? first + pages : pages_;
  size_t start = first;  // the allocation that holds `first` may start before it
  while (start > 0 && length_at_[start] == 0) start--;
  for (size_t a = start; a < end;) {
    const size_t len = length_at_[a];
    if (len == 0 || a + len <= first) {
      a = len == 0 ? a + 1 : a + len;
      continue;
    }
    const size_t cut_from = a > first ? a : first;
    const size_t cut_to = a + len < end ? a + len : end;
    length_at_[a] = 0;
    if (cut_from > a) length_at_[a] = static_cast<uint32_t>(cut_from - a);
    if (cut_to < a + len) length_at_[cut_to] = static_cast<uint32_t>(a + len - cut_to);
    insert_free({cut_from, cut_to - cut_from});
    a += len;
  }
}

bool PageRuns::mapped(const void* p, size_t pages) const {
  const size_t first = page_index(p);
  if (first + pages > pages_) return false;
  size_t start = first;  // the allocation that holds `first` may start before it
  while (start > 0 && length_at_[start] == 0) start--;
  size_t covered = first;  // pages before it are known to be allocated
  for (size_t a = start; a < first + pages && covered < first + pages;) {
    const size_t len = length_at_[a];
    if (len == 0) {
      if (a >= covered) return false;  // a page past every allocation seen: free
      ++a;
      continue;
    }
    if (a > covered) return false;
    covered = std::max(covered, a + len);
    a += len;
  }
  return covered >= first + pages;
}

bool PageRuns::take_at(void* p, size_t pages) {
  const size_t first = page_index(p);
  if (!contains(p) || pages == 0 || first + pages > pages_) return false;
  unmap(p, pages);
  for (size_t i = 0; i < runs_; i++) {  // the free run holding [first, first + pages), now whole
    const Run run = free_[i];
    if (run.first > first || run.first + run.pages < first + pages) continue;
    const Run before{run.first, first - run.first};
    const Run after{first + pages, run.first + run.pages - (first + pages)};
    erase_run(i);
    if (after.pages != 0) insert_run(i, after);
    if (before.pages != 0) insert_run(i, before);
    length_at_[first] = static_cast<uint32_t>(pages);
    return true;
  }
  return false;
}

size_t PageRuns::free_pages() const {
  size_t n = 0;
  for (size_t i = 0; i < runs_; i++) n += free_[i].pages;
  return n;
}

void PageRuns::insert_free(Run run) {
  size_t at = 0;
  while (at < runs_ && free_[at].first < run.first) at++;
  const bool joins_before = at > 0 && free_[at - 1].first + free_[at - 1].pages == run.first;
  const bool joins_after = at < runs_ && run.first + run.pages == free_[at].first;
  if (joins_before && joins_after) {
    free_[at - 1].pages += run.pages + free_[at].pages;
    erase_run(at);
  } else if (joins_before) {
    free_[at - 1].pages += run.pages;
  } else if (joins_after) {
    free_[at] = {run.first, run.pages + free_[at].pages};
  } else {
    insert_run(at, run);
  }
}

void PageRuns::erase_run(size_t at) {
  std::memmove(&free_[at], &free_[at + 1], (runs_ - at - 1) * sizeof(Run));
  runs_--;
}

void PageRuns::insert_run(size_t at, Run run) {
  std::memmove(&free_[at + 1], &free_[at], (runs_ - at) * sizeof(Run));
  free_[at] = run;
  runs_++;
}

}  // namespace zsm_preload
