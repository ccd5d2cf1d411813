// Redis Cluster routing, without I/O: which of the 16,384 hash slots a key
// falls in (CRC16 of the key, or of its {hash tag}), which node serves a
// slot (the map CLUSTER SLOTS returns, amended by MOVED redirections), and
// what a MOVED or ASK error says. The remote tier's connections use it; it
// holds no sockets, so that what decides where a block goes is tested on
// its own (hiredis has no cluster support).
//
// Thread-safety: none; each user owns its SlotMap.
#ifndef KVTIER_TIERS_INTERNAL_CLUSTER_SLOTS_H_
#define KVTIER_TIERS_INTERNAL_CLUSTER_SLOTS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/status.h"

namespace kvtier::tiers::internal {

inline constexpr uint16_t kClusterSlots = 16384;

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), as Redis Cluster
// hashes keys. Crc16("123456789") == 0x31c3.
uint16_t Crc16(std::string_view bytes);

// The key's hash slot: CRC16 mod 16384 of the whole key or, when it holds a
// non-empty {tag} (the first '{' and the first '}' after it), of the tag
// alone, so that keys sharing a tag share a slot.
uint16_t KeySlot(std::string_view key);

// A node's address as the cluster names it.
struct Endpoint {
  std::string host;
  uint16_t port = 0;
  bool operator==(const Endpoint&) const = default;
  std::string ToString() const;  // "host:port", "[v6]:port"
};

// "host:port", "[v6addr]:port" or "v6addr:port" (the last colon separates
// the port). InvalidArgument for anything else.
Result<Endpoint> ParseEndpoint(std::string_view text);

// A redirection a node answered instead of serving a key.
struct Redirect {
  enum class Kind { kMoved, kAsk };
  Kind kind = Kind::kMoved;
  uint16_t slot = 0;
  Endpoint to;
};

// "MOVED <slot> <host:port>" or "ASK <slot> <host:port>" (Redis 7 may leave
// the host empty, ":port", meaning the node that answered: `from`). nullopt
// for any other error text, or one whose slot or address does not parse.
std::optional<Redirect> ParseRedirect(std::string_view error, const Endpoint& from);

// One range of slots as CLUSTER SLOTS lists it: its master first.
struct SlotRange {
  uint16_t first = 0;
  uint16_t last = 0;  // inclusive
  Endpoint master;
  std::vector<Endpoint> replicas;
};

// Which node serves each slot. Nodes are numbered in the order they first
// appear; a slot no range covers has none (the cluster is not fully
// covered: its keys are misses until a refresh).
class SlotMap {
 public:
  static constexpr uint32_t kNoNode = 0xffff'ffffu;

  // Replaces the whole map. InvalidArgument when a range is out of order
  // (first > last) or beyond the last slot; overlapping ranges: the later
  // one wins, as the cluster's own answer never overlaps.
  Status Reset(std::span<const SlotRange> ranges);

  // The node serving `slot`, or kNoNode.
  uint32_t NodeOf(uint16_t slot) const { return owner_[slot]; }
  const Endpoint& node(uint32_t id) const { return nodes_[id]; }
  size_t nodes() const { return nodes_.size(); }

  // A MOVED redirection: `slot` now belongs to `to` (a node not seen before
  // is added). Returns its node id. ASK is not for the map: it sends one
  // request to the node named, preceded by ASKING.
  uint32_t Move(uint16_t slot, const Endpoint& to);

  // Slots served by some node.
  size_t covered() const { return covered_; }

 private:
  uint32_t IdOf(const Endpoint& e);

  std::vector<Endpoint> nodes_;
  std::array<uint32_t, kClusterSlots> owner_ = MakeEmpty();
  size_t covered_ = 0;

  static std::array<uint32_t, kClusterSlots> MakeEmpty() {
    std::array<uint32_t, kClusterSlots> a;
    a.fill(kNoNode);
    return a;
  }
};

}  // namespace kvtier::tiers::internal

#endif  // KVTIER_TIERS_INTERNAL_CLUSTER_SLOTS_H_
