#include <gtest/gtest.h>

#include <random>

#include "wire_test_util.h"

namespace kvtier::protocol {
namespace {

using namespace testing;  // NOLINT: test helpers

TEST(WireHeader, KnownBytes) {
  FrameHeader h;
  h.version = 1;
  h.opcode = Opcode::kAcquire;
  h.request_id = 0x0102030405060708ULL;
  h.payload_bytes = 0x20;
  h.status = 3;
  h.flags = kFlagReply | kFlagFds;
  Bytes out(kHeaderBytes);
  EncodeHeader(h, out);
  const Bytes want = B({0x4b, 0x56, 0x54, 0x31, 0x01, 0x00, 0x06, 0x00,  //
                        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  //
                        0x20, 0x00, 0x00, 0x00, 0x03, 0x00, 0x03, 0x00});
  EXPECT_EQ(out, want);
  auto d = DecodeHeader(want, kMaxPayloadBytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->version, 1);
  EXPECT_EQ(d->opcode, Opcode::kAcquire);
  EXPECT_EQ(d->request_id, 0x0102030405060708ULL);
  EXPECT_EQ(d->payload_bytes, 0x20u);
  EXPECT_EQ(d->status, 3);
  EXPECT_EQ(d->flags, kFlagReply | kFlagFds);
}

TEST(WireHeader, LookupRequestKnownBytes) {
  Bytes out;
  const BlockKey key{.hi = 0xA0A1A2A3A4A5A6A7ULL, .lo = 0x0001020304050607ULL};
  EncodeKeys(Opcode::kLookup, 7, std::span(&key, 1), &out);
  const Bytes want = B({0x4b, 0x56, 0x54, 0x31, 0x01, 0x00, 0x02, 0x00,    // magic, version, op
                        0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,    // request id
                        0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,    // payload, status, flags
                        0x01, 0x00, 0x00, 0x00,                            // 1 key
                        0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x00,    // lo
                        0xa7, 0xa6, 0xa5, 0xa4, 0xa3, 0xa2, 0xa1, 0xa0});  // hi
  EXPECT_EQ(out, want);
  auto req = DecodeAs<KeysRequest>(want);
  ASSERT_EQ(req.keys.size(), 1u);
  EXPECT_EQ(req.keys[0], key);
}

TEST(WireHeader, RejectsBadMagic) {
  Bytes b = ValidHeader();
  b[0] = std::byte{'X'};
  auto h = DecodeHeader(b, kMaxPayloadBytes);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("bad magic"), std::string_view::npos);
}

TEST(WireHeader, RejectsVersionZeroAndAboveMax) {
  for (uint16_t v : {uint16_t{0}, static_cast<uint16_t>(kMaxVersion + 1)}) {
    Bytes b = ValidHeader();
    b[4] = static_cast<std::byte>(v & 0xff);
    b[5] = static_cast<std::byte>(v >> 8);
    auto h = DecodeHeader(b, kMaxPayloadBytes);
    ASSERT_FALSE(h.ok()) << v;
    EXPECT_NE(h.status().message().find("unsupported protocol version " + std::to_string(v)),
              std::string_view::npos)
        << h.status().ToString();
  }
}

TEST(WireHeader, RejectsUnknownOpcode) {
  for (int op : {0, 15, 0xffff}) {
    Bytes b = ValidHeader();
    b[6] = static_cast<std::byte>(op & 0xff);
    b[7] = static_cast<std::byte>(op >> 8);
    auto h = DecodeHeader(b, kMaxPayloadBytes);
    ASSERT_FALSE(h.ok()) << op;
    EXPECT_EQ(h.status().message(), "unknown opcode " + std::to_string(op));
  }
  EXPECT_FALSE(IsKnownOpcode(0));
  EXPECT_TRUE(IsKnownOpcode(11));
  EXPECT_TRUE(IsKnownOpcode(12));  // SET_RETENTION
  EXPECT_TRUE(IsKnownOpcode(13));  // HINT
  EXPECT_TRUE(IsKnownOpcode(14));  // TOUCH
  EXPECT_FALSE(IsKnownOpcode(15));
  EXPECT_EQ(OpcodeName(Opcode::kAllocate), "ALLOCATE");
}

TEST(WireHeader, RejectsPayloadOverCap) {
  Bytes b(kHeaderBytes);
  FrameHeader h;
  h.opcode = Opcode::kPut;
  h.payload_bytes = 300000000;
  EncodeHeader(h, b);
  auto d = DecodeHeader(b, kMaxPayloadBytes);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), "payload of 300000000 bytes exceeds the cap of 268435456");
  // A caller's cap above the hard cap is clamped to it.
  EXPECT_FALSE(DecodeHeader(b, 0xffffffffu).ok());
  // A lower configured cap is honoured; the cap itself is allowed.
  h.payload_bytes = 4096;
  EncodeHeader(h, b);
  EXPECT_FALSE(DecodeHeader(b, 4095).ok());
  EXPECT_TRUE(DecodeHeader(b, 4096).ok());
}

