// Example: the pool from C++ (zsm/zsm.hpp), the README's example: a hardened pool of 4-page
// zspages, one object stored through a handle that frees it, read back, and kept through a
// compaction.
#include <zsm/zsm.hpp>

#include <cstdio>
#include <span>
#include <string>
#include <vector>

int main() {
  std::string text = "compressed bytes would go here";
  zs_pool_config config{};
  config.chain_size = 4;
  config.flags = ZS_POOL_HARDENED;
  zsm::Pool pool("values", config);
  zsm::Handle h = pool.store(std::as_bytes(std::span(text)), ZS_ALLOC_TAG_HERE());
  std::vector<std::byte> back(text.size());
  h.read(back);   // more than text.size() would abort: the pool is hardened
  pool.compact(); // h stays valid

  std::vector<std::byte> again(text.size());
  h.read(again);
  const bool ok = back == again && std::string(reinterpret_cast<const char*>(back.data()),
                                               back.size()) == text;
  std::printf("%s: %lu pages\n", ok ? "read back" : "MISMATCH", pool.total_pages());
  return ok ? 0 : 1;
}
