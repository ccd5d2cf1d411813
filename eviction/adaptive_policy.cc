// Adaptive eviction: follow whichever candidate policy would have hit most on
// this tier's recent traffic.
//
// Why miniature simulations. No fixed policy is safe for a prefix cache:
// where each request extends the last (coding agents), plain LRU evicts the
// middle of a live chain and loses every block after it, and leaf-first LRU
// is near Belady's OPT; on chat traffic leaf-first keeps old conversations'
// interiors and LRU wins; where the working set nearly fits, S3-FIFO can lead
// both. Ghost lists (ARC) judge only the policy that evicted, so they cannot
// tell what another candidate would have kept. A miniature simulation
// (Waldspurger et al., ATC'17) runs every candidate on a hash-sampled subset
// of the keys with its capacity scaled by the sampling rate, and its hit rate
// tracks the full cache's; here each candidate is the real policy object, so
// what is simulated is what would run.
//
// What is simulated is the engine's prefix cache, on the chains the lookups
// ask for (Referenced), not on the tier's Insert and Touch: those carry only
// what the engine serves or writes (nothing after a miss, nothing skipped for
// lack of room), which hides exactly where the candidates differ. A chain's
// sampled keys form a chain of their own, each key's parent being its nearest
// sampled ancestor; keys are chained hashes, so that parent is the same at
// every occurrence and the sampled keys form a consistent prefix tree, a
// scaled-down copy of the real one. On it each miniature cache does what the
// engine does with a worker's request: counts the leading run present as
// hits and reads it (touched tail first, then released: a worker's lease
// ends before it writes), then writes the rest under the run's last block,
// which alone stays pinned as the write's parent, evicting the candidate's
// victims (a victim's descendants go with it, pinned ones when the write
// ends; a block that finds no room is skipped with the rest). Keeping the
// whole run pinned while writing, as an earlier version did, hid the one
// difference that matters on agent traffic: plain LRU evicting the middle
// of the very chain being extended.
//
// Rate. One key in `stride` is sampled, by a hash of its fingerprint. A
// policy does not know its tier's capacity, so a miniature cache holds what
// the tier does: everything until the tier first evicts, then as many
// sampled keys as the tier holds (the engine gives Insert and Referenced the
// same fingerprints, so the tier's sampled blocks are counted). The stride
// is a power of two, set so that a miniature cache holds about
// sample_blocks of the tier's high-water size, at least min_stride (bounding
// the cost) unless the cache would then hold fewer than min_sample_blocks:
// a tiny tier samples every key, then one in 2, 4, ... as it fills (with one
// or two keys a miniature cache cannot show a candidate dropping the block
// before the one it writes under). When the high water mark raises the
// stride, each miniature cache is thinned in place: the keys of a
// power-of-two stride are a subset of those of the stride below, so it
// drops the keys no longer sampled, their children moving up to their
// parents, and keeps its order.
//
// Following. Only the followed candidate runs on the tier's real blocks: one
// policy's work per operation, as the fixed policies do (keeping every
// candidate live cost 1.6-2.3x LRU's time in replay), and none before the
// tier's first victim is wanted (built then from the tier's blocks, as at a
// switch). A switch builds the
// new candidate from the tier's blocks, inserted oldest first by the time of
// their last access, insert, unpin or becoming a leaf, each touched as often
// as it was accessed (up to 3): exactly the order a live LRU (and leaf-first
// LRU, up to ties) would have, and for S3-FIFO the frequencies that send
// reused blocks to its main queue (without them it took over as a plain
// FIFO and gained nothing on Mooncake).
//
// Deciding. Nothing is decided until the tier first needs room: before, every
// candidate keeps everything the tier does (and the candidates whose order
// is recency's are not run until then, but made from a record of the
// sampled keys: internal/mini_caches.h, "The prelude"). Then each miniature cache is cut
// to the tier's sampled size by its own victims and probed: it serves the
// last request's chain again with one block more (the next request, where a
// coding agent's session extends the last), and the candidate that keeps the
// longest leading run of that chain starts, the first one on a tie. Where
// other traffic fills the tier every candidate keeps the last chain whole;
// where one session fills it, plain LRU drops the block before the one it
// writes under, and that block's descendants with it. A session replayed
// alone has only its few requests to learn from: without the probe, at half
// of one session's blocks adaptive lost 3.5 points to leaf-first LRU before
// the samples made it switch (0.0 with it, at every capacity of all eight
// recorded sessions; the probe, one request more, distorts the samples no
// more than a request does). The scores restart then (kept, the references
// from the filling diluted the lead of the candidate that evicts best; on the
// Mooncake trace S3-FIFO took over two thirds of the way through instead of a
// third, and the policy stayed 1.3 points under it). Each candidate's lead is
// its hits minus the followed candidate's, request by request, since that one
// was chosen; leads, hits and the reference count decay with a half-life of
// eight turnovers of a miniature cache. Every eighth of a turnover the
// candidate with the largest lead, if it exceeds `margin` of the references,
// becomes the followed one, and the leads restart against it. A switch is not
// free (the new candidate inherits blocks the old one chose to keep; a
// rebuilt S3-FIFO lacks the history of one that ran), so it must come early,
// on little evidence: deciding every half turnover, or only after two
// decisions in a row, switched too late on the Mooncake trace and lost up to
// 2 points to S3-FIFO over different sampling seeds; deciding every eighth,
// the worst over six seeds was 0.8 point under the best fixed policy and 0.5
// under LRU on the traces the project carries.
//
// Admission. A candidate "policy/filter" (lru/seen) is the policy with an
// admission filter asked before each eviction its miniature cache makes for
// a new block. It is not followed as a policy: while the tier follows its
// policy, the tier also filters from when the variant leads by `margin`
// until its lead is gone (ChooseFilter; the engine asks admission()). Each
// filter is made twice: the miniature caches' counts the sampled keys (as
// often as a filter of every key counts them, in a sketch a stride's
// share of the size, aged as often in references), and the tier's, which
// the tier asks of any key, counts every key looked up, but only while a
// variant trails its policy by less than kCountingMargins margins or the
// tier filters.
//
// Hierarchies. Each tier's miniature caches simulate that tier alone; where
// a chain spans tiers (a tier above or below) leaf-first candidates and
// filters lost badly on the recorded agent sessions (docs/eviction.md, "In
// a hierarchy"), so there neither is followed (Eligible, ChooseFilter).
//
// Priority retention applies on top of every candidate: a block whose
// effective priority is not the default sits in a priority policy instead,
// and goes before the candidate's blocks when lower, after them when higher.
// A priority that expires while its block is untouched keeps it in the
// priority policy at the default level, behind the candidate's blocks.
#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/page_allocator.h"
#include "eviction/eviction_policy.h"
#include "eviction/internal/adaptive.h"
#include "eviction/internal/adaptive_candidates.h"
#include "eviction/internal/mini_caches.h"
#include "eviction/internal/stamp_sort.h"

