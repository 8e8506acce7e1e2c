// libzsm_region_preload.so: an unmodified program's large allocations in a zsm region.
//
// LD_PRELOAD=libzsm_region_preload.so ZSM_REGION_BUDGET=64M program ...
//
// malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign, valloc, pvalloc, free and
// malloc_usable_size are interposed. A request of at least kLargeBytes (1 MiB) is served from
// one region (zsm/region.h) of ZSM_REGION_SIZE bytes (default: 16 x the budget, >= 1 GiB) whose
// resident budget is ZSM_REGION_BUDGET (bytes, or with a K, M or G suffix, powers of 1024):
// at most that much of the large buffers stays decompressed, the rest is compressed and
// faults back in on a touch. Everything else, and a large request the region has no room for,
// goes to the next malloc (dlsym(RTLD_NEXT)); free() of a pointer outside the region goes to
// the next free.
//
// Inside the region, PageRuns (page_runs.h) hands out whole pages, first fit, under one mutex.
// A freed run is discarded (zsm_region_discard: it costs nothing and reads as zeros after),
// so every run handed out is zeros and calloc needs no memset. The run is discarded before it
// is returned to the free runs, so no other thread can be given it meanwhile.
//
// ZSM_REGION_POOL_BUDGET (a size) bounds the compressed pool (compressed_budget_bytes); with
// ZSM_REGION_BACKING_FILE (a directory, or a path that does not exist: the cold tier's rules)
// the pool's overflow goes to that file, of at most ZSM_REGION_BACKING_FILE_SIZE (default
// 256M), so the program's memory is the budget plus the pool's.
//
// The library stays out of the way (every call goes to the next malloc) when
// ZSM_REGION_BUDGET is unset, and, after one line on stderr, when it is not a size or the
// region cannot be made (no userfaultfd, budget below the region's minimum). The region is
// made on the first large request. ZSM_REGION_STATS=1 prints the region's statistics at exit,
// with the most it held resident and compressed (sampled every 10 ms by a thread of its own).
//
// Reentrancy: dlsym may call calloc before the next calloc is known; those early requests
// come from a static buffer that is never freed. While this library calls into the region
// (creation, discard), the calling thread's requests all go to the next malloc (in_library),
// so the region never serves itself. fork(): the child has no region (MADV_DONTFORK); its
// frees of region pointers are ignored and its requests go to the next malloc.
#include <zsm/region.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "page_runs.h"
#include "size_text.h"

