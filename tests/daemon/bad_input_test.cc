// Malformed and hostile input against a live daemon, while a second,
// well-behaved connection keeps working: each bad frame gets an error reply
// or a closed connection, and nothing else notices.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstring>

#include "support/daemon_harness.h"

namespace kvtier::testing {
namespace {

using prefix_index::BlockKey;
using protocol::FrameHeader;
using protocol::Opcode;

std::vector<BlockKey> Keys(uint64_t stem, size_t n) {
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(BlockKey{stem, i + 1});
  return keys;
}

// Each test runs with the sessions waiting for requests where kvtierd
// chooses (Asio's reactor, for so few clients) and in its own epoll set.
class BadInputTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    daemon_ = Daemon::Start({"--session-wait", GetParam()});
    ASSERT_NE(daemon_, nullptr);
    good_ = Attach("model-a");
    ASSERT_NE(good_, nullptr);
    // The good client caches a chain it checks after every bad frame.
    std::vector<std::byte> frame, data(3 * 4096, std::byte{0x5a});
    protocol::EncodePut(next_id_++, std::nullopt, Keys(1, 3), data, &frame);
    ASSERT_TRUE(good_->Send(frame));
    auto r = good_->Read();
    ASSERT_TRUE(r && r->header.status == 0);
  }

  std::unique_ptr<RawConnection> Attach(const std::string& model) {
    auto c = RawConnection::Open(daemon_->socket());
    if (!c) return nullptr;
    std::vector<std::byte> frame;
    protocol::EncodeHello(next_id_++, TestHello(model), &frame);
    if (!c->Send(frame)) return nullptr;
    auto r = c->Read();
    if (!r || r->header.status != 0) return nullptr;
    return c;
  }

  // The good connection still gets correct answers.
  void ExpectGoodClientUnaffected() {
    ASSERT_TRUE(daemon_->Alive()) << daemon_->Log();
    std::vector<std::byte> frame;
    const uint64_t id = next_id_++;
    protocol::EncodeKeys(Opcode::kLookup, id, Keys(1, 3), &frame);
    ASSERT_TRUE(good_->Send(frame));
    auto r = good_->Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->header.request_id, id);
    EXPECT_EQ(r->header.status, 0);
    auto lookup = protocol::DecodeLookupReply(r->payload);
    ASSERT_TRUE(lookup.ok());
    EXPECT_EQ(lookup->tiers.size(), 3u);
  }

  // Sends `bytes` on a fresh attached (or not) connection; returns the
  // reply's status (0 if none) and whether the daemon then closed it.
  struct Outcome {
    std::optional<RawConnection::Frame> reply;
    bool closed = false;
  };
  Outcome SendBad(std::span<const std::byte> bytes, bool attach = true, bool half_close = false) {
    auto c = attach ? Attach("model-a") : RawConnection::Open(daemon_->socket());
    EXPECT_NE(c, nullptr);
    Outcome out;
    if (!c) return out;
    c->Send(bytes);
    if (half_close) ::shutdown(c->fd(), SHUT_WR);
    out.reply = c->Read(std::chrono::seconds(5));
    out.closed = c->ClosedByPeer(std::chrono::seconds(5));
    return out;
  }

  std::vector<std::byte> ValidLookup() {
    std::vector<std::byte> frame;
    protocol::EncodeKeys(Opcode::kLookup, 77, Keys(1, 2), &frame);
    return frame;
  }

  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<RawConnection> good_;
  uint64_t next_id_ = 1;
};

TEST_P(BadInputTest, TruncatedFrameClosesOnlyThatConnection) {
  auto frame = ValidLookup();
  frame.resize(frame.size() - 5);  // the peer leaves before the payload ends
  Outcome o = SendBad(frame, true, /*half_close=*/true);
  EXPECT_FALSE(o.reply.has_value());
  EXPECT_TRUE(o.closed);
  ExpectGoodClientUnaffected();
}

TEST_P(BadInputTest, WrongMagicGetsAnErrorAndClose) {
  auto frame = ValidLookup();
  frame[0] = std::byte{'X'};
  Outcome o = SendBad(frame);
  ASSERT_TRUE(o.reply.has_value());
  EXPECT_EQ(o.reply->header.status, static_cast<uint16_t>(StatusCode::kInvalidArgument));
  EXPECT_EQ(o.reply->header.request_id, 77u);
  EXPECT_TRUE(o.closed);
  ExpectGoodClientUnaffected();
}

TEST_P(BadInputTest, LengthPastTheCapGetsAnErrorAndClose) {
  auto frame = ValidLookup();
  const uint32_t huge = 0x7fffffff;
  std::memcpy(frame.data() + 16, &huge, 4);
  Outcome o = SendBad(frame);
  ASSERT_TRUE(o.reply.has_value());
  EXPECT_EQ(o.reply->header.status, static_cast<uint16_t>(StatusCode::kInvalidArgument));
  const std::string msg(reinterpret_cast<const char*>(o.reply->payload.data()),
                        o.reply->payload.size());
  EXPECT_NE(msg.find("cap"), std::string::npos) << msg;
  EXPECT_TRUE(o.closed);
  ExpectGoodClientUnaffected();
}