TEST(WireHeader, RejectsShortHeader) {
  const Bytes b = ValidHeader();
  for (size_t n = 0; n < kHeaderBytes; ++n) {
    auto h = DecodeHeader(std::span(b).first(n), kMaxPayloadBytes);
    ASSERT_FALSE(h.ok()) << n;
    EXPECT_EQ(h.status().message(), "short header: " + std::to_string(n) + " of 24 bytes");
  }
  EXPECT_TRUE(DecodeHeader(b, kMaxPayloadBytes).ok());
}

// ---- request round trips -------------------------------------------------

TEST(WireRequest, HelloRoundTrip) {
  Bytes out;
  HelloRequest in = TestHello();
  in.max_version = 3;
  EncodeHello(77, in, &out);
  Frame f = Split(out);
  EXPECT_EQ(f.h.opcode, Opcode::kHello);
  EXPECT_EQ(f.h.request_id, 77u);
  EXPECT_EQ(f.h.version, in.min_version);  // HELLO's header carries the client's minimum
  EXPECT_EQ(f.h.flags, 0);
  auto got = DecodeAs<HelloRequest>(out);
  EXPECT_EQ(got.min_version, 1);
  EXPECT_EQ(got.max_version, 3);
  EXPECT_EQ(got.model, in.model);
  EXPECT_EQ(got.salt, in.salt);
  EXPECT_EQ(got.layout, in.layout);
  EXPECT_EQ(got.client_name, in.client_name);
}

TEST(WireRequest, HelloCarriesQuantizeLowerOnlyWhenAskedFor) {
  HelloRequest in = TestHello();
  Bytes off, on;
  EncodeHello(1, in, &off);
  in.quantize_lower = Quantize::kFp8E5M2;
  EncodeHello(1, in, &on);
  // Off is the field left out: a HELLO exactly as before it existed.
  EXPECT_EQ(on.size(), off.size() + 1);
  EXPECT_EQ(DecodeAs<HelloRequest>(off).quantize_lower, Quantize::kOff);
  EXPECT_EQ(DecodeAs<HelloRequest>(on).quantize_lower, Quantize::kFp8E5M2);
  // An unknown value, an explicit 0, a layout fp8 cannot apply to, or a
  // byte after the field: each refused, named.
  auto refused = [](Bytes frame, std::string_view why) {
    Frame f = Split(frame);
    auto r = DecodeRequest(f.h, f.payload, kMaxKeys);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(why), std::string_view::npos) << r.status().ToString();
  };
  Bytes bad = on;
  bad.back() = std::byte{3};
  refused(bad, "unknown quantize_lower 3");
  bad.back() = std::byte{0};
  refused(bad, "quantize_lower 0 (off)");
  HelloRequest fp32 = in;
  fp32.layout.dtype = DType::kFloat32;
  Bytes wide;
  EncodeHello(1, fp32, &wide);
  refused(wide, "needs an fp16 or bf16 namespace");
  // A byte after it is the layout_kind: 1 (latent) is refused for this
  // layout's 4 KV heads.
  Bytes kind = on;
  kind.push_back(std::byte{1});
  refused(WithPayloadBytes(kind), "an MLA latent layout has kv_heads 1");
}

