// Priority retention, TensorRT-LLM's semantics: one LRU list per priority
// level (101 of them) over a node array indexed by BlockId, and a 128-bit
// mask of the non-empty levels, so the victim is the front of the lowest
// set bit's list: O(1).
//
// A priority with an expiry counts as kDefaultPriority once the clock
// reaches it. Expiry is applied lazily: unpinned blocks whose level still
// waits for an expiry sit in a min-heap by expiry time, and Victim() first
// moves every block whose time has come to the default level (O(log n)
// each, once per block). Like TensorRT-LLM's refresh(), the moved block
// joins the default level at its most recent end. Insert, Touch and Update
// read the clock too, so a block whose priority already expired never
// enters the heap.
//
// LRU within a level: Insert, Touch and an unpin put a block at the level's
// most recent end; an Update that changes the level moves it to the new
// level's most recent end, one that does not leaves it in place. Pinned
// blocks leave their list (and the heap) until unpinned.
#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <vector>

#include "common/page_allocator.h"
#include "eviction/eviction_policy.h"
#include "eviction/internal/id_list.h"
#include "eviction/internal/indexed_heap.h"

namespace kvtier::eviction {
namespace {

using internal::IdList;
using internal::kNil;

constexpr size_t kLevels = static_cast<size_t>(kMaxPriority) + 1;

class PriorityPolicy final : public EvictionPolicy {
 public:
  explicit PriorityPolicy(const Clock& clock) : clock_(clock) {}

  std::string_view name() const override { return "priority"; }

  void Insert(BlockId id, const BlockMeta& meta) override {
    if (id >= nodes_.size()) nodes_.resize(static_cast<size_t>(id) + 1);
    Node& n = nodes_[id];
    assert(!n.tracked);
    n.tracked = true;
    n.linked = false;
    SetLevel(n, meta);
    ++size_;
    if (!meta.pinned) Link(id);
  }

  void Touch(BlockId id, const BlockMeta& meta) override {
    assert(Tracked(id));
    Node& n = nodes_[id];
    if (n.linked) Unlink(id);
    SetLevel(n, meta);
    if (!meta.pinned) Link(id);
  }

  void Update(BlockId id, const BlockMeta& meta) override {
    assert(Tracked(id));
    Node& n = nodes_[id];
    const Level now = LevelOf(meta);
    if (meta.pinned || !n.linked || now.level != n.level) {
      if (n.linked) Unlink(id);
      n.level = now.level;
      n.expires_at = now.expires_at;
      if (!meta.pinned) Link(id);  // an unpin is a use
      return;
    }
    // Same level, still a candidate: it keeps its place; only the expiry
    // may have moved.
    if (now.expires_at == n.expires_at) return;
    n.expires_at = now.expires_at;
    const bool held = expiring_.Contains(id);
    if (n.expires_at == kNoExpiry) {
      if (held) expiring_.Remove(id);
    } else if (held) {
      expiring_.Update(id, n.expires_at);
    } else {
      expiring_.Push(id, n.expires_at);
    }
  }

  void Erase(BlockId id) override {
    assert(Tracked(id));
    if (nodes_[id].linked) Unlink(id);
    nodes_[id].tracked = false;
    --size_;
  }

  std::optional<BlockId> Victim() override {
    ExpireDue(clock_.Now());
    const size_t level = LowestLevel();
    if (level == kLevels) return std::nullopt;
    return levels_[level].front();
  }

  size_t size() const override { return size_; }

 private:
  struct Node {
    BlockId prev = kNil;
    BlockId next = kNil;
    // When level falls back to kDefaultPriority; kNoExpiry when it never
    // will (already default, or no expiry).
    TimeNs expires_at = kNoExpiry;
    uint8_t level = kDefaultPriority;  // effective priority
    bool tracked = false;
    bool linked = false;  // on levels_[level] (tracked, unpinned)
  };

  bool Tracked(BlockId id) const { return id < nodes_.size() && nodes_[id].tracked; }

  struct Level {
    uint8_t level;
    TimeNs expires_at;  // when level falls back to the default
  };

  // The effective level of `meta` now, and when it will change.
  Level LevelOf(const BlockMeta& meta) const {
    // Out-of-range priorities clamp, so no level index can overflow.
    const uint8_t priority = std::min(meta.priority, kMaxPriority);
    if (priority == kDefaultPriority || meta.priority_expires_at <= clock_.Now()) {
      return {kDefaultPriority, kNoExpiry};
    }
    return {priority, meta.priority_expires_at};
  }

  void SetLevel(Node& n, const BlockMeta& meta) const {
    const Level l = LevelOf(meta);
    n.level = l.level;
    n.expires_at = l.expires_at;
  }

  void Link(BlockId id) {
    Node& n = nodes_[id];
    levels_[n.level].PushBack(nodes_, id);
    nonempty_[n.level / 64] |= uint64_t{1} << (n.level % 64);
    if (n.expires_at != kNoExpiry) expiring_.Push(id, n.expires_at);
    n.linked = true;
  }

  void Unlink(BlockId id) {
    Node& n = nodes_[id];
    IdList& list = levels_[n.level];
    list.Remove(nodes_, id);
    if (list.empty()) nonempty_[n.level / 64] &= ~(uint64_t{1} << (n.level % 64));
    if (expiring_.Contains(id)) expiring_.Remove(id);
    n.linked = false;
  }

  void ExpireDue(TimeNs now) {
    while (!expiring_.empty() && expiring_.TopKey() <= now) {
      const BlockId id = expiring_.Top();
      Unlink(id);
      nodes_[id].level = kDefaultPriority;
      nodes_[id].expires_at = kNoExpiry;
      Link(id);
    }
  }

  // The lowest non-empty level, or kLevels when all are empty.
  size_t LowestLevel() const {
    if (nonempty_[0] != 0) return static_cast<size_t>(std::countr_zero(nonempty_[0]));
    if (nonempty_[1] != 0) return 64 + static_cast<size_t>(std::countr_zero(nonempty_[1]));
    return kLevels;
  }

  const Clock& clock_;
  PageVector<Node> nodes_;
  std::array<IdList, kLevels> levels_;
  std::array<uint64_t, 2> nonempty_ = {0, 0};  // bit l: levels_[l] not empty
  // Linked blocks whose level falls back to the default, by expiry time.
  internal::IndexedHeap<TimeNs> expiring_;
  size_t size_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewPriorityPolicy(const Clock& clock) {
  return std::make_unique<PriorityPolicy>(clock);
}

}  // namespace kvtier::eviction