TEST_P(BadInputTest, WrongVersionGetsAnErrorAndClose) {
  auto frame = ValidLookup();
  const uint16_t v = protocol::kMaxVersion + 1;
  std::memcpy(frame.data() + 4, &v, 2);
  Outcome o = SendBad(frame);
  ASSERT_TRUE(o.reply.has_value());
  EXPECT_NE(o.reply->header.status, 0);
  EXPECT_TRUE(o.closed);
  ExpectGoodClientUnaffected();
}

TEST_P(BadInputTest, UnknownOpcodeGetsAnErrorAndClose) {
  auto frame = ValidLookup();
  const uint16_t op = 999;
  std::memcpy(frame.data() + 6, &op, 2);
  Outcome o = SendBad(frame);
  ASSERT_TRUE(o.reply.has_value());
  EXPECT_NE(o.reply->header.status, 0);
  EXPECT_TRUE(o.closed);
  ExpectGoodClientUnaffected();
}

TEST_P(BadInputTest, TooManyKeysGetsAnErrorAndClose) {
  std::vector<std::byte> frame;
  protocol::EncodeKeys(Opcode::kLookup, 5, Keys(9, protocol::kMaxKeys + 1), &frame);
  Outcome o = SendBad(frame);
  ASSERT_TRUE(o.reply.has_value());
  EXPECT_EQ(o.reply->header.status, static_cast<uint16_t>(StatusCode::kInvalidArgument));
  EXPECT_TRUE(o.closed);
  ExpectGoodClientUnaffected();
}

TEST_P(BadInputTest, RequestBeforeHelloIsRefused) {
  Outcome o = SendBad(ValidLookup(), /*attach=*/false);
  ASSERT_TRUE(o.reply.has_value());
  EXPECT_EQ(o.reply->header.status, static_cast<uint16_t>(StatusCode::kFailedPrecondition));
  EXPECT_TRUE(o.closed);
  ExpectGoodClientUnaffected();
}

TEST_P(BadInputTest, CommitOfAnAllocationNeverMadeIsAnErrorAndTheConnectionLives) {
  auto c = Attach("model-a");
  ASSERT_NE(c, nullptr);
  std::vector<std::byte> frame;
  protocol::EncodeHandle(Opcode::kCommit, 8, 123456, &frame);
  ASSERT_TRUE(c->Send(frame));
  auto r = c->Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->header.status, static_cast<uint16_t>(StatusCode::kNotFound));
  // Still attached: a valid request works on the same connection.
  frame.clear();
  protocol::EncodeKeys(Opcode::kLookup, 9, Keys(1, 3), &frame);
  ASSERT_TRUE(c->Send(frame));
  r = c->Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->header.status, 0);
  ExpectGoodClientUnaffected();
}

TEST_P(BadInputTest, ReleaseOfAnotherSessionsLeaseIsRefused) {
  // The good client takes a lease...
  std::vector<std::byte> frame;
  protocol::EncodeAcquire(next_id_++, {protocol::WireTier::kHost, Keys(1, 3)}, &frame);
  ASSERT_TRUE(good_->Send(frame));
  auto r = good_->Read();
  ASSERT_TRUE(r && r->header.status == 0);
  auto lease = protocol::DecodeAcquireReply(r->payload);
  ASSERT_TRUE(lease.ok());
  ASSERT_EQ(lease->offsets.size(), 3u);
  // ...another session cannot release it.
  auto thief = Attach("model-a");
  frame.clear();
  protocol::EncodeHandle(Opcode::kRelease, 3, lease->lease_id, &frame);
  ASSERT_TRUE(thief->Send(frame));
  r = thief->Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->header.status, static_cast<uint16_t>(StatusCode::kNotFound));
  // The owner still can.
  frame.clear();
  protocol::EncodeHandle(Opcode::kRelease, next_id_++, lease->lease_id, &frame);
  ASSERT_TRUE(good_->Send(frame));
  r = good_->Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->header.status, 0);
  ExpectGoodClientUnaffected();
}

TEST_P(BadInputTest, LayoutThatDoesNotMatchTheNamespaceIsRefused) {
  auto c = RawConnection::Open(daemon_->socket());
  protocol::HelloRequest hello = TestHello("model-a");
  hello.layout.head_dim = 128;  // model-a was registered with 64
  std::vector<std::byte> frame;
  protocol::EncodeHello(1, hello, &frame);
  ASSERT_TRUE(c->Send(frame));
  auto r = c->Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->header.status, static_cast<uint16_t>(StatusCode::kInvalidArgument));
  const std::string msg(reinterpret_cast<const char*>(r->payload.data()), r->payload.size());
  EXPECT_NE(msg.find("layout"), std::string::npos) << msg;
  ExpectGoodClientUnaffected();
}

TEST_P(BadInputTest, PipelinedRequestsAreAnsweredInOrder) {
  std::vector<std::byte> frames;
  for (uint64_t id = 100; id < 110; ++id) {
    protocol::EncodeKeys(Opcode::kLookup, id, Keys(1, id % 4), &frames);
  }
  ASSERT_TRUE(good_->Send(frames));  // one write, ten requests
  for (uint64_t id = 100; id < 110; ++id) {
    auto r = good_->Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->header.request_id, id);
    EXPECT_EQ(protocol::DecodeLookupReply(r->payload)->tiers.size(), std::min<size_t>(id % 4, 3));
  }
}

INSTANTIATE_TEST_SUITE_P(SessionWait, BadInputTest, ::testing::Values("auto", "set"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace kvtier::testing