namespace kvtier::eviction {
namespace {

// How far (in margins) the best filtered variant may trail the followed
// candidate with the tier's filters still counting every key (ChooseFilter).
// Measured over 8-16 sampling hashes at the sweep's capacities: counting
// only from a lead of 0 lost 0.5 point at 20 % of the Mooncake trace
// (against 0.1 from 3 margins), where the tier then filtered with too short
// a memory.
constexpr double kCountingMargins = 3;

class AdaptivePolicy final : public EvictionPolicy {
 public:
  // `candidates`: options.candidates made (MakeAdaptiveCandidates).
  AdaptivePolicy(const Clock& clock, AdaptiveOptions options,
                 internal::AdaptiveCandidates candidates, std::unique_ptr<EvictionPolicy> priority,
                 std::unique_ptr<EvictionPolicy> leaf_priority, uint32_t stamp_limit)
      : clock_(clock),
        options_(std::move(options)),
        stamp_limit_(stamp_limit),
        priority_{std::move(priority), std::move(leaf_priority)},
        tier_filters_(std::move(candidates.tier_owned)),
        tier_filter_of_(std::move(candidates.tier_filters)),
        minis_(options_.candidates, std::move(candidates.policies), candidates.filters,
               std::move(candidates.owned)) {
    variants_.resize(minis_.size());
    for (size_t i = 0; i < minis_.size(); ++i) {
      if (minis_[i].admission() == nullptr) continue;
      for (size_t b = 0; b < minis_.size(); ++b) {
        if (minis_[b].admission() == nullptr && PolicyName(b) == PolicyName(i)) {
          variants_[b].push_back(i);
        }
      }
    }
    Follows(0);
  }

  std::string_view name() const override { return "adaptive"; }

