// IdList: a doubly-linked list of BlockIds threaded through a caller-owned
// vector of nodes indexed by BlockId (any struct with `prev` and `next`), so
// a policy keeps several lists over one node array and never allocates per
// operation. A node is on at most one list at a time; the caller tracks which.
//
// Thread-safety: none; confined to the owning policy.
#pragma once

#include <cassert>
#include <cstddef>
#include <vector>

#include "eviction/eviction_policy.h"

namespace kvtier::eviction::internal {

inline constexpr BlockId kNil = 0xffff'ffffu;

class IdList {
 public:
  bool empty() const { return head_ == kNil; }
  size_t size() const { return size_; }
  // The oldest end (next to go) and the newest end; kNil when empty.
  BlockId front() const { return head_; }
  BlockId back() const { return tail_; }

  // REQUIRES: id on no list.
  // `nodes`: a vector (of any allocator) of structs with prev and next.
  template <class Nodes>
  void PushBack(Nodes& nodes, BlockId id) {
    auto& n = nodes[id];
    n.prev = tail_;
    n.next = kNil;
    if (tail_ != kNil) {
      nodes[tail_].next = id;
    } else {
      head_ = id;
    }
    tail_ = id;
    ++size_;
  }

  // REQUIRES: id on this list.
  template <class Nodes>
  void Remove(Nodes& nodes, BlockId id) {
    assert(size_ > 0);
    auto& n = nodes[id];
    if (n.prev != kNil) {
      nodes[n.prev].next = n.next;
    } else {
      head_ = n.next;
    }
    if (n.next != kNil) {
      nodes[n.next].prev = n.prev;
    } else {
      tail_ = n.prev;
    }
    n.prev = n.next = kNil;
    --size_;
  }

 private:
  BlockId head_ = kNil;
  BlockId tail_ = kNil;
  size_t size_ = 0;
};

}  // namespace kvtier::eviction::internal
