#include "daemon/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace kvtier::daemon {
namespace {

using kvtier::testing::TempDir;

class ConfigTest : public ::testing::Test {
 protected:
  void TearDown() override { ::unlink(path_.c_str()); }
  Result<DaemonConfig> Load(const std::string& text) {
    std::ofstream(path_) << text;
    return LoadConfigFile(path_);
  }
  TempDir dir_{"/tmp/kvtier-config"};
  std::string path_ = dir_ / "kvtierd.toml";
};

TEST_F(ConfigTest, DefaultsAreValid) {
  DaemonConfig c;
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_EQ(c.socket_path, "/run/kvtier/kvtierd.sock");
  EXPECT_EQ(c.socket_mode, 0660u);
  EXPECT_EQ(c.device_mode, "auto");
  // Every tier adapts its eviction to its traffic unless told otherwise.
  EXPECT_EQ(c.host_policy, "adaptive");
  EXPECT_EQ(c.device_policy, "adaptive");
  EXPECT_EQ(c.ssd_policy, "adaptive");
  EXPECT_EQ(c.max_hinted_blocks_per_session, 4096u);
  EXPECT_EQ(c.hint_ttl_ms, 10'000u);
  EXPECT_EQ(c.max_hint_ttl_ms, 60'000u);
}

TEST_F(ConfigTest, EmptyFileKeepsTheDefaults) {
  auto c = Load("");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->host_capacity_bytes, DaemonConfig{}.host_capacity_bytes);
}

TEST_F(ConfigTest, EveryKeyIsRead) {
  auto c = Load(R"(
[server]
socket = "/tmp/x.sock"
socket_mode = "0600"
max_payload = "8MiB"
max_keys = 1024
copy_threads = 3
busy_poll_us = 0
session_wait = "set"
secret = "00112233445566778899aabbccddeeff"
socket_owner = 0
socket_group = "0"
allow_uids = [1000, 1001]
allow_gids = [27]
max_sessions = 16
max_leases_per_session = 32
max_allocations_per_session = 8
max_namespaces = 12
max_hinted_blocks_per_session = 99
hint_ttl_ms = 500
max_hint_ttl_ms = 700
hello_timeout_ms = 2000
frame_timeout_ms = 3000
reply_timeout_ms = 4000
[host]
capacity = "2GiB"
slab = "16MiB"
policy = "lru"
admission = "seen"
reserve_memory = false
[device]
mode = "emulated"
capacity = 536870912
policy = "lru"
admission = "tinylfu"
[ssd]
admission = "seen"
)");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->socket_path, "/tmp/x.sock");
  EXPECT_EQ(c->socket_mode, 0600u);
  EXPECT_EQ(c->max_payload_bytes, 8 * kMiB);
  EXPECT_EQ(c->max_keys, 1024u);
  EXPECT_EQ(c->copy_threads, 3u);
  EXPECT_EQ(c->busy_poll_us, 0u);
  EXPECT_EQ(c->session_wait, "set");
  EXPECT_EQ(c->socket_owner, "0");
  EXPECT_EQ(c->socket_group, "0");
  EXPECT_EQ(c->allow_uids, (std::vector<uint32_t>{1000, 1001}));
  EXPECT_EQ(c->allow_gids, std::vector<uint32_t>{27});
  EXPECT_EQ(c->max_sessions, 16u);
  EXPECT_EQ(c->max_leases_per_session, 32u);
  EXPECT_EQ(c->max_allocations_per_session, 8u);
  EXPECT_EQ(c->max_namespaces, 12u);
  EXPECT_EQ(c->max_hinted_blocks_per_session, 99u);
  EXPECT_EQ(c->hint_ttl_ms, 500u);
  EXPECT_EQ(c->max_hint_ttl_ms, 700u);
  EXPECT_EQ(c->hello_timeout_ms, 2000u);
  EXPECT_EQ(c->frame_timeout_ms, 3000u);
  EXPECT_EQ(c->reply_timeout_ms, 4000u);
  EXPECT_EQ(c->host_capacity_bytes, 2 * kGiB);
  EXPECT_EQ(c->host_slab_bytes, 16 * kMiB);
  EXPECT_FALSE(c->host_reserve_memory);
  EXPECT_EQ(c->host_admission, "seen");
  EXPECT_EQ(c->device_admission, "tinylfu");
  EXPECT_EQ(c->ssd_admission, "seen");
  EXPECT_EQ(c->device_mode, "emulated");
  EXPECT_EQ(c->device_capacity_bytes, 512 * kMiB);
  EXPECT_TRUE(c->Validate().ok());
}

TEST_F(ConfigTest, ErrorsNameTheKeyAndTheFile) {
  auto c = Load("[host]\ncapacity = true\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("capacity"), std::string_view::npos);
  EXPECT_NE(c.status().message().find(path_), std::string_view::npos);
  EXPECT_FALSE(Load("[hots]\n").ok());
  EXPECT_FALSE(Load("[server]\nsocket_mode = \"0999\"\n").ok());
  EXPECT_FALSE(Load("not toml at all ===").ok());
}

TEST_F(ConfigTest, ValidateRejectsBadValues) {
  DaemonConfig c;
  c.device_mode = "gpu";
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.host_policy = "fifo";
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.host_policy = "adaptive:lru+";
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.host_policy = "adaptive:lru+leaf-lru+learned";  // candidates of one's own
  c.ssd_policy = "learned";
  EXPECT_TRUE(c.Validate().ok());
  c = {};
  c.host_admission = "sometimes";
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.device_admission = "oracle";  // replay's alone: it knows the future
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.ssd_admission = "always";
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.session_wait = "sometimes";
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.secret_hex = "abc";
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.max_keys = 0;
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.ssd_prepare = "fallocate";
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.max_sessions = 0;
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.max_leases_per_session = 0;
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.hello_timeout_ms = 0;
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.max_namespaces = 0;
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.socket_group = "no-such-group-kvtier";
  EXPECT_FALSE(c.Validate().ok());
}

TEST_F(ConfigTest, FlagsSetTheLimitsAndTheAllowLists) {
  std::vector<std::string> args = {"kvtierd", "--max-sessions",
                                   "7",       "--max-leases-per-session",
                                   "9",       "--max-allocations-per-session",
                                   "3",       "--max-namespaces",
                                   "11",      "--hello-timeout-ms",
                                   "1500",    "--frame-timeout-ms",
                                   "2500",    "--reply-timeout-ms",
                                   "3500",    "--allow-uids",
                                   "0, 1000", "--allow-gids",
                                   "5",       "--socket-owner",
                                   "0",       "--socket-group",
                                   "0"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  const ParsedArgs p = ParseArgs(static_cast<int>(argv.size()), argv.data());
  ASSERT_FALSE(p.exit_now);
  EXPECT_EQ(p.config.max_sessions, 7u);
  EXPECT_EQ(p.config.max_leases_per_session, 9u);
  EXPECT_EQ(p.config.max_allocations_per_session, 3u);
  EXPECT_EQ(p.config.max_namespaces, 11u);
  EXPECT_EQ(p.config.hello_timeout_ms, 1500u);
  EXPECT_EQ(p.config.frame_timeout_ms, 2500u);
  EXPECT_EQ(p.config.reply_timeout_ms, 3500u);
  EXPECT_EQ(p.config.allow_uids, (std::vector<uint32_t>{0, 1000}));
  EXPECT_EQ(p.config.allow_gids, std::vector<uint32_t>{5});
  EXPECT_EQ(p.config.socket_owner, "0");
  EXPECT_EQ(p.config.socket_group, "0");
}

TEST_F(ConfigTest, TheShippedConfigFileIsTheDefaults) {
  auto c = LoadConfigFile(KVTIER_SOURCE_DIR "/deploy/kvtierd.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const DaemonConfig d;
  EXPECT_EQ(c->socket_path, d.socket_path);
  EXPECT_EQ(c->socket_mode, d.socket_mode);
  EXPECT_EQ(c->max_payload_bytes, d.max_payload_bytes);
  EXPECT_EQ(c->max_keys, d.max_keys);
  EXPECT_EQ(c->copy_threads, d.copy_threads);
  EXPECT_EQ(c->busy_poll_us, d.busy_poll_us);
  EXPECT_EQ(c->session_wait, d.session_wait);
  EXPECT_EQ(c->host_capacity_bytes, d.host_capacity_bytes);
  EXPECT_EQ(c->host_slab_bytes, d.host_slab_bytes);
  EXPECT_EQ(c->host_reserve_memory, d.host_reserve_memory);
  EXPECT_EQ(c->device_mode, d.device_mode);
  EXPECT_EQ(c->device_capacity_bytes, d.device_capacity_bytes);
  EXPECT_EQ(c->device_gpu, d.device_gpu);
  EXPECT_EQ(c->ssd_dir, d.ssd_dir);
  EXPECT_EQ(c->ssd_capacity_bytes, d.ssd_capacity_bytes);
  EXPECT_EQ(c->ssd_policy, d.ssd_policy);
  EXPECT_EQ(c->host_policy, d.host_policy);
  EXPECT_EQ(c->device_policy, d.device_policy);
  EXPECT_EQ(c->max_hinted_blocks_per_session, d.max_hinted_blocks_per_session);
  EXPECT_EQ(c->hint_ttl_ms, d.hint_ttl_ms);
  EXPECT_EQ(c->max_hint_ttl_ms, d.max_hint_ttl_ms);
  EXPECT_EQ(c->ssd_direct_io, d.ssd_direct_io);
  EXPECT_EQ(c->ssd_io_threads, d.ssd_io_threads);
  EXPECT_EQ(c->ssd_queue, d.ssd_queue);
  EXPECT_EQ(c->ssd_write_through, d.ssd_write_through);
  EXPECT_EQ(c->ssd_prepare, d.ssd_prepare);
  EXPECT_EQ(c->socket_owner, d.socket_owner);
  EXPECT_EQ(c->socket_group, d.socket_group);
  EXPECT_EQ(c->allow_uids, d.allow_uids);
  EXPECT_EQ(c->allow_gids, d.allow_gids);
  EXPECT_EQ(c->max_sessions, d.max_sessions);
  EXPECT_EQ(c->max_leases_per_session, d.max_leases_per_session);
  EXPECT_EQ(c->max_allocations_per_session, d.max_allocations_per_session);
  EXPECT_EQ(c->max_namespaces, d.max_namespaces);
  EXPECT_EQ(c->hello_timeout_ms, d.hello_timeout_ms);
  EXPECT_EQ(c->frame_timeout_ms, d.frame_timeout_ms);
  EXPECT_EQ(c->reply_timeout_ms, d.reply_timeout_ms);
  EXPECT_EQ(c->metrics_address, d.metrics_address);
  EXPECT_TRUE(IsLoopbackAddress(c->metrics_address));
}

}  // namespace
}  // namespace kvtier::daemon

namespace kvtier::daemon {
namespace {

TEST_F(ConfigTest, RemoteAndEventsKeysAreRead) {
  auto c = Load(R"(
[remote]
seeds = ["10.0.0.1:7000", "10.0.0.2:7000"]
secret_file = "/etc/kvtier/deployment.secret"
key_prefix = "prod"
connections = 2
io_threads = 3
queue = 64
connect_timeout_ms = 100
timeout_ms = 500
pause_ms = 2000
negative_ttl_ms = 250
write_through = true

[events]
enabled = true
endpoint = "ipc:///run/kvtier/events"
replay_endpoint = "ipc:///run/kvtier/replay"
buffer_batches = 50
hwm = 10
topic_prefix = "node-a/"
flush_us = 250
)");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->remote_seeds, (std::vector<std::string>{"10.0.0.1:7000", "10.0.0.2:7000"}));
  EXPECT_EQ(c->remote_secret_file, "/etc/kvtier/deployment.secret");
  EXPECT_EQ(c->remote_key_prefix, "prod");
  EXPECT_EQ(c->remote_connections, 2u);
  EXPECT_EQ(c->remote_io_threads, 3u);
  EXPECT_EQ(c->remote_queue, 64u);
  EXPECT_EQ(c->remote_connect_timeout_ms, 100u);
  EXPECT_EQ(c->remote_timeout_ms, 500u);
  EXPECT_EQ(c->remote_pause_ms, 2000u);
  EXPECT_EQ(c->remote_negative_ttl_ms, 250u);
  EXPECT_TRUE(c->remote_write_through);
  EXPECT_TRUE(c->events_enabled);
  EXPECT_EQ(c->events_endpoint, "ipc:///run/kvtier/events");
  EXPECT_EQ(c->events_replay_endpoint, "ipc:///run/kvtier/replay");
  EXPECT_EQ(c->events_buffer_batches, 50u);
  EXPECT_EQ(c->events_hwm, 10u);
  EXPECT_EQ(c->events_topic_prefix, "node-a/");
  EXPECT_EQ(c->events_flush_us, 250u);
  EXPECT_TRUE(c->Validate().ok());
}

TEST_F(ConfigTest, ARemoteTierNeedsItsDeploymentSecretAndNoOtherMaster) {
  DaemonConfig c;
  c.remote_seeds = {"127.0.0.1:7000"};
  EXPECT_NE(c.Validate().message().find("remote.secret_file"), std::string::npos);
  c.remote_secret_file = "/etc/kvtier/deployment.secret";
  EXPECT_TRUE(c.Validate().ok());
  c.secret_hex = "00112233445566778899aabbccddeeff";
  EXPECT_NE(c.Validate().message().find("drop server.secret"), std::string::npos);
  c.secret_hex.clear();
  c.remote_key_prefix = "a b";
  EXPECT_FALSE(c.Validate().ok());
  c.remote_key_prefix = "kvtier";
  c.remote_connections = 0;
  EXPECT_FALSE(c.Validate().ok());
  // A comma-separated string works too (the --remote-seeds form).
  auto loaded = Load("[remote]\nseeds = \"a:1, b:2\"\nsecret_file = \"/s\"\n");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->remote_seeds, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_FALSE(Load("[remote]\nseed = [\"a:1\"]\n").ok());  // unknown key, named
}

// The defaults live in DaemonConfig alone: kvtierd --help states them from
// it (ParseArgs), and deploy/kvtierd.toml and the README's configuration
// table must say the same.
std::string SourceFile(const std::string& name) {
  std::ifstream in(std::string(KVTIER_SOURCE_DIR) + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_F(ConfigTest, TheDeployFileAndTheReadmeStateDaemonConfigsDefaults) {
  const std::vector<ConfigEntry> defaults = ConfigEntries(DaemonConfig{});
  // The entries are the file's keys: written out as a file, they read back
  // to themselves (an unknown key or a wrong value would fail to load).
  std::string text, section;
  for (const ConfigEntry& e : defaults) {
    const std::string sec = e.key.substr(0, e.key.find('.'));
    if (sec != section) text += "[" + (section = sec) + "]\n";
    text += e.key.substr(sec.size() + 1) + " = " + e.value + "\n";
  }
  auto round = Load(text);
  ASSERT_TRUE(round.ok()) << round.status().ToString() << "\n" << text;
  EXPECT_EQ(ConfigEntries(*round), defaults);

  // deploy/kvtierd.toml: every key shown (set, or commented out where its
  // default is "none"), and what it sets is the default.
  const std::string deploy = SourceFile("deploy/kvtierd.toml");
  auto shipped = LoadConfigFile(std::string(KVTIER_SOURCE_DIR) + "/deploy/kvtierd.toml");
  ASSERT_TRUE(shipped.ok()) << shipped.status().ToString();
  const std::vector<ConfigEntry> in_file = ConfigEntries(*shipped);
  ASSERT_EQ(in_file.size(), defaults.size());
  for (size_t i = 0; i < defaults.size(); ++i) {
    EXPECT_EQ(in_file[i].value, defaults[i].value) << "deploy/kvtierd.toml: " << defaults[i].key;
    const std::string sec = defaults[i].key.substr(0, defaults[i].key.find('.'));
    const std::string name = defaults[i].key.substr(sec.size() + 1);
    const size_t start = deploy.find("\n[" + sec + "]\n");
    ASSERT_NE(start, std::string::npos) << "deploy/kvtierd.toml has no [" << sec << "]";
    const std::string body = deploy.substr(start, deploy.find("\n[", start + 1) - start);
    EXPECT_TRUE(std::regex_search(body, std::regex("\n(# )?" + name + " = ")))
        << "deploy/kvtierd.toml does not show " << defaults[i].key;
  }

  // The README's table: each row's keys (`section.name`, one or several)
  // and its default column (one value per key, comma-separated; a remark
  // in parentheses after a value is prose), as TOML writes the value but
  // for the quotes around a non-empty string.
  std::vector<ConfigEntry> documented;
  std::istringstream readme(SourceFile("README.md"));
  const std::regex key_re("`([a-z]+\\.[a-z_]+)`");
  for (std::string line; std::getline(readme, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    const size_t c1 = line.find(" | ", 2);
    const size_t c2 = c1 == std::string::npos ? c1 : line.find(" | ", c1 + 3);
    if (c2 == std::string::npos) continue;
    std::string keys_cell = line.substr(2, c1 - 2);
    keys_cell = keys_cell.substr(0, keys_cell.find(" ("));  // the flags
    std::vector<std::string> keys;
    for (std::sregex_iterator it(keys_cell.begin(), keys_cell.end(), key_re), end; it != end;
         ++it) {
      keys.push_back((*it)[1]);
    }
    if (keys.empty()) continue;
    std::vector<std::string> values;
    std::istringstream cell(line.substr(c1 + 3, c2 - c1 - 3));
    for (std::string v; std::getline(cell, v, ',');) {
      v = v.substr(0, v.find(" ("));
      std::erase(v, '`');
      v.erase(0, v.find_first_not_of(' '));
      v.erase(v.find_last_not_of(' ') + 1);
      values.push_back(v);
    }
    ASSERT_EQ(values.size(), keys.size()) << "README: one default per key in: " << line;
    for (size_t i = 0; i < keys.size(); ++i) documented.push_back({keys[i], values[i]});
  }
  ASSERT_EQ(documented.size(), defaults.size()) << "README: every key, once";
  for (const ConfigEntry& want : defaults) {
    std::string shown = want.value;
    if (shown.size() > 2 && shown.front() == '"') shown = shown.substr(1, shown.size() - 2);
    auto it = std::find_if(documented.begin(), documented.end(),
                           [&](const ConfigEntry& d) { return d.key == want.key; });
    ASSERT_NE(it, documented.end()) << "README: no row for " << want.key;
    EXPECT_EQ(it->value, shown) << "README: the default of " << want.key;
  }
}

}  // namespace
}  // namespace kvtier::daemon
