// LRU over an intrusive list threaded through a vector indexed by BlockId
// (internal/id_list.h): no allocation per operation once the vector has
// grown to the largest id. Pinned blocks leave the list and come back at the
// most recent end when unpinned (a pin is a use).
#include <cassert>
#include <vector>

#include "common/page_allocator.h"
#include "eviction/eviction_policy.h"
#include "eviction/internal/id_list.h"

namespace kvtier::eviction {
namespace {

using internal::IdList;
using internal::kNil;

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }

  void Insert(BlockId id, const BlockMeta& meta) override {
    if (id >= nodes_.size()) Grow(id);
    Node& n = nodes_[id];
    assert(!n.tracked);
    n.tracked = true;
    n.linked = false;
    ++size_;
    if (!meta.pinned) Link(id);
  }

  void Touch(BlockId id, const BlockMeta& meta) override {
    assert(Tracked(id));
    if (nodes_[id].linked) Unlink(id);
    if (!meta.pinned) Link(id);
  }

  void Update(BlockId id, const BlockMeta& meta) override {
    assert(Tracked(id));
    if (meta.pinned && nodes_[id].linked) {
      Unlink(id);
    } else if (!meta.pinned && !nodes_[id].linked) {
      Link(id);
    }
  }

  void Erase(BlockId id) override {
    assert(Tracked(id));
    if (nodes_[id].linked) Unlink(id);
    nodes_[id].tracked = false;
    --size_;
  }

  bool recency_ordered() const override { return true; }

  std::optional<BlockId> Victim() override {
    if (order_.empty()) return std::nullopt;
    return order_.front();
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
  // (Out of line: Insert's usual case is a short function.)
  [[gnu::noinline]] void Grow(BlockId id) { nodes_.resize(static_cast<size_t>(id) + 1); }
  void Link(BlockId id) {
    order_.PushBack(nodes_, id);
    nodes_[id].linked = true;
  }
  void Unlink(BlockId id) {
    order_.Remove(nodes_, id);
    nodes_[id].linked = false;
  }

  PageVector<Node> nodes_;
  IdList order_;  // front: least recent
  size_t size_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewLruPolicy() { return std::make_unique<LruPolicy>(); }

}  // namespace kvtier::eviction
