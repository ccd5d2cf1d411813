// IndexedHeap: a 4-ary min-heap of BlockIds, each with its key stored
// inline, and each id's position kept so that removing an id or changing
// its key is O(log n). Keys sit beside the ids so that a sift compares
// siblings within one or two cache lines instead of chasing each id into
// the policy's node array; four children per node halve the depth of a
// binary heap. `Key` needs a strict weak order `operator<` (smaller leaves
// first) and should make keys unique, e.g. by ending in a sequence number.
//
// Storage is two vectors that only grow: no allocation per operation once
// they reach the largest id and the most ids held at once.
//
// Thread-safety: none; confined to the owning policy.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "eviction/eviction_policy.h"

namespace kvtier::eviction::internal {

template <class Key>
class IndexedHeap {
 public:
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  bool Contains(BlockId id) const { return id < pos_.size() && pos_[id] != kAbsent; }
  // REQUIRES: !empty()
  BlockId Top() const { return heap_.front().id; }
  const Key& TopKey() const { return heap_.front().key; }

  // REQUIRES: !Contains(id)
  void Push(BlockId id, const Key& key) {
    if (id >= pos_.size()) pos_.resize(static_cast<size_t>(id) + 1, kAbsent);
    assert(pos_[id] == kAbsent);
    heap_.push_back({key, id});
    SiftUp(heap_.size() - 1);
  }

  // REQUIRES: Contains(id)
  void Remove(BlockId id) {
    assert(Contains(id));
    const size_t i = pos_[id];
    pos_[id] = kAbsent;
    const Entry last = heap_.back();
    heap_.pop_back();
    if (i == heap_.size()) return;
    Place(i, last);
    Fix(i);
  }

  // REQUIRES: Contains(id)
  void Update(BlockId id, const Key& key) {
    assert(Contains(id));
    const size_t i = pos_[id];
    heap_[i].key = key;
    Fix(i);
  }

  // Applies `f(Key&)` to every key, then restores the order: O(n).
  template <class F>
  void RewriteKeys(F f) {
    for (Entry& e : heap_) f(e.key);
    if (heap_.size() < 2) return;
    for (size_t i = (heap_.size() - 2) / kArity + 1; i-- > 0;) SiftDown(i);
  }

 private:
  static constexpr size_t kArity = 4;
  static constexpr uint32_t kAbsent = 0xffff'ffffu;

  struct Entry {
    Key key;
    BlockId id;
  };

  void Place(size_t i, const Entry& e) {
    heap_[i] = e;
    pos_[e.id] = static_cast<uint32_t>(i);
  }

  void Fix(size_t i) {
    if (i > 0 && heap_[i].key < heap_[(i - 1) / kArity].key) {
      SiftUp(i);
    } else {
      SiftDown(i);
    }
  }

  void SiftUp(size_t i) {
    const Entry e = heap_[i];
    while (i > 0) {
      const size_t parent = (i - 1) / kArity;
      if (!(e.key < heap_[parent].key)) break;
      Place(i, heap_[parent]);
      i = parent;
    }
    Place(i, e);
  }

  void SiftDown(size_t i) {
    const Entry e = heap_[i];
    const size_t n = heap_.size();
    for (;;) {
      const size_t first = kArity * i + 1;
      if (first >= n) break;
      const size_t end = first + kArity < n ? first + kArity : n;
      size_t best = first;
      for (size_t c = first + 1; c < end; ++c) {
        if (heap_[c].key < heap_[best].key) best = c;
      }
      if (!(heap_[best].key < e.key)) break;
      Place(i, heap_[best]);
      i = best;
    }
    Place(i, e);
  }

  std::vector<Entry> heap_;
  std::vector<uint32_t> pos_;  // index in heap_, by id; kAbsent when not held
};

}  // namespace kvtier::eviction::internal