  // Insert, Touch, Update, Erase and Victim handle the usual case (a block
  // of the followed candidate at the default priority, in the ids and
  // sizes seen, stamps to spare) with no call but the followed candidate's,
  // last, so that they need no stack frame: in replay, saving and
  // restoring registers around the other calls cost a fifth of adaptive's
  // own time per operation. The rest goes out of line.
  void Insert(BlockId id, const BlockMeta& meta) override {
    if (id >= blocks_.size() || meta.priority != kDefaultPriority || size_ >= high_water_ ||
        clock_stamp_ >= stamp_limit_) [[unlikely]] {
      return InsertSlow(id, meta);
    }
    assert(blocks_[id].where == Where::kNone);
    const uint64_t fp = meta.fingerprint;
    fingerprints_[id] = fp;
    const uint8_t sampled = minis_.Sampled(fp) ? kSampled : 0;
    sampled_in_tier_ += sampled != 0;
    ++size_;
    blocks_[id] = Slot{++clock_stamp_, kDefaultPriority, 0,
                       static_cast<uint8_t>(FlagsOf(meta) | sampled), Where::kFollowed};
    if (live_ != nullptr) live_->Insert(id, meta);
  }

  [[gnu::noinline]] void InsertSlow(BlockId id, const BlockMeta& meta) {
    if (id >= blocks_.size()) {
      blocks_.resize(static_cast<size_t>(id) + 1);
      fingerprints_.resize(blocks_.size());
    }
    Slot& s = blocks_[id];
    assert(s.where == Where::kNone);
    const bool sampled = minis_.Sampled(meta.fingerprint);
    fingerprints_[id] = meta.fingerprint;
    s.stamp = NextStamp();
    s.touches = 0;
    s.flags = FlagsOf(meta) | (sampled ? kSampled : 0);
    s.priority = kDefaultPriority;
    if (meta.priority != kDefaultPriority) SetPriority(id, s, meta);
    s.where = Retained(meta) ? Where::kPriority : Where::kFollowed;
    PoolInsert(s.where, id, meta);
    ++size_;
    sampled_in_tier_ += sampled;
    if (size_ > high_water_) {
      high_water_ = size_;
      if (high_water_ >= next_restride_) Restride();
      // The filters are sized as the engine sizes a tier's own (twice what
      // the tier has held, told as that passes), so that a filtered
      // candidate's filter is the one the tier would run: a sketch half as
      // large ages twice as often, and on agent sessions that alone took a
      // filtered candidate's hit rate from 6 % to 0.2 %.
      if (high_water_ > filters_sized_ && minis_.has_filters()) {
        filters_sized_ = 2 * high_water_;
        for (const auto& f : tier_filters_) f->SetCapacity(filters_sized_);
        minis_.SizeFilters(filters_sized_);
      }
    }
  }

  // (Touch and Update's other cases: Route.)
  void Touch(BlockId id, const BlockMeta& meta) override {
    Slot& s = blocks_[id];
    assert(s.where != Where::kNone);
    if (!Usual(s, meta)) return Route(id, meta, /*touch=*/true);
    s.stamp = ++clock_stamp_;
    if (s.touches < 3) ++s.touches;
    s.flags = (s.flags & kSampled) | FlagsOf(meta);
    if (live_ != nullptr) live_->Touch(id, meta);
  }

  void Update(BlockId id, const BlockMeta& meta) override {
    Slot& s = blocks_[id];
    assert(s.where != Where::kNone);
    if (!Usual(s, meta)) return Route(id, meta, /*touch=*/false);
    const uint8_t now = FlagsOf(meta);
    const uint8_t was = s.flags;
    const unsigned change = (was & kKept) * 4u + now;  // (was, now), of the kept flags
    if (((kStampingChanges >> change) & 1) != 0) s.stamp = ++clock_stamp_;
    s.flags = (was & kSampled) | now;
    if (live_ != nullptr && ((seen_changes_ >> change) & 1) != 0) live_->Update(id, meta);
  }

  void Erase(BlockId id) override {
    Slot& s = blocks_[id];
    assert(s.where != Where::kNone);
    if (s.where != Where::kFollowed || s.priority != kDefaultPriority) [[unlikely]] {
      return EraseSlow(id);
    }
    sampled_in_tier_ -= (s.flags & kSampled) != 0;
    s.where = Where::kNone;  // (Insert sets every other field)
    --size_;
    if (live_ != nullptr) live_->Erase(id);
  }

  [[gnu::noinline]] void EraseSlow(BlockId id) {
    Slot& s = blocks_[id];
    PoolErase(s.where, id);
    sampled_in_tier_ -= (s.flags & kSampled) != 0;
    if (s.priority != kDefaultPriority) expires_.erase(id);
    s.where = Where::kNone;  // (Insert sets every other field)
    --size_;
  }

  std::optional<BlockId> Victim() override {
    // (An empty priority pool, the usual case, costs no call and no clock
    // read.)
    if (evicting_ && retained_ == 0) [[likely]]
      return live_->Victim();
    return VictimSlow();
  }

