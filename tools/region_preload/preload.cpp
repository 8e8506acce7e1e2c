// libzsm_region_preload.so: all of an unmodified program's memory in one zsm region.
//
//   LD_PRELOAD=libzsm_region_preload.so ZSM_REGION_BUDGET=256M program ...   (or: zsm-run)
//
// The budget is what the region costs in all (ZSM_REGION_BUDGET_ALL): decompressed pages, the
// compressed pool and the bookkeeping. The region is made when the library is loaded, and it
// serves:
// - the malloc family, from mimalloc given the region's first half as its only arena
//   (mi_manage_os_memory, mimalloc never asked to map or decommit memory of its own): every
//   allocation, small or large. A free of 256 KiB or more discards the block's inner pages
//   first, so that freed memory costs nothing;
// - the program's anonymous private read-write mappings of 64 KiB or more (maps.cpp), in the
//   second half, with munmap, mremap, madvise and mprotect on them taken over too.
// What stays outside: memory allocated before the library was loaded or while it is off, other
// mappings (shared, file-backed, fixed, stacks, PROT_NONE reservations such as a JVM's heap,
// which the program then mprotect()s and commits itself: see docs/region.md).
//
// Variables (sizes in bytes or with K, M, G):
//   ZSM_REGION_BUDGET       the budget; unset: the library stays out of the way
//   ZSM_REGION_POOL_BUDGET  the compressed pool's most (default: half the budget); past it,
//                           the pool's copies go to the backing file
//   ZSM_REGION_BACKING_FILE a directory (an unnamed file there) or a path that does not exist;
//                           default $TMPDIR (or /tmp); "none": no file, the pool then grows
//                           inside the budget
//   ZSM_REGION_BACKING_FILE_SIZE  the file's most (default: the region's size, at most 2T)
//   ZSM_REGION_SIZE         the region's virtual size (default 64G)
//   ZSM_REGION_SELF_SERVE=1 the SIGBUS mode (guards.cpp keeps it working)
//   ZSM_REGION_STATS=1      one line of statistics at exit (or why there was no region)
// A variable that is not a size turns the library off with one line on stderr, as does a
// region that cannot be made.
//
// The region's own threads and this library's own calls into the region get memory from the
// next malloc (use_next): they must never touch the memory they serve. dlsym's own requests,
// before the next malloc is known, come from a static buffer (bootstrap). mimalloc is loaded
// with dlopen(RTLD_LOCAL): Debian's exports malloc and operator new too, which must not join
// the program's lookup scope (the region's own code would get region memory from them).
#include "preload.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <mimalloc.h>  // its types and options; its functions come from mi (dlopen)

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "size_text.h"

