// Learned eviction: evict the block least likely to be needed soon, as
// Belady's OPT would, with the likelihood learned online from this tier's
// own history (after Song et al., "Learning Relaxed Belady for CDN
// caching", NSDI'20: sample candidates, predict each one's reuse with
// boosted trees, evict the one predicted furthest).
//
// Time is the policy's own: one tick per access (Insert or Touch), every
// interval measured in units of the tracked blocks / 64, so the same model
// reads a miniature cache (adaptive's, holding one key in 16 with a sixteenth
// of the capacity) and the tier it samples alike, and the adaptive policy
// hands a candidate's model from its miniature cache to the tier when it
// starts following it (Inherit).
//
// Features of a block (internal/reuse_model.h, each in half-octave bins):
// the time since its last access, the two intervals between its last three
// accesses (the top bin when it has had fewer), its accesses, and its
// children in the tier. A policy is told nothing else: a block's depth in its
// chain and its namespace are the engine's (and in a miniature cache the
// depth would be that of its sampled tree, not the tier's).
//
// Victim() draws `sample` unpinned blocks at random (with replacement) and
// names the one with the largest prediction (the longest since its last
// access on a tie); it also remembers the first one drawn, with its
// features, as a training sample. The label is 0 if that block's
// fingerprint is accessed again (a block evicted and written again counts:
// the miss is the access) within `horizon` tracked-blocks' worth of ticks,
// else 1: the model predicts the chance that a block is not needed within
// the horizon. (Predicting the log of the time to the next access instead,
// as LRB does, lost 1-10 points more to LRU on the recorded traces: a block
// likely to come back soon and one likely never to come back average to a
// middling time.) Every `refit` labels the model is fitted afresh to the
// last `window` of them. Until the first fit the prediction is the time
// since the last access: sampled LRU.
//
// Thread-safety: none; confined to the engine's thread.
#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <vector>

#include "common/hash.h"
#include "common/page_allocator.h"
#include "eviction/eviction_policy.h"
#include "eviction/internal/reuse_model.h"

namespace kvtier::eviction {
namespace {

using internal::Features;
using internal::LogBin;
using internal::ReuseModel;
using internal::ReuseSample;

constexpr uint32_t kNoPos = 0xffff'ffffu;
constexpr uint64_t kNever = UINT64_MAX;  // no such access

class LearnedPolicy final : public EvictionPolicy {
 public:
  explicit LearnedPolicy(LearnedOptions options)
      : options_(options), rng_(options.seed), pending_table_(2 * kMaxPending) {
    assert(options_.sample >= 1 && options_.window >= options_.refit && options_.refit >= 1);
    samples_.reserve(options_.window);
  }

  std::string_view name() const override { return "learned"; }

  void Insert(BlockId id, const BlockMeta& meta) override {
    if (id >= nodes_.size()) Grow(id);
    Node& n = nodes_[id];
    assert(!n.tracked);
    n = Node{};
    n.tracked = true;
    n.fp = meta.fingerprint;
    ++tracked_;
    Access(&n, id, meta);
  }

  void Touch(BlockId id, const BlockMeta& meta) override {
    assert(Tracked(id));
    Access(&nodes_[id], id, meta);
  }

  void Update(BlockId id, const BlockMeta& meta) override {
    assert(Tracked(id));
    SetMeta(id, meta);
  }

  void Erase(BlockId id) override {
    assert(Tracked(id));
    if (nodes_[id].pos != kNoPos) Unlist(id);
    nodes_[id].tracked = false;
    --tracked_;
    victim_ = kNoPos;
  }

