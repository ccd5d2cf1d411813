// Data-plane throughput against a running kvtierd: getting 2 MiB blocks into
// the worker's own buffer, as GB/s, beside plain memcpy of the same sizes in
// the same run.
//
//   bench_data_plane --socket S [--blocks N] [--batch B] [--seconds T] [--json]
//
// Direct path: Client::Read of B blocks read before (no request but a
// TOUCH that rides on the next one).
// Zero-copy path: ACQUIRE B blocks, memcpy each out of the shared arena into
// the worker's buffer, RELEASE. Inline path: GET B blocks through the socket.
// Peer: memcpy of B blocks between two private buffers of the same sizes.
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_flags.h"
#include "client/client.h"

using kvtier::prefix_index::BlockKey;

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string socket;
  size_t blocks = 64;  // distinct blocks cached (128 MiB)
  size_t batch = 1;    // blocks per operation
  double seconds = 3;
  bool json = false;
  bool zero_copy = true;   // measure the ACQUIRE path
  bool inline_get = true;  // measure the GET path
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_data_plane: %s\n", what.c_str());
  std::exit(1);
}

// Page-aligned, pre-faulted memory, like an inference worker's buffers.
// A private buffer on huge pages where the kernel makes them (transparent
// huge pages: aligned to 2 MiB and asked for), written once: the fastest
// memory a worker could copy between, so memcpy between two of these is
// the limit the zero-copy read is held to.
std::byte* Buffer(size_t bytes) {
  constexpr size_t kHuge = 2 << 20;
  const size_t mapped = bytes + kHuge;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) Die("mmap failed");
  auto* aligned = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(p) + kHuge - 1) &
                                               ~uintptr_t{kHuge - 1});
  ::madvise(aligned, bytes, MADV_HUGEPAGE);
  std::memset(aligned, 1, bytes);
  return aligned;
}

// One path under measurement: its operation and what it has moved so far.
struct Path {
  std::function<void(size_t)> op;  // moves bytes_per_op bytes
  size_t ops = 0;
  double seconds = 0;
  double GBs(size_t bytes_per_op) const {
    return seconds == 0 ? 0 : static_cast<double>(ops * bytes_per_op) / seconds / 1e9;
  }
};

// Runs the paths in turn, a short slice each, until each has had `seconds`:
// interleaving keeps drift of a shared machine out of their ratios.
void Measure(double seconds, std::vector<Path*> paths) {
  constexpr double kSlice = 0.1;
  for (double done = 0; done < seconds; done += kSlice) {
    for (Path* p : paths) {
      const auto start = Clock::now();
      const auto until = start + std::chrono::duration<double>(kSlice);
      while (Clock::now() < until) {
        for (int i = 0; i < 4; ++i) p->op(p->ops++);
      }
      p->seconds += std::chrono::duration<double>(Clock::now() - start).count();
    }
  }
}

