// The real kvtierd and the real client over a real socket: workers share
// blocks in place, namespaces stay apart, a vanished writer leaves nothing
// behind, and many concurrent clients never see a wrong byte.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "client/client.h"
#include "support/daemon_client.h"

namespace kvtier::testing {
namespace {

using client::Client;
using client::ClientOptions;
using prefix_index::BlockKey;
using prefix_index::TokenId;
using protocol::WireTier;
using protocol::WireWriteState;

class IntegrationTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> args = {}) {
    daemon_ = Daemon::Start(std::move(args));
    ASSERT_NE(daemon_, nullptr);
  }
  std::unique_ptr<Client> Connect(const std::string& model = "llama-test",
                                  const std::string& salt = "") {
    ClientOptions o = TestClientOptions(daemon_->socket(), model, "integration");
    o.salt = salt;
    return ConnectClient(o, daemon_.get());
  }
  // Zero-copy put of every full block of `tokens`; returns the keys.
  static std::vector<BlockKey> Put(Client& c, const std::vector<TokenId>& tokens,
                                   WireTier tier = WireTier::kHost) {
    return PutPattern(c, tokens, tier);
  }

  std::unique_ptr<Daemon> daemon_;
};

// Sessions move between Asio's reactor and kvtierd's own epoll set as the
// load changes (server.session_wait = auto: the set while three or more
// sessions read within a window, daemon/readiness.h), and every reply stays
// right through the moves, a request larger than one read included.
TEST_F(IntegrationTest, RepliesStayRightAsSessionsMoveBetweenEpollSets) {
  // (Not busy-polling, kvtierd wakes after a long request has come whole:
  // one event for all of it.)
  Start({"--busy-poll-us", "0"});
  auto writer = Connect();
  ASSERT_NE(writer, nullptr);
  const auto keys = Put(*writer, RandomTokens(7, 16 * 8));
  ASSERT_EQ(keys.size(), 8u);
  // The 8 present keys, then ~80 KB of absent ones: more than a session
  // reads at once (64 KiB), so the read that fills its space is followed by
  // another, not by a wait.
  std::vector<BlockKey> long_request = keys;
  for (uint64_t i = 0; i < 5000; ++i) long_request.push_back({0xabcdef, i});
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 6; ++i) {
    clients.push_back(Connect());
    ASSERT_NE(clients.back(), nullptr);
  }
  auto lookups = [&](size_t sessions, size_t rounds) {
    for (size_t r = 0; r < rounds; ++r) {
      for (size_t c = 0; c < sessions; ++c) {
        const size_t len = 1 + (r + c) % keys.size();
        auto hit = clients[c]->Lookup(std::span(keys).first(len));
        ASSERT_TRUE(hit.ok()) << hit.status().ToString();
        ASSERT_EQ(hit->tiers.size(), len);
      }
      if (r % 50 == 0) {
        auto hit = clients[r % sessions]->Lookup(long_request);
        ASSERT_TRUE(hit.ok()) << hit.status().ToString();
        ASSERT_EQ(hit->tiers.size(), keys.size());
      }
    }
  };
  lookups(6, 300);  // six sessions taking turns: into the set
  lookups(1, 600);  // one: back to Asio
  lookups(6, 300);
  lookups(2, 300);
}

TEST_F(IntegrationTest, SecondClientHitsWhatTheFirstCommittedWithEqualBytes) {
  Start();
  auto a = Connect();
  auto b = Connect();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->session().namespace_id, b->session().namespace_id);
  const auto tokens = RandomTokens(1, 16 * 10 + 5);
  const auto keys = Put(*a, tokens);
  ASSERT_EQ(keys.size(), 10u);
  // b computes the same keys from the same tokens, finds them all...
  EXPECT_EQ(b->Keys(tokens), keys);
  auto hit = b->Lookup(keys);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->tiers.size(), 10u);
  // ...reads them in place in the shared arena...
  auto lease = b->Acquire(keys);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_EQ(lease->size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_TRUE(MatchesPattern(lease->Bytes(i), keys[i])) << i;
  ASSERT_TRUE(lease->Release().ok());
  // ...and through the socket.
  auto got = b->GetInline(keys);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->hits, 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_TRUE(MatchesPattern(std::span(got->data).subspan(i * b->block_bytes(), b->block_bytes()),
                               keys[i]));
  }
  // A longer prompt sharing the prefix hits the shared part only.
  auto longer = tokens;
  longer.resize(16 * 14);
  for (size_t i = tokens.size(); i < longer.size(); ++i) longer[i] = 7;
  EXPECT_EQ(b->Lookup(b->Keys(longer))->tiers.size(), 10u);
}

