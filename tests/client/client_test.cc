// The client against FakeDaemon: a real socket, real frames, a real memfd.
#include "client/client.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "fake_daemon.h"

namespace kvtier::client {
namespace {

using protocol::Opcode;
using testing::FakeDaemon;
using testing::Fault;

Layout SmallLayout() { return Layout{2, 2, 8, DType::kFloat16, 4}; }  // 512-byte blocks

std::vector<TokenId> Tokens(size_t n, TokenId first = 1) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

class ClientTest : public ::testing::Test {
 protected:
  ClientOptions Options() const {
    ClientOptions o;
    o.socket_path = daemon_.path();
    o.model = "m";
    o.layout = SmallLayout();
    o.io_timeout_ms = 10000;  // a hung test fails instead of hanging
    return o;
  }
  std::unique_ptr<Client> Connect() {
    auto c = Client::Connect(Options());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *std::move(c) : nullptr;
  }

  FakeDaemon daemon_{SmallLayout(), 16};
};

TEST(ClientConnectTest, MissingSocketIsUnavailableNamingThePath) {
  ClientOptions o;
  o.socket_path = "/nonexistent/kvtierd.sock";
  o.model = "m";
  o.layout = SmallLayout();
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.error().message().find("kvtierd at /nonexistent/kvtierd.sock"), std::string::npos);
  EXPECT_NE(c.error().message().find("No such file"), std::string::npos);
}

TEST(ClientConnectTest, BadOptionsAreRefusedBeforeConnecting) {
  ClientOptions o;
  o.socket_path = "/nonexistent/kvtierd.sock";
  o.layout = SmallLayout();
  EXPECT_EQ(Client::Connect(o).error().code(), StatusCode::kInvalidArgument);  // no model
  o.model = "m";
  o.layout.head_dim = 0;
  EXPECT_EQ(Client::Connect(o).error().code(), StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, HelloMapsTheArenaAndKeysUseTheNamespaceSecret) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->block_bytes(), SmallLayout().BlockBytes());
  EXPECT_TRUE(c->mapped(WireTier::kHost));
  EXPECT_FALSE(c->mapped(WireTier::kDevice));
  auto h = prefix_index::KeyHasher::Create(c->session().namespace_secret, 4);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(c->Keys(Tokens(10)), h->Chain(Tokens(10)));
  EXPECT_EQ(c->Keys(Tokens(10)).size(), 2u);  // only full blocks
}

TEST_F(ClientTest, DaemonRefusingTheNamespaceIsItsError) {
  ClientOptions o = Options();
  o.layout.layers = 3;
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.error().message().find("layout differs"), std::string::npos);
}

TEST_F(ClientTest, ZeroCopyWriteThenRead) {
  auto c = Connect();
  const auto keys = c->Keys(Tokens(12));
  {
    auto w = c->Allocate(keys);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_EQ(w->size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(w->state(i), WireWriteState::kAllocated);
      std::memset(w->Bytes(i).data(), static_cast<int>('a' + i), w->Bytes(i).size());
    }
    ASSERT_TRUE(w->Commit().ok());
    EXPECT_FALSE(w->open());
  }
  auto look = c->Lookup(keys);
  ASSERT_TRUE(look.ok());
  EXPECT_EQ(look->tiers.size(), 3u);

  auto r = c->Acquire(keys);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r->Bytes(i)[0], static_cast<std::byte>('a' + i));
    EXPECT_EQ(r->Bytes(i).back(), static_cast<std::byte>('a' + i));
  }
  EXPECT_EQ(daemon_.open_leases(), 1u);
  ASSERT_TRUE(r->Release().ok());
  EXPECT_EQ(r->Release().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(c->Lookup(keys).ok());  // reads the deferred RELEASE's reply first
  EXPECT_EQ(daemon_.open_leases(), 0u);
}

TEST_F(ClientTest, HandlesAbortAndReleaseWhenDropped) {
  auto c = Connect();
  const auto keys = c->Keys(Tokens(8));
  { ASSERT_TRUE(c->Allocate(keys).ok()); }
  EXPECT_EQ(daemon_.open_allocations(), 0u);
  EXPECT_EQ(daemon_.ops().back(), Opcode::kAbort);
  ASSERT_TRUE(c->PutInline(keys, std::vector<std::byte>(2 * c->block_bytes())).ok());
  {
    auto r = c->Acquire(keys);
    ASSERT_TRUE(r.ok());
    ReadLease moved = *std::move(r);
    EXPECT_EQ(moved.size(), 2u);
  }
  // The release does not wait for its reply; the next call reads it, and
  // the daemon handled it before that call.
  ASSERT_TRUE(c->Lookup(keys).ok());
  EXPECT_EQ(daemon_.open_leases(), 0u);
  const auto ops = daemon_.ops();
  ASSERT_GE(ops.size(), 2u);
  EXPECT_EQ(ops[ops.size() - 2], Opcode::kRelease);
  EXPECT_TRUE(c->healthy());
}

