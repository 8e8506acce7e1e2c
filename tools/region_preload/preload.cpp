// libzsm_region_preload.so: all of an unmodified program's memory in one zsm region.
//
//   LD_PRELOAD=libzsm_region_preload.so ZSM_REGION_BUDGET=256M program ...   (or: zsm-run)
//
// The budget is what the region costs in all (ZSM_REGION_BUDGET_ALL): decompressed pages, the
// compressed pool and the bookkeeping. The region is made when the library is loaded, and it
// serves:
// - the malloc family, from mimalloc given the region's first half as its only arena
//   (mi_manage_os_memory, mimalloc never asked to map or decommit memory of its own), but for
//   what libc and the dynamic loader allocate for themselves (a child of fork() reads it before
//   its region can serve a fault). A free of 256 KiB or more discards the block's inner pages
//   first, so that freed memory costs nothing;
// - the program's anonymous private read-write mappings of 64 KiB or more (maps.cpp), in the
//   second half, with munmap, mremap, madvise and mprotect on them served as the kernel would.
// What stays outside: memory allocated before the library was loaded or while it is off, other
// mappings (shared, file-backed, fixed, stacks, PROT_NONE reservations such as a JVM's heap,
// which the program then mprotect()s and commits itself: see docs/region.md).
//
// The pinning modes (Layout::pins: the SIGBUS mode, and the user-mode-only mode an
// unprivileged user gets where vm.unprivileged_userfaultfd is 0): a system call that meets a
// page of the region nobody serves fails with EFAULT. There the malloc family takes only
// blocks of 64 KiB or more (and, as in every mode, none that libc or the loader allocates for
// itself: stdio's buffers, FILE objects, directory streams, whose system calls pass no
// wrapper), and the
// other parts keep what the kernel touches resident: io.cpp pins I/O buffers, kernel_args.cpp
// retries calls whose other arguments met an evicted page, locks.cpp pins futex words while a
// thread waits, signals.cpp gives each thread a signal stack outside the region.
//
// Variables (sizes in bytes or with K, M, G):
//   ZSM_REGION_BUDGET       the budget, at least 1M; unset: the library stays out of the way
//   ZSM_REGION_POOL_BUDGET  the compressed pool's most (default: half the budget); past it,
//                           the pool's copies go to the backing file
//   ZSM_REGION_BACKING_FILE a directory (an unnamed file there) or a path that does not exist;
//                           default $TMPDIR (or /tmp); "none": no file, the pool then grows
//                           inside the budget
//   ZSM_REGION_BACKING_FILE_SIZE  the file's most (default: the region's size, at most 2T)
//   ZSM_REGION_SIZE         the region's virtual size (default 64G, at least 256M)
//   ZSM_REGION_SELF_SERVE=1 the SIGBUS mode (signals.cpp keeps it working)
//   ZSM_REGION_COLD_AGE     seconds (0.1 to 604800; 0: off, the default): a page left untouched
//                           this long is compressed whatever the budget (region.h's cold_age_ms)
//   ZSM_REGION_STALL_TARGET percent of the time (0 to 10; 0: the default, a fixed cold age): the
//                           cold age, from ZSM_REGION_COLD_AGE on, steered so that faults on
//                           compressed pages take about this share (region.h's stall_target_ppm)
//   ZSM_REGION_STATS_INTERVAL  seconds: a CSV line of the region's figures this often (stats.cpp),
//                           to ZSM_REGION_STATS_FILE (a path), or stderr
//   ZSM_REGION_STATS=1      one line of statistics at exit (or why there was no region); with
//                           ZSM_RUN_PID (zsm-run's) only from the process of that PID
//   ZSM_RUN_ANNOUNCE=1      one line at start saying the mode and what it costs (zsm-run's;
//                           the variable is then removed, so that an exec'd program is quiet)
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
#include <link.h>
#include <sys/syscall.h>
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
constexpr size_t kLeastRegion = size_t{256} << 20;  // an arena (and a half for mappings) at least
// The least budget: what half of it (the most that may be pinned) holds of an I/O call at once
// is then at least a datagram's largest (64 KiB), which a pin must never split.
constexpr size_t kLeastBudget = size_t{1} << 20;
// The pinning modes take only allocations this large (a system call that meets an evicted page
// fails with EFAULT there, and the kernel touches small blocks through calls no wrapper sees:
// a struct stat, a path).
constexpr size_t kPinningSmallest = 64 << 10;

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
// The code of libc and of the dynamic loader: an allocation made from there stays outside. And
// the code of the next malloc where that is a library of its own (a program's jemalloc or
// tcmalloc): what it maps stays outside too, as glibc's does.
struct Text {
  uintptr_t begin = 0, end = 0;
  bool holds(uintptr_t a) const { return a - begin < end - begin; }
};
Text libc_text, loader_text, next_malloc_text;

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
#define ZSM_PRELOAD_FIND(name, ret, params) find(next.name, #name);
  ZSM_PRELOAD_FUNCTIONS(ZSM_PRELOAD_FIND)
  ZSM_PRELOAD_ARG_FUNCTIONS(ZSM_PRELOAD_FIND)
