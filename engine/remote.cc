// The CacheEngine and the remote tier (tiers/remote_tier.h): lookups that
// ask the cluster for the rest of a chain, acquires that read those blocks
// into the host tier first, a hint's read-ahead, and blocks written out as
// they leave the node's memory (or at once, write-through). Every call to
// the cluster runs on remote_io; the engine's state is touched only in the
// completions, back on its thread. Nothing here runs without a remote tier.
#include <cstring>
#include <memory>

#include "engine/cache_engine.h"
#include "engine/internal/lower_codec.h"

namespace kvtier::engine {

using prefix_index::EntryId;
using prefix_index::kNoEntry;

bool CacheEngine::SubmitRemote(IoExecutor::Work work, IoExecutor::Done done) {
  const bool queued = remote_io_->Submit(std::move(work), [this, done = std::move(done)](Status s) {
    --remote_in_flight_;
    done(std::move(s));
  });
  if (queued) ++remote_in_flight_;
  return queued;
}

std::optional<size_t> CacheEngine::RemoteStart(NamespaceId ns,
                                               std::span<const BlockKey> keys) const {
  if (remote_ == nullptr || remote_->paused()) return std::nullopt;
  size_t h = 0;
  while (h < keys.size()) {
    const EntryId id = index_.Find(ns, keys[h]);
    if (id == kNoEntry) return h;                  // not here at all: the cluster may have it
    if (!index_.visible(id)) return std::nullopt;  // being written or moved here
    ++h;
  }
  return std::nullopt;
}

bool CacheEngine::WaitForRemoteRead(NamespaceId ns, std::span<const BlockKey> keys,
                                    std::function<void()>& then) {
  if (remote_reading_.empty()) return false;
  for (const BlockKey& key : keys) {
    const EntryId id = index_.Find(ns, key);
    if (id == kNoEntry) return false;
    if (index_.visible(id)) continue;
    const auto it = remote_reading_.find(id);
    if (it == remote_reading_.end()) return false;  // a worker's write: not waited for
    remote_read_waiters_[it->second].push_back(std::move(then));
    return true;
  }
  return false;
}

void CacheEngine::RemoteReadDone(uint64_t read) {
  auto node = remote_read_waiters_.extract(read);
  if (node.empty()) return;
  for (std::function<void()>& waiter : node.mapped()) waiter();
}

void CacheEngine::LookupRemote(NamespaceId ns, std::span<const BlockKey> rest, LookupResult local,
                               std::function<void(Result<LookupResult>)> done) {
  auto chain = std::make_shared<std::vector<BlockKey>>(rest.begin(), rest.end());
  auto found = std::make_shared<size_t>(0);
  auto result = std::make_shared<LookupResult>(std::move(local));
  auto callback = std::make_shared<std::function<void(Result<LookupResult>)>>(std::move(done));
  const bool queued = SubmitRemote(
      [r = remote_.get(), id = remote_ns_[ns].id, chain, found] {
        *found = r->CountLeading(id, *chain);
        return Status::Ok();
      },
      [this, found, result, callback](const Status&) {
        result->tiers.insert(result->tiers.end(), *found, TierKind::kRemote);
        result->hits += *found;
        stats_.lookup_hits += *found;
        stats_.remote_lookup_hits += *found;
        (*callback)(std::move(*result));
      });
  if (!queued) (*callback)(std::move(*result));
}

void CacheEngine::AcquireWithRemote(NamespaceId ns, std::span<const BlockKey> keys, size_t from,
                                    TierKind kind, std::function<void(Result<Lease>)> done) {
  auto chain = std::make_shared<const std::vector<BlockKey>>(keys.begin(), keys.end());
  auto callback = std::make_shared<std::function<void(Result<Lease>)>>(std::move(done));
  FetchRemote(ns, chain, from, [this, ns, chain, kind, callback](size_t) {
    AcquireLocal(ns, *chain, kind, std::move(*callback));
  });
}

void CacheEngine::PrefetchRemote(uint64_t owner, NamespaceId ns, std::span<const BlockKey> keys,
                                 TimeNs until) {
  const std::optional<size_t> from = RemoteStart(ns, keys);
  if (!from) return;
  auto chain = std::make_shared<const std::vector<BlockKey>>(keys.begin(), keys.end());
  ++remote_prefetches_[owner];
  FetchRemote(ns, chain, *from, [this, owner, ns, chain, from = *from, until](size_t read) {
    auto it = remote_prefetches_.find(owner);
    const bool owner_left = it == remote_prefetches_.end();
    if (!owner_left && --it->second == 0) remote_prefetches_.erase(it);
    stats_.prefetched_blocks += read;
    for (size_t i = 0; i < read; ++i) {
      const EntryId id = index_.Find(ns, (*chain)[from + i]);
      if (id != kNoEntry) blocks_[id].prefetched = true;
    }
    // Hinted as the local run was; a bound reached meanwhile leaves them
    // unprotected, as fresh blocks in the host.
    if (read > 0 && !owner_left) {
      HintLocal(owner, ns, std::span(*chain).subspan(from, read), until).status().IgnoreError();
    }
  });
}

void CacheEngine::FetchRemote(NamespaceId ns, Chain chain, size_t from,
                              std::function<void(size_t)> then) {
  // First how many the cluster holds, so that no block here is evicted to
  // make room for one it does not.
  auto found = std::make_shared<size_t>(0);
  auto callback = std::make_shared<std::function<void(size_t)>>(std::move(then));
  const bool queued = SubmitRemote(
      [r = remote_.get(), id = remote_ns_[ns].id, chain, from, found] {
        *found = r->CountLeading(id, std::span(*chain).subspan(from));
        return Status::Ok();
      },
      [this, ns, chain, from, found, callback](const Status&) {
        if (*found == 0) return (*callback)(0);
        ReadRemote(ns, chain, from, *found, std::move(*callback));
      });
  if (!queued) (*callback)(0);
}

void CacheEngine::ReadRemote(NamespaceId ns, Chain chain, size_t from, size_t count,
                             std::function<void(size_t)> then) {
  // The blocks land in host slots reserved like a worker's write: invisible
  // until committed, the chain's cached part pinned meanwhile.
  std::optional<BlockKey> parent;
  if (from > 0) parent = (*chain)[from - 1];
  Result<Allocation> alloc =
      Allocate(ns, parent, std::span(*chain).subspan(from, count), TierKind::kHost);
  size_t allocated = 0;
  while (alloc && allocated < alloc->size() && alloc->state(allocated) == WriteState::kAllocated) {
    ++allocated;
  }
  if (!alloc || allocated == 0) {
    if (alloc) alloc->Abort();
    // Another read (a hint's, another acquire's) is bringing these blocks
    // in: done when it is.
    std::function<void()> after = [then] { then(0); };
    if (WaitForRemoteRead(ns, std::span(*chain).subspan(from, count), after)) return;
    return then(0);
  }
  auto outs = std::make_shared<std::vector<std::span<std::byte>>>();
  for (size_t i = 0; i < allocated; ++i) outs->push_back(alloc->Bytes(i));
  auto pending = std::make_shared<Allocation>(std::move(*alloc));
  const uint64_t read_id = pending->id();
  for (EntryId e : allocations_.at(read_id).pending) remote_reading_[e] = read_id;
  auto read = std::make_shared<size_t>(0);
  auto restored = std::make_shared<Status>();
  auto callback = std::make_shared<std::function<void(size_t)>>(std::move(then));
  const bool queued = SubmitRemote(
      [r = remote_.get(), rns = remote_ns_[ns], layout = LayoutOf(ns), q = LowerForm(ns), chain,
       from, allocated, outs, read, restored] {
        const std::span<const BlockKey> keys = std::span(*chain).subspan(from, allocated);
        if (q == Quantize::kOff) {
          *read = r->ReadLeading(rns, keys, *outs);
          return Status::Ok();
        }
        // Kept in fp8: read into scratch, then restore each into its slot.
        const uint64_t stored_bytes = rns.layout.BlockBytes();
        const std::span<std::byte> scratch = internal::ThreadScratch(allocated * stored_bytes);
        if (scratch.empty()) return Status::Ok();
        std::vector<std::span<std::byte>> stored(allocated);
        for (size_t i = 0; i < allocated; ++i) {
          stored[i] = scratch.subspan(i * stored_bytes, stored_bytes);
        }
        const size_t got = r->ReadLeading(rns, keys, stored);
        for (size_t i = 0; i < got; ++i) {
          *restored = internal::DecodeStored(layout, q, stored[i], (*outs)[i]);
          if (!restored->ok()) break;
          ++*read;
        }
        return Status::Ok();
      },
      [this, ns, pending, read, restored, callback, read_id](const Status&) {
        // Keep what was read and verified; the rest of the slots go back.
        AllocationRecord& rec = allocations_.at(pending->id());
        for (EntryId e : rec.pending) remote_reading_.erase(e);
        for (size_t i = rec.pending.size(); i-- > *read;) {
          const EntryId p = rec.pending[i];
          LeaveTier(p);
          blocks_[p].pins = 0;
          index_.Erase(p);
          --pending_blocks_;
        }
        rec.pending.resize(*read);
        for (EntryId e : rec.pending) {
          blocks_[e].in_remote = true;
          blocks_[e].from_remote = true;  // its first acquire is a remote hit
        }
        if (!restored->ok()) {
          ++stats_.checksum_failures;
          LogLimited(checksum_log_,
                     "a block read from the remote tier failed to decode; not "
                     "served: " +
                         restored->ToString());
        }
        if (LowerForm(ns) != Quantize::kOff) stats_.dequantized_blocks += *read;
        stats_.remote_fetched_blocks += *read;
        TierStats& host = stats_.tiers[Index(TierKind::kHost)];
        host.promotions_in += *read;
        host.bytes_in += *read * block_bytes_[ns];
        if (rec.pending.empty()) {
          pending->Abort();
        } else {
          pending->Commit().IgnoreError();  // an open allocation commits
        }
        (*callback)(*read);
        RemoteReadDone(read_id);
      });
  if (!queued) {
    for (EntryId e : allocations_.at(read_id).pending) remote_reading_.erase(e);
    pending->Abort();
    (*callback)(0);
    RemoteReadDone(read_id);
  }
}

void CacheEngine::WriteRemote(EntryId id) {
  Block& b = blocks_[id];
  if (b.in_remote || b.state != State::kReady) return;
  if (!tiers_[Index(b.tier)]->holds_bytes()) return;
  std::shared_ptr<std::vector<std::byte>> copy;
  if (!CopyOut(id, &copy).ok()) {
    ++stats_.remote_write_dropped;
    return;
  }
  const NamespaceId ns = index_.ns(id);
  const BlockKey key = index_.key(id);
  const EntryId parent = index_.parent(id);
  std::optional<BlockKey> parent_key;
  if (parent != kNoEntry) parent_key = index_.key(parent);
  const bool queued = SubmitRemote(
      [r = remote_.get(), rns = remote_ns_[ns], layout = LayoutOf(ns), q = LowerForm(ns), key,
       copy]() -> Status {
        KVTIER_ASSIGN_OR_RETURN(const std::span<const std::byte> stored,
                                internal::EncodeStored(layout, q, *copy));
        return r->Write(rns, key, stored);
      },
      [this, ns, key, parent_key](const Status& s) {
        if (!s.ok()) {
          ++stats_.remote_write_dropped;
          // A block fp8 cannot hold (NaN, infinity).
          if (s.code() == StatusCode::kInvalidArgument) {
            ++stats_.quantize_refused;
            LogLimited(quantize_log_, "block " + key.ToHex() +
                                          " was not written to the remote "
                                          "tier (quantize_lower): " +
                                          s.ToString());
          }
          return;
        }
        if (LowerForm(ns) != Quantize::kOff) ++stats_.quantized_blocks;
        ++stats_.remote_written_blocks;
        if (record_events_) {
          if (events_.empty() && events_ready_) events_ready_();
          events_.push_back({BlockEvent::Kind::kStored, ns, TierKind::kRemote, key, parent_key});
        }
      });
  if (queued) {
    b.in_remote = true;
  } else {
    ++stats_.remote_write_dropped;
  }
}

}  // namespace kvtier::engine
