// The README's first example, whole: a compressed cache in a program of one's own, as a
// newcomer writes it after installing the libraries (find_package(zsm COMPONENTS cache)).
#include <zsm/cache.hpp>

#include <cstdio>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

int main() {
  zsm::Cache cache(zsm::CacheOptions{.capacity_bytes = 64 << 20});  // lz4 by default
  cache.put("key", std::as_bytes(std::span(std::string_view("a value"))));
  std::optional<std::vector<std::byte>> value = cache.get("key");   // nullopt once evicted

  const bool same = value && std::string_view(reinterpret_cast<const char*>(value->data()),
                                              value->size()) == "a value";
  std::printf("quick start: %s\n", same ? "the value came back" : "WRONG VALUE");
  return same ? 0 : 1;
}