#undef ZSM_PRELOAD_FIND
  resolving = false;
}

// --- Turning on. ----------------------------------------------------------------------------

// A size from the environment, at least `least` (0: any but 0); unset leaves *out.
bool size_from_env(const char* name, size_t* out, size_t least = 1, const char* least_text = nullptr) {
  const char* text = std::getenv(name);
  if (text == nullptr) return true;
  if (!parse_size(text, out) || *out == 0) {
    say("zsm_region_preload: %s='%s' is not a size (bytes, or with K, M or G); the library is off\n", name, text);
    off_reason = "a variable was not a size";
    return false;
  }
  if (*out < least) {
    say("zsm_region_preload: %s='%s' is below the least the library takes, %s; the library is off\n", name, text,
        least_text);
    off_reason = "a variable was below its least";
    return false;
  }
  return true;
}

// A number of `unit`s from the environment, 0 or in [least, most], as *out units * scale;
// unset leaves *out.
bool scaled_from_env(const char* name, double least, double most, const char* unit, double scale, unsigned* out) {
  const char* text = std::getenv(name);
  if (text == nullptr) return true;
  char* end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(value == 0 || (value >= least && value <= most))) {
    say("zsm_region_preload: %s='%s' is not 0 or %s from %g to %g; the library is off\n", name, text, unit, least, most);
    off_reason = "a variable was not 0 or in its range";
    return false;
  }
  *out = static_cast<unsigned>(value * scale + 0.5);
  return true;
}