TEST(WireRequest, HelloCarriesALatentLayoutAsATrailingKind) {
  HelloRequest in = TestHello();
  in.layout.kv_heads = 1;
  in.layout.head_dim = 576;  // DeepSeek-V3: kv_lora_rank 512 + 64 rope dims
  Bytes kv, latent;
  EncodeHello(1, in, &kv);
  in.layout.kind = KvKind::kLatent;
  EncodeHello(1, in, &latent);
  // quantize_lower 0, written because layout_kind 1 follows it.
  ASSERT_EQ(latent.size(), kv.size() + 2);
  EXPECT_EQ(latent[latent.size() - 2], std::byte{0});
  EXPECT_EQ(latent.back(), std::byte{1});
  EXPECT_TRUE(std::equal(kv.begin() + kHeaderBytes, kv.end(), latent.begin() + kHeaderBytes));
  HelloRequest got = DecodeAs<HelloRequest>(latent);
  EXPECT_EQ(got.layout, in.layout);
  EXPECT_EQ(got.layout.kind, KvKind::kLatent);
  EXPECT_EQ(got.quantize_lower, Quantize::kOff);
  EXPECT_EQ(DecodeAs<HelloRequest>(kv).layout.kind, KvKind::kKeyValue);
  EXPECT_NE(got.layout, DecodeAs<HelloRequest>(kv).layout);

  // With quantize on demote: both fields set.
  in.quantize_lower = Quantize::kFp8E4M3;
  Bytes both;
  EncodeHello(1, in, &both);
  ASSERT_EQ(both.size(), latent.size());
  EXPECT_EQ(both[both.size() - 2], std::byte{1});
  got = DecodeAs<HelloRequest>(both);
  EXPECT_EQ(got.layout, in.layout);
  EXPECT_EQ(got.quantize_lower, Quantize::kFp8E4M3);

  auto refused = [](const Bytes& frame, std::string_view why) {
    Frame f = Split(frame);
    auto r = DecodeRequest(f.h, f.payload, kMaxKeys);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(why), std::string_view::npos) << r.status().ToString();
  };
  // kv is sent by leaving layout_kind out: an explicit 0 is refused, as is
  // an unknown kind.
  Bytes bad = latent;
  bad.back() = std::byte{0};
  refused(bad, "layout_kind 0 (kv) is sent by leaving the field out");
  bad.back() = std::byte{2};
  refused(bad, "unknown layout_kind 2");
  // quantize_lower 0 with no layout_kind after it, as before.
  bad.pop_back();
  refused(WithPayloadBytes(bad), "quantize_lower 0 (off)");
  // A byte after layout_kind is trailing.
  bad = latent;
  bad.push_back(std::byte{1});
  refused(WithPayloadBytes(bad), "1 trailing bytes");
  // A latent layout must have one KV head.
  HelloRequest heads = in;
  heads.layout.kv_heads = 2;
  Bytes two;
  EncodeHello(1, heads, &two);
  refused(two, "an MLA latent layout has kv_heads 1");
}

TEST(WireRequest, HelloEmptyAndMaximalStrings) {
  HelloRequest in = TestHello();
  in.model = "";
  in.salt = std::string(kMaxStringBytes, 's');
  in.client_name = "\xc3\xa9t\xc3\xa9";
  Bytes out;
  EncodeHello(1, in, &out);
  auto got = DecodeAs<HelloRequest>(out);
  EXPECT_EQ(got.model, "");
  EXPECT_EQ(got.salt, in.salt);
  EXPECT_EQ(got.client_name, in.client_name);
}

TEST(WireRequest, KeysRoundTrip) {
  for (Opcode op : {Opcode::kLookup, Opcode::kGet, Opcode::kRemove, Opcode::kTouch}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{5}}) {
      Bytes out;
      EncodeKeys(op, 5, Keys(n), &out);
      EXPECT_EQ(out.size(), kHeaderBytes + 4 + 16 * n);
      EXPECT_EQ(Split(out).h.opcode, op);
      EXPECT_EQ(DecodeAs<KeysRequest>(out).keys, Keys(n));
    }
  }
}