// The mapping of /proc/self/smaps holding `addr`: its KernelPageSize and
// the bytes of huge pages it maps (Shared_ and Private_Hugetlb, "private"
// those no other process maps yet: huge pages are not counted in Rss), in
// bytes (zeros when not found).
struct MappingPages {
  uint64_t page_bytes = 0;
  uint64_t huge_mapped_bytes = 0;
};
MappingPages PagesAt(const void* addr) {
  const auto at = reinterpret_cast<uintptr_t>(addr);
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  MappingPages m;
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < 16) {
      if (inside) break;
      inside = lo <= at && at < hi;
    } else if (inside &&
               (line.rfind("Shared_Hugetlb:", 0) == 0 || line.rfind("Private_Hugetlb:", 0) == 0)) {
      m.huge_mapped_bytes += std::stoull(line.substr(line.find(':') + 1)) * 1024;
    } else if (inside && line.rfind("KernelPageSize:", 0) == 0) {
      m.page_bytes = std::stoull(line.substr(15)) * 1024;
    }
  }
  return m;
}

// kvtierd's arena on huge pages: a worker maps it whole at attach, on 2 MiB
// pages, so no block's first touch in the worker faults. Needs the kernel's
// huge page pool, which is empty unless an operator fills it (like a GPU,
// a machine has one or not).
TEST_F(IntegrationTest, AnArenaOnHugePagesIsMappedWholeByTheWorker) {
  std::ifstream meminfo("/proc/meminfo");
  uint64_t free_pages = 0;
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("HugePages_Free:", 0) == 0) free_pages = std::stoull(line.substr(15));
  }
  if (free_pages < 8) GTEST_SKIP() << "no huge page pool (sysctl vm.nr_hugepages)";
  Start({"--host-huge-pages", "on", "--host-capacity", "16MiB"});
  auto c = Connect();
  ASSERT_TRUE(c);
  // 16 MiB of slots, then their generations: a huge page more.
  EXPECT_EQ(c->session().host_arena_bytes, 18u << 20);
  const auto keys = Put(*c, RandomTokens(3, 16 * 2));
  auto lease = c->Acquire(keys);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_EQ(lease->size(), 2u);
  EXPECT_TRUE(MatchesPattern(lease->Bytes(1), keys[1]));
  const MappingPages m = PagesAt(lease->Bytes(0).data());
  EXPECT_EQ(m.page_bytes, 2u << 20);
  EXPECT_EQ(m.huge_mapped_bytes, 18u << 20);  // all of it mapped, not only what was touched
}

