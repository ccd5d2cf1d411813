// kvtierd: parses the configuration, builds the tiers and the engine, serves
// the socket until SIGINT or SIGTERM, then tears down in reverse order.
#include <chrono>
#include <csignal>

#include "daemon/asio.h"
#include "daemon/config.h"
#include "daemon/log.h"
#include "daemon/server.h"
#include "daemon/service.h"
#include "tiers/cache_engine.h"

namespace kvtier::daemon {
namespace {

Result<std::unique_ptr<tiers::CacheEngine>> BuildEngine(const DaemonConfig& c) {
  KVTIER_ASSIGN_OR_RETURN(
      std::unique_ptr<tiers::Tier> host,
      tiers::NewHostTier({c.host_capacity_bytes, c.host_slab_bytes, c.host_reserve_memory}));
  std::unique_ptr<tiers::Tier> device;
  if (c.device_mode == "emulated") {
    KVTIER_ASSIGN_OR_RETURN(
        device, tiers::NewEmulatedDeviceTier({c.device_capacity_bytes, c.host_slab_bytes, true}));
  }
  tiers::EngineOptions options;
  options.host_policy = c.host_policy;
  options.device_policy = c.device_policy;
  return tiers::CacheEngine::Create(options, std::move(device), std::move(host));
}

// io_context::run(), but after each burst of work the thread keeps polling
// for `busy_poll` before it blocks (see DaemonConfig::busy_poll_us).
void RunLoop(asio::io_context& io, std::chrono::microseconds busy_poll) {
  using Clock = std::chrono::steady_clock;
  while (io.run_one() > 0) {
    auto until = Clock::now() + busy_poll;
    while (busy_poll.count() > 0 && Clock::now() < until) {
      if (io.poll() > 0) until = Clock::now() + busy_poll;
      if (io.stopped()) return;
    }
  }
}

int Run(const DaemonConfig& config) {
  auto engine = BuildEngine(config);
  if (!engine) {
    Log(LogLevel::kError, Str("cannot build the tiers: ", engine.status().ToString()));
    return 1;
  }
  asio::io_context io(1);
  asio::thread_pool copy_pool(config.copy_threads);
  Service service(**engine, config, copy_pool);
  auto server = Server::Create(io, service, config);
  if (!server) {
    Log(LogLevel::kError, server.status().ToString());
    return 1;
  }

  const tiers::EngineStats stats = (*engine)->Stats();
  for (const tiers::TierStats& t : stats.tiers) {
    if (t.present)
      Log(LogLevel::kInfo,
          Str("tier ", t.description, ", policy ",
              t.kind == tiers::TierKind::kHost ? config.host_policy : config.device_policy));
  }
  if (!stats.tiers[0].present) Log(LogLevel::kInfo, "tier device: off");
  Log(LogLevel::kInfo, Str("listening on ", config.socket_path, " (mode 0", std::oct,
                           config.socket_mode, std::dec, ")"));

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    Log(LogLevel::kInfo, Str("signal ", signo, ": stopping; finishing requests in flight"));
    (*server)->Stop();
  });
  (*server)->Start();
  // Returns once the server and every session have stopped.
  RunLoop(io, std::chrono::microseconds(config.busy_poll_us));

  server->reset();
  copy_pool.join();
  Log(LogLevel::kInfo, "stopped");
  return 0;
}

}  // namespace
}  // namespace kvtier::daemon

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  const kvtier::daemon::ParsedArgs args = kvtier::daemon::ParseArgs(argc, argv);
  if (args.exit_now) return args.exit_code;
  return kvtier::daemon::Run(args.config);
}
