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
  // Owner and group of the socket file, a name or a numeric id; "" keeps
  // the daemon's own. Set after bind, before the socket listens, so no one
  // attaches under other permissions. A group other than the daemon's needs
  // the daemon's user to be a member of it (or CAP_CHOWN); another owner
  // needs CAP_CHOWN.
  std::string socket_owner;
  std::string socket_group;
  // Who may attach, by the peer's SO_PEERCRED uid and gid (the effective ids
  // of the connecting process; supplementary groups are not seen). Empty
  // lists: anyone the socket's permissions let in. Otherwise a peer whose
  // uid is in allow_uids or whose gid is in allow_gids; any other gets an
  // error reply to its first request and is closed. Names are resolved at
  // start. A second fence behind the file mode, not a replacement for it.
  std::vector<uint32_t> allow_uids;
  std::vector<uint32_t> allow_gids;
  // Most connections served at once, attached or still to say HELLO. One
  // more gets RESOURCE_EXHAUSTED (naming this key) as the reply to its
  // first request and is closed; the others never notice. A session costs
  // an fd and its buffers (up to ~2 x max_payload while it moves a large
  // frame), so this also bounds the daemon's memory. 1024: far more workers
  // than one node runs (8 GPUs x a few processes each), small enough that
  // the fds fit the usual limits.
  uint32_t max_sessions = 1024;
  // Most leases one session may hold at once. A lease pins its blocks, so a
  // worker that leaks leases would pin the tiers full; a worker holds about
  // one per sequence in flight (vLLM's max_num_seqs defaults to 256), so
  // 4096 leaves 16x headroom. Beyond it ACQUIRE gets RESOURCE_EXHAUSTED and
  // the session goes on.
  uint32_t max_leases_per_session = 4096;
  // Most open (allocated, not yet committed or aborted) writes of one
  // session. Reserved slots are invisible and cannot be evicted; a worker
  // writes about one prompt at a time per sequence being prefilled, so 256
  // is generous. Beyond it ALLOCATE gets RESOURCE_EXHAUSTED.
  uint32_t max_allocations_per_session = 256;
  // Most namespaces (model, salt, layout) registered at once. Any worker
  // that may attach can name a new one in its HELLO, and a namespace is
  // never removed (the SSD tier keeps it across restarts), so without a cap
  // the table grows without bound. A node serves a few models with a salt
  // per tenant or adapter; 4096 leaves room. Beyond it a HELLO naming a new
  // namespace gets RESOURCE_EXHAUSTED; known namespaces still attach.
  uint32_t max_namespaces = 4096;
  // Hints (HINT): most blocks one session may protect at once. A hinted
  // block is kept like a pinned one until its hint is used, withdrawn or
  // expires (and yields when a tier has no other room), so a worker cannot
  // hold the cache with hints beyond this. A worker hints the requests in
  // its waiting queue: 4096 blocks is 64 requests of 1024 tokens at 16
  // tokens per block. Past it HINT gets RESOURCE_EXHAUSTED, nothing changes,
  // and the session goes on.
  uint32_t max_hinted_blocks_per_session = 4096;
  // How long a hint protects its blocks when the worker does not say
  // (milliseconds), and the longest a worker may ask for.
  uint32_t hint_ttl_ms = 10'000;
  uint32_t max_hint_ttl_ms = 60'000;
  // A connection that has not completed a HELLO this long after connecting
  // is closed (milliseconds). A real client says HELLO at once.
  uint32_t hello_timeout_ms = 10'000;
  // Longest a request frame may take to arrive once its first byte has
  // (milliseconds); then the connection is closed. The largest frame,
  // max_payload, crosses a Unix socket in milliseconds; a client that
  // trickles bytes only ever holds its own session.
  uint32_t frame_timeout_ms = 10'000;
  // Longest a reply may wait for the worker to read it (milliseconds); then
  // the session is closed (its leases released). While a reply waits, the
  // session's next requests are not read (backpressure), so a client that
  // stops reading holds at most one reply plus 256 KiB of queued replies.
  uint32_t reply_timeout_ms = 30'000;
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
  // Where a session waits for its next request: "set", kvtierd's own
  // edge-triggered epoll set (one recv a request; the set costs two calls
  // a batch of ready sessions); "asio", Asio's reactor (no call to wait,
  // but a failed read before each request); "auto" chooses by load: the set
  // while three or more sessions are busy at once (daemon/readiness.h).
  std::string session_wait = "auto";
  // Exit, as on SIGTERM, once no connection has been open for this long
  // (seconds); 0 = never. For a daemon started on demand by its workers
  // (the Python package's socket="auto"), so that it goes when they have.
  uint32_t idle_exit_s = 0;
  // 32+ bytes, hex: the master secret namespace secrets derive from. Empty:
  // a random one per start (keys then change across restarts, which is
  // harmless while nothing is kept across restarts).
  std::string secret_hex;
  // A file of block keys (tiers/block_seal.h: "<id>:<64 hex digits>" per
  // line, the first the current one; mode 600, else refused): every block
  // written to the ssd tier is sealed with AES-256-GCM under a key derived
  // from it. Empty: the environment variable KVTIER_BLOCK_KEYS (same text),
  // else blocks at rest stay in the clear (said once at start).
  std::string block_keys_file;

  // [host]
  uint64_t host_capacity_bytes = 1 * kGiB;
  uint64_t host_slab_bytes = 64 * kMiB;
  std::string host_policy = "adaptive";
  // Whether a block written into the full tier may take its policy's
  // victim's room (eviction::AdmissionNames(): off, seen, tinylfu).
  std::string host_admission = "off";
  bool host_reserve_memory = true;
  // The arena on 2 MiB huge pages: "auto" (where the kernel's pool,
  // vm.nr_hugepages, has enough; else 4 KiB pages and a warning), "on"
  // (refuse to start without), "off".
  std::string host_huge_pages = "auto";

  // [device]
  // "auto": GPU `device_gpu` as the device tier when CUDA finds it, else no
  // device tier (the start-up log says which); "cuda": that GPU, and refuse
  // to start without it; "emulated": a device tier in host memory behind
  // the same interface (tests, machines without a GPU); "off".
  std::string device_mode = "auto";
  uint32_t device_gpu = 0;  // CUDA ordinal for "auto" and "cuda"
  uint64_t device_capacity_bytes = 1 * kGiB;
  std::string device_policy = "adaptive";
  std::string device_admission = "off";

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
  std::string ssd_policy = "adaptive";
  // Which blocks leaving the host are written to the ssd at all
  // (eviction::AdmissionNames(); engine::EngineOptions::ssd_admission):
  // "seen" writes only those looked up again since they were written,
  // sparing the disk's endurance the blocks used once.
  std::string ssd_admission = "off";
  // Endurance: bytes written to the SSD per day at most (demotions and
  // write-through), 0 = no bound; blocks past it are not written.
  uint64_t ssd_max_write_per_day = 0;
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
  // For tests, never for service: this share of the SSD tier's payload reads
  // (0 to 1) fails with EIO, spread evenly, to watch what a failing disk
  // does to the requests above it (each failed read is a miss, recomputed).
  double ssd_fault_read_errors = 0;

  // [remote]
  // A Redis Cluster (or one Redis server) shared by the nodes of a
  // deployment, below this node's own tiers (docs/operations.md, "Several
  // nodes"). "host:port" of nodes to read the slot map from; empty: no
  // remote tier.
  std::vector<std::string> remote_seeds;
  // A file holding the deployment secret: 32+ hex digits, the same on every
  // node that shares the cluster (keys are hashed with it, so nodes with
  // different secrets never meet; the cluster records a hash of it and
  // refuses a node with another). Required with remote_seeds; it replaces
  // server.secret and the ssd directory's own secret.
  std::string remote_secret_file;
  // Before every key: deployments sharing one cluster never meet.
  std::string remote_key_prefix = "kvtier";
  // Connections per cluster node, and the threads making remote calls (and
  // how many may wait for one: beyond it, writes are dropped and lookups
  // answer from this node alone).
  uint32_t remote_connections = 4;
  uint32_t remote_io_threads = 4;
  uint32_t remote_queue = 1024;
  // Connecting to a node, and each read or write on a connection
  // (milliseconds); a node slower than this fails the call.
  uint32_t remote_connect_timeout_ms = 200;
  uint32_t remote_timeout_ms = 1000;
  // After a failure the tier answers at once (lookups miss, writes drop) for
  // this long, then tries again (milliseconds).
  uint32_t remote_pause_ms = 5000;
  // A key found missing is not asked for again for this long (milliseconds).
  uint32_t remote_negative_ttl_ms = 1000;
  // false (write-back): a block is written to the cluster when it leaves
  // this node's memory. true (write-through): every committed block is
  // written at once too, so other nodes hit it immediately.
  bool remote_write_through = false;
  // AUTH on every connection: an ACL user (Redis 6+) and its password, or
  // the password alone (requirepass). The password comes from
  // remote_password_file (mode 600 or 400: refused when others may read
  // it) or the environment variable KVTIER_REMOTE_PASSWORD; empty: no AUTH.
  std::string remote_username;
  std::string remote_password_file;
  // TLS to every cluster node, redirections included, the nodes'
  // certificates verified against remote_tls_ca_file (empty: the system's
  // store) and checked to name the host (or remote_tls_server_name).
  // remote_tls_cert_file and _key_file: this node's certificate, for nodes
  // that ask for one (Redis does by default). remote_tls_verify = false
  // turns verification off: for a test set-up only (the daemon warns).
  bool remote_tls = false;
  std::string remote_tls_ca_file, remote_tls_cert_file, remote_tls_key_file, remote_tls_server_name;
  bool remote_tls_verify = true;
  // With block keys (server.block_keys_file), values written longer ago
  // than this (seconds) are stale misses, and Redis expires them after as
  // long; 0: values never go stale (docs/security.md).
  uint64_t remote_max_age_s = 0;

  // [events]
  // KV events (vLLM's wire format) on a ZeroMQ PUB socket, for KV-aware
  // routers: off by default.
  bool events_enabled = false;
  // The PUB endpoint: bound when it has "*" or is ipc:// (vLLM's rule),
  // connected otherwise.
  std::string events_endpoint = "tcp://*:5557";
  // The ROUTER endpoint that resends missed batches; "" = none.
  std::string events_replay_endpoint;
  // Batches kept for replay; ZeroMQ's send high-water mark (messages).
  uint32_t events_buffer_batches = 10000;
  uint32_t events_hwm = 100000;
  // Each batch's topic: this prefix and the namespace's model name.
  std::string events_topic_prefix;
  // Events of this long (microseconds) go out as one batch per namespace:
  // the latency a router sees against the cost of a batch (two thread
  // hand-offs). 10 ms is about one forward pass, as often as vLLM itself
  // publishes (once per engine step); per request, events cost the daemon
  // ~25% more CPU per write, at 10 ms ~4% (bench/events_on_off.sh). 0: a
  // batch per request.
  uint32_t events_flush_us = 10'000;

  // [metrics]
  // HOST:PORT of the Prometheus endpoint (GET /metrics); "" turns it off;
  // port 0 picks a free one (logged at start). Loopback by default: the
  // figures are not secret, but nothing outside the node needs them unless
  // Prometheus runs elsewhere; then bind the node's address and firewall it.
  std::string metrics_address = "127.0.0.1:9464";

  Status Validate() const;
};

// One key of the configuration file and its value, as TOML writes it
// ("server.max_payload", "\"64MiB\"").
struct ConfigEntry {
  std::string key;
  std::string value;
  bool operator==(const ConfigEntry&) const = default;
};

// Every key of the configuration file, in the file's order, with its value
// in `config`. The defaults live in DaemonConfig alone: kvtierd --help
// states them from it, and a test (tests/daemon/config_test.cc) fails when
// deploy/kvtierd.toml or the README's configuration table says otherwise.
std::vector<ConfigEntry> ConfigEntries(const DaemonConfig& config);

// A byte count as the file and the flags take it: "64MiB" when it is a
// whole number of a binary unit, else the number of bytes.
std::string ConfigBytes(uint64_t bytes);

// The version of kvtierd (--version, STATS "version", kvtier_build_info).
const char* Version();

// True when a metrics address binds only the loopback interface
// (127.0.0.0/8, ::1, localhost). "" (off) counts as loopback.
bool IsLoopbackAddress(const std::string& address);

// A user or group given by name or numeric id, as its id. InvalidArgument
// names it when no such user or group exists.
Result<uint32_t> ResolveUser(const std::string& name_or_id);
Result<uint32_t> ResolveGroup(const std::string& name_or_id);

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
