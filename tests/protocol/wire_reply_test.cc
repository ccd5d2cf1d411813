#include <gtest/gtest.h>

#include <random>

#include "wire_test_util.h"

namespace kvtier::protocol {
namespace {

using namespace testing;  // NOLINT: test helpers

HelloReply TestHelloReply() {
  HelloReply r;
  r.version = 1;
  r.session_id = 0x1122334455667788ULL;
  r.namespace_id = 3;
  r.block_bytes = 4096;
  r.slot_bytes = 8192;
  r.host_arena_bytes = 1ULL << 33;
  r.device = DeviceKind::kEmulated;
  r.device_arena_bytes = 1ULL << 30;
  r.max_keys = 1024;
  r.max_payload_bytes = 1u << 20;
  for (size_t i = 0; i < r.namespace_secret.size(); ++i) {
    r.namespace_secret[i] = static_cast<std::byte>(i * 3 + 1);
  }
  return r;
}

TEST(WireReply, HelloRoundTrip) {
  for (bool fds : {false, true}) {
    Bytes out;
    const HelloReply in = TestHelloReply();
    EncodeHelloReply(5, in, fds, &out);
    Frame f = Split(out);
    EXPECT_EQ(f.h.opcode, Opcode::kHello);
    EXPECT_EQ(f.h.request_id, 5u);
    EXPECT_EQ(f.h.status, 0);
    EXPECT_EQ(f.h.flags, fds ? kFlagReply | kFlagFds : kFlagReply);
    EXPECT_EQ(f.payload.size(), 155u);
    auto got = DecodeHelloReply(f.payload);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->version, in.version);
    EXPECT_EQ(got->session_id, in.session_id);
    EXPECT_EQ(got->namespace_id, in.namespace_id);
    EXPECT_EQ(got->block_bytes, in.block_bytes);
    EXPECT_EQ(got->slot_bytes, in.slot_bytes);
    EXPECT_EQ(got->host_arena_bytes, in.host_arena_bytes);
    EXPECT_EQ(got->device, in.device);
    EXPECT_EQ(got->device_arena_bytes, in.device_arena_bytes);
    EXPECT_EQ(got->max_keys, in.max_keys);
    EXPECT_EQ(got->max_payload_bytes, in.max_payload_bytes);
    EXPECT_EQ(got->namespace_secret, in.namespace_secret);
    EXPECT_EQ(got->device_ordinal, -1);
  }
  // A CUDA device: its ordinal and IPC handle travel as they are.
  HelloReply in = TestHelloReply();
  in.device = DeviceKind::kCuda;
  in.device_ordinal = 3;
  for (size_t i = 0; i < in.device_ipc_handle.size(); ++i) {
    in.device_ipc_handle[i] = static_cast<std::byte>(255 - i);
  }
  Bytes out;
  EncodeHelloReply(6, in, true, &out);
  auto got = DecodeHelloReply(Split(out).payload);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->device, DeviceKind::kCuda);
  EXPECT_EQ(got->device_ordinal, 3);
  EXPECT_EQ(got->device_ipc_handle, in.device_ipc_handle);
}

TEST(WireReply, HelloRejectsBadFields) {
  HelloReply r = TestHelloReply();
  r.max_keys = kMaxKeys + 1;
  Bytes out;
  EncodeHelloReply(1, r, false, &out);
  EXPECT_FALSE(DecodeHelloReply(Split(out).payload).ok());
  r = TestHelloReply();
  r.device = static_cast<DeviceKind>(7);
  out.clear();
  EncodeHelloReply(1, r, false, &out);
  EXPECT_FALSE(DecodeHelloReply(Split(out).payload).ok());
  r = TestHelloReply();
  r.device = DeviceKind::kCuda;  // without an ordinal
  out.clear();
  EncodeHelloReply(1, r, false, &out);
  EXPECT_FALSE(DecodeHelloReply(Split(out).payload).ok());
}

