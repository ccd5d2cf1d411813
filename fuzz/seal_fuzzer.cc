// Fuzzes the block seal's parsers (tiers/block_seal.h): the envelope kept
// beside each sealed block (DecodeSeal) and the key ring's text (KeyRing::
// Parse), and opens the input as a sealed block. The input is a seal of
// kSealBytes followed by the block's bytes, and is also read whole as key
// text, and as a remote tier's value (tiers/internal/remote_store.h), sealed
// (header, payload, trailing tag) and in the clear (header, payload).
//
// Beyond "no crash, no sanitizer report": a seal that decodes encodes back
// to the same bytes, and no input ever opens under the target's own key
// (which the fuzzer cannot know): only a block this key sealed opens.
#include <algorithm>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "tiers/block_seal.h"
#include "tiers/internal/remote_store.h"

namespace kvtier::tiers {
namespace {

BlockSealer& Sealer() {
  static BlockSealer* sealer = [] {
    Result<KeyRing> ring = KeyRing::Parse(
        "2:8e2f0c6a1d9b47e3a5c0f1e2d3b4a5968778695a4b3c2d1e0f1a2b3c4d5e6f70 "
        "1:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
    KVTIER_FUZZ_CHECK(ring.ok());
    return new BlockSealer(*ring);  // one per process, never freed
  }();
  return *sealer;
}

void FuzzSeal(const uint8_t* data, size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  Result<KeyRing> ring =
      KeyRing::Parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (ring.ok()) KVTIER_FUZZ_CHECK(ring->Find(ring->current_id()) != nullptr);

  // As a remote value of a block of whatever size is left.
  RemoteNamespace ns;
  ns.layout = Layout{1, 1, 8, DType::kFloat16, 1};
  ns.id = RemoteNamespaceId("fuzz", "", ns.layout);
  ns.fingerprint = NamespaceFingerprint("fuzz", "", ns.layout.ToString());
  const prefix_index::BlockKey key{1, 2};
  using internal::kSealedRemoteHeaderBytes;
  using internal::kSealedRemoteTrailerBytes;
  if (size >= kSealedRemoteHeaderBytes + kSealedRemoteTrailerBytes) {
    std::vector<std::byte> payload(bytes + kSealedRemoteHeaderBytes,
                                   bytes + size - kSealedRemoteTrailerBytes);
    internal::RemoteFault fault = internal::RemoteFault::kNone;
    const Status opened = internal::OpenRemoteValue(
        Sealer(), std::span(bytes, kSealedRemoteHeaderBytes), ns, key, payload,
        std::span(bytes + size - kSealedRemoteTrailerBytes, kSealedRemoteTrailerBytes), 1000, 60,
        &fault);
    KVTIER_FUZZ_CHECK(!opened.ok() && fault != internal::RemoteFault::kNone);
  }
  if (size >= internal::kRemoteHeaderBytes) {
    std::vector<std::byte> out(size - internal::kRemoteHeaderBytes);
    internal::DecodeRemoteValue(std::string_view(reinterpret_cast<const char*>(data), size), ns,
                                key,
                                out)
        .IgnoreError();  // a clear value is not authenticated: only no crash
  }

  Result<Seal> seal = DecodeSeal(std::span(bytes, std::min(size, kSealBytes)));
  if (!seal.ok()) return;
  const auto again = EncodeSeal(*seal);
  KVTIER_FUZZ_CHECK(std::memcmp(again.data(), data, kSealBytes) == 0);
  std::vector<std::byte> block(bytes + kSealBytes, bytes + size);
  SealIdentity id;
  id.ns = NamespaceFingerprint("fuzz", "", "");
  id.bytes = block.size();
  KVTIER_FUZZ_CHECK(!Sealer().Open(id, *seal, block).ok());
}

}  // namespace
}  // namespace kvtier::tiers

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvtier::tiers::FuzzSeal(data, size);
  return 0;
}
