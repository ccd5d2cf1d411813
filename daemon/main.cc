// kvtierd: parses the configuration, builds the tiers and the engine, serves
// the socket until SIGINT or SIGTERM, then tears down in reverse order.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/malloc_tuning.h"
#include "common/private_file.h"
#include "common/spin_governor.h"
#include "daemon/asio.h"
#include "daemon/config.h"
#include "daemon/event_feed.h"
#include "daemon/kv_events.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/server.h"
#include "daemon/service.h"
#include "engine/cache_engine.h"
#include "tiers/block_seal.h"

namespace kvtier::daemon {
namespace {

// The device tier the configuration asks for: a GPU ("cuda", or "auto"
// where CUDA finds one), the emulated one, or none.
Result<std::unique_ptr<tiers::Tier>> BuildDeviceTier(const DaemonConfig& c) {
  if (c.device_mode == "emulated") {
    return tiers::NewEmulatedDeviceTier({c.device_capacity_bytes, c.host_slab_bytes, true});
  }
  if (c.device_mode != "cuda" && c.device_mode != "auto") return std::unique_ptr<tiers::Tier>();
  auto gpu = tiers::NewCudaDeviceTier(
      {static_cast<int>(c.device_gpu), c.device_capacity_bytes, c.host_slab_bytes});
  if (gpu || c.device_mode == "cuda") {
    if (!gpu) return gpu.status().WithContext("device tier on GPU " + std::to_string(c.device_gpu));
    return gpu;
  }
  Log(LogLevel::kInfo, Str("device tier off (device.mode auto): ", gpu.status().message()));
  return std::unique_ptr<tiers::Tier>();
}

// The deployment secret of a remote tier: the file's hex digits (32 or
// more; whitespace around them is ignored).
Result<std::vector<std::byte>> ReadDeploymentSecret(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgumentError("remote.secret_file " + path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  std::string hex;
  for (char ch : text.str()) {
    if (ch != ' ' && ch != '\n' && ch != '\r' && ch != '\t') hex.push_back(ch);
  }
  if (hex.size() < 32 || hex.size() % 2 != 0 ||
      hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return InvalidArgumentError("remote.secret_file " + path +
                                ": expected 32 or more hex digits (e.g. `openssl rand -hex 32`)");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 0077) != 0) {
    Log(LogLevel::kWarn, Str("remote.secret_file ", path, " is readable by group or others: ",
                             "anyone who reads it can name this deployment's blocks"));
  }
  std::vector<std::byte> secret;
  for (size_t i = 0; i < hex.size(); i += 2) {
    secret.push_back(static_cast<std::byte>(std::stoul(hex.substr(i, 2), nullptr, 16)));
  }
  return secret;
}

// The remote tier's AUTH password: remote.password_file (mode 600 or 400;
// white space around it ignored) or the environment variable
// KVTIER_REMOTE_PASSWORD; empty when neither is set.
Result<std::string> ReadRemotePassword(const DaemonConfig& c) {
  if (c.remote_password_file.empty()) {
    const char* env = std::getenv("KVTIER_REMOTE_PASSWORD");
    return std::string(env != nullptr ? env : "");
  }
  KVTIER_ASSIGN_OR_RETURN(std::string text,
                          ReadPrivateFile(c.remote_password_file, "remote.password_file", 4096));
  const size_t first = text.find_first_not_of(" \t\r\n");
  const size_t last = text.find_last_not_of(" \t\r\n");
  if (first == std::string::npos) {
    return InvalidArgumentError("remote.password_file " + c.remote_password_file + " is empty");
  }
  return text.substr(first, last - first + 1);
}

Result<std::unique_ptr<tiers::RemoteTier>> BuildRemoteTier(
    const DaemonConfig& c, std::span<const std::byte> secret,
    std::shared_ptr<tiers::BlockSealer> sealer) {
  tiers::RemoteTierOptions o;
  o.seeds = c.remote_seeds;
  o.key_prefix = c.remote_key_prefix;
  o.connections_per_node = static_cast<int>(c.remote_connections);
  o.connect_timeout_ns = static_cast<TimeNs>(c.remote_connect_timeout_ms) * kNsPerMs;
  o.command_timeout_ns = static_cast<TimeNs>(c.remote_timeout_ms) * kNsPerMs;
  o.pause_ns = static_cast<TimeNs>(c.remote_pause_ms) * kNsPerMs;
  o.negative_ttl_ns = static_cast<TimeNs>(c.remote_negative_ttl_ms) * kNsPerMs;
  o.note = [](const std::string& line) { Log(LogLevel::kWarn, line); };
  o.username = c.remote_username;
  KVTIER_ASSIGN_OR_RETURN(o.password, ReadRemotePassword(c));
  o.tls.enabled = c.remote_tls;
  o.tls.ca_file = c.remote_tls_ca_file;
  o.tls.cert_file = c.remote_tls_cert_file;
  o.tls.key_file = c.remote_tls_key_file;
  o.tls.server_name = c.remote_tls_server_name;
  o.tls.verify = c.remote_tls_verify;
  o.sealer = std::move(sealer);
  o.max_age_s = c.remote_max_age_s;
  if (!c.remote_tls) {
    Log(LogLevel::kWarn,
        "remote: connections to the cluster are not encrypted (remote.tls off; "
        "docs/security.md)");
  } else if (!c.remote_tls_verify) {
    Log(LogLevel::kWarn,
        "remote: TLS without certificate verification (remote.tls_verify = "
        "false): anyone on the path can pose as the cluster");
  }
  if (o.password.empty() && o.username.empty()) {
    Log(LogLevel::kWarn,
        "remote: no AUTH configured (remote.username, remote.password_file or "
        "KVTIER_REMOTE_PASSWORD)");
  }
  auto remote = tiers::NewRemoteTier(o, secret);
  if (!remote) return remote.status().WithContext("remote tier");
  return remote;
}

Result<std::unique_ptr<engine::CacheEngine>> BuildEngine(
    const DaemonConfig& c, engine::IoExecutor* io, engine::IoExecutor* copies,
    engine::IoExecutor* remote_io, std::unique_ptr<tiers::RemoteTier> remote,
    const std::string& keys_secret_id, std::shared_ptr<tiers::BlockSealer> sealer,
    std::function<void()> events_ready) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<tiers::Tier> device, BuildDeviceTier(c));
  tiers::ArenaTierOptions host_options{c.host_capacity_bytes, c.host_slab_bytes,
                                       c.host_reserve_memory};
  // DMA between the host arena and a GPU wants it page-locked.
  host_options.register_with_cuda = device != nullptr && !device->emulated();
  host_options.huge_pages = *tiers::ParseHugePages(c.host_huge_pages);  // checked by Validate
  host_options.note = [](const std::string& line) { Log(LogLevel::kWarn, "host: " + line); };
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<tiers::Tier> host, tiers::NewHostTier(host_options));
  std::unique_ptr<tiers::Tier> ssd;
  if (!c.ssd_dir.empty()) {
    tiers::SsdTierOptions ssd_options;
    ssd_options.dir = c.ssd_dir;
    ssd_options.capacity_bytes = c.ssd_capacity_bytes;
    ssd_options.direct_io = c.ssd_direct_io;
    ssd_options.prepare = c.ssd_prepare;
    ssd_options.keys_secret_id = keys_secret_id;
    ssd_options.fault_read_errors = c.ssd_fault_read_errors;
    ssd_options.sealer = std::move(sealer);
    if (c.ssd_fault_read_errors > 0) {
      Log(LogLevel::kWarn, "ssd: fault_read_errors = " + std::to_string(c.ssd_fault_read_errors) +
                               ": that share of ssd reads fails on purpose (a test setting)");
    }
    ssd_options.note = [](const std::string& line) { Log(LogLevel::kInfo, "ssd: " + line); };
    auto opened = tiers::NewSsdTier(ssd_options);
    if (!opened) return opened.status().WithContext("ssd tier at " + c.ssd_dir);
    ssd = std::move(opened).value();
  }
  engine::EngineOptions options;
  options.host_policy = c.host_policy;
  options.device_policy = c.device_policy;
  options.ssd_policy = c.ssd_policy;
  options.host_admission = c.host_admission;
  options.ssd_admission = c.ssd_admission;
  options.ssd_write_budget_per_day = c.ssd_max_write_per_day;
  options.device_admission = c.device_admission;
  options.io = io;
  options.copy = copies;
  options.ssd_write_through = c.ssd_write_through;
  options.max_hinted_blocks_per_owner = c.max_hinted_blocks_per_session;
  options.log = [](const std::string& line) { Log(LogLevel::kWarn, line); };
  options.remote_io = remote_io;
  options.remote_write_through = c.remote_write_through;
  options.record_events = c.events_enabled;
  options.events_ready = std::move(events_ready);
  return engine::CacheEngine::Create(options, std::move(device), std::move(host), std::move(ssd),
                                     std::move(remote));
}