TEST(WireReply, LookupRoundTrip) {
  LookupReply in{.tiers = {WireTier::kDevice, WireTier::kHost, WireTier::kSsd}};
  Bytes out;
  EncodeLookupReply(2, in, &out);
  Frame f = Split(out);
  EXPECT_EQ(f.h.flags, kFlagReply);
  auto got = DecodeLookupReply(f.payload);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->tiers, in.tiers);
}

TEST(WireReply, AllocateRoundTrip) {
  AllocateReply in{
      .allocation_id = 17,
      .tier = WireTier::kDevice,
      .states = {WireWriteState::kExists, WireWriteState::kAllocated, WireWriteState::kSkipped},
      .offsets = {0, 8192, 0}};
  Bytes out;
  EncodeAllocateReply(3, in, &out);
  auto got = DecodeAllocateReply(Split(out).payload);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->allocation_id, 17u);
  EXPECT_EQ(got->tier, WireTier::kDevice);
  EXPECT_EQ(got->states, in.states);
  EXPECT_EQ(got->offsets, in.offsets);
}

TEST(WireReply, AllocateRejectsBrokenInvariants) {
  // A key after a skipped one that is not skipped.
  AllocateReply in{.allocation_id = 1,
                   .tier = WireTier::kHost,
                   .states = {WireWriteState::kSkipped, WireWriteState::kAllocated},
                   .offsets = {0, 64}};
  Bytes out;
  EncodeAllocateReply(1, in, &out);
  EXPECT_FALSE(DecodeAllocateReply(Split(out).payload).ok());
  // An offset on a key that was not allocated.
  in.states = {WireWriteState::kExists, WireWriteState::kAllocated};
  in.offsets = {64, 128};
  out.clear();
  EncodeAllocateReply(1, in, &out);
  EXPECT_FALSE(DecodeAllocateReply(Split(out).payload).ok());
}

TEST(WireReply, AcquireRoundTrip) {
  AcquireReply in{.lease_id = 99, .tier = WireTier::kHost, .offsets = {0, 4096, 1ULL << 40}};
  Bytes out;
  EncodeAcquireReply(4, in, &out);
  auto got = DecodeAcquireReply(Split(out).payload);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->lease_id, 99u);
  EXPECT_EQ(got->tier, WireTier::kHost);
  EXPECT_EQ(got->offsets, in.offsets);
}

TEST(WireReply, PutRoundTrip) {
  PutReply in{.states = {WireWriteState::kAllocated, WireWriteState::kExists}};
  Bytes out;
  EncodePutReply(5, in, &out);
  auto got = DecodePutReply(Split(out).payload);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->states, in.states);
}

TEST(WireReply, GetPrefixRoundTrip) {
  Bytes out = B({0xee});  // the prefix appends to what is there
  auto data = EncodeGetReplyPrefix(6, 3, 16, &out);
  ASSERT_EQ(data.size(), 48u);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i);
  Bytes frame(out.begin() + 1, out.end());
  Frame f = Split(frame);
  EXPECT_EQ(f.h.payload_bytes, 4u + 48u);
  EXPECT_EQ(f.h.opcode, Opcode::kGet);
  auto got = DecodeGetReply(f.payload, 16);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->hits, 3u);
  ASSERT_EQ(got->data.size(), 48u);
  EXPECT_EQ(got->data[47], std::byte{47});
  EXPECT_FALSE(DecodeGetReply(f.payload, 15).ok());
  EXPECT_FALSE(DecodeGetReply(f.payload, 0).ok());
  EXPECT_FALSE(DecodeGetReply(f.payload, 1ULL << 63).ok());

  Bytes empty;
  EXPECT_TRUE(EncodeGetReplyPrefix(7, 0, 16, &empty).empty());
  auto none = DecodeGetReply(Split(empty).payload, 16);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->hits, 0u);
}

