// What zsm-run says of the region's aging (preload.h): the automatic mode's part of the line
// at exit (the cold age, the memory saved now and on average, the stall share, promotions a
// minute), and the same figures as CSV lines every ZSM_REGION_STATS_INTERVAL seconds, written
// by the region's evictor thread through the region's report hook, to ZSM_REGION_STATS_FILE
// or stderr. Everything is formatted on the stack: the evictor must not touch region memory.
// The evictor runs on a descriptor table of its own (descriptors.h): it reaches the program's
// descriptor for the lines through /proc/self/fd, the process's table.
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "preload.h"

namespace zsm_preload {
namespace {

constexpr double kMiB = 1 << 20;

double now_s() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double started_s = 0;                  // when the region was made
std::atomic<zsm_region*> reported{nullptr};
int csv_fd = -1;
struct stat csv_file {};                // what csv_fd is, so that a number the program reused is not written
pid_t csv_pid = 0;                     // the process the lines are of (not a child of fork())
struct zsm_region_stats last {};               // the report's previous figures, and when
double last_s = 0;

// Memory the pages held only as copies save: their bytes less the pool's (a clean page, mapped
// with its copy valid, saves nothing: the region's own sum_saved_bytes counts the same), and its
// share of the bytes the pages would hold.
uint64_t copies_only_bytes(const struct zsm_region_stats& s) {
  return (s.stored_pages - std::min(s.stored_pages, s.clean_pages)) * 4096;
}
uint64_t saved_now(const struct zsm_region_stats& s) {
  const uint64_t copies = copies_only_bytes(s);
  return copies > s.mem_used_total ? copies - s.mem_used_total : 0;
}
double percent_of_held(uint64_t saved, const struct zsm_region_stats& s) {
  const uint64_t held = s.resident_bytes + s.probation_bytes + copies_only_bytes(s);
  return held == 0 ? 0 : 100.0 * static_cast<double>(saved) / static_cast<double>(held);
}
double average_saved_percent(const struct zsm_region_stats& s) {
  return s.held_byte_seconds == 0 ? 0 : 100.0 * s.saved_byte_seconds / s.held_byte_seconds;
}

uint64_t rss_bytes() {
  char text[64] = "";
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t got = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  unsigned long long size = 0, resident = 0;
  if (got <= 0 || std::sscanf(text, "%llu %llu", &size, &resident) != 2) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

void write_line(int fd, const char* line, int n, size_t room) {
  if (n > 0) (void)!::write(fd, line, std::min(static_cast<size_t>(n), room - 1));
}

// From the evictor's own table: the program's descriptor opened anew, appending (a file
// written from its start would be overwritten) and never blocking (a full pipe must not stop
// the evictor: the line is lost instead), and only while it is the same file (the program
// may have closed the number and reused it). A socket cannot be opened so: no lines there.
void write_to_program_fd(int fd, const char* line, int n, size_t room) {
  char path[48];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  int own = open(path, O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
  if (own < 0) return;
  struct stat now {};
  if (fstat(own, &now) == 0 && now.st_dev == csv_file.st_dev && now.st_ino == csv_file.st_ino) {
    write_line(own, line, n, room);
  }
  ::close(own);
}

// One CSV line: the interval's stall share and promotions, the rest as they stand.
void report(void*) {
  zsm_region* r = reported.load(std::memory_order_acquire);
  struct zsm_region_stats s {};
  if (r == nullptr || getpid() != csv_pid || zsm_region_stats(r, &s) != 0) return;
  const double now = now_s(), span = now - last_s;
  const uint64_t saved = saved_now(s);
  char line[512];
  int n = std::snprintf(
      line, sizeof line, "%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.3f,%.1f,%.1f\n", now - started_s,
      rss_bytes() / kMiB, (s.resident_bytes + s.probation_bytes) / kMiB, s.mem_used_total / kMiB,
      s.orig_data_size / kMiB, saved / kMiB, percent_of_held(saved, s),
      now > started_s ? s.saved_byte_seconds / (now - started_s) / kMiB : 0,
      span > 0 ? 100.0 * static_cast<double>(s.stall_ns - last.stall_ns) * 1e-9 / span : 0,
      span > 0 ? static_cast<double>(s.refaults - last.refaults) * 60 / span : 0, s.cold_age_ms / 1000.0);
  write_to_program_fd(csv_fd, line, n, sizeof line);
  last = s;
  last_s = now;
}

}  // namespace

bool stats_interval_from_env(zsm_region_options* o) {
  started_s = last_s = now_s();
  const char* text = std::getenv("ZSM_REGION_STATS_INTERVAL");
  const char* launched = std::getenv("ZSM_RUN_PID");  // zsm-run's process alone reports
  if (text == nullptr || (launched != nullptr && std::atol(launched) != getpid())) return true;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds >= 0.1 && seconds <= 86400)) {
    say("zsm_region_preload: ZSM_REGION_STATS_INTERVAL='%s' is not seconds from 0.1 to 86400; the library is off\n",
        text);
    return false;
  }
  csv_pid = getpid();
  const char* path = std::getenv("ZSM_REGION_STATS_FILE");
  csv_fd = path != nullptr && *path != '\0' ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)
                                            : fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  if (csv_fd < 0 || fstat(csv_fd, &csv_file) != 0) {
    say("zsm_region_preload: ZSM_REGION_STATS_FILE='%s' cannot be written (%s); the library is off\n",
        path == nullptr ? "" : path, std::strerror(errno));
    return false;
  }
  const char header[] =
      "seconds,rss_mib,decompressed_mib,pool_mib,stored_mib,saved_mib,saved_percent,saved_average_mib,"
      "stall_percent,promotions_per_minute,cold_age_s\n";
  // One header a file: an exec of the launched process opens it again (zsm-run truncates it).
  if (!S_ISREG(csv_file.st_mode) || csv_file.st_size == 0) write_line(csv_fd, header, sizeof header - 1, sizeof header);
  o->report = report;
  o->report_every_ms = static_cast<unsigned>(seconds * 1000 + 0.5);
  return true;
}

void stats_region_made(zsm_region* r) { reported.store(r, std::memory_order_release); }

int aging_text(char* out, size_t n, const struct zsm_region_stats& s, unsigned stall_target_ppm) {
  const double seconds = now_s() - started_s;
  const uint64_t saved = saved_now(s);
  char steering[96] = "";
  if (stall_target_ppm != 0) {
    std::snprintf(steering, sizeof steering, " (steered toward %.2f %% of the time in promotions)",
                  stall_target_ppm / 1e4);
  }
  return std::snprintf(
      out, n,
      "aging: cold age %.1f s%s, aged %llu, cold %llu; saved now %.1f MiB (%.1f %%), on average %.1f MiB (%.1f %%); "
      "stalled %.2f s (%.2f %% of the time, promotions %.2f %%), promotions %.0f a minute",
      s.cold_age_ms / 1000.0, steering, (unsigned long long)s.aged_pages, (unsigned long long)s.cold_evictions,
      saved / kMiB, percent_of_held(saved, s), seconds > 0 ? s.saved_byte_seconds / seconds / kMiB : 0,
      average_saved_percent(s), s.stall_ns / 1e9, seconds > 0 ? 100.0 * s.stall_ns * 1e-9 / seconds : 0,
      seconds > 0 ? 100.0 * s.promotion_stall_ns * 1e-9 / seconds : 0,
      seconds > 0 ? static_cast<double>(s.refaults) * 60 / seconds : 0);
}

}  // namespace zsm_preload