  std::optional<BlockId> Victim() override {
    if (unpinned_.empty()) return std::nullopt;
    if (victim_ != kNoPos) return victim_;
    const double per_tick = 1.0 / Unit();
    BlockId best = kNoPos;
    float best_score = 0;
    uint64_t best_age = 0;
    for (uint32_t d = 0; d < options_.sample; ++d) {
      // (Lemire's multiply-shift: a draw in [0, size) without a division.)
      const uint64_t r = SplitMix64(&rng_) >> 32;
      const BlockId id = unpinned_[(r * unpinned_.size()) >> 32];
      const Node& n = nodes_[id];
      const Features x = FeaturesOf(n, per_tick);
      if (d == 0) Sample(n, x);
      const float score = model_.trained() ? model_.Predict(x) : static_cast<float>(x[0]);
      const uint64_t age = now_ - n.last;
      if (best == kNoPos || score > best_score || (score == best_score && age > best_age)) {
        best = id;
        best_score = score;
        best_age = age;
      }
    }
    victim_ = best;
    return best;
  }

  size_t size() const override { return tracked_; }

  void Inherit(const EvictionPolicy& simulated) override {
    if (const auto* other = dynamic_cast<const LearnedPolicy*>(&simulated)) {
      if (other->model_.trained()) model_ = other->model_;
    }
  }

 private:
  struct Node {
    uint64_t last = kNever, prev = kNever, prev2 = kNever;  // ticks of the last 3 accesses
    uint64_t fp = 0;
    uint32_t pos = kNoPos;  // in unpinned_; kNoPos: pinned (or not tracked)
    uint16_t accesses = 0;
    uint16_t children = 0;
    bool tracked = false;
  };
  // A block drawn at Victim(), waiting for its label.
  struct Pending {
    uint64_t fp = 0;  // 0: labelled already
    uint64_t at = 0;  // tick drawn
    double unit = 1;  // ticks per unit then
    Features x{};
  };
  static constexpr uint32_t kMaxPending = 4096;  // a power of two

  bool Tracked(BlockId id) const { return id < nodes_.size() && nodes_[id].tracked; }
  [[gnu::noinline]] void Grow(BlockId id) { nodes_.resize(static_cast<size_t>(id) + 1); }

  // Ticks per unit of time: the tracked blocks / 64.
  double Unit() const { return std::max(1.0, static_cast<double>(tracked_) / 64.0); }

  // `per_tick`: units per tick, 1 / Unit().
  Features FeaturesOf(const Node& n, double per_tick) const {
    auto interval = [&](uint64_t from, uint64_t to) -> uint8_t {
      if (from == kNever || to == kNever) return internal::kMaxBin;
      return LogBin(static_cast<uint64_t>(static_cast<double>(to - from) * per_tick));
    };
    return Features{interval(n.last, now_), interval(n.prev, n.last), interval(n.prev2, n.prev),
                    LogBin(n.accesses), LogBin(n.children)};
  }

  void SetMeta(BlockId id, const BlockMeta& meta) {
    Node& n = nodes_[id];
    const auto children = static_cast<uint16_t>(std::min<uint32_t>(meta.children_in_tier, 0xffff));
    const bool listed = n.pos != kNoPos;
    if (children == n.children && listed != meta.pinned) return;  // nothing it reads changed
    n.children = children;
    if (meta.pinned && listed) Unlist(id);
    if (!meta.pinned && !listed) {
      n.pos = static_cast<uint32_t>(unpinned_.size());
      unpinned_.push_back(id);
    }
    victim_ = kNoPos;
  }

  void Unlist(BlockId id) {
    Node& n = nodes_[id];
    const BlockId last = unpinned_.back();
    unpinned_[n.pos] = last;
    nodes_[last].pos = n.pos;
    unpinned_.pop_back();
    n.pos = kNoPos;
  }

  void Access(Node* n, BlockId id, const BlockMeta& meta) {
    ++now_;
    n->prev2 = n->prev;
    n->prev = n->last;
    n->last = now_;
    if (n->accesses < 0xffff) ++n->accesses;
    SetMeta(id, meta);
    Label(n->fp);
  }

  // Draws `n` as a training sample, unless its key is unknown, already
  // waiting, or too many are.
  void Sample(const Node& n, const Features& x) {
    if (n.fp == 0 || pending_size_ == kMaxPending || FindPending(n.fp) != kNoPos) return;
    const uint32_t slot = static_cast<uint32_t>((pending_head_ + pending_size_) % kMaxPending);
    if (pending_.size() < kMaxPending) pending_.resize(kMaxPending);
    pending_[slot] = Pending{n.fp, now_, Unit(), x};
    ++pending_size_;
    InsertPending(n.fp, slot);
  }

