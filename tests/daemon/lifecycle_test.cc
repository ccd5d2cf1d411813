// Starting and stopping the real kvtierd: the socket file, signals, stale
// and live sockets, --help, a bad configuration.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "support/daemon_harness.h"

namespace kvtier::testing {
namespace {

bool Exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

TEST(LifecycleTest, SigtermStopsCleanlyAndRemovesTheSocket) {
  auto d = Daemon::Start();
  ASSERT_NE(d, nullptr);
  struct stat st {};
  ASSERT_EQ(::lstat(d->socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  const std::string path = d->socket();
  const int status = d->Stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(Exists(path));
}

TEST(LifecycleTest, SigintFinishesAndAttachedClientsSeeTheEnd) {
  auto d = Daemon::Start();
  ASSERT_NE(d, nullptr);
  auto c = RawConnection::Open(d->socket());
  std::vector<std::byte> frame;
  protocol::EncodeHello(1, TestHello("m"), &frame);
  ASSERT_TRUE(c->Send(frame));
  ASSERT_TRUE(c->Read().has_value());
  ::kill(d->pid(), SIGINT);
  EXPECT_TRUE(c->ClosedByPeer());
  const int status = d->Stop(0);  // already stopping: just wait
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(LifecycleTest, IdleExitWaitsForTheLastConnectionThenStopsCleanly) {
  auto d = Daemon::Start({"--idle-exit-s", "1"});
  ASSERT_NE(d, nullptr);
  const std::string path = d->socket();
  auto c = RawConnection::Open(path);
  ASSERT_NE(c, nullptr);
  std::vector<std::byte> frame;
  protocol::EncodeHello(1, TestHello("m"), &frame);
  ASSERT_TRUE(c->Send(frame));
  ASSERT_TRUE(c->Read().has_value());
  // Three idle limits with a session open: the daemon stays.
  ::usleep(3'000'000);
  EXPECT_TRUE(d->Alive()) << d->Log();
  c.reset();  // the last connection goes: the daemon follows within the limit
  const int status = d->WaitForExit(std::chrono::seconds(20));
  ASSERT_TRUE(WIFEXITED(status)) << status << "\n" << d->Log();
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(Exists(path));
  EXPECT_NE(d->Log().find("(server.idle_exit_s): stopping"), std::string::npos) << d->Log();
}

TEST(LifecycleTest, StaleSocketFromACrashIsReplaced) {
  auto d = Daemon::Start();
  ASSERT_NE(d, nullptr);
  const std::string path = d->socket();
  d->Stop(SIGKILL);  // leaves the socket file behind
  ASSERT_TRUE(Exists(path));
  std::string log;
  // A second daemon on the same path starts (and is stopped by the timeout).
  auto again = Daemon::Start({}, path);
  ASSERT_NE(again, nullptr);
  EXPECT_NE(again->Log().find("stale socket"), std::string::npos) << again->Log();
}

TEST(LifecycleTest, LiveSocketOfAnotherDaemonIsAnError) {
  auto d = Daemon::Start();
  ASSERT_NE(d, nullptr);
  std::string err;
  const int status = RunDaemonToExit(
      {"--socket", d->socket(), "--no-reserve-memory", "--host-capacity", "8MiB", "--ssd-dir", ""},
      &err);
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(err.find("another kvtierd is listening"), std::string::npos) << err;
  EXPECT_TRUE(d->Alive());
}

TEST(LifecycleTest, PathThatIsNotASocketIsLeftAlone) {
  const TempDir dir("/tmp/kvtier-notsock");
  const std::string path = dir / "file";
  std::ofstream(path) << "precious";
  std::string err;
  const int status =
      RunDaemonToExit({"--socket", path, "--no-reserve-memory", "--ssd-dir", ""}, &err);
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(err.find("not a socket"), std::string::npos) << err;
  std::ifstream in(path);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
  ::unlink(path.c_str());
}

TEST(LifecycleTest, DataDirectoryOfAnotherFormatIsRefusedUntouched) {
  const TempDir dir("/var/tmp/kvtier-format");
  std::ofstream(dir / "FORMAT") << "kvtier-ssd-format 99\n";
  std::ofstream(dir / "blocks-4096.dat") << "someone's data";
  std::string err;
  const int status = RunDaemonToExit({"--socket", dir / "kvtierd.sock", "--no-reserve-memory",
                                      "--host-capacity", "8MiB", "--ssd-dir", dir},
                                     &err);
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(err.find("format"), std::string::npos) << err;
  // Nothing in it changed: the same two files, the same bytes.
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 2u);
  std::ifstream format(dir / "FORMAT");
  std::string line;
  std::getline(format, line);
  EXPECT_EQ(line, "kvtier-ssd-format 99");
}

TEST(LifecycleTest, HelpListsTheFlags) {
  std::string out;
  const int status = RunDaemonToExit({"--help"}, &out);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (const char* flag : {"--config", "--socket", "--socket-mode", "--host-capacity", "--device",
                           "--max-payload", "--max-keys"}) {
    EXPECT_NE(out.find(flag), std::string::npos) << flag;
  }
}

TEST(LifecycleTest, BadConfigurationIsAClearError) {
  const TempDir dir("/tmp/kvtier-conf");
  const std::string path = dir / "kvtierd.toml";
  std::ofstream(path) << "[host]\ncapacity = \"lots\"\n";
  std::string err;
  int status = RunDaemonToExit({"--config", path}, &err);
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(err.find("capacity"), std::string::npos) << err;
  std::ofstream(path) << "[host]\ncapacty = \"1GiB\"\n";
  status = RunDaemonToExit({"--config", path}, &err);
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(err.find("unknown key"), std::string::npos) << err;
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace kvtier::testing