namespace {

constexpr size_t kLargeBytes = size_t{1} << 20;

struct NextMalloc {
  void* (*malloc)(size_t);
  void (*free)(void*);
  void* (*calloc)(size_t, size_t);
  void* (*realloc)(void*, size_t);
  int (*posix_memalign)(void**, size_t, size_t);
  void* (*aligned_alloc)(size_t, size_t);
  void* (*memalign)(size_t, size_t);
  void* (*valloc)(size_t);
  void* (*pvalloc)(size_t);
  size_t (*malloc_usable_size)(void*);
};

NextMalloc next;
std::atomic<bool> resolving{false};

// --- The bootstrap buffer: what dlsym asks for before the next malloc is known. -----------

alignas(64) unsigned char bootstrap[64 << 10];
std::atomic<size_t> bootstrap_used{0};

void* bootstrap_alloc(size_t n) {
  const size_t take = (n + 63) / 64 * 64;
  const size_t at = bootstrap_used.fetch_add(take);
  if (at + take > sizeof(bootstrap)) return nullptr;
  return bootstrap + at;  // static storage: zeros, as calloc wants
}

bool in_bootstrap(const void* p) {
  return p >= bootstrap && p < bootstrap + sizeof(bootstrap);
}

void resolve_next() {
  resolving = true;
  next.malloc = reinterpret_cast<void* (*)(size_t)>(dlsym(RTLD_NEXT, "malloc"));
  next.free = reinterpret_cast<void (*)(void*)>(dlsym(RTLD_NEXT, "free"));
  next.calloc = reinterpret_cast<void* (*)(size_t, size_t)>(dlsym(RTLD_NEXT, "calloc"));
  next.realloc = reinterpret_cast<void* (*)(void*, size_t)>(dlsym(RTLD_NEXT, "realloc"));
  next.posix_memalign =
      reinterpret_cast<int (*)(void**, size_t, size_t)>(dlsym(RTLD_NEXT, "posix_memalign"));
  next.aligned_alloc =
      reinterpret_cast<void* (*)(size_t, size_t)>(dlsym(RTLD_NEXT, "aligned_alloc"));
  next.memalign = reinterpret_cast<void* (*)(size_t, size_t)>(dlsym(RTLD_NEXT, "memalign"));
  next.valloc = reinterpret_cast<void* (*)(size_t)>(dlsym(RTLD_NEXT, "valloc"));
  next.pvalloc = reinterpret_cast<void* (*)(size_t)>(dlsym(RTLD_NEXT, "pvalloc"));
  next.malloc_usable_size =
      reinterpret_cast<size_t (*)(void*)>(dlsym(RTLD_NEXT, "malloc_usable_size"));
  resolving = false;
}

bool next_ready() {
  if (next.malloc == nullptr && !resolving) resolve_next();
  return next.malloc != nullptr && next.calloc != nullptr;
}

// --- The region and its runs. -------------------------------------------------------------

enum class State { kUnset, kOn, kOff, kForkedChild };

std::atomic<State> state{State::kUnset};
pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t runs_lock = PTHREAD_MUTEX_INITIALIZER;
zsm_region* region = nullptr;
zsm_preload::PageRuns runs;
size_t page_size = 4096;
int stats_fd = -1;  // ZSM_REGION_STATS=1: stderr, duplicated (a program may close stderr first)
// ZSM_REGION_STATS=1: the most the region held, sampled every 10 ms by a thread of its own.
std::atomic<uint64_t> peak_resident{0}, peak_pool{0}, peak_stored{0};

// Set while this thread is inside the library's calls into the region.
__attribute__((tls_model("initial-exec"))) thread_local bool in_library = false;

class InLibrary {
 public:
  InLibrary() { in_library = true; }
  ~InLibrary() { in_library = false; }
};

// One line on stderr, formatted on the stack (stdio's buffers would call malloc).
__attribute__((format(printf, 1, 2))) void say(const char* fmt, ...) {
  char line[640];
  va_list args;
  va_start(args, fmt);
  const int n = std::vsnprintf(line, sizeof(line), fmt, args);
  va_end(args);
  if (n > 0) (void)!write(STDERR_FILENO, line, std::min(static_cast<size_t>(n), sizeof(line) - 1));
}

void forget_region_in_child() { state = State::kForkedChild; }

// The region's size: ZSM_REGION_SIZE, or 16 times the budget and at least 1 GiB. Not the
// machine's memory: the region's tables cost 16 bytes for each page the program uses.
bool region_size(size_t budget, size_t* out) {
  const char* text = std::getenv("ZSM_REGION_SIZE");
  if (text == nullptr) {
    *out = std::max(size_t{1} << 30, budget > (SIZE_MAX >> 4) ? SIZE_MAX : budget << 4);
    return true;
  }
  if (zsm_preload::parse_size(text, out) && *out != 0) return true;
  say("zsm_region_preload: ZSM_REGION_SIZE='%s' is not a size (bytes, or with K, M or G); "
      "the library is off\n", text);
  return false;
}

void raise_to(std::atomic<uint64_t>& peak, uint64_t v) {
  uint64_t old = peak.load();
  while (v > old && !peak.compare_exchange_weak(old, v)) {
  }
}

void* sample_peaks(void*) {
  in_library = true;  // its own few allocations never come from the region
  for (;;) {
    struct zsm_region_stats s {};
    if (state.load() == State::kOn && zsm_region_stats(region, &s) == 0) {
      raise_to(peak_resident, s.resident_bytes);
      raise_to(peak_pool, s.mem_used_total);
      raise_to(peak_stored, s.orig_data_size);
    }
    usleep(10000);
  }
  return nullptr;
}

// An optional size from the environment into *out (left as it is when unset); false, after
// one line on stderr, when it is set to something that is not a size.
bool size_from_env(const char* name, size_t* out) {
  const char* text = std::getenv(name);
  if (text == nullptr) return true;
  if (zsm_preload::parse_size(text, out) && *out != 0) return true;
  say("zsm_region_preload: %s='%s' is not a size (bytes, or with K, M or G); "
      "the library is off\n", name, text);
  return false;
}

// The options from the environment; false when one is malformed.
bool options_from_env(zsm_region_options* opts) {
  size_t file_size = 0;
  if (!size_from_env("ZSM_REGION_BUDGET", &opts->budget_bytes) ||
      !size_from_env("ZSM_REGION_POOL_BUDGET", &opts->compressed_budget_bytes) ||
      !size_from_env("ZSM_REGION_BACKING_FILE_SIZE", &file_size)) {
    return false;
  }
  opts->backing_file = std::getenv("ZSM_REGION_BACKING_FILE");
  opts->backing_file_capacity = file_size;
  return true;
}

State make_region() {
  if (std::getenv("ZSM_REGION_BUDGET") == nullptr) return State::kOff;
  zsm_region_options opts{};
  if (!options_from_env(&opts)) return State::kOff;
  page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t size = 0;
  if (!region_size(opts.budget_bytes, &size)) return State::kOff;
  region = zsm_region_create(size, &opts);
  if (region == nullptr) {
    say("zsm_region_preload: no region (%s: %s); the library is off\n",
        zsm_region_last_error(), std::strerror(errno));
    return State::kOff;
  }
  if (!runs.init(zsm_region_base(region), zsm_region_size(region) / page_size, page_size)) {
    say("zsm_region_preload: no room for the allocator's tables (%s); the library is off\n",
        std::strerror(errno));
    zsm_region_destroy(region);
    region = nullptr;
    return State::kOff;
  }
  pthread_atfork(nullptr, nullptr, forget_region_in_child);
  const char* want_stats = std::getenv("ZSM_REGION_STATS");
  if (want_stats != nullptr && std::strcmp(want_stats, "1") == 0) {
    stats_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    pthread_t sampler;
    if (pthread_create(&sampler, nullptr, sample_peaks, nullptr) == 0) pthread_detach(sampler);
  }
  return State::kOn;
}

bool region_on() {
  State s = state.load(std::memory_order_acquire);
  if (s != State::kUnset) return s == State::kOn;
  if (in_library || !next_ready()) return false;
  pthread_mutex_lock(&init_lock);
  if (state.load() == State::kUnset) {
    InLibrary guard;
    state.store(make_region(), std::memory_order_release);
  }
  pthread_mutex_unlock(&init_lock);
  return state.load() == State::kOn;
}

bool ours(const void* p) {
  return state.load(std::memory_order_acquire) != State::kUnset && region != nullptr &&
         runs.contains(p);
}

// Pages for `bytes`, saturating: a request near SIZE_MAX must not wrap to a few pages.
size_t pages_for(size_t bytes) {
  return bytes > SIZE_MAX - page_size ? SIZE_MAX / page_size : (bytes + page_size - 1) / page_size;
}

// A large request from the region, aligned to `align` bytes (a power of two); nullptr if it
// is not large, the region is off, or it has no room.
void* large_alloc(size_t bytes, size_t align) {
  if (bytes < kLargeBytes || in_library || !region_on()) return nullptr;
  const size_t align_pages = align > page_size ? align / page_size : 1;
  pthread_mutex_lock(&runs_lock);
  void* p = runs.allocate(pages_for(bytes), align_pages);
  pthread_mutex_unlock(&runs_lock);
  return p;
}

size_t large_pages(const void* p) {
  pthread_mutex_lock(&runs_lock);
  const size_t n = runs.pages_of(p);
  pthread_mutex_unlock(&runs_lock);
  return n;
}

void discard(void* addr, size_t pages) {
  InLibrary guard;
  zsm_region_discard(region, addr, pages * page_size);
}

void large_free(void* p) {
  if (state.load() == State::kForkedChild) return;  // the child has no region
  const size_t pages = large_pages(p);
  if (pages == 0) {
    say("zsm_region_preload: free(%p): not an allocation of the region; ignored\n", p);
    return;
  }
  discard(p, pages);
  pthread_mutex_lock(&runs_lock);
  runs.release(p);
  pthread_mutex_unlock(&runs_lock);
}

// realloc of a region allocation.
void* large_realloc(void* p, size_t bytes) {
  const size_t have = large_pages(p);
  if (have == 0 || state.load() == State::kForkedChild) {
    errno = EINVAL;
    return nullptr;
  }
  const size_t want = pages_for(bytes);
  if (bytes >= kLargeBytes && want <= have) {
    if (want < have) {
      discard(static_cast<unsigned char*>(p) + want * page_size, have - want);
      pthread_mutex_lock(&runs_lock);
      runs.shrink(p, want);
      pthread_mutex_unlock(&runs_lock);
    }
    return p;
  }
  if (bytes >= kLargeBytes) {
    pthread_mutex_lock(&runs_lock);
    const bool grown = runs.grow(p, want);
    pthread_mutex_unlock(&runs_lock);
    if (grown) return p;
  }
  void* q = large_alloc(bytes, page_size);
  if (q == nullptr) q = next.malloc(bytes);
  if (q == nullptr) return nullptr;
  std::memcpy(q, p, std::min(bytes, have * page_size));
  large_free(p);
  return q;
}

bool power_of_two(size_t v) { return v != 0 && (v & (v - 1)) == 0; }

void* aligned_large(size_t align, size_t bytes) {
  return power_of_two(align) ? large_alloc(bytes, align) : nullptr;
}

// ZSM_REGION_STATS=1: the region's statistics, when the program exits.
__attribute__((destructor)) void print_stats_at_exit() {
  if (stats_fd < 0 || state.load() != State::kOn) return;
  struct zsm_region_stats s {};
  if (zsm_region_stats(region, &s) != 0) return;
  char line[640];
  const int n = std::snprintf(
      line, sizeof(line),
      "zsm_region_preload: at exit: region %llu MiB, budget %llu MiB, resident %llu B, stored "
      "pages %llu (orig %llu B, compressed %llu B, pool %llu B), faults %llu (zero %llu, "
      "around %llu pages, from probation %llu), evictions %llu (clean %llu), refaults %llu, "
      "backing file %llu B (written back %llu, read back %llu); peaks (10 ms samples): "
      "resident %llu MiB, stored %llu MiB, pool %llu MiB\n",
      (unsigned long long)s.size_bytes >> 20, (unsigned long long)s.budget_bytes >> 20,
      (unsigned long long)s.resident_bytes, (unsigned long long)s.stored_pages,
      (unsigned long long)s.orig_data_size, (unsigned long long)s.compr_data_size,
      (unsigned long long)s.mem_used_total, (unsigned long long)s.faults,
      (unsigned long long)s.zero_faults, (unsigned long long)s.fault_around_pages,
      (unsigned long long)s.probation_faults,
      (unsigned long long)s.evictions, (unsigned long long)s.clean_evictions,
      (unsigned long long)s.refaults, (unsigned long long)s.bd_bytes_on_file,
      (unsigned long long)s.written_back, (unsigned long long)s.read_back,
      (unsigned long long)peak_resident.load() >> 20,
      (unsigned long long)peak_stored.load() >> 20, (unsigned long long)peak_pool.load() >> 20);
  if (n > 0) (void)!write(stats_fd, line, std::min(static_cast<size_t>(n), sizeof(line) - 1));
}

}  // namespace

