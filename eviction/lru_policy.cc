// LRU over an intrusive doubly-linked list threaded through a vector indexed
// by BlockId: 12 bytes per block, no allocation per operation once the
// vector has grown to the largest id. Pinned blocks leave the list and come
// back at the most recent end when unpinned (a pin is a use).
#include <cassert>
#include <vector>

#include "eviction/eviction_policy.h"

namespace kvtier::eviction {
namespace {

constexpr BlockId kNil = 0xffff'ffffu;

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }

  void Insert(BlockId id, const BlockMeta& meta) override {
    if (id >= nodes_.size()) nodes_.resize(static_cast<size_t>(id) + 1);
    Node& n = nodes_[id];
    assert(!n.tracked);
    n.tracked = true;
    n.linked = false;
    ++size_;
    if (!meta.pinned) PushBack(id);
  }

  void Touch(BlockId id, const BlockMeta& meta) override {
    assert(Tracked(id));
    if (nodes_[id].linked) Unlink(id);
    if (!meta.pinned) PushBack(id);
  }

  void Update(BlockId id, const BlockMeta& meta) override {
    assert(Tracked(id));
    Node& n = nodes_[id];
    if (meta.pinned && n.linked) {
      Unlink(id);
    } else if (!meta.pinned && !n.linked) {
      PushBack(id);
    }
  }

  void Erase(BlockId id) override {
    assert(Tracked(id));
    if (nodes_[id].linked) Unlink(id);
    nodes_[id].tracked = false;
    --size_;
  }

  std::optional<BlockId> Victim() override {
    if (head_ == kNil) return std::nullopt;
    return head_;
  }

  size_t size() const override { return size_; }

 private:
  struct Node {
    BlockId prev = kNil;
    BlockId next = kNil;
    bool tracked = false;
    bool linked = false;
  };

  bool Tracked(BlockId id) const { return id < nodes_.size() && nodes_[id].tracked; }

  void PushBack(BlockId id) {
    Node& n = nodes_[id];
    n.prev = tail_;
    n.next = kNil;
    n.linked = true;
    if (tail_ != kNil) {
      nodes_[tail_].next = id;
    } else {
      head_ = id;
    }
    tail_ = id;
  }

  void Unlink(BlockId id) {
    Node& n = nodes_[id];
    if (n.prev != kNil) {
      nodes_[n.prev].next = n.next;
    } else {
      head_ = n.next;
    }
    if (n.next != kNil) {
      nodes_[n.next].prev = n.prev;
    } else {
      tail_ = n.prev;
    }
    n.linked = false;
  }

  std::vector<Node> nodes_;
  BlockId head_ = kNil;  // least recent
  BlockId tail_ = kNil;  // most recent
  size_t size_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewLruPolicy() { return std::make_unique<LruPolicy>(); }

}  // namespace kvtier::eviction