TEST_F(ClientTest, InlinePutGetAndRemove) {
  ClientOptions o = Options();
  o.map_arenas = false;
  auto c = Client::Connect(o);
  ASSERT_TRUE(c.ok());
  const auto keys = (*c)->Keys(Tokens(12));
  EXPECT_EQ((*c)->Allocate(keys).error().code(), StatusCode::kFailedPrecondition);
  std::vector<std::byte> data(3 * (*c)->block_bytes());
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 31);
  EXPECT_EQ((*c)->PutInline(keys, std::span(data).first(10)).error().code(),
            StatusCode::kInvalidArgument);
  auto put = (*c)->PutInline(std::span(keys).first(2), std::span(data).first(data.size() * 2 / 3));
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  auto get = (*c)->GetInline(keys);
  ASSERT_TRUE(get.ok());
  EXPECT_EQ(get->hits, 2u);
  EXPECT_TRUE(std::equal(get->data.begin(), get->data.end(), data.begin()));
  auto removed = (*c)->Remove(keys);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 2u);
  EXPECT_EQ(daemon_.blocks(), 0u);
}

TEST_F(ClientTest, LookupManyPipelinesThousandsWithoutDeadlock) {
  auto c = Connect();
  const auto keys = c->Keys(Tokens(8));
  ASSERT_TRUE(c->PutInline(keys, std::vector<std::byte>(2 * c->block_bytes())).ok());
  // Enough requests that neither socket buffer could hold them all: a
  // client that wrote everything before reading would never finish.
  std::vector<std::vector<BlockKey>> chains(20000);
  for (size_t i = 0; i < chains.size(); ++i) {
    chains[i] = i % 3 == 0 ? keys : c->Keys(Tokens(64, static_cast<TokenId>(i * 100)));
  }
  chains[5].clear();  // an empty chain costs no request
  auto replies = c->LookupMany(chains);
  ASSERT_TRUE(replies.ok()) << replies.status().ToString();
  ASSERT_EQ(replies->size(), chains.size());
  for (size_t i = 0; i < chains.size(); ++i) {
    EXPECT_EQ((*replies)[i].tiers.size(), i % 3 == 0 ? 2u : 0u) << i;
  }
  EXPECT_TRUE(c->Lookup(keys).ok());
}

TEST_F(ClientTest, ErrorReplyIsTheDaemonsStatusAndTheClientGoesOn) {
  auto c = Connect();
  Status s = c->Release(12345);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("no such lease"), std::string::npos);
  daemon_.InjectFault(Fault::kErrorReply);
  EXPECT_EQ(c->Stats().error().code(), StatusCode::kNotFound);
  EXPECT_TRUE(c->healthy());
  EXPECT_TRUE(c->Stats().ok());
}

TEST_F(ClientTest, ReplyDribbledByteByByteIsReassembled) {
  auto c = Connect();
  daemon_.InjectFault(Fault::kByteByByte);
  auto stats = c->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  ASSERT_EQ(stats->size(), 3u);
  EXPECT_EQ((*stats)[2].second, "fake \"arena\"");
}

TEST_F(ClientTest, GarbageHeaderIsInvalidArgumentThenBroken) {
  auto c = Connect();
  daemon_.InjectFault(Fault::kGarbageHeader);
  EXPECT_EQ(c->Stats().error().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(c->healthy());
  EXPECT_EQ(c->Stats().error().code(), StatusCode::kUnavailable);
}

TEST_F(ClientTest, ReplyOutOfStepBreaksTheClient) {
  auto c = Connect();
  daemon_.InjectFault(Fault::kWrongRequestId);
  EXPECT_EQ(c->Lookup(c->Keys(Tokens(4))).error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Stats().error().code(), StatusCode::kUnavailable);
}

TEST_F(ClientTest, VanishedDaemonIsUnavailableForEveryLaterCall) {
  auto c = Connect();
  auto w = c->Allocate(c->Keys(Tokens(4)));
  ASSERT_TRUE(w.ok());
  daemon_.InjectFault(Fault::kClose);
  Status s = w->Commit();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("kvtierd at " + daemon_.path()), std::string::npos);
  EXPECT_EQ(c->Lookup(c->Keys(Tokens(4))).error().code(), StatusCode::kUnavailable);
  EXPECT_EQ(c->Release(1).code(), StatusCode::kUnavailable);
}

TEST_F(ClientTest, TooManyKeysIsRefusedLocally) {
  auto c = Connect();
  std::vector<BlockKey> keys(c->session().max_keys + 1);
  EXPECT_EQ(c->Lookup(keys).error().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c->healthy());
  EXPECT_EQ(daemon_.ops().size(), 1u);  // HELLO only
}

TEST(ClientDeviceTest, EmulatedDeviceArenaIsMapped) {
  FakeDaemon daemon(SmallLayout(), 4, protocol::DeviceKind::kEmulated);
  ClientOptions o;
  o.socket_path = daemon.path();
  o.model = "m";
  o.layout = SmallLayout();
  auto c = Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->mapped(WireTier::kDevice));
  EXPECT_TRUE((*c)->mapped(WireTier::kHost));
}

}  // namespace
}  // namespace kvtier::client