// Read: the first time through ACQUIRE, then straight from the arena (no
// request but the TOUCH that tells kvtierd), counted as hits all the same;
// once the blocks have left their slots, through ACQUIRE again, never the
// bytes now in those slots.
TEST_F(IntegrationTest, ReadCopiesABlockItReadBeforeWithoutAskingAndNeverAMovedOne) {
  // 64 blocks of room.
  Start({"--host-capacity", "1MiB", "--host-slab", "1MiB"});
  auto c = Connect();
  ASSERT_TRUE(c);
  const auto keys = Put(*c, RandomTokens(4, 16 * 8));
  ASSERT_EQ(keys.size(), 8u);
  std::vector<std::vector<std::byte>> bufs(8, std::vector<std::byte>(kTestBlockBytes));
  std::vector<std::byte*> dst;
  for (auto& b : bufs) dst.push_back(b.data());
  auto read = c->Read(keys, dst);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, 8u);
  EXPECT_EQ(c->direct_reads(), 0u);
  for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(MatchesPattern(bufs[i], keys[i])) << i;
  auto before = StatsOf(*c);
  for (auto& b : bufs) std::fill(b.begin(), b.end(), std::byte{0});
  read = c->Read(keys, dst);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, 8u);
  EXPECT_EQ(c->direct_reads(), 8u);  // none asked for
  for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(MatchesPattern(bufs[i], keys[i])) << i;
  // kvtierd hears of them with the client's next request (a TOUCH sent
  // first), or once 64 blocks were read so, whichever comes first: not yet.
  auto watcher = Connect();
  ASSERT_TRUE(watcher);
  EXPECT_EQ(std::stoull(StatsOf(*watcher)["op.touch.requests"]), 0u);
  auto after = StatsOf(*c);
  EXPECT_EQ(std::stoull(after["op.acquire.requests"]), std::stoull(before["op.acquire.requests"]));
  EXPECT_EQ(std::stoull(after["op.touch.requests"]), 1u);
  EXPECT_EQ(std::stoull(after["tier.host.hits"]), std::stoull(before["tier.host.hits"]) + 8);
  for (int round = 0; round < 8; ++round) ASSERT_EQ(*c->Read(keys, dst), 8u);  // 64 blocks
  bool told = false;
  for (int i = 0; i < 200 && !told; ++i) {
    told = std::stoull(StatsOf(*watcher)["op.touch.requests"]) == 2;
    if (!told) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(told);
  EXPECT_EQ(std::stoull(StatsOf(*watcher)["tier.host.hits"]),
            std::stoull(before["tier.host.hits"]) + 8 + 64);

  // Other prompts take all the room: the blocks go, their slots hold others.
  for (uint32_t seed = 10; seed < 14; ++seed) Put(*c, RandomTokens(seed, 16 * 32));
  ASSERT_EQ(c->Lookup(keys)->tiers.size(), 0u);
  read = c->Read(keys, dst);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, 0u);
  EXPECT_EQ(c->direct_misses(), 1u);  // found moved at the first key
  EXPECT_EQ(c->direct_reads(), 72u);
  // Written again (into whatever slots): read through ACQUIRE, then directly.
  Put(*c, RandomTokens(4, 16 * 8));
  for (int round = 0; round < 2; ++round) {
    read = c->Read(keys, dst);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    ASSERT_EQ(*read, 8u);
    for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(MatchesPattern(bufs[i], keys[i])) << i;
  }
  EXPECT_EQ(c->direct_reads(), 80u);
  std::vector<std::byte*> short_dst(dst.begin(), dst.begin() + 2);
  EXPECT_EQ(c->Read(keys, short_dst).status().code(), StatusCode::kInvalidArgument);
}

// A worker reading the same prompts over and over straight from the arena
// while another fills the tier, so that their blocks are evicted and their
// slots rewritten under it: every block Read reports is the right one.
TEST_F(IntegrationTest, DirectReadsRacingEvictionNeverReturnAWrongByte) {
  Start({"--host-capacity", "2MiB", "--host-slab", "1MiB"});  // 128 blocks
  auto reader = Connect();
  auto writer = Connect();
  ASSERT_TRUE(reader && writer);
  std::vector<std::vector<BlockKey>> prompts;
  for (uint32_t seed = 0; seed < 4; ++seed)
    prompts.push_back(Put(*reader, RandomTokens(seed, 16 * 4)));
  std::atomic<bool> stop{false};
  std::thread fill([&] {
    for (uint32_t seed = 100; !stop.load(); ++seed) {
      // The reader's prompts stay recent (its reads touch them): removed
      // outright, their slots freed and filled by others, then put back.
      const uint32_t p = seed % 4;
      ASSERT_TRUE(writer->Remove(std::span(prompts[p]).first(1)).ok());
      Put(*writer, RandomTokens(seed, 16 * 8));
      Put(*writer, RandomTokens(p, 16 * 4));
    }
  });
  std::vector<std::vector<std::byte>> bufs(4, std::vector<std::byte>(kTestBlockBytes));
  std::vector<std::byte*> dst;
  for (auto& b : bufs) dst.push_back(b.data());
  size_t wrong = 0, blocks = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (size_t i = 0; std::chrono::steady_clock::now() < until; ++i) {
    const auto& keys = prompts[i % prompts.size()];
    auto read = reader->Read(keys, dst);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    for (size_t k = 0; k < *read; ++k) wrong += MatchesPattern(bufs[k], keys[k]) ? 0u : 1u;
    blocks += *read;
  }
  stop = true;
  fill.join();
  EXPECT_EQ(wrong, 0u) << "of " << blocks << " blocks read";
  EXPECT_GT(reader->direct_reads(), 0u);
  EXPECT_GT(reader->direct_misses(), 0u);  // the race was run
}

