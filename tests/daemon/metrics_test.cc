// kvtierd's metrics and operations tooling against the real daemon: what
// /metrics reports agrees with what the real client saw, promtool accepts
// the exposition, a real Prometheus scrapes it and answers the dashboard's
// queries, every metric the dashboard uses exists and is documented, and
// `kvtier stats` / `kvtier plan --daemon` show the same figures.
//
// Each daemon here serves metrics on 127.0.0.1:0 (a free port, read from
// its log); it is killed, not stopped, at the end, since a graceful stop
// waits ~2 s for the HTTP server (docs/build.md): one test stops one cleanly.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "client/client.h"
#include "daemon/config.h"
#include "support/daemon_client.h"

namespace kvtier::testing {
namespace {

using client::Client;
using prefix_index::BlockKey;
using prefix_index::TokenId;
using protocol::WireTier;
using protocol::WireWriteState;
using namespace std::chrono_literals;

constexpr uint64_t kBlockBytes = 16 * 1024;  // Layout{2, 2, 64, fp16, 16}

// ------------------------------------------------------------ helpers

struct HttpReply {
  int status = 0;
  std::string body;
};

// GET http://127.0.0.1:port/target over HTTP/1.0 (the server closes the
// connection after the reply, so the body is all that follows the headers).
std::optional<HttpReply> HttpGet(uint16_t port, const std::string& target) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string raw;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request = "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      char buf[16384];
      ssize_t n;
      while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) raw.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  const size_t split = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || split == std::string::npos) return std::nullopt;
  return HttpReply{std::atoi(raw.c_str() + 9), raw.substr(split + 4)};
}

// "name{labels}" -> value, and family name -> type, of a text exposition.
struct Exposition {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;

  explicit Exposition(const std::string& text) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("# TYPE ", 0) == 0) {
        std::istringstream f(line.substr(7));
        std::string name, type;
        f >> name >> type;
        types[name] = type;
      } else if (!line.empty() && line[0] != '#') {
        const size_t space = line.rfind(' ');
        samples[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
      }
    }
  }
  // The value of a series; -1 (and a test failure) when it is absent.
  double operator()(const std::string& series) const {
    auto it = samples.find(series);
    EXPECT_NE(it, samples.end()) << series << " is not exposed";
    return it == samples.end() ? -1 : it->second;
  }
  double Tier(const std::string& name, const std::string& tier) const {
    return (*this)(name + "{tier=\"" + tier + "\"}");
  }
};

