// MiniCaches (internal/mini_caches.h): the adaptive policy's miniature
// caches and their scores.
#include "eviction/internal/mini_caches.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace kvtier::eviction::internal {

namespace {

// The block Probe adds (another, if a sampled key has it).
constexpr uint64_t kProbeFingerprint = 0x6b76'7469'6572'7072ULL;

}  // namespace

MiniCaches::MiniCaches(std::span<const std::string> names,
                       std::vector<std::unique_ptr<EvictionPolicy>> policies,
                       std::span<AdmissionFilter* const> filters,
                       std::vector<std::unique_ptr<AdmissionFilter>> owned)
    : filters_(std::move(owned)), index_(policies.size()) {
  caches_.reserve(policies.size());  // (each holds &index_; none moves)
  for (size_t i = 0; i < policies.size(); ++i) {
    caches_.emplace_back(names[i], std::move(policies[i]), filters[i], &index_, i);
    deferred_.push_back(caches_.back().policy().recency_ordered());
  }
  started_ = std::find(deferred_.begin(), deferred_.end(), true) == deferred_.end();
}

size_t MiniCaches::Request(std::span<const uint64_t> chain, size_t capacity, size_t followed) {
  sampler_.Sample(
      chain, stride_, [this](uint64_t fp) { return Sampled(fp); }, &sampled_);
  if (sampled_.empty()) return 0;
  // The filters count the sampled keys (every one the caches ask about),
  // before the caches ask them.
  for (const auto& f : filters_) f->Referenced(sampled_);
  last_chain_.assign(sampled_.begin(), sampled_.end());
  if (!started_ && capacity != SIZE_MAX) Start();
  const double known = started_ ? 0 : static_cast<double>(PreludeRequest(sampled_));
  LookUpRows(sampled_);
  for (size_t i = 0; i < caches_.size(); ++i) {
    MiniCache& m = caches_[i];
    m.last = !started_ && deferred_[i] ? known
                                       : static_cast<double>(m.Request(sampled_, rows_, capacity));
    m.hits += m.last;
    m.all_hits += m.last;
  }
  const double by_followed = caches_[followed].last;
  for (MiniCache& m : caches_) m.lead += m.last - by_followed;
  return sampled_.size();
}

size_t MiniCaches::PreludeRequest(std::span<const uint64_t> chain) {
  std::vector<uint32_t>& run = prelude_run_;
  run.clear();
  for (uint64_t fp : chain) {
    const uint32_t row = prelude_index_.Find(fp);
    if (row == SampleIndex::kNoRow) break;
    run.push_back(prelude_index_.Get(row, 0));
  }
  const size_t found = run.size();
  for (size_t i = found; i-- > 0;) prelude_[run[i]].stamp = ++prelude_clock_;
  if (found == chain.size()) return found;
  uint32_t parent = found > 0 ? run.back() : kNoBlock;
  const size_t first_new = prelude_.size();
  for (size_t i = found; i < chain.size(); ++i) {
    // (Every candidate keeps all it was asked, so none of the rest is
    // known: a sampled chain comes whole, its parents first. As a cache
    // would, stop at one that is.)
    const uint32_t row = prelude_index_.Find(chain[i]);
    if (row != SampleIndex::kNoRow) break;
    const auto at = static_cast<uint32_t>(prelude_.size());
    prelude_.push_back(PreludeKey{chain[i], 0, parent});
    prelude_index_.Set(chain[i], row, 0, at);
    parent = at;
  }
  for (size_t at = prelude_.size(); at-- > first_new;) prelude_[at].stamp = ++prelude_clock_;
  if (found > 0) prelude_[run.back()].stamp = ++prelude_clock_;
  return found;
}

