#include "daemon/config.h"

#include <grp.h>
#include <pwd.h>
#include <toml++/toml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <set>
#include <tuple>

#ifndef KVTIER_VERSION
#define KVTIER_VERSION "unknown"
#endif

namespace kvtier::daemon {
namespace {

// " [value]": a flag's default at the end of its help.
std::string Default(const std::string& value) { return " [" + value + "]"; }
std::string Default(uint64_t value) { return Default(std::to_string(value)); }
std::string Unquoted(const std::string& toml) {
  return toml.size() >= 2 && toml.front() == '"' ? toml.substr(1, toml.size() - 2) : toml;
}

Status BadKey(const std::string& path, const std::string& key, const std::string& why) {
  return InvalidArgumentError(path + ": " + key + ": " + why);
}

// Reads one key of a table if present, converting it with `convert`.
template <typename Convert>
Status ReadKey(const toml::table& table, const std::string& path, const std::string& section,
               const char* key, Convert convert) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return Status::Ok();
  return convert(*node).WithContext(path + ": [" + section + "] " + key);
}

auto Bytes(uint64_t* out) {
  return [out](const toml::node& n) -> Status {
    if (n.is_string()) {
      KVTIER_ASSIGN_OR_RETURN(*out, ParseBytes(*n.value<std::string>()));
      return Status::Ok();
    }
    if (n.is_integer() && *n.value<int64_t>() >= 0) {
      *out = static_cast<uint64_t>(*n.value<int64_t>());
      return Status::Ok();
    }
    return InvalidArgumentError("expected a byte count such as \"1GiB\" or 1073741824");
  };
}

auto String(std::string* out) {
  return [out](const toml::node& n) -> Status {
    if (n.is_string()) {
      *out = *n.value<std::string>();
      return Status::Ok();
    }
    return InvalidArgumentError("expected a string");
  };
}

auto Bool(bool* out) {
  return [out](const toml::node& n) -> Status {
    if (n.is_boolean()) {
      *out = *n.value<bool>();
      return Status::Ok();
    }
    return InvalidArgumentError("expected true or false");
  };
}

auto Share(double* out) {
  return [out](const toml::node& n) -> Status {
    if ((n.is_floating_point() || n.is_integer()) && *n.value<double>() >= 0 &&
        *n.value<double>() <= 1) {
      *out = *n.value<double>();
      return Status::Ok();
    }
    return InvalidArgumentError("expected a number from 0 to 1");
  };
}

auto Uint32(uint32_t* out) {
  return [out](const toml::node& n) -> Status {
    if (n.is_integer() && *n.value<int64_t>() >= 0 && *n.value<int64_t>() <= UINT32_MAX) {
      *out = static_cast<uint32_t>(*n.value<int64_t>());
      return Status::Ok();
    }
    return InvalidArgumentError("expected a non-negative integer");
  };
}

auto Uint64(uint64_t* out) {
  return [out](const toml::node& n) -> Status {
    if (n.is_integer() && *n.value<int64_t>() >= 0) {
      *out = static_cast<uint64_t>(*n.value<int64_t>());
      return Status::Ok();
    }
    return InvalidArgumentError("expected a non-negative integer");
  };
}

// An array of strings, or one string of comma-separated items.
std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, comma - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) out.push_back(item);
    start = comma + 1;
  }
  return out;
}

auto StringList(std::vector<std::string>* out) {
  return [out](const toml::node& n) -> Status {
    if (n.is_string()) {
      *out = SplitList(*n.value<std::string>());
      return Status::Ok();
    }
    const toml::array* a = n.as_array();
    if (a == nullptr) return InvalidArgumentError("expected an array of strings");
    out->clear();
    for (const toml::node& item : *a) {
      if (!item.is_string()) return InvalidArgumentError("expected an array of strings");
      out->push_back(*item.value<std::string>());
    }
    return Status::Ok();
  };
}

