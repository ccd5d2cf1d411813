// EvictionPolicy: which block of a tier goes next, decided from metadata
// alone (DESIGN.md §4). A policy knows no storage, no keys, no sockets.
//
// The engine keeps one policy per tier and tells it what happens to the
// blocks of that tier: Insert when a block enters, Touch on a hit, Update
// when its metadata changes without an access (pinned, children, priority),
// Erase when it leaves. Victim() names the next block to move down; the
// engine moves it and then calls Erase.
//
// Every policy honours the same contract (tests/eviction/policy_contract_test.cc):
// a pinned block is never a victim; Victim() is nullopt only when no tracked
// block is evictable; an erased block is never named again.
//
// Thread-safety: none; a policy is confined to the engine's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/result.h"

namespace kvtier::eviction {

// The engine's dense id of a block; stable while the block is tracked.
using BlockId = uint32_t;

inline constexpr uint8_t kMinPriority = 0;
inline constexpr uint8_t kMaxPriority = 100;
// TensorRT-LLM's default retention priority.
inline constexpr uint8_t kDefaultPriority = 35;
inline constexpr TimeNs kNoExpiry = INT64_MAX;

struct BlockMeta {
  uint64_t size_bytes = 0;
  // Retention priority 0-100: lower goes first. Falls back to
  // kDefaultPriority at priority_expires_at.
  uint8_t priority = kDefaultPriority;
  TimeNs priority_expires_at = kNoExpiry;
  // Leased or being written: never a victim while set.
  bool pinned = false;
  // Children of this block cached in the same tier. A prefix-aware policy
  // keeps blocks with children, since a child without its parent never hits.
  uint32_t children_in_tier = 0;
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  virtual std::string_view name() const = 0;

  // REQUIRES: id not tracked.
  virtual void Insert(BlockId id, const BlockMeta& meta) = 0;
  // The block was accessed. REQUIRES: id tracked.
  virtual void Touch(BlockId id, const BlockMeta& meta) = 0;
  // The block's metadata changed without an access. REQUIRES: id tracked.
  virtual void Update(BlockId id, const BlockMeta& meta) = 0;
  // REQUIRES: id tracked.
  virtual void Erase(BlockId id) = 0;

  // The next block to evict, or nullopt when no tracked block may be
  // evicted. Does not stop tracking it.
  virtual std::optional<BlockId> Victim() = 0;

  // Tracked blocks, pinned or not.
  virtual size_t size() const = 0;
};

// Least recently used: the block whose last Touch (or Insert, or unpin) is
// oldest goes first.
std::unique_ptr<EvictionPolicy> NewLruPolicy();

// The names NewPolicy() accepts.
std::span<const std::string_view> PolicyNames();

// A policy by its configuration name ("lru"). `clock` must outlive it.
Result<std::unique_ptr<EvictionPolicy>> NewPolicy(std::string_view name, const Clock& clock);

}  // namespace kvtier::eviction