void MiniCaches::ThinPrelude() {
  std::vector<uint32_t> up(prelude_.size(), kNoBlock);  // nearest kept ancestor or self
  std::vector<uint32_t> kept_as(prelude_.size(), kNoBlock);
  std::vector<PreludeKey> thinned;
  for (uint32_t at = 0; at < prelude_.size(); ++at) {  // (parents first)
    const PreludeKey& k = prelude_[at];
    const uint32_t above = k.parent == kNoBlock ? kNoBlock : up[k.parent];
    if (!Sampled(k.fp)) {
      up[at] = above;
      continue;
    }
    up[at] = at;
    kept_as[at] = static_cast<uint32_t>(thinned.size());
    thinned.push_back(k);
    thinned.back().parent = above == kNoBlock ? kNoBlock : kept_as[above];
  }
  prelude_ = std::move(thinned);
  prelude_index_.Reset();
  for (uint32_t at = 0; at < prelude_.size(); ++at) prelude_index_.Set(prelude_[at].fp, 0, at);
}

void MiniCaches::Start() {
  if (started_) return;
  started_ = true;
  std::vector<uint32_t> by_stamp(prelude_.size());
  for (uint32_t at = 0; at < by_stamp.size(); ++at) by_stamp[at] = at;
  std::sort(by_stamp.begin(), by_stamp.end(),
            [&](uint32_t a, uint32_t b) { return prelude_[a].stamp < prelude_[b].stamp; });
  for (size_t i = 0; i < caches_.size(); ++i) {
    if (deferred_[i]) caches_[i].Load(prelude_, by_stamp);
  }
  prelude_ = {};
  prelude_index_.Reset();
  prelude_run_ = {};
}

void MiniCaches::Decay(size_t n, double half_life) {
  sampled_refs_ += n;
  all_refs_ += static_cast<double>(n);
  const double keep = std::exp2(-static_cast<double>(n) / half_life);
  refs_ = refs_ * keep + static_cast<double>(n);
  for (MiniCache& m : caches_) {
    m.hits *= keep;
    m.lead *= keep;
  }
}

void MiniCaches::RestartScores() {
  for (MiniCache& m : caches_) m.hits = m.lead = 0;
  refs_ = 0;
}

void MiniCaches::RestartLeads() {
  for (MiniCache& m : caches_) m.lead = 0;
}

void MiniCaches::Trim(size_t capacity) {
  Start();
  for (MiniCache& m : caches_) m.Trim(capacity);
}

const std::vector<size_t>& MiniCaches::Probe(size_t capacity) {
  Start();
  // The last chain as sampled now (the rate may have dropped since), then
  // the block added.
  probe_.clear();
  for (uint64_t fp : last_chain_) {
    if (Sampled(fp)) probe_.push_back(fp);
  }
  const size_t chain = probe_.size();
  uint64_t added = kProbeFingerprint;
  while (index_.Find(added) != SampleIndex::kNoRow) ++added;
  probe_.push_back(added);
  LookUpRows(probe_);
  kept_.clear();
  for (MiniCache& m : caches_) {
    m.Trim(capacity);
    m.Request(probe_, rows_, capacity, /*filtered=*/false);
    m.Forget(added);
    kept_.push_back(m.Retained(std::span(probe_).first(chain)));
  }
  return kept_;
}

void MiniCaches::Restride(uint64_t stride) {
  const double kept = static_cast<double>(stride_) / static_cast<double>(stride);
  stride_ = stride;
  if (!started_) ThinPrelude();
  for (MiniCache& m : caches_) {
    m.Thin([this](uint64_t fp) { return Sampled(fp); });
    m.hits *= kept;
    m.all_hits *= kept;
    m.lead *= kept;
  }
  refs_ *= kept;
  all_refs_ *= kept;
  if (filters_sized_ > 0) SizeFilters(filters_sized_);
}

void MiniCaches::SizeFilters(uint64_t blocks) {
  filters_sized_ = blocks;
  for (const auto& f : filters_) f->SetCapacity(blocks, stride_);
}

void MiniCaches::LookUpRows(std::span<const uint64_t> chain) {
  rows_.clear();
  for (uint64_t fp : chain) {
    rows_.push_back(index_.Find(fp));
    if (rows_.back() == SampleIndex::kNoRow) return;
  }
}

}  // namespace kvtier::eviction::internal