  [[gnu::noinline]] std::optional<BlockId> VictimSlow() {
    if (!evicting_) {
      // The candidate followed so far takes the blocks now: until a victim
      // is wanted no policy needs to order them, and the slots know the
      // order (Build).
      Build(StartScoring());
    }
    if (retained_ == 0) return live_->Victim();
    const std::optional<BlockId> p = priority_[follows_leaf_ ? 1 : 0]->Victim();
    if (p && EffectivePriority(Meta(*p)) < kDefaultPriority) return p;
    // A leaf-first candidate with every leaf pinned names none, as it would
    // alone: the engine then skips the write rather than evict an interior
    // block and the subtree under it.
    const std::optional<BlockId> f = live_->Victim();
    return f ? f : p;
  }

  size_t size() const override { return size_; }

  bool wants_references() const override { return true; }

  void Referenced(std::span<const uint64_t> chain) override {
    // A tier below another that has never held a block (an ssd under a
    // host that has not filled yet, perhaps for hours) has nothing to
    // choose, and its miniature caches would sample every key (the stride
    // grows with the high water mark): they would cost more than the host's
    // own policy, every lookup. They start at the tier's first block. (A
    // tier on top counts from the first lookup: its first chain decides
    // where it starts, and it fills at once.)
    if (below_ && high_water_ == 0) [[unlikely]]
      return;
    // The tier's filters count every key (the tier asks of any block), but
    // only while the tier may filter soon (counting_); the miniature
    // caches' count the sampled keys, before the caches ask them.
    if (counting_) [[unlikely]] {
      for (const auto& f : tier_filters_) f->Referenced(chain);
    }
    const size_t sampled = minis_.Request(chain, MiniCapacity(), followed_index_);
    if (sampled > 0) Decay(sampled);
  }

  void SetVictimsDemoted(bool demoted) override { victims_demoted_ = demoted; }
  void SetBelowAnotherTier(bool below) override { below_ = below; }

  bool filters_admission() const override { return minis_.has_filters(); }
  AdmissionFilter* admission() override {
    return filtering_ != kNoCandidate ? tier_filter_of_[filtering_] : nullptr;
  }

  std::optional<AdaptiveReport> adaptive_report() const override {
    AdaptiveReport r;
    for (size_t i = 0; i < minis_.size(); ++i) {
      CandidateReport c;
      c.name = std::string(minis_[i].name());
      c.sampled_hit_rate = minis_.refs() > 0 ? minis_[i].hits / minis_.refs() : 0;
      c.overall_sampled_hit_rate =
          minis_.all_refs() > 0 ? minis_[i].all_hits / minis_.all_refs() : 0;
      // (Filtering, the filtered variant is what the tier does: the policy
      // and the filter.)
      c.followed = i == (filtering_ != kNoCandidate ? filtering_ : followed_index_);
      r.candidates.push_back(std::move(c));
    }
    r.switches = switches_;
    r.sampled_refs = minis_.sampled_refs();
    r.sample_stride = minis_.stride();
    r.sample_capacity = SampledCapacity();
    return r;
  }

 private:
  enum class Where : uint8_t { kNone, kFollowed, kPriority };

  // Slot::flags.
  static constexpr uint8_t kPinned = 1;
  static constexpr uint8_t kHasChildren = 2;  // children_in_tier > 0
  static constexpr uint8_t kKept = kPinned | kHasChildren;
  static constexpr uint8_t kSampled = 4;  // Sampled(fingerprint) at the current stride

  // A tracked block: what its operations read and write, in 8 bytes,
  // eight to a cache line, since every operation on the tier reads one at
  // a random place: in a tier larger than the caches each is a miss LRU
  // does not have (in replay at 43,924 blocks adaptive misses the 1 MiB L2
  // a third more often than LRU), and the smaller the slots, the more of
  // them stay cached. What only a rebuilt candidate reads is kept apart:
  // the fingerprint (fingerprints_, written at Insert) and the expiry of a
  // priority that is not the default (expires_). Of children_in_tier only
  // whether it is 0 is kept: it is all a candidate reads (leaf first).
  struct Slot {
    // When the block last joined the recency order: inserted, touched,
    // unpinned or made a leaf (the order a rebuilt candidate gets).
    uint32_t stamp = 0;
    uint8_t priority = kDefaultPriority;
    uint8_t touches = 0;  // accesses since it entered, up to 3 (S3-FIFO's frequency)
    uint8_t flags = 0;
    Where where = Where::kNone;
  };
  static_assert(sizeof(Slot) == 8);