// --- The interposed entry points. ---------------------------------------------------------

extern "C" {

__attribute__((visibility("default"))) void* malloc(size_t bytes) {
  if (void* p = large_alloc(bytes, page_size)) return p;
  if (!next_ready()) return bootstrap_alloc(bytes);
  return next.malloc(bytes);
}

__attribute__((visibility("default"))) void free(void* p) {
  if (p == nullptr || in_bootstrap(p)) return;
  if (ours(p)) return large_free(p);
  if (next_ready()) next.free(p);
}

__attribute__((visibility("default"))) void* calloc(size_t count, size_t size) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (void* p = large_alloc(bytes, page_size)) return p;  // runs handed out are zeros
  if (!next_ready()) return bootstrap_alloc(bytes);
  return next.calloc(count, size);
}

__attribute__((visibility("default"))) void* realloc(void* p, size_t bytes) {
  if (p == nullptr) return malloc(bytes);
  if (bytes == 0) {
    free(p);
    return nullptr;
  }
  if (ours(p)) return large_realloc(p, bytes);
  if (!next_ready()) return nullptr;
  if (in_bootstrap(p)) {
    void* q = malloc(bytes);
    if (q != nullptr)
      std::memcpy(q, p, std::min(bytes, sizeof(bootstrap) - static_cast<size_t>(
                                                static_cast<unsigned char*>(p) - bootstrap)));
    return q;
  }
  if (void* q = large_alloc(bytes, page_size)) {  // a buffer growing past kLargeBytes moves in
    std::memcpy(q, p, std::min(bytes, next.malloc_usable_size(p)));
    next.free(p);
    return q;
  }
  return next.realloc(p, bytes);
}

