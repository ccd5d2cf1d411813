// Fuzzes every decoder of protocol/wire.h that reads a peer's bytes.
//
// The input is one frame: a 24-byte header and its payload (bytes past the
// header's payload_bytes are ignored; fewer are passed as a truncated
// payload). A request frame goes to DecodeRequest; a reply (kFlagReply) to
// the reply decoder of its opcode, or DecodeError when its status is not 0.
// GET replies take their block size from the request id, so the fuzzer
// controls both.
//
// Beyond "no crash, no sanitizer report", every message that decodes must
// survive a round trip: encoding it gives a frame that decodes again, and
// encoding that gives the same bytes.
#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz_util.h"
#include "protocol/wire.h"

namespace kvtier::protocol {
namespace {

using Bytes = std::vector<std::byte>;

Bytes EncodeRequest(Opcode op, uint64_t id, const Request& req) {
  Bytes out;
  switch (op) {
    case Opcode::kHello:
      EncodeHello(id, std::get<HelloRequest>(req), &out);
      break;
    case Opcode::kLookup:
    case Opcode::kGet:
    case Opcode::kRemove:
    case Opcode::kTouch:
      EncodeKeys(op, id, std::get<KeysRequest>(req).keys, &out);
      break;
    case Opcode::kAllocate:
      EncodeAllocate(id, std::get<AllocateRequest>(req), &out);
      break;
    case Opcode::kCommit:
    case Opcode::kAbort:
    case Opcode::kRelease:
      EncodeHandle(op, id, std::get<HandleRequest>(req).id, &out);
      break;
    case Opcode::kAcquire:
      EncodeAcquire(id, std::get<AcquireRequest>(req), &out);
      break;
    case Opcode::kPut: {
      const auto& put = std::get<PutRequest>(req);
      EncodePut(id, put.parent, put.keys, put.data, &out);
      break;
    }
    case Opcode::kStats:
      EncodeStats(id, &out);
      break;
    case Opcode::kSetRetention: {
      const auto& ret = std::get<RetentionRequest>(req);
      EncodeSetRetention(id, ret.keys, ret.ranges, &out);
      break;
    }
    case Opcode::kHint:
      EncodeHint(id, std::get<HintRequest>(req), &out);
      break;
  }
  return out;
}

struct Frame {
  FrameHeader h;
  std::span<const std::byte> payload;
};

Frame SplitWhole(const Bytes& frame) {
  auto h = DecodeHeader(frame, kMaxPayloadBytes);
  KVTIER_FUZZ_CHECK(h.ok());
  KVTIER_FUZZ_CHECK(frame.size() == kHeaderBytes + h->payload_bytes);
  return {*h, std::span<const std::byte>(frame).subspan(kHeaderBytes)};
}

void FuzzRequest(const Frame& f) {
  // A small key cap exercises the "too many keys" paths too.
  DecodeRequest(f.h, f.payload, 1).status().IgnoreError();
  auto req = DecodeRequest(f.h, f.payload, kMaxKeys);
  if (!req.ok()) return;

  const Bytes first = EncodeRequest(f.h.opcode, f.h.request_id, *req);
  // HELLO's header carries the client's lowest version; a body claiming
  // only versions this side does not speak re-encodes into a header that
  // DecodeHeader refuses, as it should.
  if (const auto* hello = std::get_if<HelloRequest>(&*req);
      hello != nullptr && hello->min_version > kMaxVersion) {
    return;
  }
  const Frame again = SplitWhole(first);
  KVTIER_FUZZ_CHECK(again.h.opcode == f.h.opcode && again.h.request_id == f.h.request_id);
  auto req2 = DecodeRequest(again.h, again.payload, kMaxKeys);
  KVTIER_FUZZ_CHECK(req2.ok());
  KVTIER_FUZZ_CHECK(req2->index() == req->index());
  KVTIER_FUZZ_CHECK(EncodeRequest(again.h.opcode, again.h.request_id, *req2) == first);
}

// Decodes a reply payload with `decode`, then checks the round trip through
// `encode(message, out)` and a second decode.
template <typename Decode, typename Encode>
void RoundTripReply(const Frame& f, Decode decode, Encode encode) {
  auto m = decode(f.payload);
  if (!m.ok()) return;
  Bytes first;
  encode(*m, &first);
  const Frame again = SplitWhole(first);
  KVTIER_FUZZ_CHECK(again.h.opcode == f.h.opcode && (again.h.flags & kFlagReply) != 0);
  auto m2 = decode(again.payload);
  KVTIER_FUZZ_CHECK(m2.ok());
  Bytes second;
  encode(*m2, &second);
  KVTIER_FUZZ_CHECK(second == first);
}

void FuzzReply(const Frame& f) {
  const uint64_t id = f.h.request_id;
  if (f.h.status != 0) {
    const Status s = DecodeError(f.h, f.payload);
    KVTIER_FUZZ_CHECK(!s.ok());
    Bytes out;
    EncodeError(f.h.opcode, id, s, &out);
    const Frame again = SplitWhole(out);
    KVTIER_FUZZ_CHECK(DecodeError(again.h, again.payload).code() == s.code());
    return;
  }
  switch (f.h.opcode) {
    case Opcode::kHello:
      RoundTripReply(f, DecodeHelloReply,
                     [id](const HelloReply& m, Bytes* out) { EncodeHelloReply(id, m, true, out); });
      break;
    case Opcode::kLookup:
      RoundTripReply(f, DecodeLookupReply,
                     [id](const LookupReply& m, Bytes* out) { EncodeLookupReply(id, m, out); });
      break;
    case Opcode::kAllocate:
      RoundTripReply(f, DecodeAllocateReply,
                     [id](const AllocateReply& m, Bytes* out) { EncodeAllocateReply(id, m, out); });
      break;
    case Opcode::kAcquire:
      RoundTripReply(f, DecodeAcquireReply,
                     [id](const AcquireReply& m, Bytes* out) { EncodeAcquireReply(id, m, out); });
      break;
    case Opcode::kPut:
      RoundTripReply(f, DecodePutReply,
                     [id](const PutReply& m, Bytes* out) { EncodePutReply(id, m, out); });
      break;
    case Opcode::kGet: {
      // The block size comes from the request id (see the top of the file).
      const uint64_t block_bytes = id;
      auto decode = [block_bytes](std::span<const std::byte> p) {
        return DecodeGetReply(p, block_bytes);
      };
      RoundTripReply(f, decode, [id, block_bytes](const GetReply& m, Bytes* out) {
        auto data = EncodeGetReplyPrefix(id, m.hits, block_bytes, out);
        KVTIER_FUZZ_CHECK(data.size() == m.data.size());
        if (!data.empty()) std::memcpy(data.data(), m.data.data(), data.size());
      });
      // The reusing variant, into a reply that already holds bytes.
      GetReply reused;
      reused.data.resize(64, std::byte{0x5a});
      DecodeGetReplyInto(f.payload, block_bytes, &reused).IgnoreError();
      break;
    }
    case Opcode::kCommit:
    case Opcode::kAbort:
    case Opcode::kRelease:
    case Opcode::kRemove:
    case Opcode::kSetRetention:
    case Opcode::kTouch: {
      const Opcode op = f.h.opcode;
      RoundTripReply(f, DecodeCountReply, [op, id](const CountReply& m, Bytes* out) {
        EncodeCountReply(op, id, m, out);
      });
      break;
    }
    case Opcode::kStats:
      RoundTripReply(f, DecodeStatsReply,
                     [id](const StatsReply& m, Bytes* out) { EncodeStatsReply(id, m, out); });
      break;
    case Opcode::kHint:
      RoundTripReply(f, DecodeHintReply,
                     [id](const HintReply& m, Bytes* out) { EncodeHintReply(id, m, out); });
      break;
  }
}

void FuzzFrame(std::span<const std::byte> in) {
  // A daemon may configure a lower cap than the hard one; try a small one too.
  DecodeHeader(in, 64).status().IgnoreError();
  auto h = DecodeHeader(in, kMaxPayloadBytes);
  if (!h.ok()) return;
  const auto rest = in.subspan(kHeaderBytes);
  const Frame f{*h, rest.first(std::min<size_t>(rest.size(), h->payload_bytes))};
  if ((h->flags & kFlagReply) != 0) {
    FuzzReply(f);
  } else {
    FuzzRequest(f);
  }
}

}  // namespace
}  // namespace kvtier::protocol

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvtier::protocol::FuzzFrame(std::as_bytes(std::span(data, size)));
  return 0;
}