// The daemon decodes each connection's requests into one Request: the
// keys of a second LOOKUP replace the first's (fewer or more), another
// request replaces them, and keys come back after it.
TEST(WireRequest, DecodingIntoOneRequestReplacesWhatItHeld) {
  Request req;
  const auto decode = [&](const Bytes& frame) {
    Frame f = Split(frame);
    const Status s = DecodeRequest(f.h, f.payload, kMaxKeys, &req);
    EXPECT_TRUE(s.ok()) << s.ToString();
  };
  Bytes out;
  EncodeKeys(Opcode::kLookup, 1, Keys(5), &out);
  decode(out);
  EXPECT_EQ(std::get<KeysRequest>(req).keys, Keys(5));
  out.clear();
  const std::vector<BlockKey> nine = Keys(9);
  const std::vector<BlockKey> last_two(nine.begin() + 7, nine.end());
  EncodeKeys(Opcode::kTouch, 2, last_two, &out);
  decode(out);
  EXPECT_EQ(std::get<KeysRequest>(req).keys, last_two);
  out.clear();
  EncodeHandle(Opcode::kRelease, 3, 42, &out);
  decode(out);
  EXPECT_EQ(std::get<HandleRequest>(req).id, 42u);
  out.clear();
  EncodeKeys(Opcode::kGet, 4, Keys(3), &out);
  decode(out);
  EXPECT_EQ(std::get<KeysRequest>(req).keys, Keys(3));
  // A frame that does not decode says so, as the Result form does.
  out.clear();
  EncodeKeys(Opcode::kLookup, 5, Keys(3), &out);
  Frame f = Split(out);
  const Status s = DecodeRequest(f.h, f.payload.first(f.payload.size() - 1), kMaxKeys, &req);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("LOOKUP request"), std::string_view::npos) << s.ToString();
}

TEST(WireRequest, AllocateRoundTrip) {
  for (auto parent : {std::optional<BlockKey>(), std::optional<BlockKey>(Key(1000))}) {
    AllocateRequest in{.tier = WireTier::kDevice, .parent = parent, .keys = Keys(4)};
    Bytes out;
    EncodeAllocate(9, in, &out);
    auto got = DecodeAs<AllocateRequest>(out);
    EXPECT_EQ(got.tier, WireTier::kDevice);
    EXPECT_EQ(got.parent, parent);
    EXPECT_EQ(got.keys, in.keys);
  }
}

TEST(WireRequest, HandleRoundTrip) {
  for (Opcode op : {Opcode::kCommit, Opcode::kAbort, Opcode::kRelease}) {
    Bytes out;
    EncodeHandle(op, 3, 0xfedcba9876543210ULL, &out);
    EXPECT_EQ(Split(out).h.opcode, op);
    EXPECT_EQ(DecodeAs<HandleRequest>(out).id, 0xfedcba9876543210ULL);
  }
}

TEST(WireRequest, AcquireRoundTrip) {
  Bytes out;
  EncodeAcquire(4, {.tier = WireTier::kHost, .keys = Keys(2)}, &out);
  auto got = DecodeAs<AcquireRequest>(out);
  EXPECT_EQ(got.tier, WireTier::kHost);
  EXPECT_EQ(got.keys, Keys(2));
}

TEST(WireRequest, PutRoundTripViewsPayload) {
  Bytes data(3 * 64);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i);
  Bytes out;
  EncodePut(6, Key(500), Keys(3), data, &out);
  Frame f = Split(out);
  auto r = DecodeRequest(f.h, f.payload, kMaxKeys);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& got = std::get<PutRequest>(*r);
  EXPECT_EQ(got.parent, Key(500));
  EXPECT_EQ(got.keys, Keys(3));
  ASSERT_EQ(got.data.size(), data.size());
  EXPECT_TRUE(std::equal(got.data.begin(), got.data.end(), data.begin()));
  // A view into the payload, not a copy.
  EXPECT_EQ(got.data.data() + got.data.size(), f.payload.data() + f.payload.size());
}

