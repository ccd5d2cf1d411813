// The remote tier's data path against raw Redis, on a running Redis Cluster
// (bench/remote_vs_redis.sh starts one): MB/s of block payload written with
// RemoteStore::Write (header + XXH3 + SET through our cluster client) and
// read with RemoteStore::ReadLeading (GET read into the destination + header
// check + XXH3), beside two peers doing the same I/O on the same keys,
// from the same number of threads, in the same run:
//
//   hiredis  plain SET / GET of values of the payload's size through hiredis,
//            straight to the master owning each key (KeySlot of the key and
//            the CLUSTER SLOTS map, read here); a chain's GETs pipelined per
//            node, every node written before any is read, as our client
//            does. A reply is checked for its length and freed, not copied
//            out (redis-benchmark's shape): everything ours adds shows.
//   cluster  the same raw SET / GET through our RedisCluster::Run: the client
//            code is shared, so this ratio isolates the value format (a
//            72-byte header) and the checksums.
//
// Cases, for each block size: writes of one block per call from 1 and from 4
// threads (the engine writes one block per call from its remote I/O
// threads, 4 by default), reads of one block per call and of a 16-block
// chain per call (ReadLeading of the chain against 16 pipelined GETs), from
// one thread. Each round runs every case's three legs back to back, their
// order rotating from round to round, each leg moving --slice-mib of
// payload; the ratio reported is the median of the rounds' ratios (the
// machine is noisy), the MB/s the total bytes over the total time. A
// second table gives each leg's CPU seconds (this process, all threads) and
// minor page faults per GB of payload: where the time goes on this side of
// the socket.
//
// Encryption's cost, in the same rounds (issue 35's goal: >= 0.9x):
//
//   --seal   a fourth leg: the store with block keys, every value sealed
//            (AES-256-GCM) on write and opened on read, against ours.
//   --tls-seeds HOST:PORT[,...] --tls-ca F --tls-cert F --tls-key F
//            a fifth leg: the store over TLS to the same cluster's TLS ports
//            (the nodes listen on both; CLUSTER SLOTS names the ports of the
//            asker's kind), values in the clear, against ours.
//
//   bench_remote --seeds HOST:PORT[,...] [--rounds N] [--slice-mib M]
//                [--set-mib M] [--write-threads T] [--only TEXT] [--seal]
//                [--tls-seeds ... --tls-ca F --tls-cert F --tls-key F]
//
// --only runs the cases whose name holds TEXT (e.g. "write 2 MiB").
#include <hiredis/hiredis.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bench_flags.h"
#include "bench_util.h"
#include "common/malloc_tuning.h"
#include "tiers/block_seal.h"
#include "tiers/internal/redis_cluster.h"
#include "tiers/internal/remote_store.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;
using prefix_index::BlockKey;
using tiers::RemoteNamespace;
using tiers::internal::Endpoint;
using tiers::internal::RedisCluster;
using tiers::internal::RedisCommand;
using tiers::internal::RedisReply;
using tiers::internal::RemoteStore;

constexpr size_t kChain = 16;  // blocks per pipelined read

struct Args {
  std::vector<std::string> seeds;
  int rounds = 7;
  uint64_t slice_bytes = 128ULL << 20;  // payload moved by one leg
  uint64_t set_bytes = 64ULL << 20;     // distinct keys' payload, per key set
  size_t write_threads = 4;
  std::string only;  // run only the cases whose name holds this
  bool seal = false;
  std::vector<std::string> tls_seeds;
  std::string tls_ca, tls_cert, tls_key;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_remote: %s\n", what.c_str());
  std::exit(1);
}

