// Writes the seed corpus of wire_fuzzer: one small valid frame of every
// request and every reply, made by the encoders of protocol/wire.h.
//
//   make_wire_seeds fuzz/corpus/wire
//
// The output is committed; run this again when the wire format changes.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "protocol/wire.h"

namespace kvtier::protocol {
namespace {

using Bytes = std::vector<std::byte>;

BlockKey Key(uint64_t i) { return BlockKey{.hi = 0xA000000000000000ULL | i, .lo = i * 7 + 1}; }

Layout SmallLayout() {
  Layout l;
  l.layers = 2;
  l.kv_heads = 2;
  l.head_dim = 8;
  l.dtype = DType::kFloat16;
  l.block_tokens = 16;
  return l;
}

bool Write(const std::string& dir, const std::string& name, const Bytes& frame) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(frame.data()),
            static_cast<std::streamsize>(frame.size()));
  return static_cast<bool>(out);
}

int Run(const std::string& dir) {
  const std::vector<BlockKey> keys = {Key(1), Key(2), Key(3)};
  std::vector<std::pair<std::string, Bytes>> seeds;
  auto add = [&](const std::string& name) -> Bytes* {
    seeds.emplace_back(name, Bytes{});
    return &seeds.back().second;
  };

  // ---- requests
  HelloRequest hello;
  hello.model = "llama-3-8b";
  hello.salt = "tenant-a";
  hello.layout = SmallLayout();
  hello.client_name = "seed";
  EncodeHello(1, hello, add("req_hello"));
  HelloRequest latent = hello;  // an MLA namespace: quantize_lower 0, then layout_kind
  latent.layout.kv_heads = 1;
  latent.layout.kind = KvKind::kLatent;
  EncodeHello(1, latent, add("req_hello_latent"));
  EncodeKeys(Opcode::kLookup, 2, keys, add("req_lookup"));
  EncodeKeys(Opcode::kGet, 3, keys, add("req_get"));
  EncodeKeys(Opcode::kRemove, 4, keys, add("req_remove"));
  EncodeKeys(Opcode::kTouch, 14, keys, add("req_touch"));
  EncodeAllocate(5, AllocateRequest{.tier = WireTier::kHost, .parent = Key(0), .keys = keys},
                 add("req_allocate"));
  EncodeAllocate(6, AllocateRequest{.tier = WireTier::kDevice, .parent = {}, .keys = keys},
                 add("req_allocate_root"));
  EncodeHandle(Opcode::kCommit, 7, 42, add("req_commit"));
  EncodeHandle(Opcode::kAbort, 8, 42, add("req_abort"));
  EncodeHandle(Opcode::kRelease, 9, 43, add("req_release"));
  EncodeAcquire(10, AcquireRequest{.tier = WireTier::kHost, .keys = keys}, add("req_acquire"));
  const Bytes blocks(keys.size() * 8, std::byte{0xab});
  EncodePut(11, Key(0), keys, blocks, add("req_put"));
  EncodeStats(12, add("req_stats"));
  const std::vector<RetentionRange> ranges = {
      {.token_begin = 0, .token_end = 32, .priority = 90, .duration_ms = 1000},
      {.token_begin = 32, .token_end = 48, .priority = 10, .duration_ms = 0}};
  EncodeSetRetention(13, keys, ranges, add("req_set_retention"));
  EncodeHint(14, HintRequest{.keys = keys, .ttl_ms = 5000, .withdraw = false}, add("req_hint"));

  // ---- replies
  HelloReply hr;
  hr.session_id = 7;
  hr.namespace_id = 3;
  hr.block_bytes = SmallLayout().BlockBytes();
  hr.slot_bytes = 4096;
  hr.host_arena_bytes = 1 << 20;
  hr.device = DeviceKind::kEmulated;
  hr.device_arena_bytes = 1 << 20;
  EncodeHelloReply(1, hr, true, add("reply_hello"));
  EncodeLookupReply(2, LookupReply{.tiers = {WireTier::kDevice, WireTier::kHost, WireTier::kSsd}},
                    add("reply_lookup"));
  EncodeAllocateReply(5,
                      AllocateReply{.allocation_id = 42,
                                    .tier = WireTier::kHost,
                                    .states = {WireWriteState::kExists, WireWriteState::kAllocated,
                                               WireWriteState::kSkipped},
                                    .offsets = {0, 8192, 0}},
                      add("reply_allocate"));
  EncodeAcquireReply(
      10, AcquireReply{.lease_id = 43, .tier = WireTier::kHost, .offsets = {0, 4096, 8192}},
      add("reply_acquire"));
  EncodePutReply(11, PutReply{.states = {WireWriteState::kAllocated, WireWriteState::kExists}},
                 add("reply_put"));
  // wire_fuzzer reads a GET reply's block size from its request id: 8.
  Bytes* get = add("reply_get");
  auto data = EncodeGetReplyPrefix(8, 2, 8, get);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i);
  EncodeCountReply(Opcode::kCommit, 7, CountReply{.count = 3}, add("reply_commit"));
  EncodeCountReply(Opcode::kAbort, 8, CountReply{.count = 0}, add("reply_abort"));
  EncodeCountReply(Opcode::kRelease, 9, CountReply{.count = 0}, add("reply_release"));
  EncodeCountReply(Opcode::kRemove, 4, CountReply{.count = 2}, add("reply_remove"));
  EncodeCountReply(Opcode::kTouch, 14, CountReply{.count = 2}, add("reply_touch"));
  EncodeCountReply(Opcode::kSetRetention, 13, CountReply{.count = 3}, add("reply_set_retention"));
  EncodeHintReply(14, HintReply{.blocks = 3, .prefetching = 1}, add("reply_hint"));
  EncodeStatsReply(12, StatsReply{.entries = {{"version", "0.1.0"}, {"host_used_bytes", "4096"}}},
                   add("reply_stats"));
  EncodeError(Opcode::kAllocate, 5, InvalidArgumentError("too many keys (9 > 8)"),
              add("reply_error"));

  for (const auto& [name, frame] : seeds) {
    if (!Write(dir, name, frame)) {
      std::fprintf(stderr, "make_wire_seeds: cannot write %s/%s\n", dir.c_str(), name.c_str());
      return 1;
    }
  }
  std::printf("make_wire_seeds: %zu frames in %s\n", seeds.size(), dir.c_str());
  return 0;
}

}  // namespace
}  // namespace kvtier::protocol

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_wire_seeds OUT_DIR\n");
    return 2;
  }
  return kvtier::protocol::Run(argv[1]);
}