bool options_from_env(zsm_region_options* o, size_t* region_size) {
  size_t file_size = 0;
  *region_size = kDefaultRegion;
  if (!size_from_env("ZSM_REGION_BUDGET", &o->budget_bytes, kLeastBudget, "1M") ||
      !size_from_env("ZSM_REGION_POOL_BUDGET", &o->compressed_budget_bytes) ||
      !size_from_env("ZSM_REGION_BACKING_FILE_SIZE", &file_size) ||
      !size_from_env("ZSM_REGION_SIZE", region_size, kLeastRegion, "256M") ||
      !scaled_from_env("ZSM_REGION_COLD_AGE", 0.1, 604800, "seconds", 1000, &o->cold_age_ms) ||
      !scaled_from_env("ZSM_REGION_STALL_TARGET", 0.0001, 10, "percent", 10000, &o->stall_target_ppm)) {
    return false;
  }
  if (o->stall_target_ppm != 0 && o->cold_age_ms == 0) {
    say("zsm_region_preload: ZSM_REGION_STALL_TARGET steers the cold age: set ZSM_REGION_COLD_AGE too; the library is off\n");
    off_reason = "ZSM_REGION_STALL_TARGET without ZSM_REGION_COLD_AGE";
    return false;
  }
  if (!stats_interval_from_env(o)) {
    off_reason = "ZSM_REGION_STATS_INTERVAL or ZSM_REGION_STATS_FILE was not usable";
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

// Whether this process is the one zsm-run started (through any exec), or there is no zsm-run.
bool the_launched_process() {
  const char* pid = std::getenv("ZSM_RUN_PID");
  return pid == nullptr || std::atol(pid) == getpid();
}

void start_stats() {
  const char* want = std::getenv("ZSM_REGION_STATS");
  if (want != nullptr && std::strcmp(want, "1") == 0 && the_launched_process()) {
    stats_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  }
}

// The program's name (its command's last part) and PID, for the lines the library prints.
void program_tag(char* out, size_t n) {
  char name[64] = "?";
  int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t got = ::read(fd, name, sizeof name - 1);
    ::close(fd);
    if (got > 0) name[got - (name[got - 1] == '\n' ? 1 : 0)] = '\0';
  }
  std::snprintf(out, n, "%s[%d]", name, static_cast<int>(getpid()));
}

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// What the mode costs, said once at start (zsm-run's ZSM_RUN_ANNOUNCE) and in the statistics.
const char* mode_text(const Layout& l) {
  if (l.self_serve) {
    return "the SIGBUS mode (each thread serves its own faults): allocations under 64 KiB and libc's own stay "
           "outside the region, I/O buffers are pinned";
  }
  if (l.user_mode_only) {
    return "handler threads, user-mode faults only (no privilege to serve the kernel's: "
           "vm.unprivileged_userfaultfd is 0 and /dev/userfaultfd is closed to this user): allocations under 64 KiB "
           "and libc's own stay outside the region, I/O buffers are pinned";
  }
  return "handler threads serving every fault, the kernel's too: all of the program's memory in the region";
}

void announce() {
  const char* want = std::getenv("ZSM_RUN_ANNOUNCE");
  if (want == nullptr || std::strcmp(want, "1") != 0 || !the_launched_process()) return;
  unsetenv("ZSM_RUN_ANNOUNCE");  // one line, not one more for each program this one execs
  char tag[96];
  program_tag(tag, sizeof tag);
  struct zsm_region_stats s {};
  zsm_region_stats(layout.region, &s);
  char aging[192] = "";
  if (layout.stall_target_ppm != 0) {
    std::snprintf(aging, sizeof aging,
                  "automatic: pages untouched for a cold age (%.1f s to start) are compressed, the age steered so that "
                  "faults on them take about %.2f %% of the time; ",
                  layout.cold_age_ms / 1000.0, layout.stall_target_ppm / 1e4);
  } else if (layout.cold_age_ms != 0) {
    std::snprintf(aging, sizeof aging, "pages untouched for %.1f s are compressed; ", layout.cold_age_ms / 1000.0);
  }
  say("zsm-run: %s: %sbudget %.1f MiB for this process, a cap (each process it starts has a budget of its own); %s\n",
      tag, aging, mib(s.budget_bytes), mode_text(layout));
}

// An object's executable segment.
Text text_of(const struct dl_phdr_info* info) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) != 0) {
      uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
      return {begin, begin + ph.p_memsz};
    }
  }
  return {};
}

// The executable segments of libc and of the dynamic loader (ld.so), where an allocation's
// caller is the system's own code; and of the next malloc's library, where that is not libc.
int find_system_text(struct dl_phdr_info* info, size_t, void*) {
  const char* name = info->dlpi_name;
  Text text = text_of(info);
  if (name != nullptr && std::strstr(name, "/libc.so.") != nullptr) {
    libc_text = text;
  } else if (name != nullptr && std::strstr(name, "/ld-linux") != nullptr) {
    loader_text = text;
  } else if (text.holds(reinterpret_cast<uintptr_t>(next.malloc))) {
    next_malloc_text = text;
  }
  return 0;
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
  layout.cold_age_ms = o.cold_age_ms;
  layout.stall_target_ppm = o.stall_target_ppm;
  stats_region_made(r);
  struct zsm_region_stats st {};
  zsm_region_stats(r, &st);
  layout.user_mode_only = st.user_mode_only != 0 && !layout.self_serve;
  dl_iterate_phdr(find_system_text, nullptr);
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
    if (turned_on.load()) {
      pthread_atfork(fork_prepare, fork_done, fork_done);
      if (layout.self_serve) init_signal_stack();
      announce();
    }
  }
  start_stats();
}