  // An access to `fp` at now_: labels its pending sample, and censors the
  // samples older than the horizon.
  void Label(uint64_t fp) {
    if (pending_size_ == 0) return;
    if (fp != 0) {
      const uint32_t slot = FindPending(fp);
      if (slot != kNoPos) {
        Pending& p = pending_[slot];
        Learn(p, static_cast<double>(now_ - p.at) / p.unit);
        p.fp = 0;
        ErasePending(fp);
      }
    }
    const double horizon = options_.horizon * 64.0;
    while (pending_size_ > 0) {
      Pending& p = pending_[pending_head_];
      if (p.fp != 0) {
        const double waited = static_cast<double>(now_ - p.at) / p.unit;
        if (waited < horizon) break;
        Learn(p, horizon);
        ErasePending(p.fp);
        p.fp = 0;
      }
      pending_head_ = (pending_head_ + 1) % kMaxPending;
      --pending_size_;
    }
  }

  void Learn(const Pending& p, double units) {
    ReuseSample s{p.x, units >= options_.horizon * 64.0 ? 1.0f : 0.0f};
    if (samples_.size() < options_.window) {
      samples_.push_back(s);
    } else {
      samples_[next_sample_] = s;
      next_sample_ = (next_sample_ + 1) % options_.window;
    }
    if (++since_fit_ >= options_.refit) {
      since_fit_ = 0;
      model_.Fit(samples_);
    }
  }

  // The pending samples by fingerprint: open addressing, linear probing,
  // deletion by backward shift; fp 0 marks an empty entry.
  struct PendingEntry {
    uint64_t fp = 0;
    uint32_t slot = 0;
  };
  size_t Home(uint64_t fp) const { return Mix64(fp) & (pending_table_.size() - 1); }
  uint32_t FindPending(uint64_t fp) const {
    for (size_t i = Home(fp);; i = (i + 1) & (pending_table_.size() - 1)) {
      if (pending_table_[i].fp == fp) return pending_table_[i].slot;
      if (pending_table_[i].fp == 0) return kNoPos;
    }
  }
  void InsertPending(uint64_t fp, uint32_t slot) {
    size_t i = Home(fp);
    while (pending_table_[i].fp != 0) i = (i + 1) & (pending_table_.size() - 1);
    pending_table_[i] = PendingEntry{fp, slot};
  }
  void ErasePending(uint64_t fp) {
    const size_t mask = pending_table_.size() - 1;
    size_t i = Home(fp);
    while (pending_table_[i].fp != fp) i = (i + 1) & mask;
    // Backward shift: move up each later entry of the run that may sit at i.
    for (size_t j = (i + 1) & mask; pending_table_[j].fp != 0; j = (j + 1) & mask) {
      const size_t home = Home(pending_table_[j].fp);
      // j's entry may move to i when its home is not in (i, j] (cyclically).
      const bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
      if (movable) {
        pending_table_[i] = pending_table_[j];
        i = j;
      }
    }
    pending_table_[i] = PendingEntry{};
  }

  LearnedOptions options_;
  uint64_t rng_;
  uint64_t now_ = 0;
  PageVector<Node> nodes_;
  PageVector<BlockId> unpinned_;  // the unpinned tracked blocks, in no order
  size_t tracked_ = 0;
  BlockId victim_ = kNoPos;  // Victim()'s answer until the next change
  ReuseModel model_;
  std::vector<Pending> pending_;  // a ring, oldest at pending_head_
  size_t pending_head_ = 0, pending_size_ = 0;
  std::vector<PendingEntry> pending_table_;
  std::vector<ReuseSample> samples_;  // a ring of the last `window` labels
  size_t next_sample_ = 0;
  uint32_t since_fit_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewLearnedPolicy(LearnedOptions options) {
  return std::make_unique<LearnedPolicy>(options);
}

}  // namespace kvtier::eviction
