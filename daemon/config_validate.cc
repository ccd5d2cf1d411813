// DaemonConfig::Validate: the checks of a whole configuration, whichever of
// the file and the flags set it (config.cc reads both).
#include <arpa/inet.h>

#include <charconv>
#include <string>

#include "daemon/config.h"
#include "eviction/admission.h"
#include "eviction/eviction_policy.h"
#include "tiers/tier.h"

namespace kvtier::daemon {

bool IsLoopbackAddress(const std::string& address) {
  if (address.empty()) return true;
  const size_t colon = address.rfind(':');
  std::string host = address.substr(0, colon == std::string::npos ? address.size() : colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost" || host == "::1") return true;
  in_addr v4{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

Status ValidateMetricsAddress(const std::string& address) {
  if (address.empty()) return Status::Ok();
  const size_t colon = address.rfind(':');
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("metrics address '" + address + "': " + why +
                                " (expected HOST:PORT such as 127.0.0.1:9464, or \"\" for off)");
  };
  if (colon == std::string::npos || colon == 0) return bad("no host");
  const std::string_view port(address.data() + colon + 1, address.size() - colon - 1);
  unsigned value = 0;
  const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || value > 65535) {
    return bad("bad port");
  }
  return Status::Ok();
}

Status DaemonConfig::Validate() const {
  if (socket_path.empty()) return InvalidArgumentError("socket path is empty");
  if (socket_path.size() > 107) {
    return InvalidArgumentError("socket path '" + socket_path + "' exceeds 107 bytes");
  }
  if (max_payload_bytes < 4 * kKiB || max_payload_bytes > (256u << 20)) {
    return InvalidArgumentError("max_payload must be between 4 KiB and 256 MiB");
  }
  if (max_keys == 0 || max_keys > 65536) {
    return InvalidArgumentError("max_keys must be between 1 and 65536");
  }
  if (busy_poll_us > 10'000) return InvalidArgumentError("busy_poll_us must be at most 10000");
  if (session_wait != "auto" && session_wait != "set" && session_wait != "asio") {
    return InvalidArgumentError("session_wait must be auto, set or asio, not '" + session_wait +
                                "'");
  }
  if (!socket_owner.empty()) KVTIER_RETURN_IF_ERROR(ResolveUser(socket_owner).status());
  if (!socket_group.empty()) KVTIER_RETURN_IF_ERROR(ResolveGroup(socket_group).status());
  if (max_sessions == 0 || max_sessions > 1'000'000) {
    return InvalidArgumentError("max_sessions must be between 1 and 1000000");
  }
  if (max_leases_per_session == 0 || max_allocations_per_session == 0 || max_namespaces == 0) {
    return InvalidArgumentError(
        "max_leases_per_session, max_allocations_per_session and max_namespaces must be at "
        "least 1");
  }
  if (max_hinted_blocks_per_session == 0) {
    return InvalidArgumentError("max_hinted_blocks_per_session must be at least 1");
  }
  if (hint_ttl_ms == 0 || max_hint_ttl_ms > 3'600'000 || hint_ttl_ms > max_hint_ttl_ms) {
    return InvalidArgumentError(
        "hint_ttl_ms must be at least 1 and at most max_hint_ttl_ms, which is at most 3600000");
  }
  for (const uint32_t ms : {hello_timeout_ms, frame_timeout_ms, reply_timeout_ms}) {
    if (ms < 100 || ms > 3'600'000) {
      return InvalidArgumentError(
          "hello_timeout_ms, frame_timeout_ms and reply_timeout_ms must be between 100 and "
          "3600000");
    }
  }
  if (copy_threads == 0 || copy_threads > 64) {
    return InvalidArgumentError("copy_threads must be between 1 and 64");
  }
  if (!secret_hex.empty() &&
      (secret_hex.size() < 32 || secret_hex.size() % 2 != 0 ||
       secret_hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)) {
    return InvalidArgumentError("secret must be at least 32 hex digits (16 bytes)");
  }
  if (host_capacity_bytes < kMiB) return InvalidArgumentError("host capacity must be >= 1 MiB");
  if (host_slab_bytes < 4 * kKiB) return InvalidArgumentError("host slab must be >= 4 KiB");
  if (device_mode != "off" && device_mode != "emulated" && device_mode != "cuda" &&
      device_mode != "auto") {
    return InvalidArgumentError("device mode '" + device_mode +
                                "' is not one of: off, emulated (no CUDA tier yet)");
  }
  if (device_mode != "off" && device_capacity_bytes < kMiB) {
    return InvalidArgumentError("device capacity must be >= 1 MiB");
  }
  if (!ssd_dir.empty()) {
    if (ssd_capacity_bytes < kMiB) return InvalidArgumentError("ssd capacity must be >= 1 MiB");
    if (ssd_io_threads == 0 || ssd_io_threads > 64) {
      return InvalidArgumentError("ssd io_threads must be between 1 and 64");
    }
    if (ssd_queue == 0) return InvalidArgumentError("ssd queue must be at least 1");
    if (!(ssd_fault_read_errors >= 0 && ssd_fault_read_errors <= 1)) {
      return InvalidArgumentError("ssd fault_read_errors must be from 0 to 1");
    }
    if (ssd_prepare != "background" && ssd_prepare != "foreground" && ssd_prepare != "sparse") {
      return InvalidArgumentError("ssd prepare \"" + ssd_prepare +
                                  "\": expected background, foreground or sparse");
    }
  }
  KVTIER_RETURN_IF_ERROR(ValidateMetricsAddress(metrics_address));
  if (!remote_seeds.empty()) {
    if (remote_secret_file.empty()) {
      return InvalidArgumentError(
          "a remote tier needs remote.secret_file: the deployment secret every node shares");
    }
    if (remote_key_prefix.empty() ||
        remote_key_prefix.find_first_of(" {}\r\n") != std::string::npos) {
      return InvalidArgumentError("remote key_prefix must be non-empty, without spaces or braces");
    }
    if (remote_connections == 0 || remote_connections > 64) {
      return InvalidArgumentError("remote connections must be between 1 and 64");
    }
    if (remote_io_threads == 0 || remote_io_threads > 64) {
      return InvalidArgumentError("remote io_threads must be between 1 and 64");
    }
    if (remote_queue == 0) return InvalidArgumentError("remote queue must be at least 1");
    if (remote_timeout_ms == 0 || remote_connect_timeout_ms == 0) {
      return InvalidArgumentError("remote timeouts must be at least 1 ms");
    }
    if (remote_tls_cert_file.empty() != remote_tls_key_file.empty()) {
      return InvalidArgumentError(
          "remote tls_cert_file and tls_key_file go together: set both or neither");
    }
    if (!remote_tls && (!remote_tls_ca_file.empty() || !remote_tls_cert_file.empty() ||
                        !remote_tls_server_name.empty())) {
      return InvalidArgumentError(
          "remote tls_* files or tls_server_name are set but remote.tls is off: set tls = true");
    }
    if (!secret_hex.empty()) {
      return InvalidArgumentError(
          "server.secret and remote.secret_file are both set: with a remote tier the "
          "deployment secret is the master secret; drop server.secret");
    }
  }
  if (events_flush_us > 1'000'000) {
    return InvalidArgumentError("events flush_us must be at most 1000000 (1 s)");
  }
  if (events_enabled && events_endpoint.empty()) {
    return InvalidArgumentError("events are enabled without an endpoint");
  }
  if (!tiers::ParseHugePages(host_huge_pages)) {
    return InvalidArgumentError("host huge_pages must be auto, on or off, not \"" +
                                host_huge_pages + "\"");
  }
  for (const std::string* p : {&host_policy, &device_policy, &ssd_policy}) {
    KVTIER_RETURN_IF_ERROR(eviction::CheckPolicyName(*p));
  }
  for (const std::string* a : {&host_admission, &device_admission, &ssd_admission}) {
    KVTIER_RETURN_IF_ERROR(eviction::NewAdmissionFilter(*a).status());
  }
  return Status::Ok();
}

}  // namespace kvtier::daemon