TEST(WireRequest, SetRetentionRoundTripAndChecks) {
  const RetentionRange ranges[] = {{0, 64, 80, 0}, {64, 100, 10, 30'000}};
  Bytes frame;
  EncodeSetRetention(5, Keys(3), ranges, &frame);
  const auto r = DecodeAs<RetentionRequest>(frame);
  EXPECT_EQ(r.keys, Keys(3));
  ASSERT_EQ(r.ranges.size(), 2u);
  EXPECT_EQ(r.ranges[1].token_begin, 64u);
  EXPECT_EQ(r.ranges[1].token_end, 100u);
  EXPECT_EQ(r.ranges[1].priority, 10);
  EXPECT_EQ(r.ranges[1].duration_ms, 30'000u);
  const RetentionRange too_high[] = {{0, 1, 101, 0}};
  frame.clear();
  EncodeSetRetention(6, Keys(1), too_high, &frame);
  EXPECT_EQ(DecodeStatus(frame).code(), StatusCode::kInvalidArgument);
  const RetentionRange empty[] = {{5, 5, 50, 0}};
  frame.clear();
  EncodeSetRetention(7, Keys(1), empty, &frame);
  EXPECT_EQ(DecodeStatus(frame).code(), StatusCode::kInvalidArgument);
}

TEST(WireRequest, HintRoundTripAndChecks) {
  Bytes frame;
  EncodeHint(5, {.keys = Keys(3), .ttl_ms = 2500, .withdraw = false}, &frame);
  auto r = DecodeAs<HintRequest>(frame);
  EXPECT_EQ(r.keys, Keys(3));
  EXPECT_EQ(r.ttl_ms, 2500u);
  EXPECT_FALSE(r.withdraw);
  frame.clear();
  EncodeHint(6, {.keys = Keys(1), .ttl_ms = 0, .withdraw = true}, &frame);
  r = DecodeAs<HintRequest>(frame);
  EXPECT_TRUE(r.withdraw);
  // The withdraw byte is the frame's last: anything but 0 or 1 is refused.
  frame.back() = std::byte{2};
  const Status s = DecodeStatus(frame);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("withdraw"), std::string::npos) << s.message();

  Bytes reply;
  EncodeHintReply(9, {.blocks = 7, .prefetching = 3}, &reply);
  const auto f = Split(reply);
  EXPECT_EQ(f.h.opcode, Opcode::kHint);
  const auto got = DecodeHintReply(f.payload);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->blocks, 7u);
  EXPECT_EQ(got->prefetching, 3u);
}

TEST(WireRequest, StatsRoundTrip) {
  Bytes out;
  EncodeStats(8, &out);
  EXPECT_EQ(out.size(), kHeaderBytes);
  DecodeAs<StatsRequest>(out);
}

TEST(WireRequest, PipelinedFramesDecodeInOrder) {
  Bytes stream;
  EncodeKeys(Opcode::kLookup, 1, Keys(2), &stream);
  EncodeHandle(Opcode::kCommit, 2, 5, &stream);
  EncodeStats(3, &stream);
  std::span<const std::byte> rest(stream);
  for (uint64_t id = 1; id <= 3; ++id) {
    auto h = DecodeHeader(rest, kMaxPayloadBytes);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->request_id, id);
    ASSERT_TRUE(DecodeRequest(*h, rest.subspan(kHeaderBytes, h->payload_bytes), kMaxKeys).ok());
    rest = rest.subspan(kHeaderBytes + h->payload_bytes);
  }
  EXPECT_TRUE(rest.empty());
}

// ---- request rejects -----------------------------------------------------