  // Sets of changes (was, now) of the kept flags, bit was * 4 + now. An
  // unpin or a block made a leaf takes a new stamp ...
  static constexpr uint16_t kStampingChanges = [] {
    uint16_t set = 0;
    for (unsigned was = 0; was < 4; ++was) {
      for (unsigned now = 0; now < 4; ++now) {
        if ((was & ~now) != 0) set = static_cast<uint16_t>(set | (1u << (was * 4 + now)));
      }
    }
    return set;
  }();
  // ... and the followed candidate hears only of those it sees (Follows):
  // an update that leaves a block as it reads it (most of the engine's: a
  // parent losing a child, where leaves do not count) would change nothing
  // there.
  static constexpr uint16_t SeenChanges(uint8_t view) {
    uint16_t set = 0;
    for (unsigned was = 0; was < 4; ++was) {
      for (unsigned now = 0; now < 4; ++now) {
        if (((was & view) != 0) != ((now & view) != 0)) {
          set = static_cast<uint16_t>(set | (1u << (was * 4 + now)));
        }
      }
    }
    return set;
  }

  static uint8_t FlagsOf(const BlockMeta& m) {
    return static_cast<uint8_t>((m.pinned ? kPinned : 0) |
                                (m.children_in_tier > 0 ? kHasChildren : 0));
  }

  // The block's metadata as a rebuilt candidate (or the priority pools'
  // victim check) reads it.
  BlockMeta Meta(BlockId id) const {
    const Slot& s = blocks_[id];
    BlockMeta m;
    m.priority = s.priority;
    if (s.priority != kDefaultPriority) m.priority_expires_at = expires_.at(id);
    m.pinned = (s.flags & kPinned) != 0;
    m.children_in_tier = (s.flags & kHasChildren) != 0 ? 1 : 0;
    m.fingerprint = fingerprints_[id];
    return m;
  }

  // A block of the followed candidate at the default priority, staying
  // so, with stamps to spare (so that the usual case makes no call but
  // the live policy's, and needs no stack frame).
  bool Usual(const Slot& s, const BlockMeta& meta) const {
    return s.where == Where::kFollowed && s.priority == kDefaultPriority &&
           meta.priority == kDefaultPriority && clock_stamp_ < stamp_limit_;
  }

  void SetPriority(BlockId id, Slot& s, const BlockMeta& meta) {
    if (meta.priority != kDefaultPriority) {
      expires_[id] = meta.priority_expires_at;
    } else if (s.priority != kDefaultPriority) {
      expires_.erase(id);
    }
    s.priority = meta.priority;
  }

  // The next recency stamp. At stamp_limit_ (2^32 - 1: after billions of
  // operations) the tracked blocks' stamps are renumbered 1..n in their
  // order, which is all a stamp says.
  uint32_t NextStamp() {
    if (clock_stamp_ >= stamp_limit_) [[unlikely]]
      RenumberStamps();
    return ++clock_stamp_;
  }

  [[gnu::noinline]] void RenumberStamps() {
    order_.clear();
    for (BlockId id = 0; id < blocks_.size(); ++id) {
      if (blocks_[id].where != Where::kNone) order_.emplace_back(blocks_[id].stamp, id);
    }
    SortByStamp();
    uint32_t next = 0;
    for (const auto& [stamp, id] : order_) blocks_[id].stamp = ++next;
    clock_stamp_ = next;
    assert(clock_stamp_ < stamp_limit_);
  }

  void PoolInsert(Where w, BlockId id, const BlockMeta& meta) {
    if (w == Where::kPriority) [[unlikely]] {
      for (auto& p : priority_) p->Insert(id, meta);
      ++retained_;
      return;
    }
    if (live_ != nullptr) live_->Insert(id, meta);
  }
  void PoolErase(Where w, BlockId id) {
    if (w == Where::kPriority) [[unlikely]] {
      for (auto& p : priority_) p->Erase(id);
      --retained_;
      return;
    }
    if (live_ != nullptr) live_->Erase(id);
  }

  uint8_t EffectivePriority(const BlockMeta& m) const {
    if (m.priority == kDefaultPriority) return m.priority;  // no clock read
    return m.priority_expires_at <= clock_.Now() ? kDefaultPriority : m.priority;
  }
  bool Retained(const BlockMeta& m) const { return EffectivePriority(m) != kDefaultPriority; }

  // Passes an access or an update to the pool the block belongs in now.
  // (Out of line, so that Touch's and Update's usual case stays lean.)
  [[gnu::noinline]] void Route(BlockId id, const BlockMeta& meta, bool touch) {
    Slot& s = blocks_[id];
    const uint8_t now = FlagsOf(meta);
    if (touch || (s.flags & ~now & kKept) != 0) s.stamp = NextStamp();
    if (touch && s.touches < 3) ++s.touches;
    s.flags = (s.flags & kSampled) | now;
    SetPriority(id, s, meta);
    const Where w = Retained(meta) ? Where::kPriority : Where::kFollowed;
    if (w != s.where) {
      PoolErase(s.where, id);
      PoolInsert(w, id, meta);
      s.where = w;
    } else if (w == Where::kPriority) {
      for (auto& p : priority_) touch ? p->Touch(id, meta) : p->Update(id, meta);
    } else if (live_ == nullptr) {
      return;
    } else if (touch) {
      live_->Touch(id, meta);
    } else {
      live_->Update(id, meta);
    }
  }