// io_context::run(), but after each burst of work the thread keeps polling
// for `busy_poll` before it blocks (see DaemonConfig::busy_poll_us), while
// it has a core to itself: on a shared core spinning takes the CPU from the
// workers it waits for, so the governor turns it off (and logs when).
void RunLoop(asio::io_context& io, std::chrono::microseconds busy_poll) {
  using Clock = std::chrono::steady_clock;
  SpinGovernor governor;
  bool spinning = true;
  while (io.run_one() > 0) {
    if (busy_poll.count() == 0) continue;
    if (governor.MaySpin() != spinning) {
      spinning = !spinning;
      Log(LogLevel::kInfo, spinning ? "busy-poll on: the io thread has a core to itself again"
                                    : "busy-poll off: the io thread waits for its core (a shared "
                                      "CPU), so spinning would take it from the workers");
    }
    if (!spinning) continue;
    auto until = Clock::now() + busy_poll;
    while (Clock::now() < until) {
      if (io.poll() > 0) until = Clock::now() + busy_poll;
      if (io.stopped()) return;
    }
  }
}

// server.idle_exit_s: stops the server (and the signal wait, so the io
// loop runs dry and the daemon exits as on SIGTERM) once no connection has
// been open for `idle_s` seconds. Looks once a second.
asio::awaitable<void> ExitWhenIdle(asio::steady_timer& timer, Server& server,
                                   asio::signal_set& signals, uint32_t idle_s) {
  using Clock = std::chrono::steady_clock;
  const auto limit = std::chrono::seconds(idle_s);
  auto idle_since = Clock::now();
  while (!server.stopping()) {
    timer.expires_after(std::min<Clock::duration>(limit, std::chrono::seconds(1)));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec || server.stopping()) co_return;
    const auto now = Clock::now();
    if (server.open_connections() > 0) {
      idle_since = now;
    } else if (now - idle_since >= limit) {
      Log(LogLevel::kInfo, Str("no connection for ", idle_s, " s (server.idle_exit_s): stopping"));
      boost::system::error_code ignored;
      signals.cancel(ignored);
      server.Stop();
      co_return;
    }
  }
}

