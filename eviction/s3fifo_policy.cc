// S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction",
// SOSP'23). Three FIFOs threaded through one node array indexed by BlockId
// (a node is on at most one of them):
// - small: where new blocks start. Its oldest block leaves for main if it
//   was touched while there, else it is evicted and its id becomes a ghost.
//   One-hit wonders thus leave after a short stay, before anything in main.
// - main: a 2-bit CLOCK. Its oldest block goes back to the new end with one
//   frequency unit less while it has any, else it is evicted.
// - ghost: ids evicted from small, metadata only, as many as ghost_fraction
//   of the tracked blocks. A block inserted while it is a ghost enters main.
// Eviction reads small while it holds at least small_fraction of the
// unpinned blocks (or main is empty), else main.
//
// The engine evicts in two steps, Victim() then Erase(), so Victim() does
// the promotions and reinsertions that precede the eviction and names the
// block; Erase() of that block then makes it a ghost when it came from
// small. Erasing any other block (a delete, not an eviction) leaves no
// ghost. Calling Victim() again without an Erase names the same block.
//
// Ids are reused by the engine, so a ghost also keeps the block's
// fingerprint and a reinsertion is a ghost hit only when both match; with
// fingerprint 0 (unknown) a new block that reuses a ghost's id is taken for
// it and starts in main, a mild misprediction and never a contract breach.
//
// Pinned blocks leave their FIFO and come back at its new end when unpinned;
// they keep their queue and frequency. Touch never moves a block (lazy
// promotion), so a hit costs one increment. Each operation is O(1) except
// Victim(), whose moves are paid for by earlier touches: amortised O(1).
#include <algorithm>
#include <cassert>
#include <vector>

#include "common/page_allocator.h"
#include "eviction/eviction_policy.h"
#include "eviction/internal/id_list.h"

namespace kvtier::eviction {
namespace {

using internal::IdList;
using internal::kNil;

constexpr uint8_t kMaxFreq = 3;  // two bits

class S3FifoPolicy final : public EvictionPolicy {
 public:
  explicit S3FifoPolicy(S3FifoOptions options)
      : small_fraction_(options.small_fraction), ghost_fraction_(options.ghost_fraction) {
    assert(small_fraction_ > 0 && small_fraction_ <= 1);
    assert(ghost_fraction_ >= 0);
  }

  std::string_view name() const override { return "s3fifo"; }

  void Insert(BlockId id, const BlockMeta& meta) override {
    if (id >= nodes_.size()) Grow(id);
    Node& n = nodes_[id];
    assert(!Tracked(id));
    bool ghost_hit = false;
    if (n.queue == Queue::kGhost) {
      ghost_.Remove(nodes_, id);
      ghost_hit = n.fingerprint == meta.fingerprint;
    }
    n.queue = ghost_hit ? Queue::kMain : Queue::kSmall;
    n.freq = 0;
    n.linked = false;
    n.fingerprint = meta.fingerprint;
    ++size_;
    if (!meta.pinned) Link(id);
  }

  void Touch(BlockId id, const BlockMeta& meta) override {
    assert(Tracked(id));
    Node& n = nodes_[id];
    if (n.freq < kMaxFreq) ++n.freq;
    SetPinned(id, meta.pinned);
  }

  void Update(BlockId id, const BlockMeta& meta) override {
    assert(Tracked(id));
    SetPinned(id, meta.pinned);
  }

  void Erase(BlockId id) override {
    assert(Tracked(id));
    Node& n = nodes_[id];
    if (n.linked) Unlink(id);
    --size_;
    if (id == victim_) {
      victim_ = kNil;
      if (n.queue == Queue::kSmall) {
        AddGhost(id);
        return;
      }
    }
    n.queue = Queue::kNone;
  }

  std::optional<BlockId> Victim() override {
    for (;;) {
      if (small_.empty() && main_.empty()) return std::nullopt;
      const bool from_small = !small_.empty() && (main_.empty() || SmallAtTarget());
      IdList& q = from_small ? small_ : main_;
      const BlockId id = q.front();
      Node& n = nodes_[id];
      if (n.freq == 0) {
        victim_ = id;
        return id;
      }
      q.Remove(nodes_, id);
      if (from_small) {
        n.queue = Queue::kMain;  // touched while on probation: keep it
        n.freq = 0;
      } else {
        --n.freq;  // a second chance per unit
      }
      main_.PushBack(nodes_, id);
    }
  }

  size_t size() const override { return size_; }

 private:
  enum class Queue : uint8_t { kNone, kSmall, kMain, kGhost };

  struct Node {
    BlockId prev = kNil;
    BlockId next = kNil;
    uint64_t fingerprint = 0;
    Queue queue = Queue::kNone;  // kSmall or kMain iff tracked
    uint8_t freq = 0;            // touches since entering its queue, capped
    bool linked = false;         // on its queue's list (tracked, unpinned)
  };

  bool Tracked(BlockId id) const {
    return id < nodes_.size() &&
           (nodes_[id].queue == Queue::kSmall || nodes_[id].queue == Queue::kMain);
  }

  // (Out of line: Insert's usual case is a short function.)
  [[gnu::noinline]] void Grow(BlockId id) { nodes_.resize(static_cast<size_t>(id) + 1); }

  IdList& ListOf(const Node& n) { return n.queue == Queue::kSmall ? small_ : main_; }

  bool SmallAtTarget() const {
    const auto unpinned = static_cast<double>(small_.size() + main_.size());
    return static_cast<double>(small_.size()) >= small_fraction_ * unpinned;
  }

  void SetPinned(BlockId id, bool pinned) {
    const Node& n = nodes_[id];
    if (pinned && n.linked) {
      Unlink(id);
    } else if (!pinned && !n.linked) {
      Link(id);
    }
  }

  void Link(BlockId id) {
    ListOf(nodes_[id]).PushBack(nodes_, id);
    nodes_[id].linked = true;
  }

  void Unlink(BlockId id) {
    ListOf(nodes_[id]).Remove(nodes_, id);
    nodes_[id].linked = false;
  }

  void AddGhost(BlockId id) {
    nodes_[id].queue = Queue::kGhost;
    ghost_.PushBack(nodes_, id);
    const size_t limit =
        std::max<size_t>(1, static_cast<size_t>(ghost_fraction_ * static_cast<double>(size_)));
    while (ghost_.size() > limit) {
      const BlockId oldest = ghost_.front();
      ghost_.Remove(nodes_, oldest);
      nodes_[oldest].queue = Queue::kNone;
    }
  }

  const double small_fraction_;
  const double ghost_fraction_;
  PageVector<Node> nodes_;
  IdList small_;
  IdList main_;
  IdList ghost_;
  BlockId victim_ = kNil;  // last named by Victim(), until erased
  size_t size_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewS3FifoPolicy(S3FifoOptions options) {
  return std::make_unique<S3FifoPolicy>(options);
}

}  // namespace kvtier::eviction