  // The sampled keys a full tier holds: those it holds now, plus a stride's
  // share of the room left below its largest size.
  size_t SampledCapacity() const {
    return std::max<size_t>(1, sampled_in_tier_ + (high_water_ - size_) / minis_.stride());
  }

  // A miniature cache holds what the tier does: everything until the tier
  // first evicts, then as many sampled keys as the tier holds. Counted, not
  // scaled (high water / stride): the sampled share of a tier's blocks
  // varies by a few percent, and a miniature cache that fills earlier or
  // later than the tier parts the candidates at another moment than the
  // tier's. (Measured, neither is better everywhere: on single coding-agent
  // sessions, where LRU's first evictions take the head of the live chain,
  // counting cut the loss to leaf-first LRU from 24 to 17 points on one
  // and raised it from 1.6 to 7.6 on another; the loss is the requests
  // served between the first eviction and the switch.)
  size_t MiniCapacity() const { return evicting_ ? SampledCapacity() : SIZE_MAX; }

  // The tier needs room for the first time: from now on its policy decides
  // what it keeps, and the candidates' scores restart ("Deciding", above).
  // Returns the candidate to start with: the one whose miniature cache, cut
  // to the tier's size, keeps most of the last request's chain when that
  // chain comes again with one block more (the next request of a coding
  // agent's session; where other traffic fills the tier, every candidate
  // keeps it whole and the first one starts).
  [[gnu::noinline]] size_t StartScoring() {
    evicting_ = true;
    minis_.RestartScores();
    since_decision_ = 0;
    // Where victims go down to the next tier, dropping the block before the
    // one a write goes under loses nothing: no probe (leaf-first would
    // rather skip the rest of a chain longer than the tier than push its
    // head down).
    if (victims_demoted_) {
      minis_.Trim(SampledCapacity());
      return followed_index_;
    }
    const std::vector<size_t>& kept = minis_.Probe(SampledCapacity());
    size_t best = followed_index_;
    for (size_t i = 0; i < minis_.size(); ++i) {
      if (Eligible(i) && minis_[i].admission() == nullptr && kept[i] > kept[best]) best = i;
    }
    return best;
  }

  // The stride that puts about sample_blocks in a miniature cache, at least
  // min_stride, and at most one that leaves min_sample_blocks there. A
  // larger stride thins the miniature caches (each keeps its sampled keys
  // the new rate still samples, in its order).
  [[gnu::noinline]] void Restride() {
    next_restride_ = high_water_ * 2;

    const auto floor_div = [&](uint64_t n) {
      return std::bit_floor(std::max<uint64_t>(1, high_water_ / std::max<uint64_t>(1, n)));
    };
    const uint64_t want =
        std::max(std::min(options_.min_stride, floor_div(options_.min_sample_blocks)),
                 floor_div(options_.sample_blocks));
    if (want <= minis_.stride()) return;
    minis_.Restride(want);
    sampled_in_tier_ = 0;
    for (BlockId id = 0; id < blocks_.size(); ++id) {
      Slot& b = blocks_[id];
      if (b.where == Where::kNone) continue;
      const bool sampled = minis_.Sampled(fingerprints_[id]);
      b.flags = static_cast<uint8_t>((b.flags & ~kSampled) | (sampled ? kSampled : 0));
      sampled_in_tier_ += sampled;
    }
  }

  // Ages every candidate's hits and the reference count by `n` references,
  // and now and then reconsiders which candidate to follow.
  void Decay(size_t n) {
    const double half_life =
        std::clamp(8.0 * static_cast<double>(std::max<size_t>(1, high_water_ / minis_.stride())),
                   1024.0, 1048576.0);
    minis_.Decay(n, half_life);
    if (!evicting_) return;  // nothing to choose yet: every candidate keeps everything
    since_decision_ += n;
    if (since_decision_ < static_cast<uint64_t>(half_life / 64)) return;
    since_decision_ = 0;
    ChooseFilter();
    size_t best = followed_index_;
    for (size_t i = 0; i < minis_.size(); ++i) {
      if (Eligible(i) && minis_[i].admission() == nullptr && minis_[i].lead > minis_[best].lead) {
        best = i;
      }
    }
    if (best == followed_index_ || minis_[best].lead <= options_.margin * minis_.refs()) {
      streak_ = 0;
      return;
    }
    streak_ = best == leader_ ? streak_ + 1 : 1;
    leader_ = best;
    if (streak_ >= options_.streak) {
      Follow(best);
      streak_ = 0;
    }
  }