int Run(const Args& a) {
  client::ClientOptions o;
  o.socket_path = a.socket;
  o.model = "bench-data-plane";
  o.layout = Layout{32, 8, 128, DType::kFloat16, 16};  // Llama-3-8B, 16 tokens: 2 MiB
  o.client_name = "bench_data_plane";
  auto c = client::Client::Connect(o);
  if (!c.ok()) Die(c.status().ToString());
  client::Client& cl = **c;
  const size_t bb = cl.block_bytes();

  // blocks / batch independent chains of `batch` blocks each (128 MiB in
  // all by default, well past the caches, like the memcpy peer's buffers).
  const size_t chains = a.blocks / a.batch;
  std::vector<std::vector<BlockKey>> keys(chains);
  for (size_t j = 0; j < chains; ++j) {
    std::vector<prefix_index::TokenId> tokens(a.batch * 16);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<prefix_index::TokenId>(j * 100'000 + i);
    }
    keys[j] = cl.Keys(tokens);
    auto w = cl.Allocate(keys[j]);
    if (!w.ok()) Die(w.status().ToString());
    for (size_t i = 0; i < w->size(); ++i) {
      if (w->state(i) == protocol::WireWriteState::kAllocated)
        std::memset(w->Bytes(i).data(), 7, bb);
    }
    if (!w->Commit().ok()) Die("commit failed");
  }
  for (const auto& k : keys) {
    if (cl.Lookup(k)->tiers.size() != k.size()) Die("blocks not all cached; raise capacity");
  }

  const size_t per_op = a.batch * bb;
  std::byte* dst = Buffer(per_op);
  std::byte* src = Buffer(chains * per_op);
  Path copy{[&](size_t op) {
    const std::byte* from = src + (op % chains) * per_op;
    for (size_t i = 0; i < a.batch; ++i) std::memcpy(dst + i * bb, from + i * bb, bb);
  }};
  Path acquire{[&](size_t op) {
    auto lease = cl.Acquire(keys[op % chains]);
    if (!lease.ok() || lease->size() != a.batch) Die("acquire missed");
    for (size_t i = 0; i < a.batch; ++i) std::memcpy(dst + i * bb, lease->Bytes(i).data(), bb);
  }};
  // The round trip alone (ACQUIRE, its RELEASE riding on the next request),
  // nothing copied: what the zero-copy read adds to a memcpy.
  Path round_trip{[&](size_t op) {
    auto lease = cl.Acquire(keys[op % chains]);
    if (!lease.ok() || lease->size() != a.batch) Die("acquire missed");
  }};
  // Client::Read of blocks it has read before: straight out of the arena,
  // checked by the slot's generation, kvtierd told afterwards (a TOUCH whose
  // reply rides on the next request). Each chain read once first, through
  // ACQUIRE, so that the measured reads are all direct.
  std::vector<std::byte*> dsts(a.batch);
  for (size_t i = 0; i < a.batch; ++i) dsts[i] = dst + i * bb;
  for (const auto& k : keys) {
    auto n = cl.Read(k, dsts);
    if (!n.ok() || *n != a.batch) Die("read missed");
  }
  const uint64_t direct_before = cl.direct_reads();
  Path direct{[&](size_t op) {
    auto n = cl.Read(keys[op % chains], dsts);
    if (!n.ok() || *n != a.batch) Die("read missed");
  }};
  protocol::GetReply got;  // reused, as a worker streaming blocks would
  Path get{[&](size_t op) {
    if (!cl.GetInline(keys[op % chains], &got).ok() || got.hits != a.batch) Die("get missed");
    std::memcpy(dst, got.data.data(), per_op);
  }};
  std::vector<Path*> paths{&copy};
  if (a.zero_copy) {
    paths.push_back(&acquire);
    paths.push_back(&round_trip);
    paths.push_back(&direct);
  }
  if (a.inline_get) paths.push_back(&get);
  Measure(a.seconds, paths);
  const double memcpy_gbs = copy.GBs(per_op);
  const double acquire_gbs = acquire.GBs(per_op);
  const double inline_gbs = get.GBs(per_op);
  const double direct_gbs = direct.GBs(per_op);
  // Reads that found their block moved went through ACQUIRE: the share direct.
  const double direct_share = direct.ops == 0
                                  ? 0
                                  : static_cast<double>(cl.direct_reads() - direct_before) /
                                        static_cast<double>(direct.ops * a.batch);
  const double round_trip_us =
      round_trip.ops == 0 ? 0 : round_trip.seconds / static_cast<double>(round_trip.ops) * 1e6;
  const double memcpy_us = copy.seconds / static_cast<double>(copy.ops) * 1e6;

  if (a.json) {
    std::printf(
        "{\"block_bytes\":%zu,\"batch\":%zu,\"memcpy_gbs\":%.2f,\"acquire_copy_gbs\":%.2f,"
        "\"inline_get_gbs\":%.2f,\"acquire_vs_memcpy\":%.3f,\"memcpy_us\":%.1f,"
        "\"round_trip_us\":%.1f,\"direct_gbs\":%.2f,\"direct_share\":%.3f}\n",
        bb, a.batch, memcpy_gbs, acquire_gbs, inline_gbs, acquire_gbs / memcpy_gbs, memcpy_us,
        round_trip_us, direct_gbs, direct_share);
  } else {
    std::printf("%zu-block ops of %zu MiB blocks:\n", a.batch, bb >> 20);
    std::printf("  memcpy (peer)                  %6.2f GB/s\n", memcpy_gbs);
    std::printf("  acquire + copy out + release   %6.2f GB/s  = %.2fx memcpy\n", acquire_gbs,
                acquire_gbs / memcpy_gbs);
    std::printf("  direct read (read before)      %6.2f GB/s  = %.2fx memcpy (%.0f%% direct)\n",
                direct_gbs, direct_gbs / memcpy_gbs, direct_share * 100);
    std::printf("  inline GET through the socket  %6.2f GB/s  = %.2fx memcpy\n", inline_gbs,
                inline_gbs / memcpy_gbs);
    std::printf("  per op: memcpy %.1f us, acquire + release round trip alone %.1f us\n", memcpy_us,
                round_trip_us);
  }
  return 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  kvtier::bench::Args a;
  kvtier::bench::Flags flags;
  flags.options["--socket"] = [&](const std::string& v) { a.socket = v; };
  flags.options["--blocks"] = [&](const std::string& v) { a.blocks = std::stoul(v); };
  flags.options["--batch"] = [&](const std::string& v) { a.batch = std::stoul(v); };
  flags.options["--seconds"] = [&](const std::string& v) { a.seconds = std::stod(v); };
  flags.switches["--json"] = [&] { a.json = true; };
  flags.switches["--only-zero-copy"] = [&] { a.inline_get = false; };
  flags.switches["--only-inline"] = [&] { a.zero_copy = false; };
  const int done = kvtier::bench::ParseFlags(
      argc, argv, flags,
      "bench_data_plane --socket PATH [--blocks N] [--batch B] [--seconds T] "
      "[--only-zero-copy | --only-inline] [--json]");
  if (done >= 0) return done;
  if (a.socket.empty() || a.batch < 1 || a.blocks < a.batch) kvtier::bench::Die("bad arguments");
  return kvtier::bench::Run(a);
}
