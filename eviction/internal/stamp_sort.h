// SortByStamp: the adaptive policy's blocks in recency order, for a rebuilt
// candidate: a radix sort on the stamps' offsets from the oldest, 11 bits a
// pass, since a switch sorts the whole tier (std::sort took 4 % of a replay
// that switched a few times).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace kvtier::eviction::internal {

// Sorts `order` (stamp, id) by stamp, all stamps distinct; `scratch` is the
// sort's own (kept by the caller between sorts).
template <typename Id>
void SortByStamp(std::vector<std::pair<uint32_t, Id>>* order,
                 std::vector<std::pair<uint32_t, Id>>* scratch) {
  if (order->size() < 2) return;
  uint32_t lo = UINT32_MAX, hi = 0;
  for (const auto& [stamp, id] : *order) {
    lo = std::min(lo, stamp);
    hi = std::max(hi, stamp);
  }
  constexpr int kBits = 11;
  constexpr size_t kBuckets = size_t{1} << kBits;
  scratch->resize(order->size());
  std::array<size_t, kBuckets> count;
  for (int shift = 0; shift < 32 && ((hi - lo) >> shift) != 0; shift += kBits) {
    count.fill(0);
    for (const auto& e : *order) ++count[((e.first - lo) >> shift) & (kBuckets - 1)];
    size_t at = 0;
    for (size_t& c : count) at += std::exchange(c, at);
    for (const auto& e : *order)
      (*scratch)[count[((e.first - lo) >> shift) & (kBuckets - 1)]++] = e;
    order->swap(*scratch);
  }
}

}  // namespace kvtier::eviction::internal
