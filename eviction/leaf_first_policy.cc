// Leaf first (prefix-aware). A block whose children are cached in the same
// tier must stay: the child can only hit through its parent's prefix. The
// wrapper shows the inner policy such a block as pinned, so the inner policy
// never names it and needs no knowledge of prefixes; when its last child
// leaves, the engine's Update shows it unpinned and it rejoins the inner
// order as after an unpin. The wrapper keeps no state of its own: every call
// carries the full metadata, so the mask is recomputed each time.
#include <string>
#include <utility>

#include "eviction/eviction_policy.h"

namespace kvtier::eviction {
namespace {

class LeafFirstPolicy final : public EvictionPolicy {
 public:
  explicit LeafFirstPolicy(std::unique_ptr<EvictionPolicy> inner)
      : inner_(std::move(inner)), name_("leaf-" + std::string(inner_->name())) {}

  std::string_view name() const override { return name_; }

  void Insert(BlockId id, const BlockMeta& meta) override {
    if (!Masked(meta)) return inner_->Insert(id, meta);
    inner_->Insert(id, AsPinned(meta));
  }
  void Touch(BlockId id, const BlockMeta& meta) override {
    if (!Masked(meta)) return inner_->Touch(id, meta);
    inner_->Touch(id, AsPinned(meta));
  }
  void Update(BlockId id, const BlockMeta& meta) override {
    if (!Masked(meta)) return inner_->Update(id, meta);
    inner_->Update(id, AsPinned(meta));
  }
  void Erase(BlockId id) override { inner_->Erase(id); }
  std::optional<BlockId> Victim() override { return inner_->Victim(); }
  size_t size() const override { return inner_->size(); }
  bool recency_ordered() const override { return inner_->recency_ordered(); }
  void Inherit(const EvictionPolicy& simulated) override {
    if (const auto* other = dynamic_cast<const LeafFirstPolicy*>(&simulated)) {
      inner_->Inherit(*other->inner_);
    }
  }

 private:
  // An unpinned block with children: the inner policy sees it pinned. (The
  // others pass as they are, uncopied: most calls.)
  static bool Masked(const BlockMeta& meta) { return !meta.pinned && meta.children_in_tier > 0; }
  static BlockMeta AsPinned(const BlockMeta& meta) {
    BlockMeta m = meta;
    m.pinned = true;
    return m;
  }

  std::unique_ptr<EvictionPolicy> inner_;
  std::string name_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewLeafFirst(std::unique_ptr<EvictionPolicy> inner) {
  return std::make_unique<LeafFirstPolicy>(std::move(inner));
}

}  // namespace kvtier::eviction
