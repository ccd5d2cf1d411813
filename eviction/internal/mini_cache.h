// MiniCache: one candidate of the adaptive policy (adaptive_policy.cc) run
// on the sampled keys, as the engine serves a request: its own id space, the
// prefix tree of its blocks (each sampled key's parent is its nearest
// sampled ancestor), and the real policy object deciding. Every candidate's
// MiniCache shares one SampleIndex, a column each.
//
// Thread-safety: none; confined to the owning policy.
#pragma once

#include <cassert>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "eviction/admission.h"
#include "eviction/eviction_policy.h"
#include "eviction/internal/sample_index.h"

namespace kvtier::eviction::internal {

inline constexpr BlockId kNoBlock = 0xffff'ffffu;

// A sampled key as the miniature caches' prelude keeps it (MiniCaches: a
// recency-ordered candidate's cache is made from these when it first needs
// to evict).
struct PreludeKey {
  uint64_t fp = 0;
  uint64_t stamp = 0;          // when it last joined the recency order
  uint32_t parent = kNoBlock;  // its nearest sampled ancestor's place among the keys
};

// One candidate run on the sampled keys: its own id space, the prefix tree
// of its blocks, and the real policy object deciding.
class MiniCache {
 public:
  // `index` (shared by every candidate, column `column` this one's) must
  // outlive it, as must `admission` (null: every block admitted), whose
  // Admit decides whether a new block may take a victim's room (the
  // filter's evidence is the owner's to feed: every sampled key looked up).
  MiniCache(std::string name, std::unique_ptr<EvictionPolicy> policy, AdmissionFilter* admission,
            internal::SampleIndex* index, size_t column)
      : name_(std::move(name)),
        policy_(std::move(policy)),
        admission_(admission),
        index_(index),
        column_(column) {}

  // The candidate's name: its policy's, and "/<filter>" with one.
  std::string_view name() const { return name_; }
  AdmissionFilter* admission() const { return admission_; }
  const EvictionPolicy& policy() const { return *policy_; }

  // One request for `chain` (sampled keys, first first), as the engine
  // serves it; rows[i] is chain[i]'s row in the index, looked up before any
  // candidate served the request (still right for this one's column until it
  // changes the index itself), up to the first key no candidate holds (none
  // reads past it). Returns the leading hits. `filtered`: false admits every
  // block whatever the candidate's filter (a probe, not a request).
  size_t Request(std::span<const uint64_t> chain, std::span<const uint32_t> rows, size_t capacity,
                 bool filtered = true) {
    run_.clear();
    for (uint32_t row : rows) {
      if (row == internal::SampleIndex::kNoRow) break;
      const BlockId id = index_->Get(row, column_);
      if (id == kNoBlock) break;
      run_.push_back(id);
    }
    const size_t found = run_.size();
    // The read: the run touched last block first (the engine's order).
    for (auto id = run_.rbegin(); id != run_.rend(); ++id) policy_->Touch(*id, MetaOf(*id));
    if (found == chain.size()) return found;
    // The write: the parent pinned, each new block pinned until the end.
    BlockId parent = found > 0 ? run_.back() : kNoBlock;
    written_.clear();
    if (parent != kNoBlock) written_.push_back(parent);
    for (BlockId id : written_) SetPinned(id, true);
    for (size_t i = found; i < chain.size(); ++i) {
      // (Making room changes no row that another column holds, nor adds
      // one, so the row found first is still chain[i]'s after it.)
      const uint32_t row = index_->Find(chain[i]);
      if (row != internal::SampleIndex::kNoRow && index_->Get(row, column_) != kNoBlock) break;
      if (!MakeRoom(capacity, chain[i], filtered)) break;      // skipped, with the rest
      if (parent != kNoBlock && nodes_[parent].orphan) break;  // they would go at once
      parent = Add(chain[i], row, parent);
      written_.push_back(parent);
    }
    // The commit: the new blocks unpinned last first, then the parent.
    for (size_t i = written_.size(); i > (found > 0 ? 1u : 0u); --i)
      SetPinned(written_[i - 1], false);
    if (found > 0) SetPinned(written_.front(), false);
    return found;
  }