int Run(const DaemonConfig& config) {
  Log(LogLevel::kInfo, Str("kvtierd ", Version(), " starting, pid ", ::getpid()));
  Log(LogLevel::kInfo, Str("gpu: ", tiers::DescribeGpus()));
  // One thread runs io, and only it touches sockets and timers (engine
  // completions from other threads are posted here): the reactor's
  // per-descriptor locks would guard nothing, so they are off. Posting from
  // other threads stays locked.
  asio::io_context io(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO);
  // Declared before the executor, so the executor (which joins its threads)
  // goes first at teardown, once every completion has run.
  std::unique_ptr<engine::CacheEngine> engine;
  std::unique_ptr<engine::IoExecutor> ssd_io = engine::NewThreadPoolExecutor(
      config.ssd_io_threads, config.ssd_queue,
      [&io](std::function<void()> done) { asio::post(io, std::move(done)); });
  // GPU copies get threads of their own, so they never queue behind disk I/O.
  std::unique_ptr<engine::IoExecutor> copies = engine::NewThreadPoolExecutor(
      2, 256, [&io](std::function<void()> done) { asio::post(io, std::move(done)); });
  // Block keys: blocks that leave memory (for the ssd, for the remote
  // tier) are sealed under them.
  std::shared_ptr<tiers::BlockSealer> sealer;
  if (!config.ssd_dir.empty() || !config.remote_seeds.empty()) {
    auto keys = tiers::LoadKeyRing(config.block_keys_file);
    if (keys) {
      std::string ids;
      for (uint32_t id : keys->ids()) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
      const uint32_t current = keys->current_id();
      sealer = std::make_shared<tiers::BlockSealer>(std::move(keys).value());
      Log(LogLevel::kInfo,
          Str("blocks leaving memory (ssd, remote) are sealed (", sealer->cipher(),
              ") under block key ", current, "; keys configured: ", ids, " (",
              config.block_keys_file.empty() ? std::string(tiers::kBlockKeysEnv)
                                             : "server.block_keys_file " + config.block_keys_file,
              ")"));
    } else if (keys.status().code() == StatusCode::kNotFound) {
      Log(LogLevel::kWarn, Str(config.ssd_dir.empty() ? "remote" : "ssd",
                               ": blocks at rest are not encrypted: no block keys configured "
                               "(server.block_keys_file or ",
                               tiers::kBlockKeysEnv, "; docs/security.md)"));
    } else {
      Log(LogLevel::kError, Str("cannot start: ", keys.status().ToString()));
      return 1;
    }
  }
  // The remote tier's calls get threads of their own, so a slow cluster
  // never delays the disk.
  std::unique_ptr<engine::IoExecutor> remote_io;
  std::unique_ptr<tiers::RemoteTier> remote;
  std::vector<std::byte> deployment_secret;
  if (!config.remote_seeds.empty()) {
    auto secret = ReadDeploymentSecret(config.remote_secret_file);
    if (!secret) {
      Log(LogLevel::kError, secret.status().ToString());
      return 1;
    }
    deployment_secret = std::move(secret).value();
    auto connected = BuildRemoteTier(config, deployment_secret, sealer);
    if (!connected) {
      Log(LogLevel::kError, Str("cannot start: ", connected.status().ToString()));
      return 1;
    }
    remote = std::move(connected).value();
    remote_io = engine::NewThreadPoolExecutor(
        config.remote_io_threads, config.remote_queue,
        [&io](std::function<void()> done) { asio::post(io, std::move(done)); });
  }
  // KV events: the publisher, and the feed that turns each engine turn's
  // events into batches (set once the engine exists; the engine asks for a
  // flush through `events_ready` from its first event on).
  std::unique_ptr<KvEventPublisher> publisher;
  std::unique_ptr<EventFeed> feed;
  if (config.events_enabled) {
    KvEventOptions eo;
    eo.endpoint = config.events_endpoint;
    eo.replay_endpoint = config.events_replay_endpoint;
    eo.buffer_batches = config.events_buffer_batches;
    eo.hwm = static_cast<int>(config.events_hwm);
    auto started = KvEventPublisher::Start(eo);
    if (!started) {
      Log(LogLevel::kError, Str("cannot start the KV events: ", started.status().ToString()));
      return 1;
    }
    publisher = std::move(started).value();
  }
  // A batch per flush window (events.flush_us) rather than per request: a
  // batch costs two thread hand-offs (publisher, ZeroMQ's I/O thread), which
  // per request cost the daemon ~25% more CPU per write, per 10 ms ~4%
  // (bench/events_on_off.sh). The engine asks once per window: only its
  // first event after a flush calls this.
  asio::steady_timer flush_timer(io);
  auto events_ready = [&flush_timer, &feed, &config] {
    flush_timer.expires_after(std::chrono::microseconds(config.events_flush_us));
    flush_timer.async_wait([&feed](const boost::system::error_code& ec) {
      if (!ec && feed) feed->Flush();
    });
  };
  // With a remote tier the ssd directory's blocks are keyed under the
  // deployment secret; it keeps a verifier of it and refuses another.
  const std::string keys_secret_id =
      deployment_secret.empty() ? "" : tiers::DeploymentSecretVerifier(deployment_secret);
  auto built = BuildEngine(config, ssd_io.get(), copies.get(), remote_io.get(), std::move(remote),
                           keys_secret_id, sealer, events_ready);
  if (!built) {
    Log(LogLevel::kError, Str("cannot build the tiers: ", built.status().ToString()));
    return 1;
  }
  engine = std::move(built).value();
  if (publisher) {
    feed = std::make_unique<EventFeed>(*engine, *publisher, config.events_topic_prefix);
    feed->Cleared();  // routers forget what an earlier kvtierd here said
  }
  if (auto restored = engine->Recover(); !restored) {
    Log(LogLevel::kError, Str("cannot restore the ssd tier: ", restored.status().ToString()));
    return 1;
  } else if (*restored > 0) {
    Log(LogLevel::kInfo,
        Str("warm restart: ", *restored, " blocks restored from ", config.ssd_dir));
  }
  asio::thread_pool copy_pool(config.copy_threads);
  const tiers::Tier* ssd = engine->tier(tiers::TierKind::kSsd);
  // Keys are hashed under the deployment secret with a remote tier (every
  // node must agree), else under the ssd directory's (stable across restarts).
  Service service(*engine, config, copy_pool,
                  !deployment_secret.empty() ? std::span<const std::byte>(deployment_secret)
                  : ssd != nullptr           ? ssd->persistent_secret()
                                             : std::span<const std::byte>());
  service.SetEventPublisher(publisher.get());
  auto server = Server::Create(io, service, config);
  if (!server) {
    Log(LogLevel::kError, server.status().ToString());
    return 1;
  }

  // After the socket, so a daemon that cannot start never holds the port.
  std::unique_ptr<MetricsServer> metrics;
  if (!config.metrics_address.empty()) {
    auto started = MetricsServer::Start(
        config.metrics_address,
        [&io](std::function<void()> task) { asio::post(io, std::move(task)); },
        [&service] { return service.Snapshot(); });
    if (!started) {
      Log(LogLevel::kError, started.status().ToString());
      return 1;
    }
    metrics = std::move(started).value();
  }

  const engine::EngineStats stats = engine->Stats();
  const std::string* policies[] = {&config.device_policy, &config.host_policy, &config.ssd_policy};
  for (const engine::TierStats& t : stats.tiers) {
    if (t.present) {
      const bool is_ssd = t.kind == tiers::TierKind::kSsd;
      Log(LogLevel::kInfo,
          Str("tier ", t.description, ", policy ", *policies[static_cast<size_t>(t.kind)],
              !is_ssd                    ? ""
              : config.ssd_write_through ? ", write-through"
                                         : ", write-back"));
    }
  }
  if (!stats.tiers[0].present) Log(LogLevel::kInfo, "tier device: off");
  if (!stats.tiers[2].present) Log(LogLevel::kInfo, "tier ssd: off");
  Log(LogLevel::kInfo, stats.remote_present
                           ? Str("tier ", stats.remote_description,
                                 config.remote_write_through ? ", write-through" : ", write-back")
                           : std::string("tier remote: off"));
  Log(LogLevel::kInfo, publisher ? Str("KV events on ", publisher->endpoint(),
                                       publisher->replay_endpoint().empty()
                                           ? std::string()
                                           : Str(", replay on ", publisher->replay_endpoint()))
                                 : std::string("KV events: off"));
  Log(LogLevel::kInfo, Str("listening on ", config.socket_path, " (mode 0", std::oct,
                           config.socket_mode, std::dec, ")"));
  Log(LogLevel::kInfo, metrics ? Str("metrics on http://", metrics->address(), "/metrics")
                               : std::string("metrics: off"));
  if (metrics && !IsLoopbackAddress(config.metrics_address)) {
    Log(LogLevel::kWarn, Str("metrics endpoint ", config.metrics_address,
                             " is not loopback: anyone who can reach it reads the daemon's "
                             "figures; keep it behind a firewall (metrics.address)"));
  }

  asio::signal_set signals(io, SIGINT, SIGTERM);
  asio::steady_timer idle_timer(io);
  signals.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    Log(LogLevel::kInfo, Str("signal ", signo, ": stopping; finishing requests in flight"));
    idle_timer.cancel();
    (*server)->Stop();
  });
  if (config.idle_exit_s > 0) {
    Log(LogLevel::kInfo, Str("exits once no connection has been open for ", config.idle_exit_s,
                             " s (server.idle_exit_s)"));
    asio::co_spawn(io, ExitWhenIdle(idle_timer, **server, signals, config.idle_exit_s),
                   asio::detached);
  }
  (*server)->Start();
  // Returns once the server and every session have stopped.
  RunLoop(io, std::chrono::microseconds(config.busy_poll_us));
  metrics.reset();  // no scrape may ask the engine's thread for anything now

  server->reset();
  copy_pool.join();
  // Let the disk (and the GPU's copies) finish what they were doing, so
  // nothing the engine waits for is lost, then make the disk durable.
  while (ssd_io->in_flight() > 0 || copies->in_flight() > 0 ||
         (remote_io && remote_io->in_flight() > 0)) {
    io.restart();
    io.run_one();
  }
  if (tiers::Tier* t = engine->tier(tiers::TierKind::kSsd)) {
    if (Status s = t->Sync(); !s.ok()) Log(LogLevel::kWarn, Str("ssd sync: ", s.ToString()));
  }
  if (feed) feed->Flush();
  feed.reset();
  ssd_io.reset();
  copies.reset();
  remote_io.reset();
  engine.reset();
  publisher.reset();
  Log(LogLevel::kInfo, "stopped");
  return 0;
}

}  // namespace
}  // namespace kvtier::daemon

int main(int argc, char** argv) {
  kvtier::TuneMallocForLargeBuffers();
  std::signal(SIGPIPE, SIG_IGN);
  const kvtier::daemon::ParsedArgs args = kvtier::daemon::ParseArgs(argc, argv);
  if (args.exit_now) return args.exit_code;
  return kvtier::daemon::Run(args.config);
}