bool OnPath(const std::string& tool) { return Shell("command -v " + tool).first == 0; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The expressions of the Grafana dashboard (every "expr" string, unescaped).
std::vector<std::string> DashboardExprs() {
  const std::string json = ReadFile(KVTIER_SOURCE_DIR "/deploy/grafana-dashboard.json");
  std::vector<std::string> exprs;
  const std::regex expr_re(R"re("expr"\s*:\s*"((?:[^"\\]|\\.)*)")re");
  for (std::sregex_iterator it(json.begin(), json.end(), expr_re), end; it != end; ++it) {
    std::string e;
    const std::string raw = (*it)[1];
    for (size_t i = 0; i < raw.size(); ++i)
      e += raw[i] == '\\' && i + 1 < raw.size() ? raw[++i] : raw[i];
    exprs.push_back(e);
  }
  return exprs;
}

std::string UrlEncode(const std::string& s) {
  std::string out;
  char buf[4];
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// ------------------------------------------------------------ fixture

class MetricsTest : public ::testing::Test {
 protected:
  // A daemon with all three tiers (a 2 MiB emulated device tier of 1 MiB
  // slabs: 128 blocks of 16 KiB) and metrics on a free port.
  void StartDaemon(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {
        "--metrics-address", "127.0.0.1:0", "--device",       "emulated",
        "--device-capacity", "2MiB",        "--host-slab",    "1MiB",
        "--ssd-dir",         dir_ / "ssd",  "--ssd-capacity", "32MiB"};
    args.insert(args.end(), extra.begin(), extra.end());
    daemon_ = Daemon::Start(args);
    ASSERT_NE(daemon_, nullptr);
    // The line comes right after the socket is bound; wait for it.
    const std::regex port_re(R"(metrics on http://127\.0\.0\.1:(\d+)/metrics)");
    for (int i = 0; i < 500 && port_ == 0; ++i) {
      std::smatch m;
      const std::string log = daemon_->Log();
      if (std::regex_search(log, m, port_re)) {
        port_ = static_cast<uint16_t>(std::stoi(m[1]));
      } else {
        std::this_thread::sleep_for(20ms);
      }
    }
    ASSERT_NE(port_, 0) << daemon_->Log();
  }
  void TearDown() override { daemon_.reset(); }

  std::unique_ptr<Client> Connect() {
    return ConnectClient(TestClientOptions(daemon_->socket(), "metrics-test", "metrics-test"));
  }

  Exposition Scrape() {
    auto reply = HttpGet(port_, "/metrics");
    EXPECT_TRUE(reply.has_value());
    if (!reply) return Exposition("");
    EXPECT_EQ(reply->status, 200);
    text_ = reply->body;
    return Exposition(reply->body);
  }

  // Writes `keys` in chunks chained by parent, into `tier`; the blocks the
  // daemon allocated (committed).
  size_t Put(Client& c, const std::vector<BlockKey>& keys, WireTier tier, size_t chunk) {
    size_t committed = 0;
    for (size_t at = 0; at < keys.size(); at += chunk) {
      const auto part = std::span(keys).subspan(at, std::min(chunk, keys.size() - at));
      auto w = c.Allocate(part, at == 0 ? std::nullopt : std::optional(keys[at - 1]), tier);
      EXPECT_TRUE(w.ok()) << w.status().ToString();
      if (!w.ok()) return committed;
      for (size_t i = 0; i < w->size(); ++i) {
        if (w->state(i) == WireWriteState::kAllocated) FillPattern(w->Bytes(i), part[i]);
      }
      committed += w->allocated();
      EXPECT_TRUE(w->Commit().ok());
    }
    return committed;
  }

  TempDir dir_{"/var/tmp/kvtier-metrics"};
  std::unique_ptr<Daemon> daemon_;
  uint16_t port_ = 0;
  std::string text_;  // the last exposition scraped
};

// ------------------------------------------------------------ tests

TEST_F(MetricsTest, MetricsAgreeWithWhatTheClientSaw) {
  StartDaemon();
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  std::map<std::string, int> requests;  // what this client sent, per op

  // 200 blocks into the 128-block device tier: the oldest go down to host.
  const auto a = c->Keys(RandomPrompt(1, 200));
  EXPECT_EQ(Put(*c, a, WireTier::kDevice, 40), 200u);
  requests["allocate"] += 5;
  requests["commit"] += 5;
  // 8 more straight into host.
  const auto other = c->Keys(RandomPrompt(2, 8));
  EXPECT_EQ(Put(*c, other, WireTier::kHost, 8), 8u);
  requests["allocate"] += 1;
  requests["commit"] += 1;

  // Lookups: A and 10 blocks beyond it, then a prompt nobody wrote.
  auto longer_tokens = RandomPrompt(1, 200);
  for (int i = 0; i < 160; ++i) longer_tokens.push_back(7);
  const auto longer = c->Keys(longer_tokens);
  auto seen = c->Lookup(longer);
  ASSERT_TRUE(seen.ok());
  ASSERT_EQ(seen->tiers.size(), 200u);
  EXPECT_EQ(c->Lookup(c->Keys(RandomPrompt(3, 5)))->tiers.size(), 0u);
  requests["lookup"] += 2;
  std::map<WireTier, double> lookup_hits;
  for (WireTier t : seen->tiers) ++lookup_hits[t];
  EXPECT_GT(lookup_hits[WireTier::kHost], 0);  // some were demoted

  // Read the first 16 of A in the device tier: those in host are promoted.
  double promoted = 0;
  std::map<WireTier, double> acquire_hits;
  for (size_t i = 0; i < 16; ++i) {
    ++acquire_hits[seen->tiers[i]];
    promoted += seen->tiers[i] == WireTier::kHost ? 1 : 0;
  }
  {
    auto lease = c->Acquire(std::span(a).first(16), WireTier::kDevice);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    ASSERT_EQ(lease->size(), 16u);
    for (size_t i = 0; i < 16; ++i) EXPECT_TRUE(MatchesPattern(lease->Bytes(i), a[i]));
  }
  // And the 8 host blocks through the socket.
  auto got = c->GetInline(other);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->hits, 8u);
  acquire_hits[WireTier::kHost] += 8;
  requests["acquire"] += 1;
  requests["release"] += 1;
  requests["get"] += 1;
  // A round trip: the deferred RELEASE is handled, and STATS to compare.
  auto stats_list = c->Stats();
  ASSERT_TRUE(stats_list.ok());
  requests["stats"] += 1;
  requests["hello"] += 1;
  const std::map<std::string, std::string> stats(stats_list->begin(), stats_list->end());
  // The harness's probes open sessions too; wait until only ours is left.
  Exposition m = Scrape();
  for (int i = 0; i < 200 && m("kvtier_sessions") != 1; ++i) {
    std::this_thread::sleep_for(10ms);
    m = Scrape();
  }

  // Hits counted = hits returned, per tier.
  EXPECT_EQ(m("kvtier_lookups_total"), 2);
  EXPECT_EQ(m("kvtier_lookup_blocks_total"), static_cast<double>(longer.size() + 5));
  EXPECT_EQ(m.Tier("kvtier_lookup_hit_blocks_total", "device"), lookup_hits[WireTier::kDevice]);
  EXPECT_EQ(m.Tier("kvtier_lookup_hit_blocks_total", "host"), lookup_hits[WireTier::kHost]);
  EXPECT_EQ(m.Tier("kvtier_lookup_hit_blocks_total", "ssd"), 0);
  EXPECT_EQ(m.Tier("kvtier_lookup_missed_blocks_total", "device"),
            static_cast<double>(longer.size() + 5) - lookup_hits[WireTier::kDevice]);
  EXPECT_EQ(m.Tier("kvtier_lookup_missed_blocks_total", "ssd"),
            static_cast<double>(longer.size() + 5 - 200));
  EXPECT_EQ(m.Tier("kvtier_acquire_hit_blocks_total", "device"), acquire_hits[WireTier::kDevice]);
  EXPECT_EQ(m.Tier("kvtier_acquire_hit_blocks_total", "host"), acquire_hits[WireTier::kHost]);
  EXPECT_EQ(m("kvtier_acquired_blocks_total"), 24);
  EXPECT_EQ(m("kvtier_prefix_tokens_saved_total"), 24 * 16);
  EXPECT_EQ(m("kvtier_committed_blocks_total"), 208);

  // Bytes per tier = blocks x block size; every committed block is somewhere.
  double blocks = 0;
  for (const char* t : {"device", "host", "ssd"}) {
    EXPECT_EQ(m.Tier("kvtier_tier_used_bytes", t), m.Tier("kvtier_tier_blocks", t) * kBlockBytes)
        << t;
    blocks += m.Tier("kvtier_tier_blocks", t);
  }
  EXPECT_EQ(blocks, 208);
  EXPECT_LE(m.Tier("kvtier_tier_blocks", "device"), 128);
  EXPECT_EQ(m.Tier("kvtier_tier_capacity_bytes", "device"), 2 << 20);
  EXPECT_EQ(m.Tier("kvtier_tier_capacity_bytes", "host"), 64 << 20);

  // Moves: every block evicted from the device went to host; the promoted
  // ones came back; bytes moved = blocks moved x block size.
  EXPECT_EQ(m.Tier("kvtier_promotions_total", "device"), promoted);
  EXPECT_EQ(m.Tier("kvtier_demotions_total", "host"), m.Tier("kvtier_evictions_total", "device"));
  EXPECT_EQ(m.Tier("kvtier_moved_bytes_total", "host"),
            m.Tier("kvtier_demotions_total", "host") * kBlockBytes);
  EXPECT_EQ(m.Tier("kvtier_moved_bytes_total", "device"), promoted * kBlockBytes);
  EXPECT_EQ(m("kvtier_dropped_blocks_total"), 0);

  // Requests per operation, none failed; nothing held.
  for (const auto& [op, n] : requests) {
    EXPECT_EQ(m("kvtier_request_duration_seconds_count{op=\"" + op + "\"}"), n) << op;
    EXPECT_EQ(m("kvtier_request_duration_seconds_bucket{op=\"" + op + "\",le=\"+Inf\"}"), n) << op;
    EXPECT_EQ(m("kvtier_request_errors_total{op=\"" + op + "\"}"), 0) << op;
  }
  EXPECT_EQ(m("kvtier_sessions"), 1);
  EXPECT_GE(m("kvtier_sessions_opened_total"), 1);
  EXPECT_EQ(m("kvtier_leases"), 0);
  EXPECT_EQ(m("kvtier_allocations"), 0);
  EXPECT_EQ(m("kvtier_checksum_failures_total"), 0);
  // Every refusal reason is exposed (0 here; the hostile-client tests count
  // each through STATS, built from the same snapshot).
  for (const char* reason : {"permission_denied", "max_sessions", "max_leases_per_session",
                             "max_allocations_per_session", "max_namespaces", "hello_timeout",
                             "frame_timeout", "reply_timeout"}) {
    EXPECT_EQ(m("kvtier_refusals_total{reason=\"" + std::string(reason) + "\"}"), 0) << reason;
    EXPECT_EQ(stats.at(std::string("refused.") + reason), "0") << reason;
  }
  EXPECT_EQ(m("kvtier_build_info{version=\"" + std::string(daemon::Version()) + "\"}"), 1);

  // STATS reports the same figures.
  EXPECT_EQ(stats.at("tier.host.lookup_hits"),
            std::to_string(static_cast<int>(lookup_hits[WireTier::kHost])));
  EXPECT_EQ(stats.at("tier.device.promotions_in"), std::to_string(static_cast<int>(promoted)));
  EXPECT_EQ(stats.at("prefix_tokens_saved"), "384");
  EXPECT_EQ(stats.at("op.lookup.requests"), "2");

  // The start-up summary, and a clean stop with the metrics server up.
  const std::string log = daemon_->Log();
  for (const std::string& line :
       {"kvtierd " + std::string(daemon::Version()) + " starting", std::string("gpu: "),
        std::string("tier device: emulated"), std::string("tier host: "), std::string("tier ssd: "),
        std::string("listening on "), std::string("metrics on http://")}) {
    EXPECT_NE(log.find(line), std::string::npos) << line << "\n" << log;
  }
  c.reset();
  const int status = daemon_->Stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << daemon_->Log();
}

// Per namespace, in tokens: where its hits came from, and why its misses
// missed (never stored, or stored and since dropped), in the metrics and in
// STATS alike.
TEST_F(MetricsTest, NamespaceHitsByTierAndMissesByReason) {
  StartDaemon();
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  const auto keys = c->Keys(RandomPrompt(7, 10));
  const std::vector<BlockKey> stored(keys.begin(), keys.begin() + 6);
  ASSERT_EQ(Put(*c, stored, WireTier::kHost, 6), 6u);
  {
    auto lease = c->Acquire(keys);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    ASSERT_EQ(lease->size(), 6u);
  }
  ASSERT_EQ(c->Lookup(keys)->tiers.size(), 6u);  // the other 4 were never stored
  ASSERT_GE(*c->Remove(stored), 1u);             // the head, and what hangs below it
  ASSERT_EQ(c->Lookup(keys)->tiers.size(), 0u);  // all 10 behind a dropped block
  const Exposition m = Scrape();
  const auto sum = [&m](const std::string& family, const std::string& label) {
    double total = 0;
    int series = 0;
    for (const auto& [name, value] : m.samples) {
      if (name.rfind(family + "{", 0) == 0 && name.find(label) != std::string::npos &&
          name.find("namespace=\"") != std::string::npos) {
        total += value;
        ++series;
      }
    }
    EXPECT_GT(series, 0) << family << " " << label;
    return total;
  };
  constexpr double kTokens = 16;  // the test layout's block_tokens
  EXPECT_EQ(sum("kvtier_namespace_hit_tokens_total", "tier=\"host\""), 6 * kTokens);
  EXPECT_EQ(sum("kvtier_namespace_hit_tokens_total", "tier=\"ssd\""), 0);
  EXPECT_EQ(sum("kvtier_namespace_missed_tokens_total", "reason=\"never_stored\""), 4 * kTokens);
  EXPECT_EQ(sum("kvtier_namespace_missed_tokens_total", "reason=\"evicted\""), 10 * kTokens);
  EXPECT_EQ(sum("kvtier_namespace_missed_tokens_total", "reason=\"failed_load\""), 0);

  auto list = c->Stats();
  ASSERT_TRUE(list.ok());
  std::map<std::string, uint64_t> by_key;
  for (const auto& [key, value] : *list) {
    if (key.rfind("namespace.", 0) != 0) continue;
    by_key[key.substr(key.find('.', 10) + 1)] += std::stoull(value);
  }
  EXPECT_EQ(by_key["hit_tokens.host"], 6 * 16u);
  EXPECT_EQ(by_key["missed_tokens.never_stored"], 4 * 16u);
  EXPECT_EQ(by_key["missed_tokens.evicted"], 10 * 16u);
}

TEST_F(MetricsTest, PromtoolAcceptsTheExpositionAndMalformedFramesAreCountedAndLoggedOnce) {
  StartDaemon();
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  const auto keys = c->Keys(RandomPrompt(4, 4));
  Put(*c, keys, WireTier::kHost, 4);
  ASSERT_EQ(c->Acquire(keys)->size(), 4u);
  for (int i = 0; i < 5; ++i) {
    auto raw = RawConnection::Open(daemon_->socket());
    ASSERT_NE(raw, nullptr);
    const std::vector<std::byte> garbage(protocol::kHeaderBytes, std::byte{0xff});
    ASSERT_TRUE(raw->Send(garbage));
    EXPECT_TRUE(raw->ClosedByPeer());
  }
  Exposition m = Scrape();
  EXPECT_EQ(m("kvtier_protocol_errors_total"), 5);
  // At most one line per 10 s for the burst.
  const std::string log = daemon_->Log();
  size_t lines = 0;
  for (size_t at = log.find("malformed frame"); at != std::string::npos;
       at = log.find("malformed frame", at + 1)) {
    ++lines;
  }
  EXPECT_GE(lines, 1u);
  EXPECT_LT(lines, 5u) << log;

  if (!OnPath("promtool")) GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  const std::string path = dir_ / "metrics.txt";
  std::ofstream(path) << text_;
  const auto [code, out] = Shell("promtool check metrics < " + path);
  EXPECT_EQ(code, 0) << out;
}

TEST_F(MetricsTest, EveryMetricTheDashboardQueriesIsExposedAndEveryMetricIsDocumented) {
  StartDaemon();
  const Exposition m = Scrape();
  const std::vector<std::string> exprs = DashboardExprs();
  ASSERT_GE(exprs.size(), 10u);
  const std::regex name_re("kvtier_[a-zA-Z0-9_]+");
  std::set<std::string> used;
  for (const std::string& e : exprs) {
    for (std::sregex_iterator it(e.begin(), e.end(), name_re), end; it != end; ++it) {
      used.insert(it->str());
    }
  }
  for (const std::string& name : used) {
    bool found = m.types.count(name) > 0;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (!found && name.ends_with(s)) {
        auto it = m.types.find(name.substr(0, name.size() - s.size()));
        found = it != m.types.end() && it->second == "histogram";
      }
    }
    EXPECT_TRUE(found) << "the dashboard queries " << name << ", which kvtierd does not expose";
  }
  // The dashboard covers the issue's panels.
  for (const char* must :
       {"kvtier_lookup_hit_blocks_total", "kvtier_tier_used_bytes", "kvtier_evictions_total",
        "kvtier_demotions_total", "kvtier_promotions_total", "kvtier_moved_bytes_total",
        "kvtier_request_duration_seconds_bucket", "kvtier_sessions",
        "kvtier_request_errors_total"}) {
    EXPECT_TRUE(used.count(must)) << must;
  }
  const std::string doc = ReadFile(KVTIER_SOURCE_DIR "/docs/metrics.md");
  for (const auto& [family, type] : m.types) {
    if (family.rfind("kvtier_", 0) != 0) continue;
    EXPECT_NE(doc.find("`" + family + "`"), std::string::npos)
        << family << " (" << type << ") is not documented in docs/metrics.md";
  }
}

// The adaptive policy (the default) on the device tier: STATS and the
// metrics say which candidate it follows and how each scores on the sampled
// keys; a tier given a fixed policy names it.
TEST_F(MetricsTest, AdaptivePolicyShowsWhatItFollows) {
  StartDaemon({"--host-policy", "lru"});
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  // 400 blocks through the 128-block device tier, each prompt looked up first
  // (the lookups are what the miniature caches sample), then asked again.
  std::vector<std::vector<BlockKey>> prompts;
  for (uint32_t seed = 10; seed < 20; ++seed) prompts.push_back(c->Keys(RandomPrompt(seed, 40)));
  for (int round = 0; round < 2; ++round) {
    for (const auto& keys : prompts) {
      auto found = c->Lookup(keys);
      ASSERT_TRUE(found.ok()) << found.status().ToString();
      if (found->tiers.size() < keys.size()) Put(*c, keys, WireTier::kDevice, 40);
    }
  }
  auto list = c->Stats();
  ASSERT_TRUE(list.ok());
  const std::map<std::string, std::string> stats(list->begin(), list->end());
  EXPECT_EQ(stats.at("tier.device.policy"), "adaptive");
  EXPECT_EQ(stats.at("tier.host.policy"), "lru");
  const std::string follows = stats.at("tier.device.policy_follows");
  EXPECT_TRUE(follows == "leaf-lru" || follows == "lru" || follows == "s3fifo" ||
              follows == "lru/seen" || follows == "leaf-lru/seen")
      << follows;
  EXPECT_GT(std::stoull(stats.at("tier.device.policy_sampled_refs")), 0u);
  EXPECT_EQ(stats.count("tier.host.policy_follows"), 0u);

  const Exposition m = Scrape();
  EXPECT_EQ(m("kvtier_eviction_policy_info{tier=\"device\",policy=\"adaptive\"}"), 1);
  EXPECT_EQ(m("kvtier_eviction_policy_info{tier=\"host\",policy=\"lru\"}"), 1);
  double followed = 0;
  for (const char* candidate : {"lru", "leaf-lru", "s3fifo", "lru/seen", "leaf-lru/seen"}) {
    const std::string labels = std::string("{tier=\"device\",candidate=\"") + candidate + "\"}";
    followed += m("kvtier_eviction_candidate_followed" + labels);
    const double rate = m("kvtier_eviction_candidate_sampled_hit_ratio" + labels);
    EXPECT_GE(rate, 0);
    EXPECT_LE(rate, 1);
    EXPECT_NEAR(rate,
                std::stod(stats.at("tier.device.candidate." + std::string(candidate) +
                                   ".sampled_hit_rate")),
                1e-5);
  }
  EXPECT_EQ(followed, 1);
  EXPECT_EQ(m.Tier("kvtier_eviction_policy_switches_total", "device"),
            std::stod(stats.at("tier.device.policy_switches")));
  EXPECT_EQ(m.Tier("kvtier_eviction_policy_switches_total", "host"), 0);
  const std::string doc = ReadFile(KVTIER_SOURCE_DIR "/docs/metrics.md");
  for (const auto& [family, type] : m.types) {
    if (family.rfind("kvtier_eviction", 0) != 0) continue;
    EXPECT_NE(doc.find("`" + family + "`"), std::string::npos) << family;
  }
}

TEST_F(MetricsTest, PrometheusScrapesTheDaemonAndAnswersTheDashboardQueries) {
  if (!OnPath("prometheus")) GTEST_SKIP() << "prometheus not installed (Debian package prometheus)";
  StartDaemon();
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(Put(*c, c->Keys(RandomPrompt(5, 6)), WireTier::kHost, 6), 6u);

  const uint16_t web = FreePort();
  const std::string config = dir_ / "prometheus.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        << "scrape_configs:\n  - job_name: kvtier\n    scrape_timeout: 1s\n"
                        << "    static_configs:\n      - targets: [\"127.0.0.1:" << port_
                        << "\"]\n";
  const std::string cmd = "exec prometheus --config.file=" + config +
                          " --storage.tsdb.path=" + dir_.path() +
                          "/tsdb --web.listen-address=127.0.0.1:" + std::to_string(web) +
                          " --log.level=warn > " + dir_ / "prometheus.log 2>&1";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    ::_exit(127);
  }
  ASSERT_GT(pid, 0);
  // The committed blocks, read back through Prometheus's query API once it
  // has scraped (bounded: a minute at most).
  const std::string query = "/api/v1/query?query=" + UrlEncode("kvtier_committed_blocks_total");
  std::string answer;
  for (int i = 0; i < 300; ++i) {
    auto r = HttpGet(web, query);
    if (r && r->status == 200 && r->body.find("\"value\"") != std::string::npos) {
      answer = r->body;
      break;
    }
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_NE(answer.find("\"__name__\":\"kvtier_committed_blocks_total\""), std::string::npos)
      << answer << ReadFile(dir_ / "prometheus.log");
  EXPECT_NE(answer.find(",\"6\"]"), std::string::npos) << answer;
  // Every dashboard query is valid PromQL over these metrics.
  for (std::string e : DashboardExprs()) {
    e = std::regex_replace(e, std::regex(R"(\$__rate_interval)"), "1m");
    e = std::regex_replace(e, std::regex(R"(\$instance)"), ".*");
    auto r = HttpGet(web, "/api/v1/query?query=" + UrlEncode(e));
    ASSERT_TRUE(r.has_value()) << e;
    EXPECT_EQ(r->status, 200) << e << "\n" << r->body;
    EXPECT_NE(r->body.find("\"status\":\"success\""), std::string::npos) << e << "\n" << r->body;
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  for (int i = 0; i < 100 && ::waitpid(pid, &status, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(100ms);
  }
  if (::waitpid(pid, &status, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
}

TEST(StatsCommandTest, StatsWatchAndPlanShowTheDaemonsFigures) {
  auto d = Daemon::Start();
  ASSERT_NE(d, nullptr);
  auto c = Client::Connect(TestClientOptions(d->socket(), "stats-test"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const auto keys = (*c)->Keys(RandomPrompt(6, 4));
  auto w = (*c)->Allocate(keys);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Commit().ok());
  ASSERT_EQ((*c)->Hint(keys)->blocks, 4u);  // the request waits, then runs
  ASSERT_EQ((*c)->Acquire(keys)->size(), 4u);
  ASSERT_TRUE((*c)->Stats().ok());  // the deferred RELEASE is handled

  const std::string cli = std::string(KVTIER_CLI_PATH) + " ";
  const std::string sock = " --socket " + d->socket();
  auto [code, out] = Shell(cli + "stats" + sock);
  EXPECT_EQ(code, 0) << out;
  for (const char* want : {"4 blocks acquired = 64 prefix tokens saved", "4 committed", "host ",
                           "device ", "off", "acquire ", "4 hinted: 4 used", "hint "}) {
    EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  }
  std::tie(code, out) = Shell(cli + "stats --json" + sock);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"prefix_tokens_saved\": 64"), std::string::npos) << out;
  // Into a pipe --watch prints its frames one after another, --count of them.
  std::tie(code, out) = Shell(cli + "stats --watch --count 3 --interval 0.1" + sock);
  EXPECT_EQ(code, 0) << out;
  size_t frames = 0;
  for (size_t at = out.find("every 0.1 s"); at != std::string::npos;
       at = out.find("every 0.1 s", at + 1)) {
    ++frames;
  }
  EXPECT_EQ(frames, 3u) << out;
  EXPECT_NE(out.find("requests over the last interval"), std::string::npos) << out;

  std::tie(code, out) =
      Shell(cli + "plan --daemon --layers 2 --kv-heads 2 --head-dim 64 --tokens 1k" + sock);
  EXPECT_EQ(code, 0) << out;
  // The harness's 64 MiB host tier: 4,096 blocks of 16 KiB.
  EXPECT_NE(out.find("from the running kvtierd"), std::string::npos) << out;
  EXPECT_NE(out.find("4,096"), std::string::npos) << out;
}

TEST(MetricsConfigTest, AddressComesFromFileAndFlagAndBadOnesAreRefused) {
  const daemon::DaemonConfig defaults;
  EXPECT_EQ(defaults.metrics_address, "127.0.0.1:9464");
  auto shipped = daemon::LoadConfigFile(KVTIER_SOURCE_DIR "/deploy/kvtierd.toml");
  ASSERT_TRUE(shipped.ok()) << shipped.status().ToString();
  EXPECT_EQ(shipped->metrics_address, defaults.metrics_address);

  const TempDir dir("/tmp/kvtier-mconf");
  const std::string path = dir / "kvtierd.toml";
  std::ofstream(path) << "[metrics]\naddress = \"\"\n";
  auto off = daemon::LoadConfigFile(path);
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->metrics_address, "");
  std::ofstream(path) << "[metrics]\naddress = \"localhost\"\n";
  EXPECT_FALSE(daemon::LoadConfigFile(path).value().Validate().ok());
  std::ofstream(path) << "[metrics]\nadress = \"127.0.0.1:1\"\n";
  EXPECT_FALSE(daemon::LoadConfigFile(path).ok());
  for (const char* bad : {"127.0.0.1", "127.0.0.1:65536", ":9464", "127.0.0.1:x"}) {
    EXPECT_FALSE(daemon::ValidateMetricsAddress(bad).ok()) << bad;
  }
  EXPECT_TRUE(daemon::ValidateMetricsAddress("0.0.0.0:0").ok());

  std::string err;
  int status = RunDaemonToExit({"--socket", dir / "a.sock", "--metrics-address", "nonsense"}, &err);
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(err.find("metrics address 'nonsense'"), std::string::npos) << err;

  // A taken port: a clear error, and the socket is not left behind.
  const int busy = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(busy, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(busy, 1), 0);
  socklen_t len = sizeof addr;
  ::getsockname(busy, reinterpret_cast<sockaddr*>(&addr), &len);
  status = RunDaemonToExit(
      {"--socket", dir / "b.sock", "--no-reserve-memory", "--host-capacity", "8MiB", "--ssd-dir",
       "", "--metrics-address", "127.0.0.1:" + std::to_string(ntohs(addr.sin_port))},
      &err);
  ::close(busy);
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(err.find("cannot serve metrics"), std::string::npos) << err;
  struct stat st {};
  EXPECT_NE(::lstat((dir / "b.sock").c_str(), &st), 0);
}

}  // namespace
}  // namespace kvtier::testing
