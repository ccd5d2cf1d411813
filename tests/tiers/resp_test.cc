// resp.h over a socketpair: commands framed as Redis reads them, replies of
// every RESP2 type parsed, values landed in the caller's memory, in any
// split of the bytes across reads, and bad input an error, never a hang.
#include "tiers/internal/resp.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace kvtier::tiers::internal {
namespace {

class RespTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0);
    timeval tv{2, 0};  // as hiredis sets the timeouts of our connections
    ASSERT_EQ(::setsockopt(fds_[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
  }
  void TearDown() override {
    if (fds_[0] >= 0) ::close(fds_[0]);
    if (fds_[1] >= 0) ::close(fds_[1]);
  }
  // The peer's side: writes `bytes` in pieces of `piece` bytes.
  void Send(const std::string& bytes, size_t piece = SIZE_MAX) {
    for (size_t at = 0; at < bytes.size();) {
      const size_t n = std::min(piece, bytes.size() - at);
      ASSERT_EQ(::write(fds_[1], bytes.data() + at, n), static_cast<ssize_t>(n));
      at += n;
    }
  }
  std::string ReadPeer(size_t n) {
    std::string out(n, '\0');
    for (size_t got = 0; got < n;) {
      const ssize_t r = ::read(fds_[1], out.data() + got, n - got);
      if (r <= 0) return out.substr(0, got);
      got += static_cast<size_t>(r);
    }
    return out;
  }
  int fds_[2] = {-1, -1};
};

TEST_F(RespTest, CommandsAreFramedAsRedisReadsThem) {
  const std::string header = "HDR";
  const std::string payload(3000, 'p');  // above the inline limit: sent from here
  RedisCommand set{{"SET", "k1", header}, 1};
  set.last_arg_tail = payload;
  RedisCommand get{{"GET", "key two"}, 1};
  const RedisCommand* cmds[] = {&set, &get};
  ASSERT_TRUE(WriteCommands(RedisStream{fds_[0]}, cmds).ok());
  const std::string want = "*3\r\n$3\r\nSET\r\n$2\r\nk1\r\n$3003\r\nHDR" + payload +
                           "\r\n*2\r\n$3\r\nGET\r\n$7\r\nkey two\r\n";
  EXPECT_EQ(ReadPeer(want.size()), want);
}

TEST_F(RespTest, EveryReplyTypeIsParsedWhateverTheReadsSplit) {
  const std::string replies =
      "+OK\r\n-MOVED 3999 127.0.0.1:6381\r\n:42\r\n:-7\r\n$5\r\nhello\r\n$0\r\n\r\n$-1\r\n"
      "*2\r\n*3\r\n:0\r\n:5460\r\n$9\r\n127.0.0.1\r\n$-1\r\n*-1\r\n";
  for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, SIZE_MAX}) {
    std::thread peer([&] { Send(replies, piece); });
    RespReader reader(RedisStream{fds_[0]});
    using Type = RedisReply::Type;
    auto next = [&] {
      Result<RedisReply> r = reader.Next();
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      return r.ok() ? std::move(*r) : RedisReply();
    };
    RedisReply r = next();
    EXPECT_EQ(r.type(), Type::kStatus);
    EXPECT_EQ(r.str(), "OK");
    r = next();
    EXPECT_EQ(r.type(), Type::kError);
    EXPECT_EQ(r.str(), "MOVED 3999 127.0.0.1:6381");
    EXPECT_EQ(next().integer(), 42);
    EXPECT_EQ(next().integer(), -7);
    r = next();
    EXPECT_EQ(r.type(), Type::kString);
    EXPECT_EQ(r.str(), "hello");
    r = next();
    EXPECT_EQ(r.type(), Type::kString);
    EXPECT_EQ(r.size(), 0u);
    EXPECT_EQ(next().type(), Type::kNil);
    r = next();
    ASSERT_EQ(r.type(), Type::kArray);
    ASSERT_EQ(r.elements(), 2u);
    ASSERT_EQ(r.element(0).elements(), 3u);
    EXPECT_EQ(r.element(0).element(1).integer(), 5460);
    EXPECT_EQ(r.element(0).element(2).str(), "127.0.0.1");
    EXPECT_EQ(r.element(1).type(), Type::kNil);
    EXPECT_EQ(next().type(), Type::kNil);
    EXPECT_TRUE(reader.drained()) << piece;
    peer.join();
  }
}

TEST_F(RespTest, AValueOfTheRightSizeLandsInTheCallersMemory) {
  const std::string value = std::string(72, 'h') + std::string(200000, 'v');
  // Two values: one lands, the next (another size) is an ordinary reply,
  // and a nil stays a nil.
  const std::string replies =
      "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n$4\r\n" + "abcd\r\n$-1\r\n";
  std::thread peer([&] { Send(replies, 4096); });
  std::array<std::byte, 72> header{};
  std::vector<std::byte> payload(200000);
  const std::array<std::span<std::byte>, 2> into = {std::span(header), std::span(payload)};
  RespReader reader(RedisStream{fds_[0]});
  Result<RedisReply> r = reader.Next(into);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->landed());
  EXPECT_EQ(r->size(), value.size());
  EXPECT_EQ(std::memcmp(header.data(), value.data(), 72), 0);
  EXPECT_EQ(std::memcmp(payload.data(), value.data() + 72, payload.size()), 0);
  r = reader.Next(into);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->landed());
  EXPECT_EQ(r->str(), "abcd");
  r = reader.Next(into);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type(), RedisReply::Type::kNil);
  EXPECT_TRUE(reader.drained());
  peer.join();
}

TEST_F(RespTest, MalformedRepliesAreErrorsNotGuesses) {
  for (const std::string bad : {"?what\r\n", "$abc\r\n", "$-5\r\n", "$3\r\nabcXY", ":12x\r\n",
                                "+OK\rX", "*-3\r\n", "$999999999999\r\n"}) {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    ASSERT_EQ(::write(fds[1], bad.data(), bad.size()), static_cast<ssize_t>(bad.size()));
    ::close(fds[1]);
    RespReader reader(RedisStream{fds[0]});
    Result<RedisReply> r = reader.Next();
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << bad;
    ::close(fds[0]);
  }
}

TEST_F(RespTest, AServerThatClosesOrStallsIsAnErrorNotAHang) {
  Send("$10\r\nabc");
  timeval tv{0, 100 * 1000};
  ASSERT_EQ(::setsockopt(fds_[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
  RespReader reader(RedisStream{fds_[0]});
  Result<RedisReply> r = reader.Next();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("timed out"), std::string::npos) << r.status().ToString();
  ::close(fds_[1]);
  fds_[1] = -1;
  RespReader after_close(RedisStream{fds_[0]});
  r = after_close.Next();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("closed"), std::string::npos) << r.status().ToString();
  // Writing to a closed peer is an error too, not a SIGPIPE.
  RedisCommand get{{"GET", "k"}, 1};
  const RedisCommand* one = &get;
  EXPECT_EQ(WriteCommands(RedisStream{fds_[0]}, std::span(&one, 1)).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvtier::tiers::internal
