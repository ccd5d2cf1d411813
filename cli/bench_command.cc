// kvtier bench: N concurrent clients (one thread and one connection each)
// issue lookup / put / get for a bounded time or count; reports ops/s and
// p50/p99 latency per op. Lookups and gets draw from --keys prompts written
// before the clock starts; each put writes a fresh prompt, so it stores new
// blocks instead of finding them present.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "cli/cli_common.h"
#include "cli/commands.h"

namespace kvtier::cli {
namespace {

using client::BlockKey;
using client::Client;
using Clock = std::chrono::steady_clock;

struct BenchOptions {
  ConnectFlags conn;
  uint32_t clients = 4;
  double seconds = 0;
  uint64_t ops = 0;
  std::string op = "lookup";
  uint32_t prompts = 1024;
  uint32_t blocks = 4;
  uint64_t seed = 1;
  bool inline_bytes = false;
  bool json = false;
};

enum Op : size_t { kLookup = 0, kGet = 1, kPut = 2, kNumOps = 3 };
constexpr const char* kOpNames[kNumOps] = {"lookup", "get", "put"};

struct ThreadResult {
  std::vector<uint64_t> latency_ns[kNumOps];
  uint64_t errors[kNumOps] = {};
  Status first_error;
};

std::vector<client::TokenId> RandomTokens(std::mt19937_64& rng, size_t n) {
  std::vector<client::TokenId> t(n);
  for (auto& x : t) x = static_cast<client::TokenId>(rng() % 150000);
  return t;
}

Status Put(Client& c, std::span<const BlockKey> keys, bool inline_bytes) {
  if (inline_bytes) {
    std::vector<std::byte> data(keys.size() * c.block_bytes());
    for (size_t i = 0; i < keys.size(); ++i) {
      FillPattern(keys[i], std::span(data).subspan(i * c.block_bytes(), c.block_bytes()));
    }
    return c.PutInline(keys, data).status();
  }
  KVTIER_ASSIGN_OR_RETURN(auto w, c.Allocate(keys));
  for (size_t i = 0; i < w.size(); ++i) {
    if (w.state(i) == client::WireWriteState::kAllocated) FillPattern(keys[i], w.Bytes(i));
  }
  return w.Commit();
}

// Reads every byte of the hits, as a worker would.
Status Get(Client& c, std::span<const BlockKey> keys, bool inline_bytes, uint64_t* sink) {
  if (inline_bytes) {
    KVTIER_ASSIGN_OR_RETURN(auto reply, c.GetInline(keys));
    *sink += reply.hits;
    return Status::Ok();
  }
  KVTIER_ASSIGN_OR_RETURN(auto lease, c.Acquire(keys));
  for (size_t i = 0; i < lease.size(); ++i) {
    const auto b = lease.Bytes(i);
    for (size_t off = 0; off + 8 <= b.size(); off += 8) {
      uint64_t w;
      std::memcpy(&w, b.data() + off, 8);
      *sink ^= w;
    }
  }
  return lease.Release();
}

Op PickOp(const std::string& op, std::mt19937_64& rng) {
  if (op == "lookup") return kLookup;
  if (op == "get") return kGet;
  if (op == "put") return kPut;
  const uint64_t r = rng() % 4;  // mixed: half lookups, a quarter each get and put
  return r < 2 ? kLookup : r == 2 ? kGet : kPut;
}

void RunClient(const BenchOptions& o, Client& c, const std::vector<std::vector<BlockKey>>& prompts,
               uint32_t index, const std::atomic<bool>& go, Clock::time_point deadline,
               ThreadResult* out) {
  std::mt19937_64 rng(o.seed * 7919 + index);
  uint64_t sink = 0;
  while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
  for (uint64_t n = 0; o.ops == 0 || n < o.ops; ++n) {
    if (o.ops == 0 && (n & 15) == 0 && Clock::now() >= deadline) break;
    const Op op = PickOp(o.op, rng);
    std::vector<BlockKey> fresh;
    if (op == kPut) fresh = c.Keys(RandomTokens(rng, size_t{o.blocks} * o.conn.block_tokens));
    const auto& keys = op == kPut ? fresh : prompts[rng() % prompts.size()];
    const auto t0 = Clock::now();
    Status s = op == kLookup ? c.Lookup(keys).status()
               : op == kGet  ? Get(c, keys, o.inline_bytes, &sink)
                             : Put(c, keys, o.inline_bytes);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0);
    out->latency_ns[op].push_back(static_cast<uint64_t>(ns.count()));
    if (!s.ok()) {
      ++out->errors[op];
      if (out->first_error.ok()) out->first_error = s;
      if (!c.healthy()) break;
    }
  }
  if (sink == 42) std::fprintf(stderr, " ");  // keeps the reads from being optimized away
}

double Percentile(const std::vector<uint64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto i = static_cast<size_t>(p * static_cast<double>(sorted.size() - 1));
  return static_cast<double>(sorted[i]) / 1000.0;
}

void Report(const BenchOptions& o, uint64_t block_bytes, double elapsed,
            std::vector<ThreadResult>& results) {
  std::string json = "{\"clients\":" + std::to_string(o.clients) +
                     ",\"seconds\":" + std::to_string(elapsed) + ",\"op\":\"" + o.op +
                     "\",\"blocks_per_op\":" + std::to_string(o.blocks) +
                     ",\"block_bytes\":" + std::to_string(block_bytes) + ",\"results\":{";
  if (!o.json) {
    std::printf("bench: %u clients, %.2f s, op %s, %u prompts x %u blocks of %s (%s)\n", o.clients,
                elapsed, o.op.c_str(), o.prompts, o.blocks, FormatBytes(block_bytes).c_str(),
                o.inline_bytes ? "inline" : "zero-copy");
    std::printf("%-8s %10s %12s %10s %10s %8s\n", "op", "ops", "ops/s", "p50 us", "p99 us",
                "errors");
  }
  std::vector<uint64_t> all;
  uint64_t all_errors = 0;
  bool first = true;
  auto row = [&](const char* name, std::vector<uint64_t>& lat, uint64_t errors) {
    std::sort(lat.begin(), lat.end());
    const double rate = static_cast<double>(lat.size()) / elapsed;
    if (o.json) {
      char buf[256];
      std::snprintf(buf, sizeof(buf),
                    "%s\"%s\":{\"ops\":%zu,\"ops_per_s\":%.1f,\"p50_us\":%.2f,\"p99_us\":%.2f,"
                    "\"errors\":%llu}",
                    first ? "" : ",", name, lat.size(), rate, Percentile(lat, 0.5),
                    Percentile(lat, 0.99), static_cast<unsigned long long>(errors));
      json += buf;
      first = false;
    } else {
      std::printf("%-8s %10zu %12.1f %10.2f %10.2f %8llu\n", name, lat.size(), rate,
                  Percentile(lat, 0.5), Percentile(lat, 0.99),
                  static_cast<unsigned long long>(errors));
    }
  };
  for (size_t op = 0; op < kNumOps; ++op) {
    std::vector<uint64_t> lat;
    uint64_t errors = 0;
    for (auto& r : results) {
      lat.insert(lat.end(), r.latency_ns[op].begin(), r.latency_ns[op].end());
      errors += r.errors[op];
    }
    if (lat.empty()) continue;
    all.insert(all.end(), lat.begin(), lat.end());
    all_errors += errors;
    row(kOpNames[op], lat, errors);
  }
  row("all", all, all_errors);
  if (o.json) std::printf("%s}}\n", json.c_str());
}

int RunBench(const BenchOptions& o) {
  if (o.clients == 0 || o.prompts == 0 || o.blocks == 0) {
    return Fail(InvalidArgumentError("--clients, --keys and --blocks must be at least 1"));
  }
  std::vector<std::unique_ptr<Client>> clients;
  for (uint32_t i = 0; i < o.clients; ++i) {
    auto c = Connect(o.conn, /*map_arenas=*/!o.inline_bytes);
    if (!c.ok()) return Fail(c.status());
    clients.push_back(*std::move(c));
  }
  std::mt19937_64 rng(o.seed);
  std::vector<std::vector<BlockKey>> prompts;
  for (uint32_t i = 0; i < o.prompts; ++i) {
    prompts.push_back(clients[0]->Keys(RandomTokens(rng, size_t{o.blocks} * o.conn.block_tokens)));
    if (o.op != "lookup") {
      if (Status s = Put(*clients[0], prompts.back(), o.inline_bytes); !s.ok()) return Fail(s);
    }
  }
  std::atomic<bool> go{false};
  const double seconds = o.ops == 0 && o.seconds <= 0 ? 5.0 : o.seconds;
  const auto duration =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<ThreadResult> results(o.clients);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (uint32_t i = 0; i < o.clients; ++i) {
    threads.emplace_back(RunClient, std::cref(o), std::ref(*clients[i]), std::cref(prompts), i,
                         std::cref(go), start + duration, &results[i]);
  }
  const auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  Report(o, clients[0]->block_bytes(), elapsed, results);
  for (const auto& r : results) {
    if (!r.first_error.ok()) return Fail(r.first_error.WithContext("some operations failed"));
  }
  return 0;
}

}  // namespace

void AddBenchCommand(CLI::App* app, int* exit_code) {
  auto* sub = app->add_subcommand("bench", "load the daemon from concurrent clients");
  auto o = std::make_shared<BenchOptions>();
  AddConnectFlags(sub, &o->conn);
  sub->add_option("--clients", o->clients, "concurrent clients (threads)")->capture_default_str();
  auto* secs = sub->add_option("--seconds", o->seconds, "run this long [5 unless --ops]");
  sub->add_option("--ops", o->ops, "operations per client instead")->excludes(secs);
  sub->add_option("--op", o->op, "lookup | put | get | mixed (2:1:1 lookup:get:put)")
      ->check(CLI::IsMember({"lookup", "put", "get", "mixed"}))
      ->capture_default_str();
  sub->add_option("--keys", o->prompts, "distinct prompts looked up and read")
      ->capture_default_str();
  sub->add_option("--blocks", o->blocks, "blocks per prompt (per operation)")
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "seed of the prompts and the op mix")->capture_default_str();
  sub->add_flag("--inline", o->inline_bytes, "put/get bytes through the socket");
  sub->add_flag("--json", o->json, "print a JSON object");
  sub->callback([o, exit_code] { *exit_code = RunBench(*o); });
}

}  // namespace kvtier::cli
