// Fuzzes the block seal's parsers (tiers/block_seal.h): the envelope kept
// beside each sealed block (DecodeSeal) and the key ring's text (KeyRing::
// Parse), and opens the input as a sealed block. The input is a seal of
// kSealBytes followed by the block's bytes, and is also read whole as key text.
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
