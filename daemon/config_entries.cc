// ConfigEntries: the configuration as the file's keys and TOML values, for
// kvtierd --help's defaults and for the tests that hold deploy/kvtierd.toml
// and the README to DaemonConfig's defaults.
#include <cstdio>
#include <string>
#include <vector>

#include "daemon/config.h"

namespace kvtier::daemon {
namespace {

std::string Quoted(const std::string& s) { return "\"" + s + "\""; }
std::string Bool(bool b) { return b ? "true" : "false"; }
std::string Num(uint64_t n) { return std::to_string(n); }
std::string Share(double x) {
  if (x == 0) return "0";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

template <typename T>
std::string Array(const std::vector<T>& items) {
  std::string out = "[";
  for (const T& item : items) {
    if (out.size() > 1) out += ", ";
    if constexpr (std::is_same_v<T, std::string>) {
      out += Quoted(item);
    } else {
      out += std::to_string(item);
    }
  }
  return out + "]";
}

}  // namespace

std::string ConfigBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"TiB", "GiB", "MiB", "KiB"};
  for (size_t i = 0; i < std::size(kUnits); ++i) {
    const uint64_t unit = uint64_t{1} << (10 * (std::size(kUnits) - i));
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + kUnits[i];
  }
  return std::to_string(bytes);
}

std::vector<ConfigEntry> ConfigEntries(const DaemonConfig& c) {
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", c.socket_mode);
  return {
      {"server.socket", Quoted(c.socket_path)},
      {"server.socket_mode", Quoted(mode)},
      {"server.socket_owner", Quoted(c.socket_owner)},
      {"server.socket_group", Quoted(c.socket_group)},
      {"server.allow_uids", Array(c.allow_uids)},
      {"server.allow_gids", Array(c.allow_gids)},
      {"server.max_sessions", Num(c.max_sessions)},
      {"server.max_leases_per_session", Num(c.max_leases_per_session)},
      {"server.max_allocations_per_session", Num(c.max_allocations_per_session)},
      {"server.max_namespaces", Num(c.max_namespaces)},
      {"server.max_hinted_blocks_per_session", Num(c.max_hinted_blocks_per_session)},
      {"server.hint_ttl_ms", Num(c.hint_ttl_ms)},
      {"server.max_hint_ttl_ms", Num(c.max_hint_ttl_ms)},
      {"server.hello_timeout_ms", Num(c.hello_timeout_ms)},
      {"server.frame_timeout_ms", Num(c.frame_timeout_ms)},
      {"server.reply_timeout_ms", Num(c.reply_timeout_ms)},
      {"server.max_payload", Quoted(ConfigBytes(c.max_payload_bytes))},
      {"server.max_keys", Num(c.max_keys)},
      {"server.copy_threads", Num(c.copy_threads)},
      {"server.busy_poll_us", Num(c.busy_poll_us)},
      {"server.session_wait", Quoted(c.session_wait)},
      {"server.idle_exit_s", Num(c.idle_exit_s)},
      {"server.secret", Quoted(c.secret_hex)},
      {"server.block_keys_file", Quoted(c.block_keys_file)},
      {"host.capacity", Quoted(ConfigBytes(c.host_capacity_bytes))},
      {"host.slab", Quoted(ConfigBytes(c.host_slab_bytes))},
      {"host.policy", Quoted(c.host_policy)},
      {"host.admission", Quoted(c.host_admission)},
      {"host.reserve_memory", Bool(c.host_reserve_memory)},
      {"host.huge_pages", Quoted(c.host_huge_pages)},
      {"device.mode", Quoted(c.device_mode)},
      {"device.gpu", Num(c.device_gpu)},
      {"device.capacity", Quoted(ConfigBytes(c.device_capacity_bytes))},
      {"device.policy", Quoted(c.device_policy)},
      {"device.admission", Quoted(c.device_admission)},
      {"ssd.dir", Quoted(c.ssd_dir)},
      {"ssd.capacity", Quoted(ConfigBytes(c.ssd_capacity_bytes))},
      {"ssd.prepare", Quoted(c.ssd_prepare)},
      {"ssd.policy", Quoted(c.ssd_policy)},
      {"ssd.admission", Quoted(c.ssd_admission)},
      {"ssd.max_write_per_day", Quoted(ConfigBytes(c.ssd_max_write_per_day))},
      {"ssd.direct_io", Bool(c.ssd_direct_io)},
      {"ssd.io_threads", Num(c.ssd_io_threads)},
      {"ssd.queue", Num(c.ssd_queue)},
      {"ssd.write_through", Bool(c.ssd_write_through)},
      {"ssd.fault_read_errors", Share(c.ssd_fault_read_errors)},
      {"remote.seeds", Array(c.remote_seeds)},
      {"remote.secret_file", Quoted(c.remote_secret_file)},
      {"remote.key_prefix", Quoted(c.remote_key_prefix)},
      {"remote.connections", Num(c.remote_connections)},
      {"remote.io_threads", Num(c.remote_io_threads)},
      {"remote.queue", Num(c.remote_queue)},
      {"remote.connect_timeout_ms", Num(c.remote_connect_timeout_ms)},
      {"remote.timeout_ms", Num(c.remote_timeout_ms)},
      {"remote.pause_ms", Num(c.remote_pause_ms)},
      {"remote.negative_ttl_ms", Num(c.remote_negative_ttl_ms)},
      {"remote.write_through", Bool(c.remote_write_through)},
      {"remote.username", Quoted(c.remote_username)},
      {"remote.password_file", Quoted(c.remote_password_file)},
      {"remote.tls", Bool(c.remote_tls)},
      {"remote.tls_ca_file", Quoted(c.remote_tls_ca_file)},
      {"remote.tls_cert_file", Quoted(c.remote_tls_cert_file)},
      {"remote.tls_key_file", Quoted(c.remote_tls_key_file)},
      {"remote.tls_server_name", Quoted(c.remote_tls_server_name)},
      {"remote.tls_verify", Bool(c.remote_tls_verify)},
      {"remote.max_age_s", Num(c.remote_max_age_s)},
      {"events.enabled", Bool(c.events_enabled)},
      {"events.endpoint", Quoted(c.events_endpoint)},
      {"events.replay_endpoint", Quoted(c.events_replay_endpoint)},
      {"events.buffer_batches", Num(c.events_buffer_batches)},
      {"events.hwm", Num(c.events_hwm)},
      {"events.topic_prefix", Quoted(c.events_topic_prefix)},
      {"events.flush_us", Num(c.events_flush_us)},
      {"metrics.address", Quoted(c.metrics_address)},
  };
}

}  // namespace kvtier::daemon