// Resolves a user (`group` false) or group name, or a numeric id, to an id.
Result<uint32_t> ResolveId(const std::string& text, bool group) {
  const char* what = group ? "group" : "user";
  if (text.empty()) return InvalidArgumentError(std::string("empty ") + what + " name");
  uint32_t id = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec == std::errc() && ptr == text.data() + text.size()) return id;
  std::vector<char> buf(16384);
  int err = 0;
  if (group) {
    struct group* found = nullptr;
    struct group g {};
    err = ::getgrnam_r(text.c_str(), &g, buf.data(), buf.size(), &found);
    if (err == 0 && found != nullptr) return static_cast<uint32_t>(found->gr_gid);
  } else {
    struct passwd* found = nullptr;
    struct passwd p {};
    err = ::getpwnam_r(text.c_str(), &p, buf.data(), buf.size(), &found);
    if (err == 0 && found != nullptr) return static_cast<uint32_t>(found->pw_uid);
  }
  return InvalidArgumentError(std::string("no ") + what + " named '" + text + "'" +
                              (err != 0 ? std::string(" (") + std::strerror(err) + ")" : ""));
}

// "1000,alice, 1002" -> ids.
Result<std::vector<uint32_t>> ParseIdList(const std::string& text, bool group) {
  std::vector<uint32_t> out;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(at, comma - at);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) {
      KVTIER_ASSIGN_OR_RETURN(const uint32_t id, ResolveId(item, group));
      out.push_back(id);
    }
    at = comma + 1;
  }
  return out;
}

// A TOML array of ids or names.
auto IdList(std::vector<uint32_t>* out, bool group) {
  return [out, group](const toml::node& n) -> Status {
    const toml::array* a = n.as_array();
    if (a == nullptr) return InvalidArgumentError("expected an array of ids or names");
    out->clear();
    for (const toml::node& item : *a) {
      if (item.is_integer() && *item.value<int64_t>() >= 0 &&
          *item.value<int64_t>() <= UINT32_MAX) {
        out->push_back(static_cast<uint32_t>(*item.value<int64_t>()));
      } else if (item.is_string()) {
        KVTIER_ASSIGN_OR_RETURN(const uint32_t id, ResolveId(*item.value<std::string>(), group));
        out->push_back(id);
      } else {
        return InvalidArgumentError("expected an array of ids or names");
      }
    }
    return Status::Ok();
  };
}

// A name, or a numeric id, kept as text (resolved at start).
auto NameOrId(std::string* out) {
  return [out](const toml::node& n) -> Status {
    if (n.is_string()) {
      *out = *n.value<std::string>();
      return Status::Ok();
    }
    if (n.is_integer() && *n.value<int64_t>() >= 0 && *n.value<int64_t>() <= UINT32_MAX) {
      *out = std::to_string(*n.value<int64_t>());
      return Status::Ok();
    }
    return InvalidArgumentError("expected a name or a numeric id");
  };
}

Result<uint32_t> ParseMode(const std::string& text) {
  char* end = nullptr;
  const unsigned long mode = std::strtoul(text.c_str(), &end, 8);
  if (text.empty() || *end != '\0' || mode > 0777) {
    return InvalidArgumentError("'" + text + "' is not an octal file mode such as 0660");
  }
  return static_cast<uint32_t>(mode);
}

auto Mode(uint32_t* out) {
  return [out](const toml::node& n) -> Status {
    if (n.is_string()) {
      KVTIER_ASSIGN_OR_RETURN(*out, ParseMode(*n.value<std::string>()));
      return Status::Ok();
    }
    return InvalidArgumentError("expected an octal mode string such as \"0660\"");
  };
}

Status CheckKnownKeys(const toml::table& table, const std::string& path, const std::string& section,
                      const std::set<std::string>& known) {
  for (const auto& [key, node] : table) {
    if (!known.count(std::string(key.str()))) {
      return BadKey(path, "[" + section + "] " + std::string(key.str()), "unknown key");
    }
  }
  return Status::Ok();
}

}  // namespace

const char* Version() { return KVTIER_VERSION; }

Result<uint32_t> ResolveUser(const std::string& name_or_id) { return ResolveId(name_or_id, false); }
Result<uint32_t> ResolveGroup(const std::string& name_or_id) { return ResolveId(name_or_id, true); }