// The raw peer's client: one hiredis connection to each master, and the
// slot map read once (the cluster does not change under the benchmark; a
// redirection is an error here).
class RawCluster {
 public:
  explicit RawCluster(const Endpoint& seed) {
    redisContext* c = Open(seed);
    auto* reply = static_cast<redisReply*>(redisCommand(c, "CLUSTER SLOTS"));
    if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY) Die("CLUSTER SLOTS failed");
    owner_.fill(-1);
    // [[first, last, [host, port, id], replicas...], ...]
    for (size_t i = 0; i < reply->elements; ++i) {
      const redisReply* r = reply->element[i];
      const redisReply* m = r->element[2];
      Endpoint e{std::string(m->element[0]->str, m->element[0]->len),
                 static_cast<uint16_t>(m->element[1]->integer)};
      if (e.host.empty() || e.host == "?") e.host = seed.host;
      auto it = std::find(endpoints_.begin(), endpoints_.end(), e);
      if (it == endpoints_.end()) {
        endpoints_.push_back(e);
        nodes_.push_back(Open(e));
        it = endpoints_.end() - 1;
      }
      for (auto s = r->element[0]->integer; s <= r->element[1]->integer; ++s) {
        owner_[static_cast<size_t>(s)] = static_cast<int>(it - endpoints_.begin());
      }
    }
    freeReplyObject(reply);
    redisFree(c);
  }
  ~RawCluster() {
    for (redisContext* c : nodes_) redisFree(c);
  }
  RawCluster(const RawCluster&) = delete;
  RawCluster& operator=(const RawCluster&) = delete;

  void Set(std::string_view key, std::span<const std::byte> value) {
    redisContext* c = Node(key);
    const char* argv[] = {"SET", key.data(), reinterpret_cast<const char*>(value.data())};
    const size_t lens[] = {3, key.size(), value.size()};
    redisAppendCommandArgv(c, 3, argv, lens);
    redisReply* r = Reply(c);
    if (r->type != REDIS_REPLY_STATUS) Die("raw SET: " + std::string(r->str, r->len));
    freeReplyObject(r);
  }

  // GETs of `keys`, pipelined per node; every value must be `bytes` long.
  void Get(std::span<const std::string> keys, size_t bytes) {
    std::vector<std::vector<size_t>> by_node(nodes_.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      redisContext* c = Node(keys[i]);
      const char* argv[] = {"GET", keys[i].data()};
      const size_t lens[] = {3, keys[i].size()};
      redisAppendCommandArgv(c, 2, argv, lens);
      by_node[NodeIndex(keys[i])].push_back(i);
    }
    for (size_t n = 0; n < nodes_.size(); ++n) {
      int done = by_node[n].empty() ? 1 : 0;
      while (done == 0) {
        if (redisBufferWrite(nodes_[n], &done) != REDIS_OK) Die("raw GET: write failed");
      }
    }
    for (size_t n = 0; n < nodes_.size(); ++n) {
      for (size_t k = 0; k < by_node[n].size(); ++k) {
        redisReply* r = Reply(nodes_[n]);
        if (r->type != REDIS_REPLY_STRING || r->len != bytes) Die("raw GET: not the value");
        freeReplyObject(r);
      }
    }
  }

 private:
  static redisContext* Open(const Endpoint& e) {
    redisContext* c = redisConnect(e.host.c_str(), e.port);
    if (c == nullptr || c->err != 0) Die("cannot connect to " + e.ToString());
    return c;
  }
  static redisReply* Reply(redisContext* c) {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK || raw == nullptr) Die("raw: no reply");
    return static_cast<redisReply*>(raw);
  }
  size_t NodeIndex(std::string_view key) const {
    const int n = owner_[tiers::internal::KeySlot(key)];
    if (n < 0) Die("a slot no master serves");
    return static_cast<size_t>(n);
  }
  redisContext* Node(std::string_view key) { return nodes_[NodeIndex(key)]; }

  std::vector<Endpoint> endpoints_;
  std::vector<redisContext*> nodes_;
  std::array<int, tiers::internal::kClusterSlots> owner_{};
};

// One block size's keys: a write set (rewritten by every writer) and a read
// set (written once, in our format, and read by all three).
struct KeySet {
  std::vector<BlockKey> keys;
  std::vector<std::string> names;  // the store's value keys of `keys`
};

KeySet MakeKeys(const RemoteStore& store, uint64_t ns, size_t n, Rng& rng) {
  KeySet s;
  for (size_t i = 0; i < n; ++i) {
    s.keys.push_back(BlockKey{rng.Next(), rng.Next()});
    s.names.push_back(store.KeyOf(ns, s.keys.back()));
  }
  return s;
}

