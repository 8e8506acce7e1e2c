// A file of the library's own at a user's path (owned_file.h has the rules).
#include "owned_file.h"

#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace zsm::detail {
namespace {

[[noreturn]] void throw_errno(int error, const std::string& what) {
  throw std::system_error(error, std::generic_category(), what);
}

}  // namespace

OwnedFile OwnedFile::create(const std::string& path, const std::string& what,
                            const std::string& temp_prefix) {
  OwnedFile f;
  f.path_ = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    f.fd_ = ::open(path.c_str(), O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC, 0600);
    if (f.fd_ < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
      std::string name = path + "/" + temp_prefix + "XXXXXX";  // named for a moment
      f.fd_ = ::mkostemp(name.data(), O_CLOEXEC);
      if (f.fd_ >= 0) ::unlink(name.c_str());
    }
    if (f.fd_ < 0) throw_errno(errno, what + ": no file can be made in directory " + path);
  } else {
    f.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (f.fd_ < 0 && errno == EEXIST)
      throw_errno(EEXIST, what + " " + path +
                              " exists: only a file made here is used (give a path that does "
                              "not exist, or a directory for an unnamed file)");
    if (f.fd_ < 0) throw_errno(errno, what + " " + path + " cannot be created");
    f.created_ = true;
  }
  if (::fstat(f.fd_, &st) == 0) {
    f.device_ = st.st_dev;
    f.inode_ = st.st_ino;
  }
  if (::flock(f.fd_, LOCK_EX | LOCK_NB) != 0) throw_errno(errno, what + " " + path + " cannot be locked");
  return f;  // a throw above closes and unlinks what was made, through ~OwnedFile
}

OwnedFile::OwnedFile(OwnedFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      created_(std::exchange(other.created_, false)),
      device_(other.device_),
      inode_(other.inode_) {}

OwnedFile& OwnedFile::operator=(OwnedFile&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    created_ = std::exchange(other.created_, false);
    device_ = other.device_;
    inode_ = other.inode_;
  }
  return *this;
}

OwnedFile::~OwnedFile() { close(); }

void OwnedFile::close() {
  if (fd_ < 0) return;
  remove_name_if_still_ours();
  close_descriptor_only();
}

void OwnedFile::close_descriptor_only() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  created_ = false;
}

void OwnedFile::remove_name_if_still_ours() {
  if (!created_) return;
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == device_ && st.st_ino == inode_)
    ::unlink(path_.c_str());
}

}  // namespace zsm::detail
