// Example: the compressed cache from C++, the README's example. Stores 4 KiB pages of text
// (every tenth one same-filled), reads them back, recompresses with zstd and prints zram's
// mm_stat line.
#include <zsm/cache.hpp>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

std::vector<std::byte> make_page(int n) {
  static const char text[] = "zsm compressed cache ";
  std::vector<std::byte> page(4096);
  for (size_t i = 0; i < page.size(); i++)
    page[i] = static_cast<std::byte>(n % 10 == 0 ? 0 : text[(i + n) % (sizeof text - 1)]);
  return page;
}

int main() {
  zsm::CacheOptions options;
  options.capacity_bytes = 16 << 20;  // counts pool pages, pool bookkeeping and the index
  options.recompress_codec = zsm::CodecOptions{zsm::CodecKind::zstd, 19, {}};
  // options.backing_file = zsm::BackingFileOptions{.path = "/var/tmp/app.cold"};  // cold tier
  zsm::Cache cache(options);
  for (int n = 0; n < 1000; n++) cache.put("page:" + std::to_string(n), make_page(n));
  std::optional<std::vector<std::byte>> v = cache.get("page:3");

  bool ok = v == make_page(3) && !cache.get("page:1000");
  std::printf("recompressed %zu\nmm_stat %s\n", cache.recompress(), cache.mm_stat().c_str());
  ok = ok && cache.get("page:999") == make_page(999);
  return ok ? 0 : 1;
}