TEST_F(IntegrationTest, InlinePutIsReadInPlaceByAnother) {
  Start();
  auto a = Connect();
  auto b = Connect();
  const auto keys = a->Keys(RandomTokens(2, 16 * 4));
  std::vector<std::byte> data(keys.size() * a->block_bytes());
  for (size_t i = 0; i < keys.size(); ++i) {
    FillPattern(std::span(data).subspan(i * a->block_bytes(), a->block_bytes()), keys[i]);
  }
  auto put = a->PutInline(keys, data);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->states, std::vector<WireWriteState>(4, WireWriteState::kAllocated));
  auto lease = b->Acquire(keys);
  ASSERT_EQ(lease->size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(MatchesPattern(lease->Bytes(i), keys[i]));
}

TEST_F(IntegrationTest, AnotherNamespaceNeverHits) {
  Start();
  auto a = Connect("llama-test");
  auto other_model = Connect("mistral-test");
  auto other_tenant = Connect("llama-test", "tenant-b");
  const auto tokens = RandomTokens(3, 16 * 6);
  const auto keys = Put(*a, tokens);
  // Identical tokens: other namespaces compute other keys (other secrets)...
  EXPECT_NE(other_model->Keys(tokens), keys);
  EXPECT_NE(other_tenant->Keys(tokens), keys);
  EXPECT_EQ(other_model->Lookup(other_model->Keys(tokens))->tiers.size(), 0u);
  EXPECT_EQ(other_tenant->Lookup(other_tenant->Keys(tokens))->tiers.size(), 0u);
  // ...and even with the first namespace's keys they find nothing.
  EXPECT_EQ(other_model->Lookup(keys)->tiers.size(), 0u);
  EXPECT_EQ(other_tenant->Acquire(keys)->size(), 0u);
  EXPECT_EQ(other_tenant->GetInline(keys)->hits, 0u);
  EXPECT_EQ(a->Lookup(keys)->tiers.size(), 6u);
}

// An MLA latent namespace (one latent vector per token and layer): its blocks
// are one plane per layer, written and read like any other; a K/V layout of
// the same numbers is another layout, refused for the same model.
TEST_F(IntegrationTest, ALatentNamespaceRoundTripsAndIsNotItsKvTwin) {
  Start();
  ClientOptions latent = TestClientOptions(daemon_->socket(), "deepseek-test", "integration");
  latent.layout = Layout{2, 1, 64, DType::kFloat16, 16, KvKind::kLatent};
  auto a = ConnectClient(latent, daemon_.get());
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->block_bytes(), 2u * 64 * 16 * 2);  // one plane: half the K/V block
  const auto tokens = RandomTokens(9, 16 * 5);
  const auto keys = Put(*a, tokens);
  ASSERT_EQ(keys.size(), 5u);
  auto b = ConnectClient(latent, daemon_.get());
  ASSERT_NE(b, nullptr);
  auto lease = b->Acquire(keys);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_EQ(lease->size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(MatchesPattern(lease->Bytes(i), keys[i])) << i;
  ASSERT_TRUE(lease->Release().ok());

  ClientOptions kv = latent;
  kv.layout.kind = KvKind::kKeyValue;
  auto twin = Client::Connect(kv);
  ASSERT_FALSE(twin.ok());
  EXPECT_EQ(twin.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(twin.status().message().find("registered with layout"), std::string::npos)
      << twin.status().ToString();
  EXPECT_NE(twin.status().message().find("kind=latent"), std::string::npos)
      << twin.status().ToString();
  // The K/V model's namespace refuses the latent layout the same way.
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  ClientOptions latent_llama = latent;
  latent_llama.model = "llama-test";
  latent_llama.layout = c->options().layout;
  latent_llama.layout.kv_heads = 1;
  latent_llama.layout.kind = KvKind::kLatent;
  EXPECT_EQ(Client::Connect(latent_llama).status().code(), StatusCode::kInvalidArgument);
  // A latent layout with two KV heads is no layout at all.
  ClientOptions two_heads = latent;
  two_heads.layout.kv_heads = 2;
  auto bad = Client::Connect(two_heads);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("kv_heads 1"), std::string::npos)
      << bad.status().ToString();
}

