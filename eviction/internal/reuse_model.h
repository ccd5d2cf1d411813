// ReuseModel: the learned policy's predictor (learned_policy.cc): a few
// boosted regression trees over a block's binned features, predicting a
// label of its future (the policy's: whether it is needed within a
// horizon). Small on purpose: trees of depth 4 on
// kFeatures features of 32 bins each, fitted from histograms in well under a
// millisecond on a few thousand samples, evaluated in a few nanoseconds (a
// comparison per level, no floating point until the leaves).
//
// Thread-safety: none; confined to its policy.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvtier::eviction::internal {

// What a block shows the model, each feature binned 0-31 (LogBin).
inline constexpr size_t kFeatures = 5;
using Features = std::array<uint8_t, kFeatures>;
inline constexpr uint8_t kMaxBin = 31;

// Half-octave bins of a count: 0 -> 0, 1 -> 1, 2 -> 3, 3 -> 4, 4 -> 5,
// 6 -> 6, 8 -> 7, ... up to kMaxBin (about 2^15).
constexpr uint8_t LogBin(uint64_t u) {
  if (u == 0) return 0;
  const unsigned width = static_cast<unsigned>(std::bit_width(u));  // 1..64
  const unsigned half = width >= 2 ? static_cast<unsigned>((u >> (width - 2)) & 1u) : 0u;
  const unsigned bin = 2 * (width - 1) + half + 1;
  return static_cast<uint8_t>(bin < kMaxBin ? bin : kMaxBin);
}

// One labelled sample: a block's features when it was drawn, and what
// became of it (learned_policy.cc: 1 if it was not needed within the
// horizon, else 0).
struct ReuseSample {
  Features x{};
  float y = 0;
};

class ReuseModel {
 public:
  static constexpr size_t kDepth = 4;
  static constexpr size_t kInner = (size_t{1} << kDepth) - 1;  // 15 splits
  static constexpr size_t kLeaves = size_t{1} << kDepth;       // 16 leaves
  static constexpr size_t kTrees = 4;

  bool trained() const { return trained_; }

  float Predict(const Features& x) const {
    float y = base_;
    for (const Tree& t : trees_) {
      size_t node = 0;
      for (size_t d = 0; d < kDepth; ++d) {
        node = 2 * node + 1 + (x[t.feature[node]] > t.threshold[node] ? 1 : 0);
      }
      y += t.leaf[node - kInner];
    }
    return y;
  }

  // Fits the trees to `samples` afresh (gradient boosting on squared error,
  // each split the one of the 5 x 31 that most reduces it).
  void Fit(std::span<const ReuseSample> samples) {
    const size_t n = samples.size();
    if (n == 0) return;
    double sum = 0;
    for (const ReuseSample& s : samples) sum += s.y;
    base_ = static_cast<float>(sum / static_cast<double>(n));
    residual_.resize(n);
    node_.resize(n);
    for (size_t i = 0; i < n; ++i) residual_[i] = samples[i].y - base_;
    for (Tree& t : trees_) {
      FitTree(samples, &t);
      for (size_t i = 0; i < n; ++i) residual_[i] -= t.leaf[node_[i] - kInner];
    }
    trained_ = true;
  }

 private:
  struct Tree {
    std::array<uint8_t, kInner> feature{};
    std::array<uint8_t, kInner> threshold{};  // left: bin <= threshold
    std::array<float, kLeaves> leaf{};
  };
  // Each tree's leaves take this share of the mean residual they hold.
  static constexpr float kShrink = 0.6f;

  void FitTree(std::span<const ReuseSample> samples, Tree* t) {
    const size_t n = samples.size();
    std::fill(node_.begin(), node_.end(), 0u);
    for (size_t d = 0; d < kDepth; ++d) {
      const size_t first = (size_t{1} << d) - 1, count = size_t{1} << d;
      // Histograms of the residuals per node of this level, feature and bin.
      hist_.assign(static_cast<size_t>(count) * kFeatures * (kMaxBin + 1), Cell{});
      for (size_t i = 0; i < n; ++i) {
        const size_t at = (node_[i] - first) * kFeatures * (kMaxBin + 1);
        for (size_t f = 0; f < kFeatures; ++f) {
          Cell& c = hist_[at + f * (kMaxBin + 1) + samples[i].x[f]];
          c.sum += residual_[i];
          ++c.n;
        }
      }
      for (size_t k = 0; k < count; ++k) ChooseSplit(k, first + k, t);
      for (size_t i = 0; i < n; ++i) {
        const uint32_t node = node_[i];
        node_[i] = 2 * node + 1 + (samples[i].x[t->feature[node]] > t->threshold[node] ? 1u : 0u);
      }
    }
    std::array<double, kLeaves> sum{};
    std::array<uint32_t, kLeaves> cnt{};
    for (size_t i = 0; i < n; ++i) {
      sum[node_[i] - kInner] += residual_[i];
      ++cnt[node_[i] - kInner];
    }
    for (size_t l = 0; l < kLeaves; ++l) {
      t->leaf[l] = cnt[l] == 0 ? 0.0f : kShrink * static_cast<float>(sum[l] / cnt[l]);
    }
  }

  // The split of node `node` (the level's `k`-th) that most reduces the
  // squared error; with none (too few samples, or all in one bin) every
  // sample goes left.
  void ChooseSplit(size_t k, size_t node, Tree* t) {
    t->feature[node] = 0;
    t->threshold[node] = kMaxBin;
    const size_t at = k * kFeatures * (kMaxBin + 1);
    double best = 0;
    for (size_t f = 0; f < kFeatures; ++f) {
      const Cell* h = &hist_[at + f * (kMaxBin + 1)];
      double total = 0;
      uint32_t total_n = 0;
      for (size_t b = 0; b <= kMaxBin; ++b) {
        total += h[b].sum;
        total_n += h[b].n;
      }
      if (total_n < 2 * kMinLeaf) return;
      const double before = total * total / total_n;
      double left = 0;
      uint32_t left_n = 0;
      for (size_t b = 0; b < kMaxBin; ++b) {
        left += h[b].sum;
        left_n += h[b].n;
        const uint32_t right_n = total_n - left_n;
        if (left_n < kMinLeaf || right_n < kMinLeaf) continue;
        const double right = total - left;
        const double gain = left * left / left_n + right * right / right_n - before;
        if (gain > best) {
          best = gain;
          t->feature[node] = static_cast<uint8_t>(f);
          t->threshold[node] = static_cast<uint8_t>(b);
        }
      }
    }
  }

  struct Cell {
    double sum = 0;
    uint32_t n = 0;
  };
  static constexpr uint32_t kMinLeaf = 64;

  bool trained_ = false;
  float base_ = 0;
  std::array<Tree, kTrees> trees_{};
  // Fit's scratch.
  std::vector<float> residual_;
  std::vector<uint32_t> node_;
  std::vector<Cell> hist_;
};

}  // namespace kvtier::eviction::internal