  void SortByStamp() { internal::SortByStamp(&order_, &scratch_); }

  // Whether to filter admission as one of the followed policy's filtered
  // variants does: from when the variant with the largest lead has led it by
  // `margin` of the references until its lead is gone.
  void ChooseFilter() {
    // A tier whose victims go down judges its own hits alone, and a block it
    // keeps out reaches no tier below either: a filter that raised the host's
    // hits on Mooncake (1,953 blocks over an ssd of 7,813) lowered the
    // hierarchy's from 0.421 to 0.389. A tier below another is filled by
    // demotions, which its miniature caches (filled by requests) do not
    // model, and the engine asks no policy's filter of a demotion (the ssd's
    // own filter is ssd.admission).
    counting_ = false;
    if (victims_demoted_ || below_) return;
    size_t best = kNoCandidate;
    for (size_t v : variants_[followed_index_]) {
      if (best == kNoCandidate || minis_[v].lead > minis_[best].lead) best = v;
    }
    if (best == kNoCandidate) return;
    if (filtering_ == kNoCandidate) {
      if (minis_[best].lead > options_.margin * minis_.refs()) filtering_ = best;
    } else if (minis_[filtering_].lead < 0) {
      filtering_ = minis_[best].lead > options_.margin * minis_.refs() ? best : kNoCandidate;
    }
    // The tier's filters count every key looked up while the best variant
    // trails the followed candidate by less than kCountingMargins margins
    // (so that one that goes on to lead by a margin filters with what was
    // looked up meanwhile), and while the tier filters. Counting every key
    // costs a random word of a sketch of 16 bytes a tier block, a cache
    // miss a key in a tier larger than the caches: always counting was a
    // sixth of adaptive's cost over LRU's in replay (Mooncake x16, 43,924
    // blocks), where the variants trail by far.
    counting_ = filtering_ != kNoCandidate ||
                minis_[best].lead > -kCountingMargins * options_.margin * minis_.refs();
  }

  // Makes candidate `i` the followed one, its leads restarting against it
  // (and unfiltered until a variant leads it).
  [[gnu::noinline]] void Follow(size_t i) {
    Build(i);
    filtering_ = kNoCandidate;
    minis_.RestartLeads();
    ++switches_;
  }

  // Candidate `i` is the followed one (its view of the blocks: follows_leaf_
  // and seen_changes_).
  void Follows(size_t i) {
    followed_index_ = i;
    follows_leaf_ = PolicyName(i).starts_with("leaf-");
    seen_changes_ = SeenChanges(follows_leaf_ ? kKept : kPinned);
  }

  // Whether candidate `i` may be followed. Not a leaf-first one in a tier of
  // a hierarchy (victims demoted, or a tier above): there a chain spans
  // tiers, a block's children in another tier do not keep it in its own,
  // and the miniature caches judge the tier as if alone. Measured on the
  // agent sessions with an ssd of three times the host below it, leaf-first
  // LRU on either tier cost 36-42 points against LRU on both (0.53-0.59
  // against 0.95, one session after another), where alone it gains up to 41.
  bool Eligible(size_t i) const {
    return !(PolicyName(i).starts_with("leaf-") && (victims_demoted_ || below_));
  }

  // Candidate `i`'s policy: its name up to the slash before a filter.
  std::string_view PolicyName(size_t i) const {
    const std::string_view name = options_.candidates[i];
    return name.substr(0, name.find('/'));
  }

  // Makes a new instance of candidate `i` the live one, given the tier's
  // blocks oldest first.
  [[gnu::noinline]] void Build(size_t i) {
    Result<std::unique_ptr<EvictionPolicy>> next = NewPolicy(PolicyName(i), clock_);
    if (!next) return;  // cannot happen: every name was made once at the start
    order_.clear();
    for (BlockId id = 0; id < blocks_.size(); ++id) {
      if (blocks_[id].where == Where::kFollowed) order_.emplace_back(blocks_[id].stamp, id);
    }
    SortByStamp();
    // Each block inserted, then touched as often as it was accessed (up to
    // 3): S3-FIFO's (and LFU's) frequencies, so that it does not take over
    // as a plain FIFO. A policy ordered by recency alone (LRU, priority,
    // leaf-first around them) keeps a block touched right after its insert
    // where the insert put it, so it is not touched.
    const std::string_view name = PolicyName(i);
    const bool by_recency = name.ends_with("lru") || name.ends_with("priority");
    for (const auto& [stamp, id] : order_) {
      const BlockMeta meta = Meta(id);
      (*next)->Insert(id, meta);
      if (by_recency) continue;
      for (uint8_t t = 0; t < blocks_[id].touches; ++t) (*next)->Touch(id, meta);
    }
    (*next)->Inherit(minis_[i].policy());  // (learned: its model)
    live_ = std::move(next).value();
    Follows(i);
  }