TEST(WireReply, CountRoundTrip) {
  for (Opcode op :
       {Opcode::kRemove, Opcode::kCommit, Opcode::kAbort, Opcode::kRelease, Opcode::kTouch}) {
    Bytes out;
    EncodeCountReply(op, 8, {.count = 12}, &out);
    Frame f = Split(out);
    EXPECT_EQ(f.h.opcode, op);
    auto got = DecodeCountReply(f.payload);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->count, 12u);
  }
}

TEST(WireReply, StatsRoundTrip) {
  StatsReply in{.entries = {{"host.bytes_used", "1048576"}, {"version", "0.1.0"}, {"", ""}}};
  Bytes out;
  EncodeStatsReply(9, in, &out);
  auto got = DecodeStatsReply(Split(out).payload);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->entries, in.entries);
}

TEST(WireReply, ErrorRoundTrip) {
  Bytes out;
  EncodeError(Opcode::kCommit, 10, NotFoundError("no allocation 5"), &out);
  Frame f = Split(out);
  EXPECT_EQ(f.h.opcode, Opcode::kCommit);
  EXPECT_EQ(f.h.request_id, 10u);
  EXPECT_EQ(f.h.status, 1);
  EXPECT_EQ(f.h.flags, kFlagReply);
  EXPECT_EQ(DecodeError(f.h, f.payload), NotFoundError("no allocation 5"));
  EXPECT_EQ(static_cast<int>(StatusCode::kFailedPrecondition), 8);
  EXPECT_EQ(static_cast<int>(StatusCode::kPermissionDenied), 9);
  Bytes denied_frame;
  EncodeError(Opcode::kHello, 11, PermissionDeniedError("uid 5 may not attach"), &denied_frame);
  const Frame denied = Split(denied_frame);
  EXPECT_EQ(denied.h.status, 9);
  EXPECT_EQ(DecodeError(denied.h, denied.payload), PermissionDeniedError("uid 5 may not attach"));

  FrameHeader h = f.h;
  h.status = 200;
  EXPECT_EQ(DecodeError(h, f.payload).code(), StatusCode::kInternal);
  h.status = 0;
  EXPECT_EQ(DecodeError(h, f.payload).code(), StatusCode::kInternal);
}

TEST(WireReply, ErrorMessageCutAt4KiBOnACharacterBoundary) {
  // 4095 ASCII bytes then a 2-byte character straddling the 4 KiB line.
  std::string msg(4095, 'a');
  msg += "\xc3\xa9";
  msg += std::string(100, 'b');
  Bytes out;
  EncodeError(Opcode::kPut, 1, ResourceExhaustedError(msg), &out);
  Frame f = Split(out);
  EXPECT_EQ(f.payload.size(), 4095u);
  EXPECT_EQ(DecodeError(f.h, f.payload).message(), std::string(4095, 'a'));
}

std::vector<Bytes> AllReplies() {
  std::vector<Bytes> frames(9);
  EncodeHelloReply(1, TestHelloReply(), true, &frames[0]);
  EncodeLookupReply(2, {.tiers = {WireTier::kHost, WireTier::kSsd}}, &frames[1]);
  EncodeAllocateReply(3,
                      {.allocation_id = 1,
                       .tier = WireTier::kHost,
                       .states = {WireWriteState::kAllocated, WireWriteState::kSkipped},
                       .offsets = {64, 0}},
                      &frames[2]);
  EncodeAcquireReply(4, {.lease_id = 2, .tier = WireTier::kDevice, .offsets = {0, 8}}, &frames[3]);
  EncodePutReply(5, {.states = {WireWriteState::kExists}}, &frames[4]);
  EncodeGetReplyPrefix(6, 2, 8, &frames[5]);
  EncodeCountReply(Opcode::kRemove, 7, {.count = 3}, &frames[6]);
  EncodeStatsReply(8, {.entries = {{"a", "1"}, {"bb", "22"}}}, &frames[7]);
  EncodeHintReply(9, {.blocks = 5, .prefetching = 2}, &frames[8]);
  return frames;
}