// ZSM_REGION_STATS=1: the region's statistics when the program exits, or why it had none. One
// line, sizes in MiB: the budget and the most the region cost (decompressed, pool, tables), what
// is stored and in what, the faults and evictions, and the mode.
__attribute__((destructor)) void print_stats_at_exit() {
  if (stats_fd < 0 || !the_launched_process()) return;  // not in a child of fork() that exits
  char line[1536], tag[96], aging[512] = "aging off";
  program_tag(tag, sizeof tag);
  int n;
  struct zsm_region_stats s {};
  if (!turned_on.load() || zsm_region_stats(layout.region, &s) != 0) {
    n = std::snprintf(line, sizeof line, "zsm-run: %s at exit: no region (%s)\n", tag, off_reason);
  } else {
    if (layout.cold_age_ms != 0) aging_text(aging, sizeof aging, s, layout.stall_target_ppm);
    n = std::snprintf(
        line, sizeof line,
        "zsm-run: %s at exit: budget %.1f MiB, peak %.1f MiB (decompressed %.1f, pool %.1f at their own peaks), now %.1f MiB "
        "(decompressed %.1f, pool %.1f, tables %.1f); stored %.1f MiB in %.1f MiB, %.1f MiB on file "
        "(written back %llu, read back %llu); faults %llu (zero %llu, ahead %llu, probation %llu, waited %llu); "
        "evictions %llu (clean %llu); over budget %llu pages; %s; outside the region %llu allocations; %s\n",
        tag, mib(s.budget_bytes), mib(std::max(s.peak_total_bytes, s.peak_decompressed_bytes)),
        mib(s.peak_decompressed_bytes), mib(s.peak_pool_bytes),
        mib(s.resident_bytes + s.probation_bytes + s.mem_used_total + s.bookkeeping_bytes),
        mib(s.resident_bytes + s.probation_bytes), mib(s.mem_used_total), mib(s.bookkeeping_bytes),
        mib(s.orig_data_size), mib(s.mem_used_total), mib(s.bd_bytes_on_file),
        (unsigned long long)s.written_back, (unsigned long long)s.read_back, (unsigned long long)s.faults,
        (unsigned long long)s.zero_faults, (unsigned long long)s.fault_around_pages,
        (unsigned long long)s.probation_faults, (unsigned long long)s.budget_waits, (unsigned long long)s.evictions,
        (unsigned long long)s.clean_evictions, (unsigned long long)s.over_budget_pages, aging,
        (unsigned long long)outside.load(), layout.self_serve ? "SIGBUS mode" : layout.user_mode_only ?
        "user-mode faults only" : "handler threads");
  }
  if (n > 0) (void)!::write(stats_fd, line, std::min(static_cast<size_t>(n), sizeof line - 1));
}

// --- The malloc family. ---------------------------------------------------------------------

bool called_from_the_system(const void* caller) {
  auto a = reinterpret_cast<uintptr_t>(caller);
  return libc_text.holds(a) || loader_text.holds(a);
}

