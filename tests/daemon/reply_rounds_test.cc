// ReplyRounds (daemon/reply_rounds.h): replies held to the end of the io
// loop's round while more than one session is served a round, and the
// sessions that waited resumed in the order they came.
#include "daemon/reply_rounds.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::daemon {
namespace {

TEST(ReplyRoundsTest, HoldsOnlyAfterARoundThatServedSeveralSessions) {
  ReplyRounds rounds;
  EXPECT_FALSE(rounds.holding());  // a lone worker's reply leaves at once
  rounds.Served();
  rounds.EndRound();
  EXPECT_FALSE(rounds.holding());
  rounds.Served();
  rounds.Served();
  rounds.EndRound();
  EXPECT_TRUE(rounds.holding());
  rounds.EndRound();  // a round that served no one (an idle poll) changes nothing
  EXPECT_TRUE(rounds.holding());
  rounds.Served();
  rounds.EndRound();
  EXPECT_FALSE(rounds.holding());
}

// Sessions that wait resume at the round's end, first come first, on the
// thread that ends it; one that waits again waits for the next round.
TEST(ReplyRoundsTest, WaitersResumeInOrderAtTheRoundsEnd) {
  asio::io_context io(1);
  ReplyRounds rounds;
  std::vector<int> resumed;
  auto session = [&](int id, int waits) -> asio::awaitable<void> {
    for (int w = 0; w < waits; ++w) {
      co_await rounds.Wait();
      resumed.push_back(id);
    }
  };
  for (int id = 0; id < 3; ++id) asio::co_spawn(io, session(id, id == 1 ? 2 : 1), asio::detached);
  io.poll();
  EXPECT_TRUE(resumed.empty());
  EXPECT_EQ(rounds.waiting(), 3u);
  rounds.EndRound();
  EXPECT_EQ(resumed, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(rounds.waiting(), 1u);  // session 1, waiting again
  io.poll();
  EXPECT_EQ(resumed.size(), 3u);
  rounds.EndRound();
  EXPECT_EQ(resumed, (std::vector<int>{0, 1, 2, 1}));
  EXPECT_EQ(rounds.waiting(), 0u);
  io.poll();
  EXPECT_TRUE(io.stopped());  // every coroutine ran to its end
}

}  // namespace
}  // namespace kvtier::daemon
