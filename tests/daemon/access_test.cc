// Who may attach (docs/security.md): the socket file's owner and group, the
// SO_PEERCRED allow lists, the peer logged at attach, and the metrics
// endpoint's loopback default.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "client/client.h"
#include "daemon/config.h"
#include "support/daemon_client.h"

namespace kvtier::testing {
namespace {

Result<std::unique_ptr<client::Client>> TryConnect(const Daemon& d) {
  client::ClientOptions o = TestClientOptions(d.socket(), "m", "access-test");
  o.layout = Layout{1, 1, 64, DType::kFloat16, 16};
  o.io_timeout_ms = 10'000;
  return client::Client::Connect(o);
}

// The daemon's log once it holds `text` (or after 5 s).
std::string LogWith(const Daemon& d, const std::string& text) {
  std::string log;
  for (int i = 0; i < 500; ++i) {
    log = d.Log();
    if (log.find(text) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return log;
}

// A group to give the socket other than the daemon's own, where this user
// may: any group as root, else a supplementary group (or the primary one).
gid_t SomeOtherGroup() {
  if (::geteuid() == 0) return 65534;
  std::vector<gid_t> groups(static_cast<size_t>(std::max(0, ::getgroups(0, nullptr))));
  const int n = ::getgroups(static_cast<int>(groups.size()), groups.data());
  for (int i = 0; i < n; ++i) {
    if (groups[static_cast<size_t>(i)] != ::getegid()) return groups[static_cast<size_t>(i)];
  }
  return ::getegid();
}

TEST(AccessTest, SocketOwnerGroupAndModeAreSetBeforeAnyoneAttaches) {
  const uid_t owner = ::geteuid() == 0 ? 65534 : ::geteuid();
  const gid_t group = SomeOtherGroup();
  // The group by name where it has one: names and ids both work.
  std::string group_text = std::to_string(group);
  if (const ::group* g = ::getgrgid(group)) group_text = g->gr_name;
  auto d = Daemon::Start({"--socket-owner", std::to_string(owner), "--socket-group", group_text,
                          "--socket-mode", "0660"});
  ASSERT_NE(d, nullptr);
  struct stat st {};
  ASSERT_EQ(::lstat(d->socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, owner);
  EXPECT_EQ(st.st_gid, group);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  // This user still attaches (as the owner, through the group, or as root).
  auto c = TryConnect(*d);
  EXPECT_TRUE(c.ok()) << c.status().ToString() << "\n" << d->Log();
}

TEST(AccessTest, UnknownSocketGroupIsAStartError) {
  std::string err;
  const int status =
      RunDaemonToExit({"--socket", "/tmp/kvtier-access-none.sock", "--no-reserve-memory",
                       "--ssd-dir", "", "--socket-group", "no-such-group-kvtier"},
                      &err);
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(err.find("no group named 'no-such-group-kvtier'"), std::string::npos) << err;
}

TEST(AccessTest, PeerIsLoggedAtAttach) {
  auto d = Daemon::Start();
  ASSERT_NE(d, nullptr);
  auto c = TryConnect(*d);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::string peer = "peer pid " + std::to_string(::getpid()) + " uid " +
                           std::to_string(::geteuid()) + " gid " + std::to_string(::getegid());
  EXPECT_NE(d->Log().find(peer), std::string::npos) << peer << "\n" << d->Log();
}

TEST(AccessTest, PeersNotOnTheAllowListsAreRefused) {
  // Neither this uid nor this gid is listed.
  const std::string other_uid = std::to_string(::geteuid() + 4242);
  const std::string other_gid = std::to_string(::getegid() + 4242);
  auto d = Daemon::Start({"--allow-uids", other_uid, "--allow-gids", other_gid});
  ASSERT_NE(d, nullptr);
  for (int i = 0; i < 3; ++i) {
    auto c = TryConnect(*d);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied);
    EXPECT_NE(c.status().message().find("permission denied"), std::string_view::npos)
        << c.status().ToString();
    EXPECT_NE(c.status().message().find("server.allow_uids"), std::string_view::npos);
  }
  EXPECT_TRUE(d->Alive());
  // One line, not one per attempt (rate-limited).
  const std::string log = d->Log();
  const std::string line = "refused a connection from pid " + std::to_string(::getpid());
  EXPECT_NE(log.find(line), std::string::npos) << log;
  EXPECT_EQ(log.find(line), log.rfind(line)) << log;
}

TEST(AccessTest, PeersOnEitherAllowListAttach) {
  const std::string other = std::to_string(::geteuid() + 4242);
  auto by_uid = Daemon::Start({"--allow-uids", other + "," + std::to_string(::geteuid())});
  ASSERT_NE(by_uid, nullptr);
  auto c = TryConnect(*by_uid);
  EXPECT_TRUE(c.ok()) << c.status().ToString() << "\n" << by_uid->Log();
  by_uid.reset();
  auto by_gid = Daemon::Start({"--allow-uids", other, "--allow-gids", std::to_string(::getegid())});
  ASSERT_NE(by_gid, nullptr);
  c = TryConnect(*by_gid);
  EXPECT_TRUE(c.ok()) << c.status().ToString() << "\n" << by_gid->Log();
}

TEST(AccessTest, AllowListsComeFromTheFileByIdOrName) {
  const TempDir dir("/tmp/kvtier-allow");
  const std::string path = dir / "kvtierd.toml";
  const ::passwd* me = ::getpwuid(::geteuid());
  ASSERT_NE(me, nullptr);
  std::ofstream(path) << "[server]\nallow_uids = [4242, \"" << me->pw_name
                      << "\"]\nallow_gids = [7]\nsocket_owner = 0\nsocket_group = \"\"\n";
  auto c = daemon::LoadConfigFile(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->allow_uids, (std::vector<uint32_t>{4242, static_cast<uint32_t>(::geteuid())}));
  EXPECT_EQ(c->allow_gids, std::vector<uint32_t>{7});
  EXPECT_EQ(c->socket_owner, "0");
  std::ofstream(path) << "[server]\nallow_uids = [\"no-such-user-kvtier\"]\n";
  auto bad = daemon::LoadConfigFile(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no user named 'no-such-user-kvtier'"),
            std::string_view::npos)
      << bad.status().ToString();
  std::ofstream(path) << "[server]\nallow_gids = [-1]\n";
  EXPECT_FALSE(daemon::LoadConfigFile(path).ok());
}

// Another Unix user's process, not allowed to attach, can neither connect
// nor reach the host arena: the socket's mode refuses the connection, and
// the arena's memfd, which has no path, is reachable only through the
// daemon's /proc entries and pidfd_getfd, which the kernel keeps from other
// users. The second user is a uid of the test's choosing with no account
// (the kernel knows users by number); becoming it takes root, as the test
// command runs (scripts/test.sh in a fresh root).
TEST(AccessTest, AnotherUsersProcessCanNeitherConnectNorMapTheArena) {
  if (::geteuid() != 0) GTEST_SKIP() << "acting as a second Unix user needs root";
  uid_t other = 0;
  for (uid_t u = 47000; u < 48000 && other == 0; ++u) {
    if (::getpwuid(u) == nullptr) other = u;
  }
  ASSERT_NE(other, 0u);
  // The socket in a directory anyone may traverse: its own mode decides.
  const TempDir dir("/tmp/kvtier-access-user");
  std::filesystem::permissions(dir.path(), std::filesystem::perms(0755));
  auto d = Daemon::Start({"--socket-mode", "0660"}, dir / "kvtierd.sock");
  ASSERT_NE(d, nullptr);
  std::string arena_fd;
  const std::string fds = "/proc/" + std::to_string(d->pid()) + "/fd";
  for (const auto& e : std::filesystem::directory_iterator(fds)) {
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path(), ec).string().find("memfd:kvtier-host-arena") !=
        std::string::npos) {
      arena_fd = e.path().filename().string();
    }
  }
  ASSERT_FALSE(arena_fd.empty()) << "no host arena memfd among " << fds;
  const std::string arena_path = fds + "/" + arena_fd;
  const std::string mem_path = "/proc/" + std::to_string(d->pid()) + "/mem";
  const std::string socket_path = d->socket();
  const pid_t daemon_pid = d->pid();
  const int target_fd = std::stoi(arena_fd);

  // Each way in, tried as `uid`: 0 where it worked, else its errno.
  auto attempts = [&](uid_t uid) -> std::vector<int> {
    int out[2];
    EXPECT_EQ(::pipe(out), 0);
    const pid_t child = ::fork();
    if (child == 0) {
      int r[5];
      bool ok = ::setgroups(0, nullptr) == 0 && ::setgid(uid) == 0 && ::setuid(uid) == 0;
      if (!ok) ::_exit(2);
      const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
      r[0] = ::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 ? 0 : errno;
      const int arena = ::open(arena_path.c_str(), O_RDWR);
      r[1] = arena >= 0 ? 0 : errno;
      const int listing = ::open(fds.c_str(), O_RDONLY | O_DIRECTORY);
      r[2] = listing >= 0 ? 0 : errno;
      const int mem = ::open(mem_path.c_str(), O_RDONLY);
      r[3] = mem >= 0 ? 0 : errno;
      const long pidfd = ::syscall(SYS_pidfd_open, daemon_pid, 0);
      const long got = pidfd < 0 ? -1 : ::syscall(SYS_pidfd_getfd, pidfd, target_fd, 0);
      r[4] = got >= 0 ? 0 : errno;
      ok = ::write(out[1], r, sizeof(r)) == static_cast<ssize_t>(sizeof(r));
      ::_exit(ok ? 0 : 3);
    }
    ::close(out[1]);
    std::vector<int> r(5, -1);
    const ssize_t n = ::read(out[0], r.data(), r.size() * sizeof(int));
    ::close(out[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_EQ(n, static_cast<ssize_t>(r.size() * sizeof(int))) << "child status " << status;
    return r;
  };
  const std::vector<int> as_other = attempts(other);
  EXPECT_EQ(as_other[0], EACCES) << "connect: " << std::strerror(as_other[0]);
  EXPECT_EQ(as_other[1], EACCES) << "open the arena: " << std::strerror(as_other[1]);
  EXPECT_EQ(as_other[2], EACCES) << "list the daemon's fds: " << std::strerror(as_other[2]);
  EXPECT_EQ(as_other[3], EACCES) << "open its memory: " << std::strerror(as_other[3]);
  EXPECT_EQ(as_other[4], EPERM) << "pidfd_getfd: " << std::strerror(as_other[4]);
  // The same ways work for the daemon's own user: the test can tell.
  const std::vector<int> as_owner = attempts(::geteuid());
  EXPECT_EQ(as_owner, std::vector<int>(5, 0));
  EXPECT_TRUE(d->Alive());
  EXPECT_TRUE(TryConnect(*d).ok());
}

TEST(AccessTest, MetricsBindLoopbackByDefaultAndWarnOtherwise) {
  const daemon::DaemonConfig defaults;
  EXPECT_TRUE(daemon::IsLoopbackAddress(defaults.metrics_address)) << defaults.metrics_address;
  auto shipped = daemon::LoadConfigFile(KVTIER_SOURCE_DIR "/deploy/kvtierd.toml");
  ASSERT_TRUE(shipped.ok()) << shipped.status().ToString();
  EXPECT_TRUE(daemon::IsLoopbackAddress(shipped->metrics_address));
  for (const char* loopback : {"127.0.0.1:9464", "127.1.2.3:0", "localhost:9464", "[::1]:9464"}) {
    EXPECT_TRUE(daemon::IsLoopbackAddress(loopback)) << loopback;
  }
  for (const char* open : {"0.0.0.0:9464", "10.0.0.5:9464", "[::]:9464", "node1:9464"}) {
    EXPECT_FALSE(daemon::IsLoopbackAddress(open)) << open;
  }
  auto local = Daemon::Start({"--metrics-address", "127.0.0.1:0"});
  ASSERT_NE(local, nullptr);
  const std::string local_log = LogWith(*local, "metrics on http");
  EXPECT_NE(local_log.find("metrics on http"), std::string::npos) << local_log;
  EXPECT_EQ(local_log.find("is not loopback"), std::string::npos) << local_log;
  auto wide = Daemon::Start({"--metrics-address", "0.0.0.0:0"});
  ASSERT_NE(wide, nullptr);
  const std::string wide_log = LogWith(*wide, "is not loopback");
  EXPECT_NE(wide_log.find("metrics endpoint 0.0.0.0:0 is not loopback"), std::string::npos)
      << wide_log;
}

}  // namespace
}  // namespace kvtier::testing
