// zsm_region_service_client: the client of tools/run-region-services.sh. It speaks to redis-server,
// or to the script's own Python services (which answer the same subset), over one TCP
// connection with a few requests pipelined in flight (--depth, 16 by default): a new request goes
// out as each reply comes back, so a reply's latency (request written to reply parsed) includes
// its wait behind the others in flight. Key i is "k:<i>"; its value is bytes [i*V, (i+1)*V) of
// the corpus file (V = the file's size / --keys), mapped here to check every reply.
//
//   --load: SETs every key in order (RESP arrays), checks each +OK, prints "set=N wrong=W seconds=S".
//   --seconds S: GETs (inline commands) for S seconds: the newest 30 % of the keys by recency
//   under Zipf(0.99) (rank 1 the newest key), one GET in a thousand an older key drawn
//   uniformly; prints "ops=N seconds=S p99_us=P wrong=W cpu_s=C" (C: this client's CPU time in
//   that loop, to show whether the client or the service is the bottleneck). A wrong value: a
//   reply that is not the key's bytes (an error, a nil, other bytes).
//
//   zsm_region_service_client --port P --keys N --corpus FILE (--load | --seconds S) [--depth D]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "zsm_region_service_client: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

// One reply: '+' (status), '-' (error), '$' (a bulk string) or 'n' (nil), and its text.
struct Reply {
  char type;
  std::string_view data;
};

// The reply at the start of `in`, and the bytes it takes; nullopt while it is incomplete.
std::optional<std::pair<Reply, size_t>> parse(std::string_view in) {
  size_t eol = in.find("\r\n");
  if (eol == std::string_view::npos) return std::nullopt;
  if (in[0] != '$') return std::pair{Reply{in[0], in.substr(1, eol - 1)}, eol + 2};
  long len = std::strtol(std::string(in.substr(1, eol - 1)).c_str(), nullptr, 10);
  if (len < 0) return std::pair{Reply{'n', {}}, eol + 2};
  size_t end = eol + 2 + static_cast<size_t>(len) + 2;
  if (in.size() < end) return std::nullopt;
  return std::pair{Reply{'$', in.substr(eol + 2, static_cast<size_t>(len))}, end};
}

