// zsm_region_page_calls: what the page-table calls the region makes cost on this machine, so
// that a choice between them (docs/region.md, "Moving pages") rests on this CPU's numbers.
// Two ways to install a run of decompressed pages write-protected (clean), as fault-around
// does: UFFDIO_COPY from a buffer, or UFFDIO_MOVE of recycled pages (already written, as
// decompression into them would leave them) followed by UFFDIO_WRITEPROTECT, since a moved
// page arrives writable. Two ways to take a run out, as the evictor does: UFFDIO_MOVE into
// a staging area, or UFFDIO_WRITEPROTECT + a copy + MADV_DONTNEED. Runs of 1, 16 and 64
// pages; each alone in the process and with a second thread spinning on another CPU (a
// range's TLB flush then interrupts it). The region's own wrappers (compress/region/uffd.h)
// make the calls; p50 of 2,000 tries each.
//   zsm_region_page_calls
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "uffd.h"

namespace {

using zsm::region::kPageSize;
using Clock = std::chrono::steady_clock;
constexpr int kTries = 2000;
constexpr size_t kMostPages = 64;

[[noreturn]] void fail(const char* what, int rc) {
  std::fprintf(stderr, "zsm_region_page_calls: %s: %s\n", what, std::strerror(-rc));
  std::exit(1);
}
void check(int rc, const char* what) {
  if (rc != 0) fail(what, rc);
}

void pin_to(unsigned cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// A registered area of `pages` pages, as the region and its staging area are.
uintptr_t registered_area(int fd, size_t pages) {
  void* p = zsm::region::map_unlocked(pages * kPageSize);
  if (p == nullptr) fail("mmap", -errno);
  std::string why;
  if (zsm::region::uffd_register(fd, p, pages * kPageSize, true, &why) != 0) {
    std::fprintf(stderr, "zsm_region_page_calls: %s\n", why.c_str());
    std::exit(1);
  }
  return reinterpret_cast<uintptr_t>(p);
}

struct Costs {
  double copy_in, move_in, move_out, copy_out;  // p50 us for the run
};

double p50(std::vector<double>& us) {
  std::nth_element(us.begin(), us.begin() + static_cast<long>(us.size() / 2), us.end());
  return us[us.size() / 2];
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

Costs measure(const zsm::region::UffdInfo& uffd, size_t pages) {
  const int fd = uffd.fd;
  const size_t len = pages * kPageSize;
  const uintptr_t region = registered_area(fd, kMostPages);
  const uintptr_t stock = registered_area(fd, kMostPages);
  std::vector<std::byte> buffer(len + kPageSize);
  std::byte* bytes = buffer.data() + (kPageSize - reinterpret_cast<uintptr_t>(buffer.data()) % kPageSize);
  std::vector<double> copy_in, move_in, move_out, copy_out;
  check(zsm::region::uffd_copy(fd, stock, bytes, len, false, nullptr), "filling the stock");
  for (int i = 0; i < kTries; ++i) {
    std::memset(bytes, i, len);
    auto t0 = Clock::now();
    check(zsm::region::uffd_copy(fd, region, bytes, len, true, nullptr), "UFFDIO_COPY");
    copy_in.push_back(since(t0));
    t0 = Clock::now();
    check(zsm::region::uffd_write_protect(fd, region, len, true), "UFFDIO_WRITEPROTECT");
    std::memcpy(bytes, reinterpret_cast<void*>(region), len);
    check(zsm::region::drop_pages(region, len), "MADV_DONTNEED");
    copy_out.push_back(since(t0));
    if (!uffd.can_move) continue;
    std::memset(reinterpret_cast<void*>(stock), i, len);
    t0 = Clock::now();
    check(zsm::region::uffd_move(fd, region, stock, len, true, false, nullptr), "UFFDIO_MOVE in");
    check(zsm::region::uffd_write_protect(fd, region, len, true), "UFFDIO_WRITEPROTECT");
    move_in.push_back(since(t0));
    check(zsm::region::uffd_write_protect(fd, region, len, false), "UFFDIO_WRITEPROTECT (off)");
    t0 = Clock::now();
    check(zsm::region::uffd_move(fd, stock, region, len, true, false, nullptr), "UFFDIO_MOVE out");
    move_out.push_back(since(t0));
  }
  zsm::region::unmap(reinterpret_cast<void*>(region), kMostPages * kPageSize);
  zsm::region::unmap(reinterpret_cast<void*>(stock), kMostPages * kPageSize);
  return {p50(copy_in), uffd.can_move ? p50(move_in) : 0, uffd.can_move ? p50(move_out) : 0, p50(copy_out)};
}

void print_row(size_t pages, bool other_cpu, const Costs& c, bool can_move) {
  auto cell = [&](double us, bool available) {
    char s[48];
    if (!available) return std::string("-");
    std::snprintf(s, sizeof s, "%.2f (%.2f)", us, us / static_cast<double>(pages));
    return std::string(s);
  };
  std::printf("| %zu | %s | %s | %s | %s | %s |\n", pages, other_cpu ? "yes" : "no",
              cell(c.copy_in, true).c_str(), cell(c.move_in, can_move).c_str(),
              cell(c.copy_out, true).c_str(), cell(c.move_out, can_move).c_str());
}

}  // namespace

int main() {
  zsm::region::UffdInfo uffd;
  std::string why;
  if (int rc = zsm::region::uffd_open({}, &uffd, &why); rc != 0) {
    std::fprintf(stderr, "zsm_region_page_calls: %s\n", why.c_str());
    return 1;
  }
  const unsigned cpus = std::thread::hardware_concurrency();
  pin_to(0);
  std::printf("# p50 us of a run (us a page); install = written pages mapped clean, evict = mapped pages taken out\n");
  std::printf("| pages | a thread on another CPU | install: UFFDIO_COPY | install: UFFDIO_MOVE + WRITEPROTECT "
              "| evict: WRITEPROTECT + copy + MADV_DONTNEED | evict: UFFDIO_MOVE |\n|---|---|---|---|---|---|\n");
  for (bool other_cpu : {false, true}) {
    if (other_cpu && cpus < 2) break;
    std::atomic<bool> stop{false};
    std::thread spinner;
    if (other_cpu) {
      spinner = std::thread([&] {
        pin_to(1);
        while (!stop.load(std::memory_order_relaxed)) {
        }
      });
    }
    for (size_t pages : {size_t{1}, size_t{16}, kMostPages}) print_row(pages, other_cpu, measure(uffd, pages), uffd.can_move);
    stop = true;
    if (spinner.joinable()) spinner.join();
  }
  if (!uffd.can_move) std::printf("(this kernel has no UFFDIO_MOVE: Linux 6.8+)\n");
  zsm::region::close_fd(uffd.fd);
  return 0;
}
