// ReadinessSet (daemon/readiness.h) over real socket pairs and a real
// io_context: the waits complete on bytes, end of file and writability,
// not before; news that comes while nobody waits, or while a write waits,
// is kept; Complete() ends a wait; the set's teardown frees what still
// waits.
#include "daemon/readiness.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <memory>
#include <vector>

namespace kvtier::daemon {
namespace {

struct Pair {
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    ours = fds[0];
    theirs = fds[1];
  }
  ~Pair() {
    if (ours >= 0) ::close(ours);
    if (theirs >= 0) ::close(theirs);
  }
  int ours = -1;
  int theirs = -1;
};

// Runs what is ready now, without blocking.
void Settle(asio::io_context& io) {
  io.restart();
  io.poll();
}

// One socket pair, our end watched by `w` in `set`.
class ReadinessSetTest : public ::testing::Test {
 protected:
  // Watches our end, its first read (owed to any new socket) taken.
  void WatchQuietly() {
    ASSERT_TRUE(w.Watch(set, p.ours));
    w.TakeReady();
  }

  asio::io_context io;
  ReadinessSet set{io};
  Pair p;
  ReadinessSet::Waiter w;
};

TEST_F(ReadinessSetTest, ReadWaitCompletesWhenBytesComeNotBefore) {
  ASSERT_TRUE(set.ok());
  ASSERT_TRUE(w.Watch(set, p.ours));
  // A new socket is read before its first wait: bytes may predate the set.
  EXPECT_TRUE(w.TakeReady());
  EXPECT_FALSE(w.TakeReady());

  int completions = 0;
  w.AsyncWaitReadable([&](boost::system::error_code ec) {
    EXPECT_FALSE(ec);
    ++completions;
  });
  EXPECT_TRUE(w.waiting());
  Settle(io);
  EXPECT_EQ(completions, 0) << "completed with nothing to read";

  ASSERT_EQ(::write(p.theirs, "x", 1), 1);
  Settle(io);
  EXPECT_EQ(completions, 1);
  EXPECT_FALSE(w.waiting());
  // The event was the wait's: no second read is owed.
  EXPECT_FALSE(w.TakeReady());

  // Bytes that come while nobody waits are kept for the next wait.
  ASSERT_EQ(::write(p.theirs, "y", 1), 1);
  w.AsyncWaitReadable([&](boost::system::error_code) { ++completions; });
  Settle(io);
  EXPECT_EQ(completions, 2);
  char buf[4];
  EXPECT_EQ(::read(p.ours, buf, sizeof buf), 2);
}

TEST_F(ReadinessSetTest, NewsWhileBusyIsKeptForTakeReady) {
  Pair a, b;
  ReadinessSet::Waiter wa, wb;
  ASSERT_TRUE(wa.Watch(set, a.ours));
  ASSERT_TRUE(wb.Watch(set, b.ours));
  wa.TakeReady();
  wb.TakeReady();
  // b waits and a does not: when both get bytes, b is resumed and a's news
  // is kept.
  int b_done = 0;
  wb.AsyncWaitReadable([&](boost::system::error_code) { ++b_done; });
  ASSERT_EQ(::write(a.theirs, "a", 1), 1);
  ASSERT_EQ(::write(b.theirs, "b", 1), 1);
  Settle(io);
  EXPECT_EQ(b_done, 1);
  EXPECT_TRUE(wa.TakeReady());
  EXPECT_FALSE(wb.TakeReady());
}

TEST_F(ReadinessSetTest, EndOfFileCompletesTheWait) {
  WatchQuietly();
  int done = 0;
  w.AsyncWaitReadable([&](boost::system::error_code) { ++done; });
  ::close(std::exchange(p.theirs, -1));
  Settle(io);
  EXPECT_EQ(done, 1);
}

TEST_F(ReadinessSetTest, WriteWaitCompletesWhenThePeerDrainsAndKeepsReadNews) {
  WatchQuietly();
  // Fill our side until it takes no more.
  std::vector<char> chunk(64 * 1024, 'z');
  while (::write(p.ours, chunk.data(), chunk.size()) > 0) {
  }
  ASSERT_EQ(errno, EAGAIN);
  int done = 0;
  w.AsyncWaitWritable([&](boost::system::error_code) { ++done; });
  Settle(io);
  EXPECT_EQ(done, 0) << "a full socket reported writable";

  // A request comes while the write waits: the wait ends, and the news is
  // kept for the read that follows the write.
  ASSERT_EQ(::write(p.theirs, "r", 1), 1);
  Settle(io);
  EXPECT_EQ(done, 1);
  EXPECT_TRUE(w.TakeReady());

  // Still full: the next write wait ends when the peer reads, not at once
  // for the unread request.
  w.AsyncWaitWritable([&](boost::system::error_code) { ++done; });
  Settle(io);
  EXPECT_EQ(done, 1);
  while (::read(p.theirs, chunk.data(), chunk.size()) > 0) {
  }
  Settle(io);
  EXPECT_EQ(done, 2);
  // ("r" is still unread, and each event says so.)
  EXPECT_TRUE(w.TakeReady());
}

TEST_F(ReadinessSetTest, CompleteEndsAWaitAndASocketOutOfTheSetWakesNoOne) {
  WatchQuietly();
  int done = 0;
  w.AsyncWaitReadable([&](boost::system::error_code) { ++done; });
  w.Complete();
  EXPECT_EQ(done, 1);
  w.Complete();  // nothing waits: nothing happens
  EXPECT_EQ(done, 1);
  // With nobody waiting the set holds no work: run() returns (a daemon
  // whose sessions were stopped exits).
  io.restart();
  io.run();

  // Out of the set, bytes wake nobody (a deadline closed the socket; its
  // fd number may already be another connection's).
  w.Unwatch();
  w.AsyncWaitReadable([&](boost::system::error_code) { ++done; });
  ASSERT_EQ(::write(p.theirs, "x", 1), 1);
  Settle(io);
  EXPECT_EQ(done, 1);
  w.Complete();
  EXPECT_EQ(done, 2);

  // Back in the set (from Asio's reactor), the byte that came meanwhile is
  // not lost: it is read first, and a wait sees it too.
  ASSERT_TRUE(w.Watch(set, p.ours));
  EXPECT_TRUE(w.TakeReady());
  w.AsyncWaitReadable([&](boost::system::error_code) { ++done; });
  Settle(io);
  EXPECT_EQ(done, 3);
}

TEST(ReadinessSetTeardownTest, DestroysTheHandlersThatStillWait) {
  auto owned = std::make_shared<int>(7);
  std::weak_ptr<int> seen = owned;
  Pair p;
  {
    asio::io_context io;
    auto w = std::make_unique<ReadinessSet::Waiter>();
    {
      ReadinessSet set(io);
      ASSERT_TRUE(w->Watch(set, p.ours));
      w->TakeReady();
      // The handler owns the only reference, as a session's coroutine owns
      // its session.
      w->AsyncWaitReadable([keep = std::move(owned)](boost::system::error_code) {});
      EXPECT_FALSE(seen.expired());
    }
    EXPECT_TRUE(seen.expired()) << "a waiting handler outlived the set";
    EXPECT_FALSE(w->watching());
  }
}

TEST_F(ReadinessSetTest, DenseWhenSeveralSessionsReadWithinAWindow) {
  EXPECT_FALSE(set.dense());
  // One session, however busy, is not dense.
  uint64_t one = 0;
  for (int i = 0; i < 1000; ++i) set.NoteRead(&one);
  EXPECT_FALSE(set.dense());
  // Two taking turns are not yet (break-even); five are.
  std::array<uint64_t, 5> five{};
  for (int i = 0; i < 1000; ++i) set.NoteRead(&five[static_cast<size_t>(i) % 2]);
  EXPECT_FALSE(set.dense());
  for (int i = 0; i < 1000; ++i) set.NoteRead(&five[static_cast<size_t>(i) % 5]);
  EXPECT_TRUE(set.dense());
  EXPECT_TRUE(set.WaitHere());
  // Back to one: no longer, within a window or two.
  for (int i = 0; i < 300; ++i) set.NoteRead(&one);
  EXPECT_FALSE(set.dense());
  EXPECT_FALSE(set.WaitHere());

  // server.session_wait = "set" or "asio": load does not matter.
  ReadinessSet always(io, ReadinessSet::ParseChoice("set"));
  ReadinessSet never(io, ReadinessSet::ParseChoice("asio"));
  EXPECT_TRUE(always.WaitHere());
  EXPECT_FALSE(never.WaitHere());
  EXPECT_FALSE(never.ok());  // (no epoll set made)
  for (int i = 0; i < 1000; ++i) never.NoteRead(&five[static_cast<size_t>(i) % 5]);
  EXPECT_FALSE(never.WaitHere());
}

}  // namespace
}  // namespace kvtier::daemon