enum Leg : size_t { kOurs = 0, kCluster = 1, kHiredis = 2, kSealed = 3, kTls = 4, kLegs = 5 };
constexpr const char* kLegNames[kLegs] = {"ours", "cluster", "hiredis", "sealed", "tls"};

// One case: its legs (the last two only with --seal and --tls-seeds), each moving `ops` operations
// of bytes_per_op starting at operation `first` (keys cycle through the set).
struct Case {
  std::string name;
  uint64_t block_bytes = 0;
  uint64_t bytes_per_op = 0;
  uint64_t ops_per_leg = 0;
  std::array<std::function<void(uint64_t first, uint64_t ops)>, kLegs> legs;
  std::array<uint64_t, kLegs> ops{};
  std::array<double, kLegs> seconds{};
  std::array<std::vector<double>, kLegs> round_mbps;
  std::array<double, kLegs> cpu_seconds{};  // this process's, all threads
  std::array<uint64_t, kLegs> faults{};     // minor page faults
};

// This process's CPU time (user + system) and minor page faults so far.
struct Usage {
  double cpu_seconds = 0;
  uint64_t faults = 0;
};
Usage SelfUsage() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  const auto secs = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
  };
  return {secs(ru.ru_utime) + secs(ru.ru_stime), static_cast<uint64_t>(ru.ru_minflt)};
}

// Runs `body(t, i)` for operations i in [first, first + ops), split over
// `threads` threads by i % threads.
void Spread(size_t threads, uint64_t first, uint64_t ops,
            const std::function<void(size_t, uint64_t)>& body) {
  if (threads == 1) {
    for (uint64_t i = first; i < first + ops; ++i) body(0, i);
    return;
  }
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (uint64_t i = first + t; i < first + ops; i += threads) body(t, i);
    });
  }
  for (auto& th : pool) th.join();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string SizeName(uint64_t bytes) {
  return bytes >= (1ULL << 20) ? std::to_string(bytes >> 20) + " MiB"
                               : std::to_string(bytes >> 10) + " KiB";
}

