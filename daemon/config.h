// DaemonConfig: every setting of kvtierd, with its default. Read from one
// TOML file (deploy/kvtierd.toml documents every key), then overridden by
// command-line flags; validated once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/units.h"

namespace kvtier::daemon {

struct DaemonConfig {
  // [server]
  // The Unix socket workers attach to. Its directory is created if missing.
  std::string socket_path = "/run/kvtier/kvtierd.sock";
  // Permission bits of the socket file: who may attach. 0660 = owner and group.
  uint32_t socket_mode = 0660;
  // Largest frame payload accepted or sent. Bounds the memory one request
  // can make the daemon hold; inline PUT/GET move at most this much at once.
  uint64_t max_payload_bytes = 64 * kMiB;
  // Most keys in one request (a 1M-token prompt at 16 tokens/block is 65,536).
  uint32_t max_keys = 65536;
  // Threads that copy inline PUT/GET bytes off the engine's thread.
  uint32_t copy_threads = 2;
  // After handling work, the io thread keeps polling the sockets this long
  // before it sleeps, so a worker's next request finds it awake: a wake-up
  // across CPUs costs tens of microseconds, more than a request. Burns at
  // most this much CPU per burst of traffic; 0 turns it off.
  uint32_t busy_poll_us = 200;
  // 32+ bytes, hex: the master secret namespace secrets derive from. Empty:
  // a random one per start (keys then change across restarts, which is
  // harmless while nothing is kept across restarts).
  std::string secret_hex;

  // [host]
  uint64_t host_capacity_bytes = 1 * kGiB;
  uint64_t host_slab_bytes = 64 * kMiB;
  std::string host_policy = "lru";
  bool host_reserve_memory = true;

  // [device]
  // "auto": GPU `device_gpu` as the device tier when CUDA finds it, else no
  // device tier (the start-up log says which); "cuda": that GPU, and refuse
  // to start without it; "emulated": a device tier in host memory behind
  // the same interface (tests, machines without a GPU); "off".
  std::string device_mode = "auto";
  uint32_t device_gpu = 0;  // CUDA ordinal for "auto" and "cuda"
  uint64_t device_capacity_bytes = 1 * kGiB;
  std::string device_policy = "lru";

  // [ssd]
  // The data directory of the SSD tier: block payloads and their RocksDB
  // index; "" turns the tier off. Kept across restarts (warm restart).
  std::string ssd_dir = "/var/lib/kvtier/ssd";
  // Bytes of blocks on disk; never exceeded. Also the size of the one slot
  // file, which claims its disk space up front (see ssd_prepare).
  uint64_t ssd_capacity_bytes = 16 * kGiB;
  // How the slot file is made ready: "background" writes it once on a thread
  // of its own while the tier serves what is done (a new 16 GiB tier is
  // whole in ~10 s at 1.5 GB/s); "foreground" writes it before serving;
  // "sparse" skips it: no start-up writes, but every block written into new
  // space then costs ext4 an extent allocation (0.35-0.6x as fast).
  std::string ssd_prepare = "background";
  std::string ssd_policy = "lru";
  // O_DIRECT payload I/O: no page-cache copy of cold data.
  bool ssd_direct_io = true;
  // Threads doing SSD I/O, and how many moves may wait for one: when the
  // queue is full, blocks leaving the host are dropped rather than waited on.
  uint32_t ssd_io_threads = 4;
  uint32_t ssd_queue = 256;
  // false (write-back): a block reaches the disk when the host evicts it.
  // true (write-through): every committed block is written to the disk at
  // once too, so a crash loses nothing committed; costs a disk write per
  // block and disk space for blocks also in memory.
  bool ssd_write_through = false;

  // [metrics]
  // HOST:PORT of the Prometheus endpoint (GET /metrics); "" turns it off;
  // port 0 picks a free one (logged at start). Loopback by default: the
  // figures are not secret, but nothing outside the node needs them unless
  // Prometheus runs elsewhere; then bind the node's address and firewall it.
  std::string metrics_address = "127.0.0.1:9464";

  Status Validate() const;
};

// The version of kvtierd (--version, STATS "version", kvtier_build_info).
const char* Version();

// Checks a metrics address: "" (off) or "HOST:PORT" with PORT 0-65535
// (0: any free port). InvalidArgument names what is wrong.
Status ValidateMetricsAddress(const std::string& address);

// Reads a TOML file over the defaults. InvalidArgument names the key and the
// file for an unknown key, a wrong type or a bad value.
Result<DaemonConfig> LoadConfigFile(const std::string& path, DaemonConfig base = {});

// Parses argv: `--config FILE` first, then every other flag over it.
// Returns nullopt-like via `exit_code` when --help or an error was printed.
struct ParsedArgs {
  DaemonConfig config;
  bool exit_now = false;  // --help or --version printed, or an error
  int exit_code = 0;
};
ParsedArgs ParseArgs(int argc, char** argv);

}  // namespace kvtier::daemon
