// The handler threads (handlers.h).
#include "handlers.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "descriptors.h"

namespace zsm::region {
namespace {

constexpr size_t kMaxHandlers = 8;

void block_all_signals() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

// A spin-wait hint to the CPU (x86 pause, arm64 yield), nothing elsewhere.
void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

Handlers::~Handlers() {
  stop();
  if (doorbell_ != 0) unmap(reinterpret_cast<void*>(doorbell_), kPageSize);
}

int Handlers::init(int uffd, std::string* why) {
  void* m = map_unlocked(kPageSize);
  if (m == nullptr) {
    *why = "mmap of the handlers' doorbell failed";
    return -errno;
  }
  doorbell_ = reinterpret_cast<uintptr_t>(m);
  return uffd_register(uffd, m, kPageSize, false, why);
}

int Handlers::reregister(int uffd, std::string* why) {
  drop_pages(doorbell_, kPageSize);
  return uffd_register(uffd, reinterpret_cast<void*>(doorbell_), kPageSize, false, why);
}

// The CPUs the process may run on, at most kMaxHandlers of them; none: one unpinned handler.
std::vector<int> Handlers::cpus() const {
  std::vector<int> cpus;
  cpu_set_t allowed;
  if (c_.one_handler || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < kMaxHandlers; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  if (cpus.size() < 2) cpus.clear();
  return cpus;
}

void Handlers::start(bool own_table) {
  stopping_.store(false);
  reads_block_.store(false);
  running_.store(0);
  started_.store(0);
  std::vector<int> pinned = cpus();
  auto spawn = [this](std::function<void()> body) {
    started_.fetch_add(1);
    threads_.push_back(std::make_unique<RegionThread>());
    if (!threads_.back()->start(std::move(body))) check(-errno, "starting a handler thread");
  };
  if (pinned.empty()) {
    spawn([this, own_table] { main(c_.spin_us > 0, own_table); });
    return;
  }
  for (int cpu : pinned) {
    spawn([this, cpu, own_table] {
      cpu_set_t only;
      CPU_ZERO(&only);
      CPU_SET(cpu, &only);
      sched_setaffinity(0, sizeof only, &only);  // if refused, it serves from where it runs
      main(false, own_table);
    });
  }
}

bool Handlers::serve_one(int wait_ms) {
  server_.prepare_thread();
  pollfd p{calls_.number(), POLLIN, 0};
  if (poll(&p, 1, wait_ms) <= 0) return false;
  uffd_msg msg;
  ssize_t n = read(calls_.number(), &msg, sizeof msg);
  if (n != sizeof msg) return false;
  std::vector<std::byte> pages(std::max(c_.fault_around, 1u) * kPageSize), file_buf(kPageSize);
  ServeBuffers b{pages.data(), file_buf.data()};
  serve_message(calls_.number(), msg, b);
  return true;
}

void Handlers::main(bool spin, bool own_table) {
  running_.fetch_add(1);
  mark_region_thread();
  if (own_table) mark_private_files();
  block_all_signals();  // a program's handler here touching the region could not be served
  server_.prepare_thread();  // before any page's lock (copy_store.h)
  std::vector<std::byte> pages(std::max(c_.fault_around, 1u) * kPageSize), file_buf(kPageSize);
  ServeBuffers b{pages.data(), file_buf.data()};
  const int fd = calls_.number();
  bool served = false;
  bool found_none = false;  // a read found nothing: the descriptor does not block (yet, or again)
  pollfd wait{fd, POLLIN, 0};
  for (;;) {
    const bool may_block_in_read = reads_block_.load(std::memory_order_relaxed) && !found_none;
    if (!may_block_in_read && !(spin && served && wait_spinning())) {
      while (poll(&wait, 1, -1) < 0) {
        if (errno != EINTR) check(-errno, "poll on the userfaultfd");
      }
    }
    uffd_msg msg;
    ssize_t n = read(fd, &msg, sizeof msg);
    found_none = n < 0 && errno == EAGAIN;  // another handler took it
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      check(-errno, "read from the userfaultfd");
    }
    if (n != sizeof msg) continue;
    if (msg.event == UFFD_EVENT_PAGEFAULT && (msg.arg.pagefault.address & ~uintptr_t{kPageSize - 1}) == doorbell_) {
      int rc = uffd_zeropage(fd, doorbell_, kPageSize);
      if (rc != -EEXIST) check(rc, "UFFDIO_ZEROPAGE (doorbell)");
      if (stopping_.load()) return;
      continue;
    }
    serve_message(fd, msg, b);
    served = true;
  }
}

// Only pinned handlers: one handler serves every fault, and gains nothing (it spins in poll(2)
// after a fault, and has no other handler's wake-ups to sleep through). If fcntl fails, they go
// on waiting in poll(2); if the descriptor is ever non-blocking again (the number is the
// creating thread's, which a program's thread could close and reuse meanwhile), a read that
// finds nothing sends them back to poll(2), not round a loop of reads.
void Handlers::block_in_read() {
  if (threads_.size() < 2) return;
  const int fd = calls_.number();
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) return;
  reads_block_.store(true);
}

void Handlers::serve_message(int fd, const uffd_msg& msg, ServeBuffers& b) {
  if (msg.event != UFFD_EVENT_PAGEFAULT) return;
  uintptr_t a = msg.arg.pagefault.address & ~uintptr_t{kPageSize - 1};
  uint64_t flags = msg.arg.pagefault.flags;
  if (a - c_.base >= c_.size) {  // the probation stage or the doorbell, populated by mlockall(): a zero page
    int rc = uffd_zeropage(fd, a, kPageSize);
    if (rc != -EEXIST) check(rc, "UFFDIO_ZEROPAGE");
    return;
  }
  const auto tid = static_cast<pid_t>(msg.arg.pagefault.feat.ptid);
  FaultServer::Fault f{static_cast<uint32_t>((a - c_.base) / kPageSize),
                       (flags & UFFD_PAGEFAULT_FLAG_WRITE) != 0, (flags & UFFD_PAGEFAULT_FLAG_WP) != 0,
                       msg.arg.pagefault.feat.ptid, tid != 0 ? tid : -1};
  server_.serve(f, b, false);
}

bool Handlers::wait_spinning() {
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(c_.spin_us);
  pollfd p{calls_.number(), POLLIN, 0};
  while (std::chrono::steady_clock::now() < until) {
    if (stopping_.load(std::memory_order_relaxed)) return false;
    if (poll(&p, 1, 0) > 0) return true;
    cpu_relax();
  }
  return false;
}

// The bell is dropped first (mlockall() may have populated and locked it: drop_pages unlocks
// it), so that the touch faults.
void Handlers::ring_doorbell() {
  check(drop_pages(doorbell_, kPageSize), "madvise(MADV_DONTNEED) of the doorbell");
  volatile const char* bell = reinterpret_cast<volatile const char*>(doorbell_);
  (void)*bell;  // blocks until a handler serves it
}

void Handlers::stop() {
  if (threads_.empty()) return;
  stopping_.store(true);
  for (size_t i = 0; i < threads_.size(); ++i) ring_doorbell();
  for (auto& t : threads_) t->join();
  threads_.clear();
}

void Handlers::forget_in_child() {
  for (auto& t : threads_) t.release()->forget();  // never joined, never destroyed
  threads_.clear();
}

}  // namespace zsm::region
