// LFU with exponential aging. Each access adds a weight of 2^(t/half_life)
// to its block's score instead of decaying every count as time passes: at
// any moment every decayed count is its score times the same factor
// 2^(-now/half_life), so ordering by score is ordering by decayed count, and
// a score changes only when its own block is accessed. That makes the order
// a static key for a heap: O(log n) per access and no aging pass. (This is
// LRFU's CRF with a half-life.) Frequency buckets would give O(1) only for
// integer counts and need an O(n) halving sweep to age them.
//
// The weights grow without bound, so once the exponent passes kRescaleAt
// half-lives every score is scaled by the same power of two (exact in
// floating point) and the epoch moves: O(n), once per kRescaleAt
// half-lives. Scores too old to survive the scaling become 0; those blocks
// then go least recently used first, which is what their ~0 counts deserve.
#include <cassert>
#include <cmath>
#include <vector>

#include "common/page_allocator.h"
#include "eviction/eviction_policy.h"
#include "eviction/internal/indexed_heap.h"

namespace kvtier::eviction {
namespace {

// Half-lives between rescales; 2^256 leaves ample headroom below DBL_MAX
// for sums of many accesses.
constexpr double kRescaleAt = 256.0;

class LfuPolicy final : public EvictionPolicy {
 public:
  LfuPolicy(const Clock& clock, LfuOptions options)
      : clock_(clock), half_life_(options.half_life), epoch_(clock.Now()), weight_at_(epoch_) {
    assert(half_life_ > 0);
  }

  std::string_view name() const override { return "lfu"; }

  void Insert(BlockId id, const BlockMeta& meta) override {
    if (id >= nodes_.size()) nodes_.resize(static_cast<size_t>(id) + 1);
    const double w = Weight();  // may rescale: before touching the node
    Node& n = nodes_[id];
    assert(!n.tracked);
    n.tracked = true;
    n.score = w;
    n.seq = ++seq_;
    ++size_;
    if (!meta.pinned) heap_.Push(id, KeyOf(n));
  }

  void Touch(BlockId id, const BlockMeta& meta) override {
    assert(Tracked(id));
    const double w = Weight();
    Node& n = nodes_[id];
    n.score += w;
    n.seq = ++seq_;
    if (meta.pinned) {
      if (heap_.Contains(id)) heap_.Remove(id);
    } else if (heap_.Contains(id)) {
      heap_.Update(id, KeyOf(n));
    } else {
      heap_.Push(id, KeyOf(n));
    }
  }

  void Update(BlockId id, const BlockMeta& meta) override {
    assert(Tracked(id));
    const bool held = heap_.Contains(id);
    if (meta.pinned && held) {
      heap_.Remove(id);
    } else if (!meta.pinned && !held) {
      // As in LRU, a pin is a use for recency (the tie-break), though it
      // adds nothing to the count.
      nodes_[id].seq = ++seq_;
      heap_.Push(id, KeyOf(nodes_[id]));
    }
  }

  void Erase(BlockId id) override {
    assert(Tracked(id));
    if (heap_.Contains(id)) heap_.Remove(id);
    nodes_[id].tracked = false;
    --size_;
  }

  std::optional<BlockId> Victim() override {
    if (heap_.empty()) return std::nullopt;
    return heap_.Top();
  }

  size_t size() const override { return size_; }

 private:
  struct Node {
    double score = 0;  // sum of 2^((t - epoch_) / half_life_) over accesses
    uint64_t seq = 0;  // last access (or unpin), for the LRU tie-break
    bool tracked = false;
  };

  // Lower decayed count first, then least recently used.
  struct Key {
    double score;
    uint64_t seq;
    bool operator<(const Key& o) const {
      return score < o.score || (score == o.score && seq < o.seq);
    }
  };

  static Key KeyOf(const Node& n) { return {n.score, n.seq}; }

  bool Tracked(BlockId id) const { return id < nodes_.size() && nodes_[id].tracked; }

  // The weight of an access now; one exp2 per distinct clock reading.
  double Weight() {
    const TimeNs now = clock_.Now();
    if (now != weight_at_) {
      double exponent = static_cast<double>(now - epoch_) / static_cast<double>(half_life_);
      if (exponent >= kRescaleAt) exponent = Rescale(exponent);
      weight_ = std::exp2(exponent);
      weight_at_ = now;
    }
    return weight_;
  }

  // Moves the epoch forward by whole half-lives, scaling every score alike;
  // returns the exponent relative to the new epoch.
  double Rescale(double exponent) {
    const double shift = std::floor(exponent);
    const int k = static_cast<int>(shift);
    for (Node& n : nodes_) {
      if (n.tracked) n.score = std::ldexp(n.score, -k);
    }
    // The same scaling on the heap's copies; scores that reached 0 may now
    // tie differently, so the heap is rebuilt.
    heap_.RewriteKeys([k](Key& key) { key.score = std::ldexp(key.score, -k); });
    epoch_ += static_cast<TimeNs>(shift) * half_life_;
    return exponent - shift;
  }

  const Clock& clock_;
  const TimeNs half_life_;
  TimeNs epoch_;
  TimeNs weight_at_;
  double weight_ = 1.0;  // 2^((weight_at_ - epoch_) / half_life_)
  uint64_t seq_ = 0;
  PageVector<Node> nodes_;
  internal::IndexedHeap<Key> heap_;  // unpinned tracked blocks
  size_t size_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewLfuPolicy(const Clock& clock, LfuOptions options) {
  return std::make_unique<LfuPolicy>(clock, options);
}

}  // namespace kvtier::eviction