  // Makes an empty cache hold `keys` (parents before children), as if it
  // had served their requests without evicting: each key enters the
  // policy in the order of `by_stamp` (their places in `keys`, oldest
  // first). REQUIRES: policy().recency_ordered(), for which that is the
  // order it would have had, and no eviction since the start.
  void Load(std::span<const PreludeKey> keys, std::span<const uint32_t> by_stamp) {
    assert(policy_->recency_ordered() && nodes_.empty() && held_ == 0);
    nodes_.resize(keys.size());
    for (BlockId id = 0; id < keys.size(); ++id) {
      Node& n = nodes_[id];
      n.fp = keys[id].fp;
      n.held = true;
      index_->Set(n.fp, column_, id);
      ++held_;
      assert(keys[id].parent == kNoBlock || keys[id].parent < id);
      if (keys[id].parent != kNoBlock) Attach(id, keys[id].parent);
    }
    // (Each enters with its children counted: a leaf-first candidate sees
    // its leaves as leaves from the start.)
    for (uint32_t id : by_stamp) policy_->Insert(id, MetaOf(id));
  }

  // Evicts the candidate's victims until it holds at most `capacity` (between
  // requests: none pinned).
  void Trim(size_t capacity) {
    while (held_ > capacity) {
      const std::optional<BlockId> v = policy_->Victim();
      if (!v) return;
      Drop(*v);
    }
  }

  // The leading run of `chain` (sampled keys) held: the hits if it came again.
  size_t Retained(std::span<const uint64_t> chain) const {
    size_t n = 0;
    while (n < chain.size() && Holds(chain[n])) ++n;
    return n;
  }

  bool Holds(uint64_t fp) const {
    const uint32_t row = index_->Find(fp);
    return row != internal::SampleIndex::kNoRow && index_->Get(row, column_) != kNoBlock;
  }

  // Pins or unpins a block; an orphan (its ancestor dropped while it was
  // pinned) goes at its unpin.
  void SetPinned(BlockId id, bool pinned) {
    Node& n = nodes_[id];
    n.pinned = pinned;
    if (!pinned && n.orphan) {
      policy_->Erase(id);
      free_.push_back(id);
      return;
    }
    policy_->Update(id, MetaOf(id));
  }

  // Forgets the keys `keep` rejects (the sampling rate lowered: the keys of
  // the new rate are a subset of the old one's), each one's children moving
  // up to its parent: what stays is the tree the new rate would have built,
  // in the order the candidate had it (between requests: none pinned).
  template <typename Keep>
  void Thin(const Keep& keep) {
    for (BlockId id = 0; id < nodes_.size(); ++id) {
      if (nodes_[id].held && !keep(nodes_[id].fp)) Remove(id);
    }
  }

  // Forgets `fp`, if held (between requests).
  void Forget(uint64_t fp) {
    const uint32_t row = index_->Find(fp);
    if (row == internal::SampleIndex::kNoRow) return;
    const BlockId id = index_->Get(row, column_);
    if (id != kNoBlock) Remove(id);
  }

  double hits = 0;      // decayed (AdaptivePolicy::Decay)
  double all_hits = 0;  // since the start, scaled with the rate as hits
  double last = 0;      // hits of the last request
  // Hits more than the followed candidate's since it was chosen (decayed).
  double lead = 0;

 private:
  struct Node {
    uint64_t fp = 0;
    BlockId parent = kNoBlock, first_child = kNoBlock, prev_sibling = kNoBlock,
            next_sibling = kNoBlock;
    uint32_t children = 0;
    bool pinned = false;
    bool held = false;    // in the index and the policy
    bool orphan = false;  // dropped while pinned: gone from the index, freed at its unpin
  };

  // The block's metadata, in a scratch the next call overwrites (a policy
  // call reads it and returns before that).
  const BlockMeta& MetaOf(BlockId id) {
    meta_.fingerprint = nodes_[id].fp;
    meta_.children_in_tier = nodes_[id].children;
    meta_.pinned = nodes_[id].pinned;
    return meta_;
  }

