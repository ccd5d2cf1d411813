// Slow and hostile clients against the real kvtierd: one that pipelines
// requests and never reads the replies, connections that never say HELLO, a
// frame trickled in a byte at a time, too many sessions, too many leases
// and open writes in one session. In each case a well-behaved client keeps
// working — it completes its requests within a generous bound, a liveness
// check, not a speed assertion — and the limits answer with the documented
// errors (README "Configuration", docs/security.md).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <thread>

#include "client/client.h"
#include "common/units.h"
#include "support/daemon_client.h"

namespace kvtier::testing {
namespace {

using client::Client;
using prefix_index::BlockKey;
using prefix_index::TokenId;
using protocol::Opcode;
using protocol::WireWriteState;
using Clock = std::chrono::steady_clock;

// The good client's requests must all complete within this: far beyond any
// normal latency, far below "stalled".
constexpr auto kLivenessBound = std::chrono::seconds(5);

std::string Text(std::span<const std::byte> payload) {
  return {reinterpret_cast<const char*>(payload.data()), payload.size()};
}

// Each test runs with the sessions waiting for requests where kvtierd
// chooses (these tests' few clients: Asio's reactor) and in its own epoll
// set (server.session_wait, daemon/readiness.h).
class HostileClientTest : public ::testing::TestWithParam<std::string> {
 protected:
  void Start(std::vector<std::string> args) {
    args.push_back("--session-wait");
    args.push_back(GetParam());
    daemon_ = Daemon::Start(std::move(args));
    ASSERT_NE(daemon_, nullptr);
    good_ = Connect();
    ASSERT_NE(good_, nullptr);
    chain_ = good_->Keys(RandomPrompt(1, 4));
    auto w = good_->Allocate(chain_);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (size_t i = 0; i < w->size(); ++i) FillPattern(w->Bytes(i), chain_[i]);
    ASSERT_TRUE(w->Commit().ok());
  }

  client::ClientOptions Options(const std::string& model) const {
    client::ClientOptions o = TestClientOptions(daemon_->socket(), model, "hostile-test");
    o.layout = Layout{1, 1, 64, DType::kFloat16, 16};  // 4 KiB blocks, as TestHello
    o.io_timeout_ms = 10'000;
    return o;
  }
  Result<std::unique_ptr<Client>> TryConnect(const std::string& model = "m") {
    return Client::Connect(Options(model));
  }
  std::unique_ptr<Client> Connect() { return ConnectClient(Options("m"), daemon_.get()); }

  // A raw connection that has said HELLO.
  std::unique_ptr<RawConnection> Attach() {
    auto c = RawConnection::Open(daemon_->socket());
    if (!c) return nullptr;
    std::vector<std::byte> frame;
    protocol::EncodeHello(1, TestHello("m"), &frame);
    if (!c->Send(frame)) return nullptr;
    auto r = c->Read();
    if (!r || r->header.status != 0) return nullptr;
    return c;
  }

  // The good client reads its chain `n` times (lookup, acquire, check every
  // byte, release) and must finish within kLivenessBound.
  void ExpectGoodClientLive(int n = 100) {
    ASSERT_TRUE(daemon_->Alive()) << daemon_->Log();
    const auto start = Clock::now();
    for (int i = 0; i < n; ++i) {
      auto hit = good_->Lookup(chain_);
      ASSERT_TRUE(hit.ok()) << hit.status().ToString();
      ASSERT_EQ(hit->tiers.size(), chain_.size());
      auto lease = good_->Acquire(chain_);
      ASSERT_TRUE(lease.ok()) << lease.status().ToString();
      ASSERT_EQ(lease->size(), chain_.size());
      for (size_t b = 0; b < lease->size(); ++b) {
        ASSERT_TRUE(MatchesPattern(lease->Bytes(b), chain_[b]));
      }
    }
    EXPECT_LT(Clock::now() - start, kLivenessBound) << n << " requests";
  }

