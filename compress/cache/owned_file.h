// A file the library makes for itself at a path the user gives, by the cold tier's rules
// (zsm/backing_file.hpp, "The path"): a directory gets an unnamed file (O_TMPFILE, or a
// name unlinked at once where the file system has none); any other path must not exist and
// is created there (O_CREAT | O_EXCL: never through a symlink, never an existing file),
// mode 0600. The file is flock'ed for its life, so a second user of the same path is refused.
// At close its name is removed only if the path still names the file made here: a file
// renamed onto the path meanwhile is someone else's. The cache's backing file and the
// region's page file both open theirs this way.
#pragma once

#include <sys/types.h>

#include <string>

namespace zsm::detail {

class OwnedFile {
 public:
  // Makes and locks the file; `what` names it in errors ("backing file"), `temp_prefix` is
  // the moment's name in a directory without O_TMPFILE. Throws std::system_error naming the
  // path and what is wrong with it.
  static OwnedFile create(const std::string& path, const std::string& what,
                          const std::string& temp_prefix);
  OwnedFile() = default;
  OwnedFile(OwnedFile&& other) noexcept;
  OwnedFile& operator=(OwnedFile&& other) noexcept;
  OwnedFile(const OwnedFile&) = delete;
  OwnedFile& operator=(const OwnedFile&) = delete;
  ~OwnedFile();  // close(): removes the name if still ours, closes

  [[nodiscard]] int fd() const { return fd_; }
  void close();
  // Closes the descriptor only: in a child of fork(), the name and the lock are the parent's.
  void close_descriptor_only();

 private:
  void remove_name_if_still_ours();

  std::string path_;
  int fd_ = -1;
  bool created_ = false;  // the file has a name, path_, that close removes
  dev_t device_ = 0;      // the file's, to check the path still names it
  ino_t inode_ = 0;
};

}  // namespace zsm::detail
