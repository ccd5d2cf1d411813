// Helpers shared by the wire tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "protocol/wire.h"

namespace kvtier::protocol::testing {

using Bytes = std::vector<std::byte>;

inline Bytes B(std::initializer_list<int> v) {
  Bytes out;
  for (int x : v) out.push_back(static_cast<std::byte>(x));
  return out;
}

inline Layout TestLayout() {
  Layout l;
  l.layers = 2;
  l.kv_heads = 4;
  l.head_dim = 8;
  l.dtype = DType::kBFloat16;
  l.block_tokens = 16;
  return l;
}

inline BlockKey Key(uint64_t i) {
  return BlockKey{.hi = 0xA000000000000000ULL | i, .lo = i * 7 + 1};
}

inline std::vector<BlockKey> Keys(size_t n) {
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(Key(i));
  return keys;
}

// A whole frame split into its decoded header and its payload.
struct Frame {
  FrameHeader h;
  std::span<const std::byte> payload;
};

// `frame` with its header's payload_bytes set to what follows the header
// (after a test appended or removed payload bytes).
inline Bytes WithPayloadBytes(Bytes frame) {
  FrameHeader h = DecodeHeader(std::span(frame).first(kHeaderBytes), kMaxPayloadBytes).value();
  h.payload_bytes = static_cast<uint32_t>(frame.size() - kHeaderBytes);
  EncodeHeader(h, std::span(frame).first(kHeaderBytes));
  return frame;
}

inline Frame Split(const Bytes& frame) {
  auto h = DecodeHeader(frame, kMaxPayloadBytes);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(frame.size(), kHeaderBytes + h->payload_bytes);
  return {*h, std::span<const std::byte>(frame).subspan(kHeaderBytes)};
}

template <typename T>
T DecodeAs(const Bytes& frame, uint32_t max_keys = kMaxKeys) {
  Frame f = Split(frame);
  auto r = DecodeRequest(f.h, f.payload, max_keys);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(std::holds_alternative<T>(*r));
  return std::get<T>(*r);
}

inline Status DecodeStatus(const Bytes& frame, uint32_t max_keys = kMaxKeys) {
  Frame f = Split(frame);
  return DecodeRequest(f.h, f.payload, max_keys).status();
}

inline HelloRequest TestHello() {
  HelloRequest r;
  r.min_version = 1;
  r.max_version = 1;
  r.model = "llama-3-8b";
  r.salt = "tenant-a";
  r.layout = TestLayout();
  r.client_name = "worker-0";
  return r;
}

// One valid frame of every request kind, for the truncation and fuzz tests.
inline std::vector<Bytes> AllRequests() {
  std::vector<Bytes> frames(16);
  EncodeHello(1, TestHello(), &frames[0]);
  EncodeKeys(Opcode::kLookup, 2, Keys(3), &frames[1]);
  EncodeKeys(Opcode::kGet, 3, Keys(2), &frames[2]);
  EncodeKeys(Opcode::kRemove, 4, Keys(1), &frames[3]);
  EncodeAllocate(5, {.tier = WireTier::kDevice, .parent = Key(99), .keys = Keys(3)}, &frames[4]);
  EncodeAllocate(6, {.tier = WireTier::kHost, .parent = std::nullopt, .keys = Keys(2)}, &frames[5]);
  EncodeHandle(Opcode::kCommit, 7, 42, &frames[6]);
  EncodeHandle(Opcode::kAbort, 8, 43, &frames[7]);
  EncodeHandle(Opcode::kRelease, 9, 44, &frames[8]);
  EncodeAcquire(10, {.tier = WireTier::kHost, .keys = Keys(4)}, &frames[9]);
  const Bytes data(3 * 10, std::byte{0x5a});
  EncodePut(11, Key(98), Keys(3), data, &frames[10]);
  EncodePut(12, std::nullopt, {}, {}, &frames[11]);
  EncodeStats(13, &frames[12]);
  const RetentionRange ranges[] = {{0, 64, 80, 0}, {64, 100, 10, 30'000}};
  EncodeSetRetention(14, Keys(3), ranges, &frames[13]);
  EncodeHint(15, {.keys = Keys(3), .ttl_ms = 5000, .withdraw = false}, &frames[14]);
  EncodeHint(16, {.keys = Keys(1), .ttl_ms = 0, .withdraw = true}, &frames[15]);
  return frames;
}

// ---- header ------------------------------------------------------------

inline Bytes ValidHeader() {
  Bytes out(kHeaderBytes);
  FrameHeader h;
  h.opcode = Opcode::kStats;
  EncodeHeader(h, out);
  return out;
}

}  // namespace kvtier::protocol::testing
