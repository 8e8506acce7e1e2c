// Real pages for the benchmarks and tools: 4 KiB pages of the regular files under some
// directories (by default /usr/lib and /usr/share), files in a shuffled order fixed by a seed,
// at most `per_file` pages from each, so that a modest page count still spans many kinds of
// file. Header-only; depends on the standard library.
#pragma once

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace zsm_bench {

inline constexpr size_t kCorpusPage = 4096;

inline std::vector<std::string> default_corpus_roots() { return {"/usr/lib", "/usr/share"}; }

// Regular files of at least one page under `roots`, shuffled by `seed`.
inline std::vector<std::filesystem::path> corpus_files(const std::vector<std::string>& roots,
                                                       uint64_t seed) {
  std::vector<std::filesystem::path> files;
  for (const std::string& root : roots) {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(
             root, std::filesystem::directory_options::skip_permission_denied, ec);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      if (it->is_regular_file(ec) && !it->is_symlink(ec) && it->file_size(ec) >= kCorpusPage)
        files.push_back(it->path());
    }
  }
  std::sort(files.begin(), files.end());
  std::shuffle(files.begin(), files.end(), std::mt19937_64(seed));
  return files;
}

// Calls fn(file, page index in the file, page bytes) for whole pages, at most `per_file` from
// each file, until fn has taken `max_pages` of them (fn returns whether it took the page);
// returns the number taken.
inline size_t for_each_corpus_page(
    const std::vector<std::filesystem::path>& files, size_t max_pages, int per_file,
    const std::function<bool(const std::filesystem::path&, size_t, const unsigned char*)>& fn) {
  std::vector<unsigned char> page(kCorpusPage);
  size_t taken = 0;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    for (int n = 0; n < per_file && taken < max_pages; n++) {
      if (!in.read(reinterpret_cast<char*>(page.data()), kCorpusPage)) break;
      taken += fn(file, static_cast<size_t>(n), page.data()) ? 1 : 0;
    }
    if (taken >= max_pages) break;
  }
  return taken;
}

}  // namespace zsm_bench