__attribute__((visibility("default"))) int posix_memalign(void** out, size_t align,
                                                          size_t bytes) {
  if (!power_of_two(align) || align % sizeof(void*) != 0) return EINVAL;
  if (void* p = aligned_large(align, bytes)) {
    *out = p;
    return 0;
  }
  if (!next_ready()) return ENOMEM;
  return next.posix_memalign(out, align, bytes);
}

__attribute__((visibility("default"))) void* aligned_alloc(size_t align, size_t bytes) {
  if (void* p = aligned_large(align, bytes)) return p;
  return next_ready() ? next.aligned_alloc(align, bytes) : nullptr;
}

__attribute__((visibility("default"))) void* memalign(size_t align, size_t bytes) {
  if (void* p = aligned_large(align, bytes)) return p;
  return next_ready() ? next.memalign(align, bytes) : nullptr;
}

__attribute__((visibility("default"))) void* valloc(size_t bytes) {
  if (void* p = large_alloc(bytes, page_size)) return p;
  return next_ready() ? next.valloc(bytes) : nullptr;
}

__attribute__((visibility("default"))) void* pvalloc(size_t bytes) {
  if (void* p = large_alloc(bytes, page_size)) return p;
  return next_ready() ? next.pvalloc(bytes) : nullptr;
}

__attribute__((visibility("default"))) size_t malloc_usable_size(void* p) {
  if (p == nullptr) return 0;
  if (in_bootstrap(p)) return 0;
  if (ours(p)) return state.load() == State::kForkedChild ? 0 : large_pages(p) * page_size;
  return next_ready() ? next.malloc_usable_size(p) : 0;
}

}  // extern "C"
