// The region's backing file (page_file.h has its layout and promises).
#include "page_file.h"

#include <xxhash.h>

#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <system_error>
#include <unistd.h>

namespace zsm::region {
namespace {

// A location: the extent's first sector above, the checksum of its bytes below.
uint64_t location(uint64_t sector, uint32_t checksum) { return sector << 32 | checksum; }
uint32_t checksum_of(uint64_t where) { return static_cast<uint32_t>(where); }
uint32_t checksum(std::span<const std::byte> bytes) {
  return static_cast<uint32_t>(XXH3_64bits(bytes.data(), bytes.size()));
}

// pread(2) and pwrite(2) as system calls, not libc's functions: those are cancellation points,
// and a read back may run in a SIGBUS handler holding a page's lock, which a deferred
// pthread_cancel() acting there would never release. (A preload library may also interpose
// libc's.) The bytes done, or -1 with errno.
ssize_t pread_raw(int fd, void* buf, size_t n, off_t at) { return syscall(SYS_pread64, fd, buf, n, at); }
ssize_t pwrite_raw(int fd, const void* buf, size_t n, off_t at) { return syscall(SYS_pwrite64, fd, buf, n, at); }

// The directory a backing file at `path` lives in: the path itself when it is one.
std::string directory_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return path;
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

PageFile::PageFile(const std::string& path, uint64_t capacity)
    : file_(detail::OwnedFile::create(path, "backing file", ".zsm-region-")),
      directory_(directory_of(path)),
      capacity_sectors_(capacity / kSector),
      buffer_(kMaxSectors * kSector) {
  for (auto& list : free_) list.reserve(kReleaseRoom);  // release() from a signal handler
}

std::optional<uint64_t> PageFile::allocate(size_t sectors) {
  if (!free_[sectors].empty()) {
    uint64_t s = free_[sectors].back();
    free_[sectors].pop_back();
    return s;
  }
  if (next_sector_ + sectors <= capacity_sectors_) {
    uint64_t s = next_sector_;
    next_sector_ += sectors;
    return s;
  }
  for (size_t longer = sectors + 1; longer <= kMaxSectors; ++longer) {
    if (free_[longer].empty()) continue;
    uint64_t s = free_[longer].back();
    free_[longer].pop_back();
    free_[longer - sectors].push_back(s + sectors);
    return s;
  }
  return std::nullopt;
}

void PageFile::free_extent(uint64_t sector, size_t sectors) {
  std::vector<uint64_t>& list = free_[sectors];
  list.push_back(sector);
  if (list.capacity() < list.size() + kReleaseRoom) list.reserve(list.size() + 2 * kReleaseRoom);
}

std::optional<uint64_t> PageFile::write(std::span<const std::byte> bytes) {
  if (bytes.empty() || bytes.size() > kMaxSectors * kSector) return std::nullopt;
  size_t sectors = sectors_for(bytes.size());
  auto sector = allocate(sectors);
  full_ = !sector;
  if (!sector) return std::nullopt;
  std::memcpy(buffer_.data(), bytes.data(), bytes.size());
  std::memset(buffer_.data() + bytes.size(), 0, sectors * kSector - bytes.size());
  auto n = pwrite_raw(file_.fd(), buffer_.data(), sectors * kSector, static_cast<off_t>(*sector * kSector));
  if (n != static_cast<ssize_t>(sectors * kSector)) {
    free_extent(*sector, sectors);
    full_ = true;
    return std::nullopt;
  }
  live_sectors_ += sectors;
  return location(*sector, checksum(bytes));
}

bool PageFile::read_at(int fd, uint64_t where, std::span<std::byte> out) {
  auto n = pread_raw(fd, out.data(), out.size(), static_cast<off_t>(sector_of(where) * kSector));
  return n == static_cast<ssize_t>(out.size()) && checksum(out) == checksum_of(where);
}

void PageFile::release(uint64_t where, size_t length, bool may_allocate) {
  size_t sectors = sectors_for(length);
  std::vector<uint64_t>& list = free_[sectors];
  if (may_allocate) {
    free_extent(sector_of(where), sectors);
  } else if (list.size() < list.capacity()) {
    list.push_back(sector_of(where));
  } else {
    lost_sectors_ += sectors;
  }
  live_sectors_ -= sectors;
  full_ = false;
}

void PageFile::end_batch() {
  ::sync_file_range(file_.fd(), 0, 0,
                    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
  ::posix_fadvise(file_.fd(), 0, 0, POSIX_FADV_DONTNEED);
}

}  // namespace zsm::region

namespace zsm::region {

PageFile::ChildCopy PageFile::copy_for_child() const {
  ChildCopy c;
  try {
    c.file = detail::OwnedFile::create(directory_, "the child's backing file", ".zsm-region-");
  } catch (const std::system_error& e) {
    c.error = e.code().value();
    c.why = e.what();
    return c;
  }
  const auto size = static_cast<size_t>(next_sector_ * kSector);
  loff_t in = 0, out = 0;
  while (c.bytes < size) {
    ssize_t n = ::copy_file_range(file_.fd(), &in, c.file.fd(), &out, size - c.bytes, 0);
    if (n <= 0) {
      c.error = n < 0 ? errno : EIO;
      c.why = std::string("copying the backing file for a child of fork() into ") + directory_ + ": " +
              std::strerror(c.error);
      break;
    }
    c.bytes += static_cast<uint64_t>(n);
  }
  c.bytes = c.bytes / kSector * kSector;
  return c;
}

void PageFile::adopt_in_child(detail::OwnedFile copy) {
  file_.close_descriptor_only();
  file_ = std::move(copy);
}

}  // namespace zsm::region