Status DecodeReplyPayload(Opcode op, std::span<const std::byte> p) {
  switch (op) {
    case Opcode::kHello:
      return DecodeHelloReply(p).status();
    case Opcode::kLookup:
      return DecodeLookupReply(p).status();
    case Opcode::kAllocate:
      return DecodeAllocateReply(p).status();
    case Opcode::kAcquire:
      return DecodeAcquireReply(p).status();
    case Opcode::kPut:
      return DecodePutReply(p).status();
    case Opcode::kGet:
      return DecodeGetReply(p, 8).status();
    case Opcode::kStats:
      return DecodeStatsReply(p).status();
    case Opcode::kHint:
      return DecodeHintReply(p).status();
    default:
      return DecodeCountReply(p).status();
  }
}

TEST(WireReply, EveryTruncationAndTrailingByteFailsCleanly) {
  for (const Bytes& frame : AllReplies()) {
    Frame f = Split(frame);
    ASSERT_TRUE(DecodeReplyPayload(f.h.opcode, f.payload).ok()) << OpcodeName(f.h.opcode);
    for (size_t n = 0; n < f.payload.size(); ++n) {
      Status s = DecodeReplyPayload(f.h.opcode, f.payload.first(n));
      ASSERT_FALSE(s.ok()) << OpcodeName(f.h.opcode) << " prefix " << n;
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    }
    Bytes longer(f.payload.begin(), f.payload.end());
    longer.push_back(std::byte{0});
    EXPECT_FALSE(DecodeReplyPayload(f.h.opcode, longer).ok()) << OpcodeName(f.h.opcode);
  }
}

// ---- random input --------------------------------------------------------

TEST(WireFuzz, RandomBytesNeverCrash) {
  std::mt19937_64 rng(20240601);
  const std::vector<Bytes> valid = AllRequests();
  const std::vector<Bytes> replies = AllReplies();
  size_t accepted = 0;
  for (int iter = 0; iter < 100000; ++iter) {
    Bytes b;
    switch (iter % 3) {
      case 0: {  // pure noise, sometimes with a valid magic and version
        b.resize(rng() % 96);
        for (auto& x : b) x = static_cast<std::byte>(rng());
        if (b.size() >= 6 && rng() % 2 == 0) {
          const Bytes h = ValidHeader();
          std::copy(h.begin(), h.begin() + 6, b.begin());
        }
        break;
      }
      default: {  // a valid frame with a few bytes flipped, cut or extended
        b = iter % 3 == 1 ? valid[rng() % valid.size()] : replies[rng() % replies.size()];
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int i = 0; i < flips; ++i) b[rng() % b.size()] = static_cast<std::byte>(rng());
        if (rng() % 4 == 0) b.resize(rng() % (b.size() + 1));
        if (rng() % 8 == 0) b.push_back(static_cast<std::byte>(rng()));
        break;
      }
    }
    auto h = DecodeHeader(b, static_cast<uint32_t>(rng()));
    std::span<const std::byte> payload = b.size() > kHeaderBytes
                                             ? std::span<const std::byte>(b).subspan(kHeaderBytes)
                                             : std::span<const std::byte>();
    FrameHeader fh;
    if (h.ok()) {
      fh = *h;
    } else {
      // Still drive the payload decoders with whatever opcode the bytes suggest.
      fh.opcode = static_cast<Opcode>(1 + rng() % 11);
    }
    fh.payload_bytes = static_cast<uint32_t>(payload.size());
    const uint32_t max_keys = static_cast<uint32_t>(rng() % 8);
    auto req = DecodeRequest(fh, payload, max_keys == 7 ? kMaxKeys : max_keys);
    if (req.ok()) ++accepted;
    DecodeReplyPayload(fh.opcode, payload).IgnoreError();
    DecodeError(fh, payload).IgnoreError();
  }
  EXPECT_GT(accepted, 0u);  // the mutations do reach the accepting paths
}

}  // namespace
}  // namespace kvtier::protocol