// Two tenants of one model (same model, different salt) write the same
// tokens: each namespace has its own secret, so each computes other keys;
// neither ever finds, leases or reads the other's blocks, in either tier,
// even when one writes under the other's key values (as if it had learned
// them): the index is keyed by namespace too.
TEST_F(IntegrationTest, TenantsWritingIdenticalTokensNeverGetEachOthersBlocks) {
  Start({"--device", "emulated", "--device-capacity", "4MiB"});
  auto a = Connect("llama-test", "tenant-a");
  auto b = Connect("llama-test", "tenant-b");
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->session().namespace_id, b->session().namespace_id);
  EXPECT_NE(a->session().namespace_secret, b->session().namespace_secret);
  const auto tokens = RandomTokens(7, 16 * 8);
  const auto ka = Put(*a, tokens);
  const auto kb = Put(*b, tokens, WireTier::kDevice);
  ASSERT_EQ(ka.size(), 8u);
  for (size_t i = 0; i < ka.size(); ++i) EXPECT_NE(ka[i], kb[i]) << i;
  auto expect_reads = [](Client& c, const std::vector<BlockKey>& keys, WireTier tier,
                         const std::vector<BlockKey>& pattern_of) {
    auto lease = c.Acquire(keys, tier);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    ASSERT_EQ(lease->size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_TRUE(MatchesPattern(lease->Bytes(i), pattern_of[i])) << i;
    }
    ASSERT_TRUE(lease->Release().ok());  // GET reads from the host: unpin them
    auto got = c.GetInline(keys);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->hits, keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_TRUE(MatchesPattern(std::span(got->data).subspan(i * c.block_bytes(), c.block_bytes()),
                                 pattern_of[i]))
          << i;
    }
  };
  auto expect_nothing = [](Client& c, const std::vector<BlockKey>& keys) {
    EXPECT_EQ(c.Lookup(keys)->tiers.size(), 0u);
    EXPECT_EQ(c.Acquire(keys, WireTier::kHost)->size(), 0u);
    EXPECT_EQ(c.Acquire(keys, WireTier::kDevice)->size(), 0u);
    EXPECT_EQ(c.GetInline(keys)->hits, 0u);
  };
  // Each reads its own, in both tiers; neither finds the other's.
  expect_reads(*a, ka, WireTier::kHost, ka);
  expect_reads(*b, kb, WireTier::kDevice, kb);
  expect_reads(*a, ka, WireTier::kDevice, ka);
  expect_reads(*b, kb, WireTier::kHost, kb);
  expect_nothing(*a, kb);
  expect_nothing(*b, ka);

  // b writes bytes of its own under a's key values...
  std::vector<BlockKey> forged_pattern(ka.size());
  std::vector<std::byte> data(ka.size() * b->block_bytes());
  for (size_t i = 0; i < ka.size(); ++i) {
    forged_pattern[i] = BlockKey{~ka[i].lo, ka[i].hi};
    FillPattern(std::span(data).subspan(i * b->block_bytes(), b->block_bytes()), forged_pattern[i]);
  }
  auto put = b->PutInline(ka, data);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->states, std::vector<WireWriteState>(8, WireWriteState::kAllocated));
  // ...and reads them back; a still reads its own bytes under the same keys.
  expect_reads(*b, ka, WireTier::kHost, forged_pattern);
  expect_reads(*a, ka, WireTier::kHost, ka);
  // Removing them in b's namespace leaves a's alone.
  EXPECT_GE(*b->Remove(ka), 1u);  // the first key, with what hangs below it
  expect_nothing(*b, ka);
  expect_reads(*a, ka, WireTier::kHost, ka);
  EXPECT_EQ(StatsOf(*a)["namespaces"], "2");
}