TEST(WireRequest, EveryTruncationFailsCleanly) {
  for (const Bytes& frame : AllRequests()) {
    Frame f = Split(frame);
    ASSERT_TRUE(DecodeRequest(f.h, f.payload, kMaxKeys).ok());
    for (size_t n = 0; n < f.payload.size(); ++n) {
      // The header agreeing with the short payload: the decoder must find the hole.
      FrameHeader h = f.h;
      h.payload_bytes = static_cast<uint32_t>(n);
      auto r = DecodeRequest(h, f.payload.first(n), kMaxKeys);
      ASSERT_FALSE(r.ok()) << OpcodeName(f.h.opcode) << " prefix " << n;
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      // The header disagreeing with it.
      EXPECT_FALSE(DecodeRequest(f.h, f.payload.first(n), kMaxKeys).ok());
    }
  }
}

TEST(WireRequest, TrailingGarbageRejected) {
  for (const Bytes& frame : AllRequests()) {
    Frame f = Split(frame);
    FrameHeader h = f.h;
    h.payload_bytes += 1;
    Bytes payload(f.payload.begin(), f.payload.end());
    payload.push_back(std::byte{0});
    auto r = DecodeRequest(h, payload, kMaxKeys);
    ASSERT_FALSE(r.ok()) << OpcodeName(h.opcode);
    if (h.opcode == Opcode::kPut) {
      EXPECT_NE(r.status().message().find("data of"), std::string_view::npos);
    } else if (h.opcode == Opcode::kHello) {  // a byte there is the optional quantize_lower
      EXPECT_NE(r.status().message().find("quantize_lower 0"), std::string_view::npos);
    } else {
      EXPECT_NE(r.status().message().find("1 trailing bytes"), std::string_view::npos)
          << r.status().ToString();
    }
  }
}