namespace zsm_preload {

Next next;

namespace {

constexpr size_t kDiscardOnFree = 256 << 10;  // frees this large give their pages back
constexpr size_t kArenaAlign = size_t{64} << 20;  // mimalloc's arenas start at a segment boundary
constexpr size_t kDefaultRegion = size_t{64} << 30;

std::atomic<bool> resolving{false};
Layout layout;

// mimalloc's functions, from its library opened locally.
struct Mimalloc {
  void* (*malloc)(size_t);
  void* (*calloc)(size_t, size_t);
  void* (*realloc)(void*, size_t);
  void (*free)(void*);
  size_t (*usable_size)(const void*);
  int (*posix_memalign)(void**, size_t, size_t);
  void* (*aligned_alloc)(size_t, size_t);
  void* (*memalign)(size_t, size_t);
  void* (*valloc)(size_t);
  void* (*pvalloc)(size_t);
  void (*option_set)(mi_option_t, long);
  bool (*manage_os_memory)(void*, size_t, bool, bool, bool, int);
} mi;
std::atomic<bool> turned_on{false};
const char* off_reason = "ZSM_REGION_BUDGET is not set";
int stats_fd = -1;  // ZSM_REGION_STATS=1: stderr, duplicated (a program may close stderr first)
std::atomic<uint64_t> outside{0};

__attribute__((tls_model("initial-exec"))) thread_local bool in_library = false;

// --- dlsym's own requests, before the next malloc is known. ---------------------------------

alignas(64) unsigned char bootstrap[64 << 10];
std::atomic<size_t> bootstrap_used{0};

void* bootstrap_alloc(size_t n) {
  const size_t take = (n + 63) / 64 * 64;
  const size_t at = bootstrap_used.fetch_add(take);
  if (at + take > sizeof(bootstrap)) return nullptr;
  return bootstrap + at;  // static storage: zeros, as calloc wants
}

bool in_bootstrap(const void* p) { return p >= bootstrap && p < bootstrap + sizeof(bootstrap); }

template <typename F>
void find(F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

void resolve_next() {
  resolving = true;
  find(next.malloc, "malloc");
  find(next.free, "free");
  find(next.calloc, "calloc");
  find(next.realloc, "realloc");
  find(next.posix_memalign, "posix_memalign");
  find(next.aligned_alloc, "aligned_alloc");
  find(next.memalign, "memalign");
  find(next.valloc, "valloc");
  find(next.pvalloc, "pvalloc");
  find(next.malloc_usable_size, "malloc_usable_size");
  find(next.mmap, "mmap");
  find(next.munmap, "munmap");
  find(next.mremap, "mremap");
  find(next.madvise, "madvise");
  find(next.mprotect, "mprotect");
  find(next.mlock, "mlock");
  find(next.mlock2, "mlock2");
  find(next.mlockall, "mlockall");
  find(next.close, "close");
  find(next.close_range, "close_range");
  find(next.closefrom, "closefrom");
  find(next.sigprocmask, "sigprocmask");
  find(next.pthread_sigmask, "pthread_sigmask");
  find(next.sigaction, "sigaction");
  find(next.signal, "signal");
  find(next.read, "read");
  find(next.pread64, "pread64");
  find(next.readv, "readv");
  find(next.preadv, "preadv");
  find(next.write, "write");
  find(next.pwrite64, "pwrite64");
  find(next.writev, "writev");
  find(next.pwritev, "pwritev");
  find(next.recv, "recv");
  find(next.recvfrom, "recvfrom");
  find(next.recvmsg, "recvmsg");
  find(next.send, "send");
  find(next.sendto, "sendto");
  find(next.sendmsg, "sendmsg");
  find(next.vmsplice, "vmsplice");
  find(next.fread, "fread");
  find(next.fwrite, "fwrite");
  find(next.fread_unlocked, "fread_unlocked");
  find(next.epoll_wait, "epoll_wait");
  find(next.epoll_pwait, "epoll_pwait");
  find(next.fwrite_unlocked, "fwrite_unlocked");
  resolving = false;
}

// --- Turning on. ----------------------------------------------------------------------------

bool size_from_env(const char* name, size_t* out) {
  const char* text = std::getenv(name);
  if (text == nullptr) return true;
  if (parse_size(text, out) && *out != 0) return true;
  say("zsm_region_preload: %s='%s' is not a size (bytes, or with K, M or G); the library is off\n", name, text);
  off_reason = "a variable was not a size";
  return false;
}

bool options_from_env(zsm_region_options* o, size_t* region_size) {
  size_t file_size = 0;
  *region_size = kDefaultRegion;
  if (!size_from_env("ZSM_REGION_BUDGET", &o->budget_bytes) ||
      !size_from_env("ZSM_REGION_POOL_BUDGET", &o->compressed_budget_bytes) ||
      !size_from_env("ZSM_REGION_BACKING_FILE_SIZE", &file_size) ||
      !size_from_env("ZSM_REGION_SIZE", region_size)) {
    return false;
  }
  o->flags = ZSM_REGION_BUDGET_ALL;
  const char* self_serve = std::getenv("ZSM_REGION_SELF_SERVE");
  if (self_serve != nullptr && std::strcmp(self_serve, "0") != 0) o->flags |= ZSM_REGION_SELF_SERVE;
  if (o->compressed_budget_bytes == 0) o->compressed_budget_bytes = std::max<size_t>(o->budget_bytes / 2, 1 << 20);
  const char* file = std::getenv("ZSM_REGION_BACKING_FILE");
  if (file == nullptr) file = std::getenv("TMPDIR");
  if (file == nullptr || *file == '\0') file = "/tmp";
  if (std::strcmp(file, "none") != 0) {
    o->backing_file = file;
    o->backing_file_capacity = file_size != 0 ? file_size : std::min<size_t>(*region_size, size_t{2} << 40);
  }
  return true;
}

bool load_mimalloc() {
  void* lib = dlopen("libmimalloc.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return false;
  bool all = true;
  auto take = [&](auto& f, const char* name) {
    f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib, name));
    all = all && f != nullptr;
  };
  take(mi.malloc, "mi_malloc");
  take(mi.calloc, "mi_calloc");
  take(mi.realloc, "mi_realloc");
  take(mi.free, "mi_free");
  take(mi.usable_size, "mi_usable_size");
  take(mi.posix_memalign, "mi_posix_memalign");
  take(mi.aligned_alloc, "mi_aligned_alloc");
  take(mi.memalign, "mi_memalign");
  take(mi.valloc, "mi_valloc");
  take(mi.pvalloc, "mi_pvalloc");
  take(mi.option_set, "mi_option_set");
  take(mi.manage_os_memory, "mi_manage_os_memory");
  return all;
}

// mimalloc, told to take memory from the region's first part and from nowhere else, and never
// to decommit or reset it (that would be madvise on the region, which maps.cpp would serve,
// but only slower).
bool give_heap_to_mimalloc() {
  mi.option_set(mi_option_limit_os_alloc, 1);
  mi.option_set(mi_option_allow_decommit, 0);
  mi.option_set(mi_option_page_reset, 0);
  mi.option_set(mi_option_abandoned_page_decommit, 0);
  mi.option_set(mi_option_show_errors, 0);
  mi.option_set(mi_option_show_stats, 0);
  mi.option_set(mi_option_verbose, 0);
  return mi.manage_os_memory(reinterpret_cast<void*>(layout.heap_begin), layout.heap_end - layout.heap_begin,
                             true, false, true, -1);
}

void start_stats() {
  const char* want = std::getenv("ZSM_REGION_STATS");
  if (want != nullptr && std::strcmp(want, "1") == 0) stats_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
}

bool turn_on() {
  zsm_region_options o{};
  size_t size = 0;
  if (!options_from_env(&o, &size)) return false;
  if (!load_mimalloc()) {
    say("zsm_region_preload: libmimalloc.so.2 cannot be loaded (%s); the library is off\n", dlerror());
    off_reason = "libmimalloc.so.2 could not be loaded";
    return false;
  }
  zsm_region* r = zsm_region_create(size + kArenaAlign, &o);
  if (r == nullptr) {
    say("zsm_region_preload: no region (%s: %s); the library is off\n", zsm_region_last_error(),
        std::strerror(errno));
    off_reason = "the region could not be made";
    return false;
  }
  layout.region = r;
  layout.begin = reinterpret_cast<uintptr_t>(zsm_region_base(r));
  layout.end = layout.begin + zsm_region_size(r);
  layout.heap_begin = (layout.begin + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  layout.heap_end = layout.heap_begin + (layout.end - layout.heap_begin) / 2 / kArenaAlign * kArenaAlign;
  layout.maps_begin = layout.heap_end;
  layout.maps_end = layout.end;
  layout.self_serve = (o.flags & ZSM_REGION_SELF_SERVE) != 0;
  auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (!give_heap_to_mimalloc() || !init_maps(layout, page)) {
    say("zsm_region_preload: the region's memory could not be set up (%s); the library is off\n",
        std::strerror(errno));
    off_reason = "the region's allocators could not be set up";
    zsm_region_destroy(r);
    return false;
  }
  return true;
}

// fork(): the region's own atfork handlers (registered when it was made, so run after this
// prepare and before this parent and child) copy and set up the region; what they allocate
// must come from the next malloc, as the gate they close would stall any fault.
bool forking_was_in_library = false;
void fork_prepare() {
  forking_was_in_library = in_library;
  in_library = true;
}
void fork_done() { in_library = forking_was_in_library; }

__attribute__((constructor)) void load() {
  if (std::getenv("ZSM_REGION_BUDGET") != nullptr && next_ready()) {
    InLibrary guard;
    turned_on.store(turn_on(), std::memory_order_release);
    if (turned_on.load()) pthread_atfork(fork_prepare, fork_done, fork_done);
  }
  start_stats();
}

// ZSM_REGION_STATS=1: the region's statistics when the program exits, or why it had none.
__attribute__((destructor)) void print_stats_at_exit() {
  if (stats_fd < 0) return;
  char line[768];
  int n;
  struct zsm_region_stats s {};
  if (!turned_on.load() || zsm_region_stats(layout.region, &s) != 0) {
    n = std::snprintf(line, sizeof line, "zsm_region_preload: at exit: no region (%s)\n", off_reason);
  } else {
    n = std::snprintf(
        line, sizeof line,
        "zsm_region_preload: at exit: budget %llu MiB (decompressed now %llu MiB), resident %llu KiB, "
        "probation %llu KiB, stored pages %llu (orig %llu KiB, pool %llu KiB), faults %llu (zero %llu, "
        "around %llu, from probation %llu), evictions %llu (clean %llu), backing file %llu KiB "
        "(written back %llu, read back %llu), io-pinned skips %llu, over budget %llu; peaks: "
        "decompressed %llu MiB, pool %llu MiB, all %llu MiB; allocations outside the region %llu\n",
        (unsigned long long)s.budget_bytes >> 20, (unsigned long long)s.resident_limit_bytes >> 20,
        (unsigned long long)s.resident_bytes >> 10, (unsigned long long)s.probation_bytes >> 10,
        (unsigned long long)s.stored_pages, (unsigned long long)s.orig_data_size >> 10,
        (unsigned long long)s.mem_used_total >> 10, (unsigned long long)s.faults,
        (unsigned long long)s.zero_faults, (unsigned long long)s.fault_around_pages,
        (unsigned long long)s.probation_faults, (unsigned long long)s.evictions,
        (unsigned long long)s.clean_evictions, (unsigned long long)s.bd_bytes_on_file >> 10,
        (unsigned long long)s.written_back, (unsigned long long)s.read_back,
        (unsigned long long)s.io_pinned_skips, (unsigned long long)s.over_budget_pages,
        (unsigned long long)s.peak_decompressed_bytes >> 20, (unsigned long long)s.peak_pool_bytes >> 20,
        (unsigned long long)s.peak_total_bytes >> 20,
        (unsigned long long)outside.load());
  }
  if (n > 0) (void)!::write(stats_fd, line, std::min(static_cast<size_t>(n), sizeof line - 1));
}

// --- The malloc family. ---------------------------------------------------------------------

// The SIGBUS mode takes only allocations this large: a system call that meets an evicted page
// fails with EFAULT there, and libc's own calls (stdio's reads into its buffer, stat into a
// struct) write small blocks the program allocated without passing through guards.cpp.
constexpr size_t kSelfServeSmallest = 64 << 10;

// The layout, when a request of `bytes` may be served from the region.
const Layout* heap_for_this_call(size_t bytes) {
  const Layout* l = on();
  if (l == nullptr || use_next() || (l->self_serve && bytes < kSelfServeSmallest)) return nullptr;
  return l;
}

// The region is full (mimalloc's arena): the next malloc serves it, and the stats count it.
void* outside_region(void* p) {
  if (p != nullptr) outside.fetch_add(1, std::memory_order_relaxed);
  return p;
}

// A large block's inner pages, discarded before it is freed: they cost nothing after.
void discard_inside(const Layout& l, void* p) {
  size_t size = mi.usable_size(p);
  if (size < kDiscardOnFree) return;
  auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t from = (reinterpret_cast<uintptr_t>(p) + 64 + page - 1) / page * page;  // mimalloc's free list link
  uintptr_t to = (reinterpret_cast<uintptr_t>(p) + size) / page * page;
  if (to <= from) return;
  InLibrary guard;
  zsm_region_discard(l.region, reinterpret_cast<void*>(from), to - from);
}

}  // namespace

const Layout* on() { return turned_on.load(std::memory_order_acquire) ? &layout : nullptr; }

bool next_ready() {
  if (next.malloc == nullptr && !resolving) resolve_next();
  return next.malloc != nullptr && next.calloc != nullptr;
}

bool use_next() { return in_library || zsm_region_internal_thread() != 0; }

InLibrary::InLibrary() : was_(in_library) { in_library = true; }
InLibrary::~InLibrary() { in_library = was_; }

void say(const char* fmt, ...) {
  char line[640];
  va_list args;
  va_start(args, fmt);
  const int n = std::vsnprintf(line, sizeof(line), fmt, args);
  va_end(args);
  if (n > 0) (void)!::write(STDERR_FILENO, line, std::min(static_cast<size_t>(n), sizeof(line) - 1));
}

}  // namespace zsm_preload

// --- The interposed malloc family. --------------------------------------------------------

using zsm_preload::bootstrap_alloc;
using zsm_preload::heap_for_this_call;
using zsm_preload::mi;
using zsm_preload::in_bootstrap;
using zsm_preload::next;
using zsm_preload::next_ready;
using zsm_preload::outside_region;

extern "C" {

__attribute__((visibility("default"))) void* malloc(size_t bytes) {
  if (heap_for_this_call(bytes) != nullptr) {
    if (void* p = mi.malloc(bytes)) return p;
    return outside_region(next.malloc(bytes));
  }
  if (!next_ready()) return bootstrap_alloc(bytes);
  return next.malloc(bytes);
}

__attribute__((visibility("default"))) void free(void* p) {
  if (p == nullptr || in_bootstrap(p)) return;
  const zsm_preload::Layout* l = zsm_preload::on();
  if (l != nullptr && zsm_preload::in_heap(*l, p)) {
    zsm_preload::discard_inside(*l, p);
    return mi.free(p);
  }
  if (next_ready()) next.free(p);  // the next malloc's (whose own mappings may be in the region)
}

__attribute__((visibility("default"))) void* calloc(size_t count, size_t size) {
  if (heap_for_this_call(count * size) != nullptr) {
    if (void* p = mi.calloc(count, size)) return p;
    if (count != 0 && size > SIZE_MAX / count) return nullptr;
    return outside_region(next.calloc(count, size));
  }
  if (!next_ready()) {
    size_t bytes = 0;
    if (__builtin_mul_overflow(count, size, &bytes)) return nullptr;
    return bootstrap_alloc(bytes);
  }
  return next.calloc(count, size);
}

__attribute__((visibility("default"))) void* realloc(void* p, size_t bytes) {
  if (p == nullptr) return malloc(bytes);
  if (bytes == 0) {
    free(p);
    return nullptr;
  }
  const zsm_preload::Layout* l = zsm_preload::on();
  if (l != nullptr && zsm_preload::in_heap(*l, p)) {
    if (heap_for_this_call(bytes) == nullptr && l->self_serve) {  // shrunk below what the mode takes
      void* q = next.malloc(bytes);
      if (q != nullptr) std::memcpy(q, p, std::min(bytes, mi.usable_size(p)));
      if (q != nullptr) mi.free(p);
      return q;
    }
    if (void* q = mi.realloc(p, bytes)) return q;
    void* q = outside_region(next.malloc(bytes));
    if (q == nullptr) return nullptr;
    std::memcpy(q, p, std::min(bytes, mi.usable_size(p)));
    mi.free(p);
    return q;
  }
  if (!next_ready()) return nullptr;
  if (in_bootstrap(p)) {
    void* q = malloc(bytes);
    if (q != nullptr) {
      auto left = sizeof(zsm_preload::bootstrap) - static_cast<size_t>(static_cast<unsigned char*>(p) - zsm_preload::bootstrap);
      std::memcpy(q, p, std::min(bytes, left));
    }
    return q;
  }
  if (heap_for_this_call(bytes) != nullptr && l->self_serve) {  // grown into what the mode takes
    void* q = malloc(bytes);
    if (q != nullptr) {
      std::memcpy(q, p, std::min(bytes, next.malloc_usable_size(p)));
      next.free(p);
    }
    return q;
  }
  return next.realloc(p, bytes);  // allocated before the library turned on: it stays outside
}

__attribute__((visibility("default"))) void* reallocarray(void* p, size_t count, size_t size) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(p, bytes);
}

__attribute__((visibility("default"))) int posix_memalign(void** out, size_t align, size_t bytes) {
  if (heap_for_this_call(bytes) != nullptr) return mi.posix_memalign(out, align, bytes);
  if (!next_ready()) return ENOMEM;
  return next.posix_memalign(out, align, bytes);
}

__attribute__((visibility("default"))) void* aligned_alloc(size_t align, size_t bytes) {
  if (heap_for_this_call(bytes) != nullptr) return mi.aligned_alloc(align, bytes);
  return next_ready() ? next.aligned_alloc(align, bytes) : nullptr;
}

__attribute__((visibility("default"))) void* memalign(size_t align, size_t bytes) {
  if (heap_for_this_call(bytes) != nullptr) return mi.memalign(align, bytes);
  return next_ready() ? next.memalign(align, bytes) : nullptr;
}

__attribute__((visibility("default"))) void* valloc(size_t bytes) {
  if (heap_for_this_call(bytes) != nullptr) return mi.valloc(bytes);
  return next_ready() ? next.valloc(bytes) : nullptr;
}

__attribute__((visibility("default"))) void* pvalloc(size_t bytes) {
  if (heap_for_this_call(bytes) != nullptr) return mi.pvalloc(bytes);
  return next_ready() ? next.pvalloc(bytes) : nullptr;
}

__attribute__((visibility("default"))) size_t malloc_usable_size(void* p) {
  if (p == nullptr || in_bootstrap(p)) return 0;
  const zsm_preload::Layout* l = zsm_preload::on();
  if (l != nullptr && zsm_preload::in_heap(*l, p)) return mi.usable_size(p);
  return next_ready() ? next.malloc_usable_size(p) : 0;
}

}  // extern "C"
