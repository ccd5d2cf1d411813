// AdmissionFilter: whether a block that is not in a tier may take room in
// it when the tier is full, or bypass it. An eviction policy chooses which
// block leaves; a filter chooses whether the newcomer is worth that block at
// all. Belady's OPT wins most of its lead over LRU here: it never lets a
// block that will not come back soon push out one that will (a document
// pasted once, a tool output read once).
//
// The evidence is what lookups ask for (Referenced: every key of a
// request's chain, hit or not, before its blocks are written), as
// fingerprints of keys (BlockMeta::fingerprint), so a filter, like a
// policy, knows no keys, storage or tiers. The engine asks Admit only when
// the tier is full: the room the newcomer wants is the policy's victim's.
//
// Thread-safety: none; confined to the engine's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "common/result.h"

namespace kvtier::eviction {

class AdmissionFilter {
 public:
  virtual ~AdmissionFilter() = default;

  virtual std::string_view name() const = 0;

  // The fingerprints of one lookup's chain, first first.
  virtual void Referenced(std::span<const uint64_t> chain) = 0;

  // The tier has held up to `blocks` blocks: what the filter remembers is
  // sized to it (called as that number grows). `one_in`: Referenced is
  // given only one key in that many, a sample by a hash of the key (an
  // adaptive policy's miniature caches): the filter remembers as long, in
  // references, as one given every key, in that many times less room.
  virtual void SetCapacity(size_t blocks, size_t one_in = 1) = 0;

  // Whether `candidate`, not in the full tier, may take the room of
  // `victim`, the block the tier's policy would evict for it.
  virtual bool Admit(uint64_t candidate, uint64_t victim) = 0;
};

// The names NewAdmissionFilter() accepts: "off" (every block admitted, no
// filter), "seen" (a block is admitted to a full tier only if its key was
// looked up before the request that writes it: on its second sighting, as
// peers' disk tiers do), "tinylfu" (admitted only if its key was looked up
// more often lately than the victim's).
std::span<const std::string_view> AdmissionNames();

// nullptr for "off"; InvalidArgument naming the choices for an unknown name.
Result<std::unique_ptr<AdmissionFilter>> NewAdmissionFilter(std::string_view name);

}  // namespace kvtier::eviction