TEST_F(IntegrationTest, ClientKilledMidWriteLeavesNoSlotOrLeaseBehind) {
  Start();
  auto observer = Connect();
  const auto before = StatsOf(*observer);
  const auto shared = Put(*observer, RandomTokens(4, 16 * 3));
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    // The worker: takes a lease, allocates, writes half a block, then is
    // killed before it commits.
    auto c = Client::Connect(TestClientOptions(daemon_->socket()));
    if (!c.ok()) ::_exit(1);
    auto lease = (*c)->Acquire(shared);
    auto w = (*c)->Allocate((*c)->Keys(RandomTokens(5, 16 * 8)));
    if (!lease.ok() || !w.ok()) ::_exit(2);
    std::memset(w->Bytes(0).data(), 0xab, w->Bytes(0).size() / 2);
    [[maybe_unused]] auto n = ::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  char x;
  ASSERT_EQ(::read(ready[0], &x, 1), 1);
  auto mid = StatsOf(*observer);
  EXPECT_EQ(mid["open_allocations"], "1");
  EXPECT_EQ(mid["pending_blocks"], "8");
  EXPECT_EQ(mid["open_leases"], "1");
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  // The daemon notices the disconnect and frees what the worker held.
  std::map<std::string, std::string> after;
  for (int i = 0; i < 200; ++i) {
    after = StatsOf(*observer);
    if (after["sessions"] == "1") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(after["sessions"], "1");
  EXPECT_EQ(after["open_allocations"], "0");
  EXPECT_EQ(after["pending_blocks"], "0");
  EXPECT_EQ(after["open_leases"], "0");
  EXPECT_EQ(after["tier.host.pinned_blocks"], "0");
  EXPECT_EQ(after["tier.host.blocks"], "3");  // only the committed ones
  EXPECT_EQ(after["aborted_blocks"], "8");
  EXPECT_EQ(observer->Lookup(observer->Keys(RandomTokens(5, 16 * 8)))->tiers.size(), 0u);
  EXPECT_EQ(before.at("open_leases"), "0");
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(IntegrationTest, DeviceTierWritesAreReadFromTheHostAfterDemotion) {
  Start({"--device", "emulated", "--device-capacity", "1MiB"});
  auto a = Connect();
  auto b = Connect();
  ASSERT_EQ(a->session().device, protocol::DeviceKind::kEmulated);
  ASSERT_TRUE(a->mapped(WireTier::kDevice));
  const auto first = Put(*a, RandomTokens(6, 16 * 8), WireTier::kDevice);
  // 1 MiB of device holds 64 blocks of 16 KiB: more pushes the first down.
  for (uint32_t seed = 100; seed < 110; ++seed)
    Put(*a, RandomTokens(seed, 16 * 8), WireTier::kDevice);
  auto where = b->Lookup(first);
  ASSERT_EQ(where->tiers.size(), 8u);
  EXPECT_EQ(where->tiers[0], WireTier::kHost);
  auto lease = b->Acquire(first, WireTier::kHost);
  ASSERT_EQ(lease->size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(MatchesPattern(lease->Bytes(i), first[i]));
  ASSERT_TRUE(lease->Release().ok());
  // And promoted back into the device on request, bytes intact.
  auto on_device = b->Acquire(first, WireTier::kDevice);
  ASSERT_EQ(on_device->size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(MatchesPattern(on_device->Bytes(i), first[i]));
}

TEST_F(IntegrationTest, SixtyFourConcurrentClientsNeverReadAWrongByte) {
  // A small host tier, so the run evicts while it reads and writes.
  Start({"--host-capacity", "4MiB", "--host-slab", "1MiB"});
  constexpr int kClients = 64;
  constexpr int kRounds = 100;
  std::atomic<int> errors{0}, verified{0}, connected{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      auto c = Connect();
      if (!c) {
        ++errors;
        return;
      }
      ++connected;
      std::mt19937 rng(static_cast<uint32_t>(t));
      for (int round = 0; round < kRounds; ++round) {
        // 80 prompts shared by all clients, so hits cross sessions; their
        // blocks (up to 15 MiB) overflow the 4 MiB tier.
        const auto tokens = RandomTokens(static_cast<uint32_t>(rng() % 80), 16 * (1 + rng() % 12));
        const auto keys = c->Keys(tokens);
        switch (rng() % 5) {
          case 0: {
            auto w = c->Allocate(keys);
            if (!w.ok()) {
              if (w.status().code() != StatusCode::kResourceExhausted) ++errors;
              break;
            }
            for (size_t i = 0; i < w->size(); ++i) {
              if (w->state(i) == WireWriteState::kAllocated) FillPattern(w->Bytes(i), keys[i]);
            }
            if (!(rng() % 8 ? w->Commit() : w->Abort()).ok()) ++errors;
            break;
          }
          case 1: {
            std::vector<std::byte> data(keys.size() * c->block_bytes());
            for (size_t i = 0; i < keys.size(); ++i) {
              FillPattern(std::span(data).subspan(i * c->block_bytes(), c->block_bytes()), keys[i]);
            }
            auto put = c->PutInline(keys, data);
            if (!put.ok() && put.status().code() != StatusCode::kResourceExhausted) ++errors;
            break;
          }
          case 2: {
            auto lease = c->Acquire(keys);
            if (!lease.ok()) {
              ++errors;
              break;
            }
            for (size_t i = 0; i < lease->size(); ++i) {
              if (!MatchesPattern(lease->Bytes(i), keys[i])) ++errors;
              ++verified;
            }
            break;
          }
          case 3: {
            auto got = c->GetInline(keys);
            if (!got.ok()) {
              ++errors;
              break;
            }
            for (size_t i = 0; i < got->hits; ++i) {
              const auto bytes =
                  std::span(got->data).subspan(i * c->block_bytes(), c->block_bytes());
              if (!MatchesPattern(bytes, keys[i])) ++errors;
              ++verified;
            }
            break;
          }
          default:
            if (!c->Lookup(keys).ok()) ++errors;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(connected.load(), kClients);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(verified.load(), 1000);
  auto c = Connect();
  auto s = StatsOf(*c);
  EXPECT_EQ(s["open_leases"], "0");
  EXPECT_EQ(s["open_allocations"], "0");
  EXPECT_EQ(s["tier.host.pinned_blocks"], "0");
  EXPECT_EQ(s["request_errors"], "0");
  EXPECT_NE(s["tier.host.evictions"], "0");
  EXPECT_TRUE(daemon_->Alive());
}

}  // namespace
}  // namespace kvtier::testing

namespace kvtier::testing {
namespace {

// Retention through the whole stack: a worker's SET_RETENTION reaches the
// `priority` policy, which evicts the lowest priority first and lets a
// priority with a duration fall back to the default.
TEST(RetentionTest, LowPriorityGoesFirstAndDurationsExpire) {
  // 1 MiB of host: 64 blocks of 16 KiB.
  auto d = Daemon::Start(
      {"--host-capacity", "1MiB", "--host-slab", "256KiB", "--host-policy", "priority"});
  ASSERT_NE(d, nullptr);
  auto c = client::Client::Connect(TestClientOptions(d->socket()));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto put = [&](uint32_t seed, size_t blocks) {
    const auto keys = (*c)->Keys(RandomTokens(seed, blocks * 16));
    auto w = (*c)->Allocate(keys);
    EXPECT_TRUE(w.ok());
    for (size_t i = 0; i < w->size(); ++i) {
      if (w->state(i) == WireWriteState::kAllocated) FillPattern(w->Bytes(i), keys[i]);
    }
    EXPECT_TRUE(w->Commit().ok());
    return keys;
  };
  auto retain = [&](const std::vector<BlockKey>& keys, uint8_t priority, uint64_t ms) {
    const protocol::RetentionRange range{0, keys.size() * 16, priority, ms};
    auto n = (*c)->SetRetention(keys, std::span(&range, 1));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, keys.size());
  };
  const auto high = put(1, 8);
  retain(high, 100, 0);
  const auto low = put(2, 8);
  retain(low, 0, 0);
  const auto brief = put(3, 8);
  retain(brief, 90, 1);  // back to 35 after a millisecond
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // 48 more default blocks overflow the 64-block tier by 16.
  for (uint32_t seed = 10; seed < 16; ++seed) put(seed, 8);
  EXPECT_EQ((*c)->Lookup(high)->tiers.size(), 8u);  // kept
  EXPECT_EQ((*c)->Lookup(low)->tiers.size(), 0u);   // lowest priority: gone first
  // Turn the tier over with default blocks: what is above 35 stays; the
  // expired blocks, back at 35, go like any other.
  for (uint32_t seed = 20; seed < 28; ++seed) put(seed, 8);
  EXPECT_EQ((*c)->Lookup(high)->tiers.size(), 8u);
  EXPECT_EQ((*c)->Lookup(brief)->tiers.size(), 0u);
}

}  // namespace
}  // namespace kvtier::testing