// The layout, when a request of `bytes` made from `caller` may be served from the region.
// The allocations libc and the dynamic loader make for themselves stay outside in every mode:
// libc's system calls into them pass no wrapper, fork() reads libc's state (its name-service
// database) between the atfork handlers, and a new thread's start copies the loader's TLS
// tables, which a child of fork() does before its region has a thread to serve it.
const Layout* heap_for_this_call(size_t bytes, const void* caller) {
  const Layout* l = on();
  if (l == nullptr || use_next() || called_from_the_system(caller)) return nullptr;
  if (l->pins() && bytes < kPinningSmallest) return nullptr;
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

bool called_from_the_next_malloc(const void* caller) {
  return next_malloc_text.holds(reinterpret_cast<uintptr_t>(caller));
}

const Layout* on() { return turned_on.load(std::memory_order_acquire) ? &layout : nullptr; }

bool next_ready() {
  if (next.malloc == nullptr && !resolving) resolve_next();
  return next.malloc != nullptr && next.calloc != nullptr;
}

bool use_next() { return in_library || zsm_region_internal_thread() != 0; }

const Layout* pinning() {
  const Layout* l = on();
  return l != nullptr && l->pins() && !use_next() ? l : nullptr;
}

int Pin::take(const Layout& l, const void* p, size_t len) {
  release();
  auto a = reinterpret_cast<uintptr_t>(p);
  uintptr_t from = std::max(a, l.begin), to = std::min(a + len, l.end);
  if (len == 0 || from >= to) return 0;
  int saved = errno;  // a pin is invisible to the call it serves
  InLibrary guard;
  int rc = zsm_region_pin(l.region, reinterpret_cast<void*>(from), to - from);
  if (rc == 0) {
    l_ = &l;
    from_ = from;
    to_ = to;
  }
  errno = saved;
  return rc;
}

void Pin::release() {
  if (l_ == nullptr) return;
  int saved = errno;
  InLibrary guard;
  zsm_region_unpin(l_->region, reinterpret_cast<void*>(from_), to_ - from_);
  l_ = nullptr;
  errno = saved;
}

// A page's worth of steps through [p, p + len) inside the region: the first byte and each
// page's after it.
template <typename Touch>
void each_page(const Layout& l, const void* p, size_t len, Touch touch) {
  auto a = reinterpret_cast<uintptr_t>(p);
  uintptr_t from = std::max(a, l.begin), to = std::min(a + len, l.end);
  for (uintptr_t at = from; at < to; at = (at | 4095) + 1) touch(reinterpret_cast<unsigned char*>(at));
}

void touch_for_read(const Layout& l, const void* p, size_t len) {
  each_page(l, p, len, [](unsigned char* b) { (void)*reinterpret_cast<volatile unsigned char*>(b); });
}

void touch_for_write(const Layout& l, void* p, size_t len) {
  each_page(l, p, len, [](unsigned char* b) { __atomic_fetch_or(b, 0, __ATOMIC_RELAXED); });
}

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

namespace zsm_preload {
namespace {

// A block of `bytes` for `caller` (the interposed function's return address): the region's, or
// the next malloc's (too small or libc's own in a pinning mode, the library off, the region's
// arena full).
void* allocate(size_t bytes, const void* caller) {
  if (heap_for_this_call(bytes, caller) != nullptr) {
    if (void* p = mi.malloc(bytes)) return p;
    return outside_region(next.malloc(bytes));
  }
  if (!next_ready()) return bootstrap_alloc(bytes);
  return next.malloc(bytes);
}

size_t usable(const void* p, bool in_region) {
  return in_region ? mi.usable_size(p) : next.malloc_usable_size(const_cast<void*>(p));
}

// realloc() across the line between the region and the next malloc (a block that grew into
// what the mode takes, or shrank below it): a new block, the bytes copied.
void* move_block(void* p, size_t bytes, bool in_region, const void* caller) {
  void* q = allocate(bytes, caller);
  if (q == nullptr) return nullptr;
  std::memcpy(q, p, std::min(bytes, usable(p, in_region)));
  if (in_region) {
    mi.free(p);
  } else {
    next.free(p);
  }
  return q;
}

}  // namespace
}  // namespace zsm_preload

using zsm_preload::allocate;
using zsm_preload::bootstrap_alloc;
using zsm_preload::heap_for_this_call;
using zsm_preload::mi;
using zsm_preload::in_bootstrap;
using zsm_preload::next;
using zsm_preload::next_ready;
using zsm_preload::outside_region;

#define CALLER __builtin_return_address(0)

// The aligned calls: in the region while its arena has room, else from the next malloc (as
// malloc() and calloc() do; an alignment none takes gets the next malloc's answer).
template <typename... Args>
void* aligned_in_region_or_next(void* (*in_region)(Args...), void* (*from_next)(Args...), size_t bytes,
                                const void* caller, Args... args) {
  if (heap_for_this_call(bytes, caller) != nullptr) {
    if (void* p = in_region(args...)) return p;
    return next_ready() ? outside_region(from_next(args...)) : nullptr;
  }
  return next_ready() ? from_next(args...) : nullptr;
}

extern "C" {

__attribute__((visibility("default"))) void* malloc(size_t bytes) { return allocate(bytes, CALLER); }

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
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (heap_for_this_call(bytes, CALLER) != nullptr) {
    if (void* p = mi.calloc(count, size)) return p;
    return outside_region(next.calloc(count, size));
  }
  if (!next_ready()) return bootstrap_alloc(bytes);
  return next.calloc(count, size);
}

__attribute__((visibility("default"))) void* realloc(void* p, size_t bytes) {
  const void* caller = CALLER;
  if (p == nullptr) return allocate(bytes, caller);
  if (bytes == 0) {
    free(p);
    return nullptr;
  }
  if (in_bootstrap(p)) {
    void* q = allocate(bytes, caller);
    auto left = sizeof(zsm_preload::bootstrap) - static_cast<size_t>(static_cast<unsigned char*>(p) - zsm_preload::bootstrap);
    if (q != nullptr) std::memcpy(q, p, std::min(bytes, left));
    return q;
  }
  const zsm_preload::Layout* l = zsm_preload::on();
  const bool in_region = l != nullptr && zsm_preload::in_heap(*l, p);
  const bool wants_region = heap_for_this_call(bytes, caller) != nullptr;
  if (in_region && wants_region) {
    if (void* q = mi.realloc(p, bytes)) return q;
    void* q = outside_region(next.malloc(bytes));  // the arena is full
    if (q == nullptr) return nullptr;
    std::memcpy(q, p, std::min(bytes, mi.usable_size(p)));
    mi.free(p);
    return q;
  }
  if (!in_region && !wants_region) return next_ready() ? next.realloc(p, bytes) : nullptr;
  return zsm_preload::move_block(p, bytes, in_region, caller);
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
  if (heap_for_this_call(bytes, CALLER) != nullptr) {
    int rc = mi.posix_memalign(out, align, bytes);
    if (rc != ENOMEM) return rc;
    if (next_ready() && (rc = next.posix_memalign(out, align, bytes)) == 0) outside_region(*out);
    return rc;
  }
  if (!next_ready()) return ENOMEM;
  return next.posix_memalign(out, align, bytes);
}

__attribute__((visibility("default"))) void* aligned_alloc(size_t align, size_t bytes) {
  return aligned_in_region_or_next(mi.aligned_alloc, next.aligned_alloc, bytes, CALLER, align, bytes);
}

__attribute__((visibility("default"))) void* memalign(size_t align, size_t bytes) {
  return aligned_in_region_or_next(mi.memalign, next.memalign, bytes, CALLER, align, bytes);
}

__attribute__((visibility("default"))) void* valloc(size_t bytes) {
  return aligned_in_region_or_next(mi.valloc, next.valloc, bytes, CALLER, bytes);
}

__attribute__((visibility("default"))) void* pvalloc(size_t bytes) {
  return aligned_in_region_or_next(mi.pvalloc, next.pvalloc, bytes, CALLER, bytes);
}

__attribute__((visibility("default"))) size_t malloc_usable_size(void* p) {
  if (p == nullptr || in_bootstrap(p)) return 0;
  const zsm_preload::Layout* l = zsm_preload::on();
  if (l != nullptr && zsm_preload::in_heap(*l, p)) return mi.usable_size(p);
  return next_ready() ? next.malloc_usable_size(p) : 0;
}

}  // extern "C"