// Keeps `depth` requests in flight on `fd`: next(out) appends one request and returns its key,
// or nullopt when there are no more; done(key, reply, latency in ns) sees the replies in order.
template <class Next, class Done>
void pipeline(int fd, size_t depth, Next next, Done done) {
  struct Sent {
    uint64_t key;
    Clock::time_point at;
  };
  std::deque<Sent> in_flight;
  std::string out, in;
  char chunk[1 << 16];
  bool more = true;
  for (;;) {
    while (more && in_flight.size() < depth) {
      std::optional<uint64_t> key = next(out);
      if (!key) more = false;
      else in_flight.push_back({*key, Clock::now()});
    }
    for (size_t sent = 0; sent < out.size();) {
      ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n < 0) fail("send");
      sent += static_cast<size_t>(n);
    }
    out.clear();
    if (in_flight.empty()) return;
    ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n == 0) errno = ECONNRESET;  // the service closed the connection
    if (n <= 0) fail("recv");
    in.append(chunk, static_cast<size_t>(n));
    size_t used = 0;
    while (!in_flight.empty()) {
      auto reply = parse(std::string_view(in).substr(used));
      if (!reply) break;
      auto now = Clock::now();
      done(in_flight.front().key, reply->first,
           std::chrono::duration_cast<std::chrono::nanoseconds>(now - in_flight.front().at).count());
      in_flight.pop_front();
      used += reply->second;
    }
    in.erase(0, used);
  }
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0;
  uint64_t keys = 0;
  size_t depth = 16;
  double seconds = 0;
  bool load = false;
  const char* corpus = nullptr;
  auto usage = [] {
    std::fprintf(stderr, "usage: zsm_region_service_client --port P --keys N --corpus FILE "
                         "(--load | --seconds S) [--depth D]\n");
    std::exit(2);
  };
  for (int i = 1; i < argc; i++) {
    std::string_view a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--load") load = true;
    else if (a == "--port") port = std::atoi(v), i++;
    else if (a == "--keys") keys = std::strtoull(v, nullptr, 10), i++;
    else if (a == "--corpus") corpus = v, i++;
    else if (a == "--seconds") seconds = std::atof(v), i++;
    else if (a == "--depth") depth = std::strtoull(v, nullptr, 10), i++;
    else usage();
  }
  if (port <= 0 || keys == 0 || corpus == nullptr || depth == 0 || load == (seconds > 0)) usage();
  int cfd = ::open(corpus, O_RDONLY);
  struct stat st {};
  if (cfd < 0 || fstat(cfd, &st) != 0) fail(corpus);
  const size_t value = static_cast<size_t>(st.st_size) / keys;
  auto* base = static_cast<const char*>(
      mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE | MAP_POPULATE, cfd, 0));
  if (base == MAP_FAILED || value == 0) fail("mmap of the corpus");
  auto value_of = [&](uint64_t key) { return std::string_view(base + key * value, value); };

  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) fail("connect");

  uint64_t wrong = 0, ops = 0;
  auto start = Clock::now();
  if (load) {
    uint64_t key = 0;
    pipeline(
        fd, 64,
        [&](std::string& out) -> std::optional<uint64_t> {
          if (key == keys) return std::nullopt;
          std::string k = "k:" + std::to_string(key);
          out += "*3\r\n$3\r\nSET\r\n$" + std::to_string(k.size()) + "\r\n" + k + "\r\n$" +
                 std::to_string(value) + "\r\n";
          out += value_of(key);
          out += "\r\n";
          return key++;
        },
        [&](uint64_t, const Reply& r, int64_t) { wrong += !(r.type == '+' && r.data == "OK"); });
    std::printf("set=%llu wrong=%llu seconds=%.3f\n", static_cast<unsigned long long>(keys),
                static_cast<unsigned long long>(wrong),
                std::chrono::duration<double>(Clock::now() - start).count());
    return 0;
  }

  // Recency ranks of the hot part (the newest 30 %), Zipf(0.99): the CDF, drawn by bisection.
  const uint64_t hot = std::max<uint64_t>(1, keys * 3 / 10), old = keys - hot;
  std::vector<double> cdf(hot);
  double sum = 0;
  for (uint64_t r = 0; r < hot; r++) cdf[r] = sum += 1.0 / std::pow(static_cast<double>(r + 1), 0.99);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> unit(0, sum);
  auto draw = [&]() -> uint64_t {
    if (old > 0 && rng() % 1000 == 0) return rng() % old;
    uint64_t rank = static_cast<uint64_t>(std::lower_bound(cdf.begin(), cdf.end(), unit(rng)) - cdf.begin());
    return keys - 1 - std::min(rank, hot - 1);
  };

  std::vector<uint32_t> latency_ns;
  latency_ns.reserve(1 << 20);
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  const double cpu0 = cpu_seconds();
  pipeline(
      fd, depth,
      [&](std::string& out) -> std::optional<uint64_t> {
        if (Clock::now() >= deadline) return std::nullopt;
        uint64_t key = draw();
        out += "GET k:" + std::to_string(key) + "\r\n";
        return key;
      },
      [&](uint64_t key, const Reply& r, int64_t ns) {
        ops++;
        wrong += !(r.type == '$' && r.data == value_of(key));
        latency_ns.push_back(static_cast<uint32_t>(std::min<int64_t>(ns, UINT32_MAX)));
      });
  const double cpu = cpu_seconds() - cpu0;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  double p99 = 0;
  if (!latency_ns.empty()) {
    auto at = latency_ns.begin() + static_cast<ptrdiff_t>((latency_ns.size() - 1) * 99 / 100);
    std::nth_element(latency_ns.begin(), at, latency_ns.end());
    p99 = *at / 1000.0;
  }
  std::printf("ops=%llu seconds=%.3f p99_us=%.1f wrong=%llu cpu_s=%.3f\n", static_cast<unsigned long long>(ops),
              elapsed, p99, static_cast<unsigned long long>(wrong), cpu);
  return 0;
}