Result<DaemonConfig> LoadConfigFile(const std::string& path, DaemonConfig c) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << path << ":" << e.source().begin.line << ":" << e.source().begin.column << ": "
        << e.description();
    return InvalidArgumentError(msg.str());
  } catch (const std::exception& e) {
    return InvalidArgumentError(path + ": " + e.what());
  }
  KVTIER_RETURN_IF_ERROR(CheckKnownKeys(
      root, path, "", {"server", "host", "device", "ssd", "remote", "events", "metrics"}));
  auto section = [&](const char* name) -> Result<const toml::table*> {
    const toml::node* n = root.get(name);
    if (n == nullptr) return static_cast<const toml::table*>(nullptr);
    if (!n->is_table()) return BadKey(path, name, "expected a table");
    return n->as_table();
  };
  KVTIER_ASSIGN_OR_RETURN(const toml::table* server, section("server"));
  if (server != nullptr) {
    const toml::table& t = *server;
    KVTIER_RETURN_IF_ERROR(CheckKnownKeys(t, path, "server",
                                          {"socket",
                                           "socket_mode",
                                           "socket_owner",
                                           "socket_group",
                                           "allow_uids",
                                           "allow_gids",
                                           "max_payload",
                                           "max_keys",
                                           "max_sessions",
                                           "max_leases_per_session",
                                           "max_allocations_per_session",
                                           "max_namespaces",
                                           "max_hinted_blocks_per_session",
                                           "hint_ttl_ms",
                                           "max_hint_ttl_ms",
                                           "hello_timeout_ms",
                                           "frame_timeout_ms",
                                           "reply_timeout_ms",
                                           "copy_threads",
                                           "busy_poll_us",
                                           "session_wait",
                                           "idle_exit_s",
                                           "secret",
                                           "block_keys_file"}));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "socket_owner", NameOrId(&c.socket_owner)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "socket_group", NameOrId(&c.socket_group)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "allow_uids", IdList(&c.allow_uids, false)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "allow_gids", IdList(&c.allow_gids, true)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "max_sessions", Uint32(&c.max_sessions)));
    KVTIER_RETURN_IF_ERROR(
        ReadKey(t, path, "server", "max_leases_per_session", Uint32(&c.max_leases_per_session)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "max_allocations_per_session",
                                   Uint32(&c.max_allocations_per_session)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "max_namespaces", Uint32(&c.max_namespaces)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "max_hinted_blocks_per_session",
                                   Uint32(&c.max_hinted_blocks_per_session)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "hint_ttl_ms", Uint32(&c.hint_ttl_ms)));
    KVTIER_RETURN_IF_ERROR(
        ReadKey(t, path, "server", "max_hint_ttl_ms", Uint32(&c.max_hint_ttl_ms)));
    KVTIER_RETURN_IF_ERROR(
        ReadKey(t, path, "server", "hello_timeout_ms", Uint32(&c.hello_timeout_ms)));
    KVTIER_RETURN_IF_ERROR(
        ReadKey(t, path, "server", "frame_timeout_ms", Uint32(&c.frame_timeout_ms)));
    KVTIER_RETURN_IF_ERROR(
        ReadKey(t, path, "server", "reply_timeout_ms", Uint32(&c.reply_timeout_ms)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "socket", String(&c.socket_path)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "socket_mode", Mode(&c.socket_mode)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "max_payload", Bytes(&c.max_payload_bytes)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "max_keys", Uint32(&c.max_keys)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "copy_threads", Uint32(&c.copy_threads)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "busy_poll_us", Uint32(&c.busy_poll_us)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "session_wait", String(&c.session_wait)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "idle_exit_s", Uint32(&c.idle_exit_s)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "server", "secret", String(&c.secret_hex)));
    KVTIER_RETURN_IF_ERROR(
        ReadKey(t, path, "server", "block_keys_file", String(&c.block_keys_file)));
  }
  KVTIER_ASSIGN_OR_RETURN(const toml::table* host, section("host"));
  if (host != nullptr) {
    const toml::table& t = *host;
    KVTIER_RETURN_IF_ERROR(CheckKnownKeys(
        t, path, "host",
        {"capacity", "slab", "policy", "admission", "reserve_memory", "huge_pages"}));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "host", "capacity", Bytes(&c.host_capacity_bytes)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "host", "slab", Bytes(&c.host_slab_bytes)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "host", "policy", String(&c.host_policy)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "host", "admission", String(&c.host_admission)));
    KVTIER_RETURN_IF_ERROR(
        ReadKey(t, path, "host", "reserve_memory", Bool(&c.host_reserve_memory)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "host", "huge_pages", String(&c.host_huge_pages)));
  }
  KVTIER_ASSIGN_OR_RETURN(const toml::table* device, section("device"));
  if (device != nullptr) {
    const toml::table& t = *device;
    KVTIER_RETURN_IF_ERROR(
        CheckKnownKeys(t, path, "device", {"mode", "gpu", "capacity", "policy", "admission"}));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "device", "gpu", Uint32(&c.device_gpu)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "device", "mode", String(&c.device_mode)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "device", "capacity", Bytes(&c.device_capacity_bytes)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "device", "policy", String(&c.device_policy)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "device", "admission", String(&c.device_admission)));
  }
  KVTIER_ASSIGN_OR_RETURN(const toml::table* ssd, section("ssd"));
  if (ssd != nullptr) {
    const toml::table& t = *ssd;
    KVTIER_RETURN_IF_ERROR(
        CheckKnownKeys(t, path, "ssd",
                       {"dir", "capacity", "policy", "admission", "max_write_per_day", "direct_io",
                        "io_threads", "queue", "write_through", "prepare", "fault_read_errors"}));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "ssd", "dir", String(&c.ssd_dir)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "ssd", "capacity", Bytes(&c.ssd_capacity_bytes)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "ssd", "prepare", String(&c.ssd_prepare)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "ssd", "policy", String(&c.ssd_policy)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "ssd", "admission", String(&c.ssd_admission)));
    KVTIER_RETURN_IF_ERROR(
        ReadKey(t, path, "ssd", "max_write_per_day", Bytes(&c.ssd_max_write_per_day)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "ssd", "direct_io", Bool(&c.ssd_direct_io)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "ssd", "io_threads", Uint32(&c.ssd_io_threads)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "ssd", "queue", Uint32(&c.ssd_queue)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "ssd", "write_through", Bool(&c.ssd_write_through)));
    KVTIER_RETURN_IF_ERROR(
        ReadKey(t, path, "ssd", "fault_read_errors", Share(&c.ssd_fault_read_errors)));
  }
  KVTIER_ASSIGN_OR_RETURN(const toml::table* remote, section("remote"));
  if (remote != nullptr) {
    const toml::table& t = *remote;
    KVTIER_RETURN_IF_ERROR(CheckKnownKeys(
        t, path, "remote",
        {"seeds",         "secret_file",        "key_prefix",      "connections", "io_threads",
         "queue",         "connect_timeout_ms", "timeout_ms",      "pause_ms",    "negative_ttl_ms",
         "write_through", "username",           "password_file",   "tls",         "tls_ca_file",
         "tls_cert_file", "tls_key_file",       "tls_server_name", "tls_verify",  "max_age_s"}));
    const char* r = "remote";
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "seeds", StringList(&c.remote_seeds)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "secret_file", String(&c.remote_secret_file)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "key_prefix", String(&c.remote_key_prefix)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "connections", Uint32(&c.remote_connections)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "io_threads", Uint32(&c.remote_io_threads)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "queue", Uint32(&c.remote_queue)));
    KVTIER_RETURN_IF_ERROR(
        ReadKey(t, path, r, "connect_timeout_ms", Uint32(&c.remote_connect_timeout_ms)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "timeout_ms", Uint32(&c.remote_timeout_ms)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "pause_ms", Uint32(&c.remote_pause_ms)));
    KVTIER_RETURN_IF_ERROR(
        ReadKey(t, path, r, "negative_ttl_ms", Uint32(&c.remote_negative_ttl_ms)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "write_through", Bool(&c.remote_write_through)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "username", String(&c.remote_username)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "password_file", String(&c.remote_password_file)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "tls", Bool(&c.remote_tls)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "tls_ca_file", String(&c.remote_tls_ca_file)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "tls_cert_file", String(&c.remote_tls_cert_file)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "tls_key_file", String(&c.remote_tls_key_file)));
    KVTIER_RETURN_IF_ERROR(
        ReadKey(t, path, r, "tls_server_name", String(&c.remote_tls_server_name)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "tls_verify", Bool(&c.remote_tls_verify)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, r, "max_age_s", Uint64(&c.remote_max_age_s)));
  }
  KVTIER_ASSIGN_OR_RETURN(const toml::table* events, section("events"));
  if (events != nullptr) {
    const toml::table& t = *events;
    KVTIER_RETURN_IF_ERROR(CheckKnownKeys(t, path, "events",
                                          {"enabled", "endpoint", "replay_endpoint",
                                           "buffer_batches", "hwm", "topic_prefix", "flush_us"}));
    const char* e = "events";
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, e, "enabled", Bool(&c.events_enabled)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, e, "endpoint", String(&c.events_endpoint)));
    KVTIER_RETURN_IF_ERROR(
        ReadKey(t, path, e, "replay_endpoint", String(&c.events_replay_endpoint)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, e, "buffer_batches", Uint32(&c.events_buffer_batches)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, e, "hwm", Uint32(&c.events_hwm)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, e, "topic_prefix", String(&c.events_topic_prefix)));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, e, "flush_us", Uint32(&c.events_flush_us)));
  }
  KVTIER_ASSIGN_OR_RETURN(const toml::table* metrics, section("metrics"));
  if (metrics != nullptr) {
    const toml::table& t = *metrics;
    KVTIER_RETURN_IF_ERROR(CheckKnownKeys(t, path, "metrics", {"address"}));
    KVTIER_RETURN_IF_ERROR(ReadKey(t, path, "metrics", "address", String(&c.metrics_address)));
  }
  return c;
}