  std::map<std::string, std::string> Stats() { return StatsOf(*good_); }
  // Waits (up to 10 s) until the daemon counts `n` sessions.
  bool WaitForSessions(const std::string& n) {
    for (int i = 0; i < 1000; ++i) {
      if (Stats()["sessions"] == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<Client> good_;
  std::vector<BlockKey> chain_;
};

TEST_P(HostileClientTest, ClientThatNeverReadsItsRepliesIsHeldBackThenClosed) {
  Start({"--reply-timeout-ms", "2000"});
  ExpectGoodClientLive(10);
  const uint64_t rss_before = ResidentBytes(daemon_->pid());
  // Sixteen clients pipeline STATS requests (24 bytes in, ~5 KB out) and
  // read nothing, until their sockets take no more. Unbounded, a daemon
  // would queue ~13 MB of replies per 64 KiB of requests read.
  constexpr int kHostile = 16;
  std::vector<std::unique_ptr<RawConnection>> hostile;
  std::vector<std::byte> stats;
  for (uint64_t i = 0; i < 256; ++i) protocol::EncodeStats(1000 + i, &stats);
  for (int i = 0; i < kHostile; ++i) {
    hostile.push_back(Attach());
    ASSERT_NE(hostile.back(), nullptr);
  }
  size_t requests_sent = 0;
  for (auto idle_rounds = 0; idle_rounds < 20;) {
    bool progress = false;
    for (auto& c : hostile) {
      const ssize_t n = ::send(c->fd(), stats.data(), stats.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        progress = true;
        requests_sent += static_cast<size_t>(n) / protocol::kHeaderBytes;
      }
    }
    if (progress) {
      idle_rounds = 0;
    } else {
      ++idle_rounds;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  EXPECT_GT(requests_sent, 10'000u);
  // The daemon reads no more of theirs than it can answer, and everyone
  // else goes on.
  ExpectGoodClientLive();
  const uint64_t rss_after = ResidentBytes(daemon_->pid());
  std::cout << requests_sent << " requests pipelined unread; daemon RSS " << rss_before / kKiB
            << " KiB before, " << rss_after / kKiB << " KiB after\n";
  // Each holds at most its input chunk (64 KiB), 256 KiB of queued replies
  // and one reply: 1 MiB each is generous. (Without the bound on queued
  // replies this run grew by ~36 MiB, and the good client stalled.)
  if (!kSanitized) {
    EXPECT_LT(rss_after, rss_before + kHostile * kMiB)
        << "before " << rss_before << " after " << rss_after << " bytes";
  }
  // After reply_timeout_ms without a reply taken, they are closed.
  EXPECT_TRUE(WaitForSessions("1")) << Stats()["sessions"] << "\n" << daemon_->Log();
  EXPECT_NE(daemon_->Log().find("server.reply_timeout_ms"), std::string::npos) << daemon_->Log();
  EXPECT_EQ(Stats()["refused.reply_timeout"], std::to_string(kHostile));
  ExpectGoodClientLive();
}

TEST_P(HostileClientTest, StopDoesNotWaitForAClientThatNeverReads) {
  Start({});  // the default reply timeout, 30 s
  auto hostile = Attach();
  ASSERT_NE(hostile, nullptr);
  std::vector<std::byte> stats;
  for (uint64_t i = 0; i < 256; ++i) protocol::EncodeStats(i, &stats);
  for (int idle = 0; idle < 20;) {
    if (::send(hostile->fd(), stats.data(), stats.size(), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) {
      idle = 0;
    } else {
      ++idle;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  const auto start = Clock::now();
  const int status = daemon_->Stop(SIGTERM);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_P(HostileClientTest, ConnectionsThatNeverSayHelloAreClosed) {
  Start({"--hello-timeout-ms", "1000"});
  std::vector<std::unique_ptr<RawConnection>> silent;
  for (int i = 0; i < 100; ++i) {
    silent.push_back(RawConnection::Open(daemon_->socket()));
    ASSERT_NE(silent.back(), nullptr);
  }
  // Half a header, then nothing.
  auto half = RawConnection::Open(daemon_->socket());
  std::vector<std::byte> hello;
  protocol::EncodeHello(1, TestHello("m"), &hello);
  ASSERT_TRUE(half->Send(std::span(hello).first(10)));
  ExpectGoodClientLive();
  const auto start = Clock::now();
  for (auto& c : silent) EXPECT_TRUE(c->ClosedByPeer(std::chrono::seconds(5)));
  EXPECT_TRUE(half->ClosedByPeer(std::chrono::seconds(5)));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(WaitForSessions("1"));
  EXPECT_NE(daemon_->Log().find("said no HELLO within 1000 ms (server.hello_timeout_ms)"),
            std::string::npos)
      << daemon_->Log();
  // Logged once per burst, counted every time: the 100 silent and the half.
  EXPECT_EQ(Stats()["refused.hello_timeout"], "101");
  EXPECT_EQ(Stats()["refused.frame_timeout"], "0");
  // The limit counts only "no successful HELLO": an attached client idle for
  // longer is left alone.
  ExpectGoodClientLive();
}

// Sends `bytes` one at a time, `gap` apart. False once the daemon has closed
// the connection (a send fails).
bool Trickle(RawConnection& c, std::span<const std::byte> bytes, std::chrono::milliseconds gap) {
  for (const std::byte& b : bytes) {
    if (::send(c.fd(), &b, 1, MSG_NOSIGNAL) != 1) return false;
    std::this_thread::sleep_for(gap);
  }
  return true;
}

TEST_P(HostileClientTest, FrameTrickledAByteAtATimeStallsNoOne) {
  Start({"--frame-timeout-ms", "1500"});
  std::vector<std::byte> hello, lookup;
  protocol::EncodeHello(1, TestHello("m"), &hello);
  protocol::EncodeKeys(Opcode::kLookup, 2, chain_, &lookup);
  // A slow but honest client: every frame arrives within the timeout.
  std::atomic<bool> slow_ok{false};
  std::thread slow([&] {
    auto c = RawConnection::Open(daemon_->socket());
    if (!c || !Trickle(*c, hello, std::chrono::milliseconds(5))) return;
    auto r = c->Read();
    if (!r || r->header.status != 0) return;
    if (!Trickle(*c, lookup, std::chrono::milliseconds(5))) return;
    r = c->Read();
    slow_ok = r && r->header.status == 0 && r->header.request_id == 2;
  });
  // Too slow: 76 bytes at 100 ms each would take 7.6 s; it is cut off.
  std::atomic<bool> cut_off{false};
  std::atomic<int64_t> cut_after_ms{-1};
  std::thread too_slow([&] {
    auto c = Attach();
    if (!c) return;
    const auto start = Clock::now();
    const bool sent_all = Trickle(*c, lookup, std::chrono::milliseconds(100));
    cut_off = !sent_all || c->ClosedByPeer(std::chrono::seconds(5));
    cut_after_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  });
  // Meanwhile the good client's requests keep completing.
  for (int round = 0; round < 10; ++round) {
    ExpectGoodClientLive(20);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  slow.join();
  too_slow.join();
  EXPECT_TRUE(slow_ok.load());
  EXPECT_TRUE(cut_off.load());
  EXPECT_LT(cut_after_ms.load(), 5000);
  EXPECT_NE(daemon_->Log().find("server.frame_timeout_ms"), std::string::npos) << daemon_->Log();
  EXPECT_EQ(Stats()["refused.frame_timeout"], "1");  // the slow but honest client was not
  ExpectGoodClientLive();
}

TEST_P(HostileClientTest, SessionsPastTheLimitAreRefusedWithAClearError) {
  Start({"--max-sessions", "4"});
  std::vector<std::unique_ptr<Client>> others;
  for (int i = 0; i < 3; ++i) others.push_back(Connect());  // 4 with the good one
  auto refused = TryConnect();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("server.max_sessions"), std::string_view::npos)
      << refused.status().ToString();
  // On the wire: the error answers the first request, then the connection
  // closes.
  auto raw = RawConnection::Open(daemon_->socket());
  std::vector<std::byte> frame;
  protocol::EncodeHello(42, TestHello("m"), &frame);
  ASSERT_TRUE(raw->Send(frame));
  auto r = raw->Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->header.request_id, 42u);
  EXPECT_EQ(r->header.status, static_cast<uint16_t>(StatusCode::kResourceExhausted));
  EXPECT_NE(Text(r->payload).find("server.max_sessions"), std::string::npos);
  EXPECT_TRUE(raw->ClosedByPeer(std::chrono::seconds(5)));
  // The sessions within the limit never noticed.
  ExpectGoodClientLive();
  for (auto& c : others) EXPECT_TRUE(c->Lookup(chain_).ok());
  EXPECT_EQ(Stats()["sessions"], "4");
  EXPECT_NE(daemon_->Log().find("(server.max_sessions)"), std::string::npos);
  EXPECT_EQ(Stats()["refused.max_sessions"], "2");  // TryConnect and the raw connection
  // A session that leaves makes room.
  others.pop_back();
  ASSERT_TRUE(WaitForSessions("3"));
  auto again = TryConnect();
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

TEST_P(HostileClientTest, LeasesAndOpenWritesPastTheLimitAreRefusedAndTheSessionGoesOn) {
  Start({"--max-leases-per-session", "8", "--max-allocations-per-session", "4"});
  auto c = Connect();
  std::vector<client::ReadLease> leases;
  for (int i = 0; i < 8; ++i) {
    auto lease = c->Acquire(chain_);
    ASSERT_TRUE(lease.ok()) << i << ": " << lease.status().ToString();
    leases.push_back(std::move(lease).value());
  }
  auto ninth = c->Acquire(chain_);
  ASSERT_FALSE(ninth.ok());
  EXPECT_EQ(ninth.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(ninth.status().message().find("server.max_leases_per_session"), std::string_view::npos)
      << ninth.status().ToString();
  // The session is still usable: lookups, inline reads (their lease is the
  // daemon's, for the one request), and a lease once one is released.
  EXPECT_EQ(c->Lookup(chain_)->tiers.size(), chain_.size());
  auto got = c->GetInline(chain_);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->hits, chain_.size());
  ASSERT_TRUE(leases.back().Release().ok());
  leases.pop_back();
  auto again = c->Acquire(chain_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  leases.push_back(std::move(again).value());
  // Another session has a limit of its own.
  ExpectGoodClientLive(10);

  std::vector<client::WriteHandle> writes;
  for (uint32_t i = 0; i < 4; ++i) {
    auto w = c->Allocate(c->Keys(RandomPrompt(100 + i, 2)));
    ASSERT_TRUE(w.ok()) << i << ": " << w.status().ToString();
    writes.push_back(std::move(w).value());
  }
  const auto fifth_keys = c->Keys(RandomPrompt(200, 2));
  auto fifth = c->Allocate(fifth_keys);
  ASSERT_FALSE(fifth.ok());
  EXPECT_EQ(fifth.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(fifth.status().message().find("server.max_allocations_per_session"),
            std::string_view::npos)
      << fifth.status().ToString();
  // PUT's allocation lasts one request, so it is not counted.
  std::vector<std::byte> data(fifth_keys.size() * c->block_bytes());
  for (size_t i = 0; i < fifth_keys.size(); ++i) {
    FillPattern(std::span(data).subspan(i * c->block_bytes(), c->block_bytes()), fifth_keys[i]);
  }
  EXPECT_TRUE(c->PutInline(fifth_keys, data).ok());
  ASSERT_TRUE(writes.front().Commit().ok());  // (its bytes are never read)
  {
    auto sixth = c->Allocate(c->Keys(RandomPrompt(300, 2)));
    EXPECT_TRUE(sixth.ok()) << sixth.status().ToString();
  }
  // Everything held is given back at the end.
  writes.clear();
  leases.clear();
  c.reset();
  ASSERT_TRUE(WaitForSessions("1"));
  const auto s = Stats();
  EXPECT_EQ(s.at("refused.max_leases_per_session"), "1");
  EXPECT_EQ(s.at("refused.max_allocations_per_session"), "1");
  EXPECT_EQ(s.at("open_leases"), "0");
  EXPECT_EQ(s.at("open_allocations"), "0");
  EXPECT_EQ(s.at("pending_blocks"), "0");
}

TEST_P(HostileClientTest, NewNamespacesPastTheLimitAreRefusedAndKnownOnesStillAttach) {
  Start({"--max-namespaces", "3"});  // the good client's "m" is one
  std::vector<std::unique_ptr<Client>> others;
  for (const char* model : {"a", "b"}) {
    others.push_back(Connect());  // "m" again: no new namespace
    auto c = TryConnect(model);
    ASSERT_TRUE(c.ok()) << model << ": " << c.status().ToString();
    others.push_back(std::move(c).value());
  }
  for (const char* model : {"c", "d", "e"}) {
    auto refused = TryConnect(model);
    ASSERT_FALSE(refused.ok()) << model;
    EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(refused.status().message().find("server.max_namespaces"), std::string_view::npos)
        << refused.status().ToString();
  }
  // Known namespaces attach and serve as before; nothing else noticed.
  for (const char* model : {"m", "a", "b"}) {
    auto c = TryConnect(model);
    EXPECT_TRUE(c.ok()) << model << ": " << c.status().ToString();
  }
  ExpectGoodClientLive(10);
  const auto s = Stats();
  EXPECT_EQ(s.at("namespaces"), "3");
  EXPECT_EQ(s.at("refused.max_namespaces"), "3");
  // Logged, not once per refusal.
  const std::string log = daemon_->Log();
  const std::string line = "refused a new namespace";
  EXPECT_NE(log.find(line), std::string::npos) << log;
  EXPECT_EQ(log.find(line), log.rfind(line)) << log;
}

INSTANTIATE_TEST_SUITE_P(SessionWait, HostileClientTest, ::testing::Values("auto", "set"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace kvtier::testing