int Run(const Args& a) {
  tiers::internal::RemoteStoreOptions opt;
  for (const std::string& s : a.seeds) {
    auto e = tiers::internal::ParseEndpoint(s);
    if (!e) Die(e.status().ToString());
    opt.redis.seeds.push_back(*e);
  }
  opt.redis.connections_per_node = static_cast<int>(std::max<size_t>(4, a.write_threads));
  opt.key_prefix = "kvbench";
  const std::vector<std::byte> secret(32, std::byte{0x42});
  auto store = RemoteStore::Open(opt, secret);
  if (!store) Die("RemoteStore::Open: " + store.status().ToString());
  auto cluster = RedisCluster::Connect(opt.redis);
  if (!cluster) Die("RedisCluster::Connect: " + cluster.status().ToString());
  std::vector<std::unique_ptr<RawCluster>> raw;
  for (size_t t = 0; t < a.write_threads; ++t) {
    raw.push_back(std::make_unique<RawCluster>(opt.redis.seeds.front()));
  }
  std::printf("cluster: %s\n", (*store)->description().c_str());
  // The encrypted legs' stores: sealed values under a prefix of their own
  // (a prefix's values are all sealed or none are), TLS to the same keys.
  std::unique_ptr<RemoteStore> sealed, tls;
  if (a.seal) {
    tiers::internal::RemoteStoreOptions so = opt;
    so.key_prefix = "kvbench-sealed";
    auto ring = tiers::KeyRing::Parse("1:" + std::string(64, '7'));
    if (!ring) Die(ring.status().ToString());
    so.sealer = std::make_shared<tiers::BlockSealer>(*std::move(ring));
    auto opened = RemoteStore::Open(so, secret);
    if (!opened) Die("sealed RemoteStore::Open: " + opened.status().ToString());
    sealed = std::move(*opened);
  }
  if (!a.tls_seeds.empty()) {
    tiers::internal::RemoteStoreOptions to = opt;
    to.redis.seeds.clear();
    for (const std::string& s : a.tls_seeds)
      to.redis.seeds.push_back(*tiers::internal::ParseEndpoint(s));
    to.redis.tls.enabled = true;
    to.redis.tls.ca_file = a.tls_ca;
    to.redis.tls.cert_file = a.tls_cert;
    to.redis.tls.key_file = a.tls_key;
    auto opened = RemoteStore::Open(to, secret);
    if (!opened) Die("TLS RemoteStore::Open: " + opened.status().ToString());
    tls = std::move(*opened);
    std::printf("tls: %s\n", tls->description().c_str());
  }
  std::array<bool, kLegs> active{true, true, true, sealed != nullptr, tls != nullptr};

  Rng rng(17);
  // Llama-3-8B's layout (32 layers, 8 KV heads of 128, fp16): 2 and 16
  // tokens per block.
  const std::vector<Layout> layouts = {Layout{32, 8, 128, DType::kFloat16, 2},
                                       Layout{32, 8, 128, DType::kFloat16, 16}};
  // Everything the cases capture by reference lives here, one per layout.
  struct PerSize {
    RemoteNamespace ns;
    uint64_t bb = 0;
    std::vector<std::byte> payload;  // what every writer writes
    KeySet write_set, read_set;
    std::vector<std::byte> dst;  // kChain blocks: the reads' destination
    std::vector<std::span<std::byte>> outs;
  };
  std::vector<std::unique_ptr<PerSize>> sizes;
  std::vector<Case> cases;
  for (const Layout& layout : layouts) {
    auto p = std::make_unique<PerSize>();
    p->ns = RemoteNamespace{tiers::RemoteNamespaceId("bench_remote", "", layout), layout};
    p->bb = layout.BlockBytes();
    p->payload.resize(p->bb);
    for (size_t i = 0; i + 8 <= p->bb; i += 8) {
      const uint64_t v = rng.Next();
      std::memcpy(p->payload.data() + i, &v, 8);
    }
    size_t n = std::max<size_t>(kChain, a.set_bytes / p->bb);
    n = (n + kChain - 1) / kChain * kChain;  // whole chains
    p->write_set = MakeKeys(**store, p->ns.id, n, rng);
    p->read_set = MakeKeys(**store, p->ns.id, n, rng);
    p->ns.fingerprint = tiers::NamespaceFingerprint("bench_remote", "", layout.ToString());
    for (const BlockKey& k : p->read_set.keys) {
      if (Status s = (*store)->Write(p->ns, k, p->payload); !s.ok()) Die(s.ToString());
      if (sealed) {
        if (Status s = sealed->Write(p->ns, k, p->payload); !s.ok()) Die(s.ToString());
      }
    }
    p->dst.assign(kChain * p->bb, std::byte{1});
    for (size_t i = 0; i < kChain; ++i) p->outs.push_back({p->dst.data() + i * p->bb, p->bb});
    PerSize& s = *p;
    RemoteStore& ours = **store;
    RedisCluster& rc = **cluster;
    const uint64_t value_bytes = tiers::internal::kRemoteHeaderBytes + s.bb;
    const std::string_view raw_value(reinterpret_cast<const char*>(s.payload.data()), s.bb);

    std::vector<size_t> thread_counts{1};
    if (a.write_threads > 1) thread_counts.push_back(a.write_threads);
    for (size_t threads : thread_counts) {
      Case c;
      c.name = "write " + SizeName(s.bb) + ", " + std::to_string(threads) + " thread" +
               (threads > 1 ? "s" : "");
      c.block_bytes = s.bb;
      c.bytes_per_op = s.bb;
      const size_t nk = s.write_set.keys.size();
      c.legs[kOurs] = [&s, &ours, threads, nk](uint64_t first, uint64_t ops) {
        Spread(threads, first, ops, [&](size_t, uint64_t i) {
          if (Status st = ours.Write(s.ns, s.write_set.keys[i % nk], s.payload); !st.ok()) {
            Die("RemoteStore::Write: " + st.ToString());
          }
        });
      };
      c.legs[kCluster] = [&s, &rc, raw_value, threads, nk](uint64_t first, uint64_t ops) {
        Spread(threads, first, ops, [&](size_t, uint64_t i) {
          RedisCommand set{{"SET", s.write_set.names[i % nk], raw_value}, 1};
          auto r = rc.Run(std::span(&set, 1));
          if (!r[0] || r[0]->type() != RedisReply::Type::kStatus) Die("cluster raw SET failed");
        });
      };
      c.legs[kHiredis] = [&s, &raw, threads, nk](uint64_t first, uint64_t ops) {
        Spread(threads, first, ops,
               [&](size_t t, uint64_t i) { raw[t]->Set(s.write_set.names[i % nk], s.payload); });
      };
      for (const auto& [leg, other] :
           {std::pair{kSealed, sealed.get()}, std::pair{kTls, tls.get()}}) {
        if (other == nullptr) continue;
        c.legs[leg] = [&s, other, threads, nk](uint64_t first, uint64_t ops) {
          Spread(threads, first, ops, [&](size_t, uint64_t i) {
            if (Status st = other->Write(s.ns, s.write_set.keys[i % nk], s.payload); !st.ok()) {
              Die("RemoteStore::Write (encrypted leg): " + st.ToString());
            }
          });
        };
      }
      cases.push_back(std::move(c));
    }
    for (size_t chain : {size_t{1}, kChain}) {
      Case c;
      c.name = "read " + SizeName(s.bb) + ", " + std::to_string(chain) + " block" +
               (chain > 1 ? "s" : "") + "/call";
      c.block_bytes = s.bb;
      c.bytes_per_op = chain * s.bb;
      const size_t nk = s.read_set.keys.size();
      // Operation i reads blocks [i * chain, (i + 1) * chain) mod the set.
      const auto from = [nk, chain](uint64_t i) { return (i * chain) % nk; };
      c.legs[kOurs] = [&s, &ours, chain, from](uint64_t first, uint64_t ops) {
        const std::span outs(s.outs.data(), chain);
        for (uint64_t i = first; i < first + ops; ++i) {
          const size_t got =
              ours.ReadLeading(s.ns, std::span(s.read_set.keys).subspan(from(i), chain), outs);
          if (got != chain) Die("ReadLeading missed: " + ours.stats().last_error);
        }
      };
      c.legs[kCluster] = [&s, &rc, chain, from, value_bytes](uint64_t first, uint64_t ops) {
        std::vector<RedisCommand> cmds(chain);
        for (uint64_t i = first; i < first + ops; ++i) {
          for (size_t k = 0; k < chain; ++k) cmds[k] = {{"GET", s.read_set.names[from(i) + k]}, 1};
          for (const auto& r : rc.Run(cmds)) {
            if (!r || r->str().size() != value_bytes) Die("cluster raw GET: not the value");
          }
        }
      };
      c.legs[kHiredis] = [&s, &raw, chain, from, value_bytes](uint64_t first, uint64_t ops) {
        for (uint64_t i = first; i < first + ops; ++i) {
          raw[0]->Get(std::span(s.read_set.names).subspan(from(i), chain), value_bytes);
        }
      };
      for (const auto& [leg, other] :
           {std::pair{kSealed, sealed.get()}, std::pair{kTls, tls.get()}}) {
        if (other == nullptr) continue;
        c.legs[leg] = [&s, other, chain, from](uint64_t first, uint64_t ops) {
          const std::span outs(s.outs.data(), chain);
          for (uint64_t i = first; i < first + ops; ++i) {
            const size_t got =
                other->ReadLeading(s.ns, std::span(s.read_set.keys).subspan(from(i), chain), outs);
            if (got != chain)
              Die("ReadLeading (encrypted leg) missed: " + other->stats().last_error);
          }
        };
      }
      cases.push_back(std::move(c));
    }
    sizes.push_back(std::move(p));
  }
  std::erase_if(cases, [&](const Case& c) { return c.name.find(a.only) == std::string::npos; });
  if (cases.empty()) Die("no case's name holds \"" + a.only + "\"");
  for (Case& c : cases) c.ops_per_leg = std::max<uint64_t>(1, a.slice_bytes / c.bytes_per_op);
  // One unmeasured pass of every leg: connections opened, pages faulted.
  std::vector<size_t> legs;
  for (size_t l = 0; l < kLegs; ++l) {
    if (active[l]) legs.push_back(l);
  }
  for (Case& c : cases) {
    for (size_t l : legs) c.legs[l](0, std::min<uint64_t>(c.ops_per_leg, 4));
  }

  for (int round = 0; round < a.rounds; ++round) {
    for (Case& c : cases) {
      for (size_t k = 0; k < legs.size(); ++k) {
        const size_t leg = legs[(k + static_cast<size_t>(round)) % legs.size()];
        const Usage u0 = SelfUsage();
        const auto t0 = Clock::now();
        c.legs[leg](c.ops[leg], c.ops_per_leg);
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        const Usage u1 = SelfUsage();
        c.cpu_seconds[leg] += u1.cpu_seconds - u0.cpu_seconds;
        c.faults[leg] += u1.faults - u0.faults;
        c.ops[leg] += c.ops_per_leg;
        c.seconds[leg] += secs;
        c.round_mbps[leg].push_back(static_cast<double>(c.ops_per_leg * c.bytes_per_op) / secs /
                                    1e6);
      }
    }
    std::fprintf(stderr, "round %d of %d done\n", round + 1, a.rounds);
  }

  std::printf(
      "\n%d rounds, %llu MiB per leg; MB/s = total payload / total time; ratio = median of the "
      "rounds' ours/peer [min-max]\n",
      a.rounds, static_cast<unsigned long long>(a.slice_bytes >> 20));
  std::printf(
      "peers: hiredis = raw SET/GET straight to the owning master (KeySlot + CLUSTER "
      "SLOTS), replies freed, not copied;\n       cluster = raw SET/GET through our "
      "RedisCluster::Run (same client: isolates value format, checksum, copies)\n\n");
  std::printf("%-30s %10s %12s %18s %12s %18s\n", "case", "ours MB/s", "cluster MB/s",
              "ours/cluster", "hiredis MB/s", "ours/hiredis");
  for (const Case& c : cases) {
    double mbps[kLegs];
    for (size_t l = 0; l < kLegs; ++l) {
      mbps[l] = static_cast<double>(c.ops[l] * c.bytes_per_op) / c.seconds[l] / 1e6;
    }
    std::string ratios[kLegs];
    for (size_t peer : {kCluster, kHiredis}) {
      std::vector<double> r;
      for (size_t i = 0; i < c.round_mbps[kOurs].size(); ++i) {
        r.push_back(c.round_mbps[kOurs][i] / c.round_mbps[peer][i]);
      }
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.2fx [%.2f-%.2f]", Median(r),
                    *std::min_element(r.begin(), r.end()), *std::max_element(r.begin(), r.end()));
      ratios[peer] = buf;
    }
    std::printf("%-30s %10.0f %12.0f %18s %12.0f %18s\n", c.name.c_str(), mbps[kOurs],
                mbps[kCluster], ratios[kCluster].c_str(), mbps[kHiredis], ratios[kHiredis].c_str());
  }
  // Where the time goes on this side of the socket: the benchmark's own CPU
  // time (client work: formatting, copies, checksums, page faults) and page
  // faults, per GB of payload.
  std::printf("\nclient side, per GB of payload: CPU seconds (all threads) / minor page faults\n");
  std::printf("%-30s %18s %18s %18s\n", "case", "ours", "cluster", "hiredis");
  for (const Case& c : cases) {
    std::printf("%-30s", c.name.c_str());
    for (size_t l = 0; l < kLegs; ++l) {
      if (!active[l] || l > kHiredis) continue;
      const double gb = static_cast<double>(c.ops[l] * c.bytes_per_op) / 1e9;
      std::printf(" %9.2f / %6.0f", c.cpu_seconds[l] / gb, static_cast<double>(c.faults[l]) / gb);
    }
    std::printf("\n");
  }
  // Encryption against none, same rounds: throughput ratio (median of the
  // rounds, worst round) and the extra CPU per block on this side.
  for (size_t leg : {kSealed, kTls}) {
    if (!active[leg]) continue;
    std::printf("\n%s: %s\n", kLegNames[leg],
                leg == kSealed ? "block keys configured: every value sealed (AES-256-GCM) on write "
                                 "and opened on read, against ours in the clear"
                               : "ours over TLS (the same cluster's TLS ports, the same keys), "
                                 "against ours in plaintext");
    std::printf("%-30s %10s %10s %22s %22s\n", "case", "ours MB/s", "enc MB/s", "enc/ours",
                "extra CPU us/block");
    for (const Case& c : cases) {
      std::vector<double> r;
      for (size_t i = 0; i < c.round_mbps[kOurs].size(); ++i) {
        r.push_back(c.round_mbps[leg][i] / c.round_mbps[kOurs][i]);
      }
      const double mb_ours =
          static_cast<double>(c.ops[kOurs] * c.bytes_per_op) / c.seconds[kOurs] / 1e6;
      const double mb_enc = static_cast<double>(c.ops[leg] * c.bytes_per_op) / c.seconds[leg] / 1e6;
      const double blocks_per_op =
          static_cast<double>(c.bytes_per_op) / static_cast<double>(c.block_bytes);
      const double us_ours =
          c.cpu_seconds[kOurs] / static_cast<double>(c.ops[kOurs]) / blocks_per_op * 1e6;
      const double us_enc =
          c.cpu_seconds[leg] / static_cast<double>(c.ops[leg]) / blocks_per_op * 1e6;
      char ratio[64];
      std::snprintf(ratio, sizeof(ratio), "%.2fx [%.2f-%.2f]", Median(r),
                    *std::min_element(r.begin(), r.end()), *std::max_element(r.begin(), r.end()));
      std::printf("%-30s %10.0f %10.0f %22s %22.1f\n", c.name.c_str(), mb_ours, mb_enc, ratio,
                  us_enc - us_ours);
    }
  }
  const tiers::RemoteStats st = (*store)->stats();
  std::printf(
      "\nours: %llu writes, %llu reads verified, %llu errors, %llu corrupt\n",
      static_cast<unsigned long long>(st.writes), static_cast<unsigned long long>(st.read_hits),
      static_cast<unsigned long long>(st.errors), static_cast<unsigned long long>(st.corrupt));
  return 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  kvtier::TuneMallocForLargeBuffers();  // as kvtierd, whose remote tier this measures
  kvtier::bench::Args a;
  kvtier::bench::Flags flags;
  flags.options["--seeds"] = [&](const std::string& v) {
    for (size_t at = 0; at <= v.size();) {
      const size_t comma = std::min(v.find(',', at), v.size());
      if (comma > at) a.seeds.push_back(v.substr(at, comma - at));
      at = comma + 1;
    }
  };
  flags.options["--rounds"] = [&](const std::string& v) { a.rounds = std::stoi(v); };
  flags.options["--slice-mib"] = [&](const std::string& v) {
    a.slice_bytes = std::stoull(v) << 20;
  };
  flags.options["--set-mib"] = [&](const std::string& v) { a.set_bytes = std::stoull(v) << 20; };
  flags.options["--write-threads"] = [&](const std::string& v) { a.write_threads = std::stoul(v); };
  flags.options["--only"] = [&](const std::string& v) { a.only = v; };
  flags.options["--tls-seeds"] = [&](const std::string& v) {
    for (size_t at = 0; at <= v.size();) {
      const size_t comma = std::min(v.find(',', at), v.size());
      if (comma > at) a.tls_seeds.push_back(v.substr(at, comma - at));
      at = comma + 1;
    }
  };
  flags.switches["--seal"] = [&] { a.seal = true; };
  flags.options["--tls-ca"] = [&](const std::string& v) { a.tls_ca = v; };
  flags.options["--tls-cert"] = [&](const std::string& v) { a.tls_cert = v; };
  flags.options["--tls-key"] = [&](const std::string& v) { a.tls_key = v; };
  const int done = kvtier::bench::ParseFlags(
      argc, argv, flags,
      "bench_remote --seeds HOST:PORT[,...] [--rounds N] [--slice-mib M] [--set-mib M] "
      "[--write-threads T] [--only TEXT] [--seal] [--tls-seeds HOST:PORT[,...] --tls-ca F "
      "--tls-cert F --tls-key F]");
  if (done >= 0) return done;
  if (a.seeds.empty() || a.rounds < 1 || a.write_threads < 1) {
    kvtier::bench::Die("bad arguments");
  }
  return kvtier::bench::Run(a);
}