TEST(WireRequest, TooManyKeys) {
  Bytes out;
  EncodeKeys(Opcode::kLookup, 1, Keys(5), &out);
  EXPECT_TRUE(DecodeStatus(out, 5).ok());
  Status s = DecodeStatus(out, 4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "LOOKUP request: too many keys (5 > 4)");
  // A count over the cap is refused before the keys are looked for.
  Bytes big;
  EncodeKeys(Opcode::kGet, 1, {}, &big);
  const uint32_t n = kMaxKeys + 1;
  for (size_t i = 0; i < 4; ++i)
    big[kHeaderBytes + i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  EXPECT_EQ(DecodeStatus(big, 0xffffffffu).message(), "GET request: too many keys (65537 > 65536)");
}

TEST(WireRequest, HugeKeyCountWithinCapIsTruncation) {
  Bytes out;
  EncodeAcquire(1, {.tier = WireTier::kHost, .keys = Keys(1)}, &out);
  out[kHeaderBytes + 2] = std::byte{0xff};  // count (after the tier byte): 1 -> 0xff01
  EXPECT_NE(DecodeStatus(out).message().find("truncated: 65281 keys need 1044496 bytes"),
            std::string_view::npos)
      << DecodeStatus(out).ToString();
}

TEST(WireRequest, BadLayoutRejected) {
  HelloRequest in = TestHello();
  in.layout = Layout{};
  in.layout.dtype = DType::kFloat16;
  Bytes out;
  EncodeHello(1, in, &out);
  Status s = DecodeStatus(out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bad layout"), std::string_view::npos) << s.ToString();

  in = TestHello();
  in.layout.dtype = static_cast<DType>(9);
  out.clear();
  EncodeHello(1, in, &out);
  EXPECT_NE(DecodeStatus(out).message().find("unknown dtype 9"), std::string_view::npos);

  in = TestHello();
  in.layout.layers = 1u << 20;  // a block beyond kMaxBlockBytes
  out.clear();
  EncodeHello(1, in, &out);
  EXPECT_FALSE(DecodeStatus(out).ok());
}

TEST(WireRequest, BadVersionRangeRejected) {
  for (auto [lo, hi] : {std::pair{0, 1}, std::pair{2, 1}}) {
    HelloRequest in = TestHello();
    in.min_version = static_cast<uint16_t>(lo);
    in.max_version = static_cast<uint16_t>(hi);
    Bytes out;
    EncodeHello(1, in, &out);
    // min 0 puts version 0 in the header; decode the payload under a good one.
    FrameHeader h;
    h.opcode = Opcode::kHello;
    h.payload_bytes = static_cast<uint32_t>(out.size() - kHeaderBytes);
    auto r = DecodeRequest(h, std::span(out).subspan(kHeaderBytes), kMaxKeys);
    EXPECT_FALSE(r.ok());
  }
}

TEST(WireRequest, OverlongStringsRejected) {
  for (int field = 0; field < 3; ++field) {
    HelloRequest in = TestHello();
    std::string* s = field == 0 ? &in.model : field == 1 ? &in.salt : &in.client_name;
    *s = std::string(kMaxStringBytes + 1, 'x');
    Bytes out;
    EncodeHello(1, in, &out);
    Status st = DecodeStatus(out);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("of 1025 bytes exceeds the limit of 1024"), std::string_view::npos)
        << st.ToString();
  }
  // Longer than a u16 can say: still refused, not silently truncated to fit.
  HelloRequest in = TestHello();
  in.model = std::string(70000, 'm');
  Bytes out;
  EncodeHello(1, in, &out);
  EXPECT_FALSE(DecodeStatus(out).ok());
}

TEST(WireRequest, PutDataSizeMismatch) {
  Bytes out;
  const Bytes data(3 * 10);
  EncodePut(1, std::nullopt, Keys(3), data, &out);
  const size_t block_bytes_at = kHeaderBytes + 1 + 4 + 3 * 16;
  ASSERT_EQ(out[block_bytes_at], std::byte{10});
  for (int bad : {0, 9, 11}) {
    Bytes b = out;
    b[block_bytes_at] = static_cast<std::byte>(bad);
    Status s = DecodeStatus(b);
    EXPECT_EQ(s.message(),
              "PUT request: data of 30 bytes is not 3 blocks of " + std::to_string(bad) + " bytes");
  }
  // A block size whose product with the key count overflows 64 bits.
  Bytes b = out;
  for (size_t i = 0; i < 8; ++i) b[block_bytes_at + i] = std::byte{0xff};
  EXPECT_FALSE(DecodeStatus(b).ok());
  // Data without keys.
  Bytes put;
  EncodePut(1, std::nullopt, {}, {}, &put);
  put.push_back(std::byte{1});  // one data byte for zero keys
  FrameHeader h = Split(Bytes(put.begin(), put.end() - 1)).h;
  h.payload_bytes += 1;
  EXPECT_FALSE(DecodeRequest(h, std::span(put).subspan(kHeaderBytes), kMaxKeys).ok());
}

TEST(WireRequest, BadEnumsAndFlagsRejected) {
  Bytes out;
  EncodeAllocate(1, {.tier = WireTier::kHost, .parent = Key(1), .keys = Keys(1)}, &out);
  Bytes b = out;
  b[kHeaderBytes] = std::byte{3};  // tier
  EXPECT_NE(DecodeStatus(b).message().find("unknown tier 3"), std::string_view::npos);
  b = out;
  b[kHeaderBytes + 1] = std::byte{2};  // parent presence
  EXPECT_NE(DecodeStatus(b).message().find("parent presence byte is 2"), std::string_view::npos);

  Frame f = Split(out);
  FrameHeader h = f.h;
  h.flags = kFlagReply;
  EXPECT_FALSE(DecodeRequest(h, f.payload, kMaxKeys).ok());
  h = f.h;
  h.status = 2;
  EXPECT_FALSE(DecodeRequest(h, f.payload, kMaxKeys).ok());
}

TEST(WireRequest, StatsWithPayloadRejected) {
  FrameHeader h;
  h.opcode = Opcode::kStats;
  h.payload_bytes = 1;
  const Bytes payload = B({0});
  EXPECT_EQ(DecodeRequest(h, payload, kMaxKeys).status().message(),
            "STATS request: 1 trailing bytes after offset 0");
}

// ---- replies -------------------------------------------------------------

}  // namespace
}  // namespace kvtier::protocol
