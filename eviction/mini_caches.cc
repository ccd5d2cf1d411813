// MiniCaches (internal/mini_caches.h): the adaptive policy's miniature
// caches and their scores.
#include "eviction/internal/mini_caches.h"

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
  }
}

size_t MiniCaches::Request(std::span<const uint64_t> chain, size_t capacity, size_t followed) {
  sampler_.Sample(
      chain, stride_, [this](uint64_t fp) { return Sampled(fp); }, &sampled_);
  if (sampled_.empty()) return 0;
  // The filters count the sampled keys (every one the caches ask about),
  // before the caches ask them.
  for (const auto& f : filters_) f->Referenced(sampled_);
  last_chain_.assign(sampled_.begin(), sampled_.end());
  LookUpRows(sampled_);
  for (MiniCache& m : caches_) {
    m.last = static_cast<double>(m.Request(sampled_, rows_, capacity));
    m.hits += m.last;
    m.all_hits += m.last;
  }
  const double by_followed = caches_[followed].last;
  for (MiniCache& m : caches_) m.lead += m.last - by_followed;
  return sampled_.size();
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
  for (MiniCache& m : caches_) m.Trim(capacity);
}

const std::vector<size_t>& MiniCaches::Probe(size_t capacity) {
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
