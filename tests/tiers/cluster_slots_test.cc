#include "tiers/internal/cluster_slots.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvtier::tiers::internal {
namespace {

TEST(ClusterSlotsTest, Crc16IsXmodem) {
  EXPECT_EQ(Crc16("123456789"), 0x31c3);  // the CRC's published check value
  EXPECT_EQ(Crc16(""), 0);
}

// Slots as a Redis 7.0 server in cluster mode answered CLUSTER KEYSLOT for
// the same keys, hash tags included.
TEST(ClusterSlotsTest, KeySlotsAreRedisClusters) {
  const std::vector<std::pair<std::string, uint16_t>> want = {
      {"123456789", 12739},
      {"foo", 12182},
      {"bar", 5061},
      {"somekey", 11058},
      {"hello", 866},
      {"{user1000}.following", 3443},  // keys sharing a tag share a slot
      {"{user1000}.followers", 3443},
      {"foo{}{bar}", 8363},     // an empty tag: the whole key
      {"foo{{bar}}zap", 4015},  // the tag is "{bar"
      {"foo{bar}{zap}", 5061},  // the first tag only: "bar"
      {"kvtier:0123", 3834},
      {"{}", 15257},
      {"a{", 14311},  // no closing brace: the whole key
      {"}{x}", 16287},
  };
  for (const auto& [key, slot] : want) EXPECT_EQ(KeySlot(key), slot) << key;
}

TEST(ClusterSlotsTest, EndpointsParseAndPrint) {
  auto e = ParseEndpoint("127.0.0.1:7001");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, 7001);
  EXPECT_EQ(e->ToString(), "127.0.0.1:7001");
  auto v6 = ParseEndpoint("[::1]:7002");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->ToString(), "[::1]:7002");
  auto bare_v6 = ParseEndpoint("fe80::2:7003");  // the last colon is the port's
  ASSERT_TRUE(bare_v6.ok());
  EXPECT_EQ(bare_v6->host, "fe80::2");
  EXPECT_EQ(bare_v6->port, 7003);
  for (const char* bad : {"", "host", ":7001", "host:", "host:0", "host:65536", "host:7x"}) {
    EXPECT_FALSE(ParseEndpoint(bad).ok()) << bad;
  }
}

TEST(ClusterSlotsTest, RedirectsAreParsed) {
  const Endpoint from{"10.0.0.1", 7000};
  auto moved = ParseRedirect("MOVED 3999 127.0.0.1:6381", from);
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->kind, Redirect::Kind::kMoved);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->to, (Endpoint{"127.0.0.1", 6381}));
  auto ask = ParseRedirect("ASK 16383 [::1]:7005", from);
  ASSERT_TRUE(ask.has_value());
  EXPECT_EQ(ask->kind, Redirect::Kind::kAsk);
  EXPECT_EQ(ask->slot, 16383);
  EXPECT_EQ(ask->to, (Endpoint{"::1", 7005}));
  // Redis 7 leaves the host out when it is the answering node's.
  auto same_host = ParseRedirect("MOVED 12 :7009", from);
  ASSERT_TRUE(same_host.has_value());
  EXPECT_EQ(same_host->to, (Endpoint{"10.0.0.1", 7009}));
  for (const char* other :
       {"ERR unknown command", "MOVED", "MOVED 3999", "MOVED 16384 a:1", "MOVED -1 a:1",
        "MOVED x a:1", "ASK 1 nohostport", "MOVED 1 :0", "CLUSTERDOWN The cluster is down"}) {
    EXPECT_FALSE(ParseRedirect(other, from).has_value()) << other;
  }
}

TEST(ClusterSlotsTest, TheMapRoutesSlotsAndFollowsMoves) {
  const std::vector<SlotRange> ranges = {
      {0, 5460, {"127.0.0.1", 7000}, {{"127.0.0.1", 7003}}},
      {5461, 10922, {"127.0.0.1", 7001}, {}},
      {10923, 16383, {"127.0.0.1", 7002}, {}},
  };
  SlotMap map;
  EXPECT_EQ(map.covered(), 0u);
  EXPECT_EQ(map.NodeOf(0), SlotMap::kNoNode);
  ASSERT_TRUE(map.Reset(ranges).ok());
  EXPECT_EQ(map.covered(), 16384u);
  EXPECT_EQ(map.nodes(), 3u);
  EXPECT_EQ(map.node(map.NodeOf(KeySlot("foo"))).port, 7002);  // 12182
  EXPECT_EQ(map.node(map.NodeOf(KeySlot("bar"))).port, 7000);  // 5061
  EXPECT_EQ(map.node(map.NodeOf(5461)).port, 7001);
  // A resharding moved slot 5061 to a new node: it joins the map.
  const uint32_t id = map.Move(5061, Endpoint{"127.0.0.1", 7006});
  EXPECT_EQ(map.nodes(), 4u);
  EXPECT_EQ(map.NodeOf(5061), id);
  EXPECT_EQ(map.node(map.NodeOf(5060)).port, 7000);
  // A partial answer (a master lost, no replica promoted) leaves a hole.
  ASSERT_TRUE(map.Reset(std::span(ranges).first(2)).ok());
  EXPECT_EQ(map.covered(), 10923u);
  EXPECT_EQ(map.NodeOf(16383), SlotMap::kNoNode);
  // Bad ranges are refused and leave the map as it was.
  const std::vector<SlotRange> bad = {{10, 5, {"h", 1}, {}}};
  EXPECT_FALSE(map.Reset(bad).ok());
  const std::vector<SlotRange> beyond = {{0, 16384, {"h", 1}, {}}};
  EXPECT_FALSE(map.Reset(beyond).ok());
  EXPECT_EQ(map.covered(), 10923u);
}

}  // namespace
}  // namespace kvtier::tiers::internal