  const Clock& clock_;
  AdaptiveOptions options_;
  // The followed candidate on the tier's blocks; none until the first
  // Victim().
  std::unique_ptr<EvictionPolicy> live_;
  size_t followed_index_ = 0;  // a candidate without a filter
  // The filtered variant of the followed candidate whose filter the tier
  // follows (ChooseFilter), or kNoCandidate.
  static constexpr size_t kNoCandidate = SIZE_MAX;
  size_t filtering_ = kNoCandidate;
  // Of each candidate without a filter, the candidates that are its policy
  // with one (lru: lru/seen).
  uint32_t clock_stamp_ = 0;  // Slot::stamp's clock
  const uint32_t stamp_limit_;
  std::vector<std::pair<uint32_t, BlockId>> order_;    // Build's (and RenumberStamps') scratch
  std::vector<std::pair<uint32_t, BlockId>> scratch_;  // SortByStamp's
  // The retained blocks by priority, twice: plainly, and leaf first (used
  // while the followed candidate is leaf-first, so that it keeps a retained
  // block's children as it keeps the others').
  std::array<std::unique_ptr<EvictionPolicy>, 2> priority_;
  bool follows_leaf_ = false;
  // The changes of a block's kept flags the followed candidate sees (it
  // reads pinned, and a leaf-first one whether it has children too).
  uint16_t seen_changes_ = 0;
  size_t retained_ = 0;  // blocks in the priority pools
  PageVector<Slot> blocks_;
  PageVector<uint64_t> fingerprints_;  // of the tracked blocks, as inserted (they keep their keys)
  std::unordered_map<BlockId, TimeNs>
      expires_;  // of the blocks whose Slot::priority is not the default
  size_t size_ = 0;
  uint64_t switches_ = 0;

  std::vector<std::vector<size_t>> variants_;
  // The candidates' filters as the tier runs them (one a name: given every
  // key while counting_; the miniature caches have their own).
  std::vector<std::unique_ptr<AdmissionFilter>> tier_filters_;
  std::vector<AdmissionFilter*> tier_filter_of_;  // candidate i's tier filter, or null
  internal::MiniCaches minis_;                    // every candidate's, and their scores
  uint64_t filters_sized_ = 0;                    // the capacity last told the filters
  bool counting_ = false;                         // the tier's filters count (ChooseFilter)
  uint64_t high_water_ = 0;
  size_t sampled_in_tier_ = 0;  // the tier's blocks whose fingerprint is sampled
  uint64_t next_restride_ = 0;
  uint64_t since_decision_ = 0;
  size_t leader_ = 0;             // the candidate that led at the last decisions
  uint32_t streak_ = 0;           // decisions in a row it led the followed one by margin
  bool evicting_ = false;         // the tier has named a victim
  bool victims_demoted_ = false;  // SetVictimsDemoted
  bool below_ = false;            // SetBelowAnotherTier
};

}  // namespace

namespace internal {

Result<std::unique_ptr<EvictionPolicy>> NewAdaptivePolicyWithStampLimit(const Clock& clock,
                                                                        AdaptiveOptions options,
                                                                        uint32_t stamp_limit) {
  if (options.min_stride == 0 || !std::has_single_bit(options.min_stride)) {
    return InvalidArgumentError("adaptive: min_stride must be a power of two");
  }
  KVTIER_ASSIGN_OR_RETURN(internal::AdaptiveCandidates candidates,
                          internal::MakeAdaptiveCandidates(options.candidates, clock));
  std::unique_ptr<EvictionPolicy> policy = std::make_unique<AdaptivePolicy>(
      clock, std::move(options), std::move(candidates), NewPriorityPolicy(clock),
      NewLeafFirst(NewPriorityPolicy(clock)), stamp_limit);
  return policy;
}

}  // namespace internal

Result<std::unique_ptr<EvictionPolicy>> NewAdaptivePolicy(const Clock& clock,
                                                          AdaptiveOptions options) {
  return internal::NewAdaptivePolicyWithStampLimit(clock, std::move(options), UINT32_MAX);
}

}  // namespace kvtier::eviction