ParsedArgs ParseArgs(int argc, char** argv) {
  ParsedArgs out;
  CLI::App app{
      "kvtierd: keeps the attention KV cache of LLM inference in GPU, host and SSD tiers.\n"
      "Settings come from the TOML file given with --config (deploy/kvtierd.toml documents\n"
      "every key and default); flags override the file."};
  std::string config_path;
  app.add_option("--config", config_path, "TOML configuration file")->check(CLI::ExistingFile);
  // The defaults shown are DaemonConfig's own (the only place they live).
  const DaemonConfig d;
  const std::vector<ConfigEntry> defaults = ConfigEntries(d);
  auto entry = [&](std::string_view key) {
    for (const ConfigEntry& e : defaults) {
      if (e.key == key) return e.value;
    }
    return std::string("?");
  };
  // Flags are read as text, so that byte counts take units ("64MiB") and an
  // unset flag leaves the file's value alone.
  std::string session_wait;
  std::string socket, socket_mode, max_payload, secret, block_keys_file, host_capacity, host_slab,
      host_policy, host_huge_pages, host_admission, device_mode, device_capacity, device_policy,
      device_admission, ssd_capacity, ssd_max_write_per_day, ssd_policy, ssd_admission, ssd_prepare;
  std::optional<std::string> ssd_dir, metrics_address;
  std::optional<uint32_t> device_gpu;
  uint32_t ssd_io_threads = 0;
  std::optional<double> ssd_fault_read_errors;
  uint32_t max_keys = 0, copy_threads = 0;
  std::optional<uint32_t> busy_poll_us, idle_exit_s;
  std::optional<std::string> socket_owner, socket_group, allow_uids, allow_gids;
  std::optional<uint32_t> max_hinted, hint_ttl_ms, max_hint_ttl_ms;
  std::optional<uint32_t> max_sessions, max_leases, max_allocations, max_namespaces,
      hello_timeout_ms, frame_timeout_ms, reply_timeout_ms;
  bool no_reserve = false;
  bool write_through = false;
  std::optional<std::string> remote_seeds, remote_secret_file, remote_key_prefix, events_endpoint,
      events_replay_endpoint;
  std::optional<uint32_t> events_flush_us;
  bool remote_write_through = false;
  app.add_option("--socket", socket, "Unix socket path" + Default(d.socket_path));
  app.add_option("--socket-mode", socket_mode,
                 "socket file mode, octal" + Default(Unquoted(entry("server.socket_mode"))));
  app.add_option("--socket-owner", socket_owner,
                 "owner of the socket file, name or uid, \"\" = the daemon's" +
                     Default(entry("server.socket_owner")));
  app.add_option("--socket-group", socket_group,
                 "group of the socket file, name or gid, \"\" = the daemon's" +
                     Default(entry("server.socket_group")));
  app.add_option("--allow-uids", allow_uids,
                 "peers that may attach by uid, comma-separated ids or names [anyone]");
  app.add_option("--allow-gids", allow_gids,
                 "peers that may attach by gid, comma-separated ids or names [anyone]");
  app.add_option("--max-sessions", max_sessions,
                 "most connections at once" + Default(d.max_sessions));
  app.add_option("--max-leases-per-session", max_leases,
                 "most leases one session holds" + Default(d.max_leases_per_session));
  app.add_option("--max-allocations-per-session", max_allocations,
                 "most open writes of one session" + Default(d.max_allocations_per_session));
  app.add_option("--max-namespaces", max_namespaces,
                 "most namespaces (model, salt, layout) registered" + Default(d.max_namespaces));
  app.add_option(
      "--max-hinted-blocks-per-session", max_hinted,
      "most blocks one session's hints protect at once" + Default(d.max_hinted_blocks_per_session));
  app.add_option(
      "--hint-ttl-ms", hint_ttl_ms,
      "how long a hint protects its blocks when the worker does not say" + Default(d.hint_ttl_ms));
  app.add_option("--max-hint-ttl-ms", max_hint_ttl_ms,
                 "the longest a worker may ask for" + Default(d.max_hint_ttl_ms));
  app.add_option("--hello-timeout-ms", hello_timeout_ms,
                 "close a connection without HELLO after this long" + Default(d.hello_timeout_ms));
  app.add_option("--frame-timeout-ms", frame_timeout_ms,
                 "close a connection whose request frame takes longer to arrive" +
                     Default(d.frame_timeout_ms));
  app.add_option(
      "--reply-timeout-ms", reply_timeout_ms,
      "close a session whose reply is not read for this long" + Default(d.reply_timeout_ms));
  app.add_option("--max-payload", max_payload,
                 "largest frame payload" + Default(ConfigBytes(d.max_payload_bytes)));
  app.add_option("--max-keys", max_keys, "most keys per request" + Default(d.max_keys));
  app.add_option("--copy-threads", copy_threads,
                 "threads copying inline bytes" + Default(d.copy_threads));
  app.add_option("--busy-poll-us", busy_poll_us,
                 "poll this long after work before sleeping, 0 = off" + Default(d.busy_poll_us));
  app.add_option("--session-wait", session_wait,
                 "where sessions wait for requests: auto, set (kvtierd's own epoll set) or "
                 "asio" +
                     Default(d.session_wait));
  app.add_option(
      "--idle-exit-s", idle_exit_s,
      "exit once no connection has been open this long, 0 = never" + Default(d.idle_exit_s));
  app.add_option("--secret", secret, "master secret, 32+ hex digits [random per start]");
  app.add_option("--block-keys-file", block_keys_file,
                 "file of block keys (<id>:<64 hex digits> per line, mode 600): blocks on the "
                 "ssd are sealed with AES-256-GCM [KVTIER_BLOCK_KEYS, else none]");
  app.add_option("--remote-seeds", remote_seeds,
                 "remote tier: Redis Cluster nodes, comma-separated host:port [none]");
  app.add_option("--remote-secret-file", remote_secret_file,
                 "remote tier: file with the deployment secret (32+ hex digits) [none]");
  app.add_option("--remote-key-prefix", remote_key_prefix,
                 "remote tier: prefix of every key" + Default(d.remote_key_prefix));
  app.add_flag("--remote-write-through", remote_write_through,
               "write every committed block to the remote tier at once [write-back]");
  app.add_option("--events-endpoint", events_endpoint,
                 "publish KV events on this ZeroMQ endpoint (turns them on) [off]");
  app.add_option("--events-replay-endpoint", events_replay_endpoint,
                 "ZeroMQ ROUTER endpoint resending missed event batches [none]");
  app.add_option(
      "--events-flush-us", events_flush_us,
      "events of this long go out as one batch, 0 = one per request" + Default(d.events_flush_us));
  app.add_option("--host-capacity", host_capacity,
                 "host tier bytes" + Default(ConfigBytes(d.host_capacity_bytes)));
  app.add_option("--host-slab", host_slab,
                 "host tier slab bytes" + Default(ConfigBytes(d.host_slab_bytes)));
  app.add_option("--host-policy", host_policy,
                 "host tier eviction policy" + Default(d.host_policy));
  app.add_option("--host-admission", host_admission,
                 "host tier admission filter: off | seen | tinylfu" + Default(d.host_admission));
  app.add_flag("--no-reserve-memory", no_reserve, "do not commit the host arena's memory at start");
  app.add_option("--host-huge-pages", host_huge_pages,
                 "host arena on 2 MiB huge pages: auto | on | off" + Default(d.host_huge_pages));
  app.add_option("--device", device_mode,
                 "device tier: auto | cuda | emulated | off" + Default(d.device_mode));
  app.add_option("--device-gpu", device_gpu,
                 "CUDA ordinal of the device tier's GPU" + Default(d.device_gpu));
  app.add_option("--device-capacity", device_capacity,
                 "device tier bytes" + Default(ConfigBytes(d.device_capacity_bytes)));
  app.add_option("--device-policy", device_policy,
                 "device tier eviction policy" + Default(d.device_policy));
  app.add_option(
      "--device-admission", device_admission,
      "device tier admission filter: off | seen | tinylfu" + Default(d.device_admission));
  app.add_option("--ssd-dir", ssd_dir,
                 "ssd tier data directory, \"\" = no ssd tier" + Default(d.ssd_dir));
  app.add_option("--ssd-capacity", ssd_capacity,
                 "ssd tier bytes" + Default(ConfigBytes(d.ssd_capacity_bytes)));
  app.add_option("--ssd-policy", ssd_policy, "ssd tier eviction policy" + Default(d.ssd_policy));
  app.add_option("--ssd-admission", ssd_admission,
                 "which blocks leaving the host are written to the ssd: off (all) | seen (those "
                 "looked up again since written) | tinylfu" +
                     Default(d.ssd_admission));
  app.add_option("--ssd-max-write-per-day", ssd_max_write_per_day,
                 "bytes written to the ssd per day at most, 0 = no bound" +
                     Default(ConfigBytes(d.ssd_max_write_per_day)));
  app.add_option(
      "--ssd-prepare", ssd_prepare,
      "write the ssd slot file once: background, foreground or sparse" + Default(d.ssd_prepare));
  app.add_option("--ssd-io-threads", ssd_io_threads,
                 "threads doing ssd I/O" + Default(d.ssd_io_threads));
  app.add_flag("--ssd-write-through", write_through,
               "write every committed block to the ssd at once [write-back]");
  app.add_option("--ssd-fault-read-errors", ssd_fault_read_errors,
                 "for tests: this share of ssd reads fails with EIO" +
                     Default(entry("ssd.fault_read_errors")));
  app.add_option("--metrics-address", metrics_address,
                 "Prometheus endpoint HOST:PORT, \"\" = off" + Default(d.metrics_address));
  app.set_version_flag("--version", std::string("kvtierd ") + Version());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    out.exit_now = true;
    out.exit_code = app.exit(e);
    return out;
  }

  auto fail = [&](const Status& s) {
    std::cerr << "kvtierd: " << s.message() << "\n";
    out.exit_now = true;
    out.exit_code = 2;
    return out;
  };
  if (!config_path.empty()) {
    auto loaded = LoadConfigFile(config_path);
    if (!loaded) return fail(loaded.status());
    out.config = *loaded;
  }
  DaemonConfig& c = out.config;
  auto bytes = [&](const std::string& text, const char* flag, uint64_t* dst) -> Status {
    if (text.empty()) return Status::Ok();
    auto v = ParseBytes(text);
    if (!v) return v.status().WithContext(flag);
    *dst = *v;
    return Status::Ok();
  };
  if (!socket.empty()) c.socket_path = socket;
  if (!socket_mode.empty()) {
    auto m = ParseMode(socket_mode);
    if (!m) return fail(m.status().WithContext("--socket-mode"));
    c.socket_mode = *m;
  }
  for (const Status& s :
       {bytes(max_payload, "--max-payload", &c.max_payload_bytes),
        bytes(host_capacity, "--host-capacity", &c.host_capacity_bytes),
        bytes(host_slab, "--host-slab", &c.host_slab_bytes),
        bytes(device_capacity, "--device-capacity", &c.device_capacity_bytes),
        bytes(ssd_capacity, "--ssd-capacity", &c.ssd_capacity_bytes),
        bytes(ssd_max_write_per_day, "--ssd-max-write-per-day", &c.ssd_max_write_per_day)}) {
    if (!s.ok()) return fail(s);
  }
  if (socket_owner) c.socket_owner = *socket_owner;
  if (socket_group) c.socket_group = *socket_group;
  for (auto [text, flag, group, dst] :
       {std::tuple{&allow_uids, "--allow-uids", false, &c.allow_uids},
        std::tuple{&allow_gids, "--allow-gids", true, &c.allow_gids}}) {
    if (!*text) continue;
    auto ids = ParseIdList(**text, group);
    if (!ids) return fail(ids.status().WithContext(flag));
    *dst = *std::move(ids);
  }
  if (max_sessions) c.max_sessions = *max_sessions;
  if (max_leases) c.max_leases_per_session = *max_leases;
  if (max_hinted) c.max_hinted_blocks_per_session = *max_hinted;
  if (hint_ttl_ms) c.hint_ttl_ms = *hint_ttl_ms;
  if (max_hint_ttl_ms) c.max_hint_ttl_ms = *max_hint_ttl_ms;
  if (max_allocations) c.max_allocations_per_session = *max_allocations;
  if (max_namespaces) c.max_namespaces = *max_namespaces;
  if (hello_timeout_ms) c.hello_timeout_ms = *hello_timeout_ms;
  if (frame_timeout_ms) c.frame_timeout_ms = *frame_timeout_ms;
  if (reply_timeout_ms) c.reply_timeout_ms = *reply_timeout_ms;
  if (max_keys != 0) c.max_keys = max_keys;
  if (copy_threads != 0) c.copy_threads = copy_threads;
  if (busy_poll_us) c.busy_poll_us = *busy_poll_us;
  if (!session_wait.empty()) c.session_wait = session_wait;
  if (idle_exit_s) c.idle_exit_s = *idle_exit_s;
  if (!secret.empty()) c.secret_hex = secret;
  if (!block_keys_file.empty()) c.block_keys_file = block_keys_file;
  if (!host_policy.empty()) c.host_policy = host_policy;
  if (!host_admission.empty()) c.host_admission = host_admission;
  if (no_reserve) c.host_reserve_memory = false;
  if (!host_huge_pages.empty()) c.host_huge_pages = host_huge_pages;
  if (!device_mode.empty()) c.device_mode = device_mode;
  if (device_gpu) c.device_gpu = *device_gpu;
  if (!device_policy.empty()) c.device_policy = device_policy;
  if (!device_admission.empty()) c.device_admission = device_admission;
  if (ssd_dir) c.ssd_dir = *ssd_dir;
  if (!ssd_policy.empty()) c.ssd_policy = ssd_policy;
  if (!ssd_admission.empty()) c.ssd_admission = ssd_admission;
  if (!ssd_prepare.empty()) c.ssd_prepare = ssd_prepare;
  if (ssd_io_threads != 0) c.ssd_io_threads = ssd_io_threads;
  if (write_through) c.ssd_write_through = true;
  if (ssd_fault_read_errors) c.ssd_fault_read_errors = *ssd_fault_read_errors;
  if (metrics_address) c.metrics_address = *metrics_address;
  if (remote_seeds) c.remote_seeds = SplitList(*remote_seeds);
  if (remote_secret_file) c.remote_secret_file = *remote_secret_file;
  if (remote_key_prefix) c.remote_key_prefix = *remote_key_prefix;
  if (remote_write_through) c.remote_write_through = true;
  if (events_endpoint) {
    c.events_endpoint = *events_endpoint;
    c.events_enabled = true;
  }
  if (events_replay_endpoint) c.events_replay_endpoint = *events_replay_endpoint;
  if (events_flush_us) c.events_flush_us = *events_flush_us;
  if (Status s = c.Validate(); !s.ok()) return fail(s);
  return out;
}

}  // namespace kvtier::daemon