  // Room for `fp` (a new block): false if there is none or the filter keeps
  // it out.
  bool MakeRoom(size_t capacity, uint64_t fp, bool filtered) {
    while (held_ >= capacity) {
      const std::optional<BlockId> v = policy_->Victim();
      if (!v) return false;
      if (filtered && admission_ != nullptr && !admission_->Admit(fp, nodes_[*v].fp)) return false;
      Drop(*v);
    }
    return true;
  }

  // A new pinned block for `fp` (whose row in the index is `row`, or kNoRow)
  // under `parent` (kNoBlock: a root).
  BlockId Add(uint64_t fp, uint32_t row, BlockId parent) {
    BlockId id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      id = static_cast<BlockId>(nodes_.size());
      nodes_.emplace_back();
    }
    Node& n = nodes_[id];
    n = Node{};
    n.fp = fp;
    n.pinned = true;
    n.held = true;
    index_->Set(fp, row, column_, id);
    ++held_;
    if (parent != kNoBlock) Link(id, parent);
    policy_->Insert(id, MetaOf(id));
    return id;
  }

  // Makes `id` (a root) a child of `parent`.
  void Link(BlockId id, BlockId parent) {
    Attach(id, parent);
    if (nodes_[parent].held) policy_->Update(parent, MetaOf(parent));
  }

  // The tree's part of Link: `id` (a root) becomes `parent`'s first child.
  void Attach(BlockId id, BlockId parent) {
    Node& n = nodes_[id];
    n.parent = parent;
    n.prev_sibling = kNoBlock;
    n.next_sibling = nodes_[parent].first_child;
    if (n.next_sibling != kNoBlock) nodes_[n.next_sibling].prev_sibling = id;
    nodes_[parent].first_child = id;
    ++nodes_[parent].children;
  }

  // Forgets one held, unpinned block; its children move up to its parent.
  void Remove(BlockId id) {
    const BlockId parent = nodes_[id].parent;
    Unlink(id);
    while (nodes_[id].first_child != kNoBlock) {
      const BlockId c = nodes_[id].first_child;
      Unlink(c);
      if (parent != kNoBlock) Link(c, parent);
    }
    index_->Clear(nodes_[id].fp, column_);
    policy_->Erase(id);
    nodes_[id].held = false;
    --held_;
    free_.push_back(id);
  }

  // Drops `root` (a victim: unpinned) and its descendants, iteratively
  // (chains are deep). A pinned descendant (the write's parent and the
  // blocks written under it) becomes an orphan: invisible now, freed at its
  // unpin.
  void Drop(BlockId root) {
    Unlink(root);
    stack_.assign(1, root);
    while (!stack_.empty()) {
      const BlockId id = stack_.back();
      stack_.pop_back();
      for (BlockId c = nodes_[id].first_child; c != kNoBlock; c = nodes_[c].next_sibling) {
        stack_.push_back(c);
      }
      index_->Clear(nodes_[id].fp, column_);
      nodes_[id].held = false;
      --held_;
      if (nodes_[id].pinned) {
        nodes_[id].orphan = true;
        continue;
      }
      policy_->Erase(id);
      free_.push_back(id);
    }
  }

  void Unlink(BlockId id) {
    Node& n = nodes_[id];
    if (n.parent == kNoBlock) return;
    if (n.prev_sibling != kNoBlock) {
      nodes_[n.prev_sibling].next_sibling = n.next_sibling;
    } else {
      nodes_[n.parent].first_child = n.next_sibling;
    }
    if (n.next_sibling != kNoBlock) nodes_[n.next_sibling].prev_sibling = n.prev_sibling;
    --nodes_[n.parent].children;
    policy_->Update(n.parent, MetaOf(n.parent));
    n.parent = n.prev_sibling = n.next_sibling = kNoBlock;
  }

  std::string name_;
  std::unique_ptr<EvictionPolicy> policy_;
  AdmissionFilter* admission_;
  internal::SampleIndex* index_;
  size_t column_;
  size_t held_ = 0;  // blocks in the index (orphans are not)
  std::vector<Node> nodes_;
  std::vector<BlockId> free_;
  std::vector<BlockId> stack_;
  std::vector<BlockId> run_;
  std::vector<BlockId> written_;  // the write's parent, then its new blocks
  BlockMeta meta_;                // MetaOf's
};

}  // namespace kvtier::eviction::internal
