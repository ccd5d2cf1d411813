// The CacheEngine's asynchronous moves: demotion into an io_bound tier (the
// ssd) and promotion out of it on the IoExecutor, copies into a tier whose
// copies are asynchronous (a GPU arena) on the copy pool, and what a failed
// read, write or copy does. The block is copied out on the engine's thread;
// encoding, the I/O and decoding run on the pool's threads, the completions
// back on the engine's.
#include <cstring>
#include <memory>
#include <string>

#include "engine/cache_engine.h"
#include "engine/internal/lower_codec.h"

namespace kvtier::engine {

using prefix_index::EntryId;
using prefix_index::kNoEntry;
using tiers::kSlotPageBytes;

bool CacheEngine::PromotesAsync(EntryId id, TierKind to) const {
  if (tiers_[Index(blocks_[id].tier)]->io_bound()) return true;
  return copy_ != nullptr && tiers_[Index(to)]->copies_async();
}

bool CacheEngine::LeavingFor(EntryId id, TierKind kind) const {
  return blocks_[id].promoting && promotions_.at(id).to != kind;
}

bool CacheEngine::StartPromotion(EntryId id, TierKind to, uint64_t waiter) {
  const uint64_t bytes = BlockBytes(id);
  Result<SlotId> slot = MakeRoom(to, bytes, /*yield_hints=*/waiter != 0);
  if (!slot) return false;
  Tier* src = tiers_[Index(blocks_[id].tier)].get();
  Tier* dst = tiers_[Index(to)].get();
  const SlotId from = blocks_[id].slot;
  const bool upload = !src->io_bound();
  bool queued = false;
  if (upload) {
    // Host bytes into a GPU arena: the DMA runs on the copy pool; the block
    // stays readable in the host (pinned) until it lands.
    const std::span<std::byte> view = src->HostView(from, bytes);
    queued = !view.empty() &&
             copy_->Submit([dst, s = *slot, view] { return dst->Write(s, view); },
                           [this, id](Status status) { OnPromoted(id, std::move(status)); });
  } else {
    const std::span<std::byte> view = dst->HostView(*slot, bytes);
    // A read from disk lands in host-addressable memory; a GPU target is
    // reached through the host tier (ACQUIRE of the device promotes host
    // blocks; a disk block goes to the host first). A quantized block is
    // read into the I/O thread's scratch and restored from there.
    queued = !view.empty() &&
             io_->Submit(
                 [src, from, info = InfoOf(id), view, layout = LayoutOf(index_.ns(id))]() {
                   if (info.quantize == Quantize::kOff) return src->ReadBlock(from, info, view);
                   // Read padded to the slot's 4 KiB: one direct I/O.
                   const std::span<std::byte> stored =
                       internal::ThreadScratch(AlignUp(info.block_bytes, kSlotPageBytes));
                   if (stored.empty()) return ResourceExhaustedError("no memory to read a block");
                   KVTIER_RETURN_IF_ERROR(src->ReadBlock(from, info, stored));
                   return internal::DecodeStored(layout, info.quantize,
                                                 stored.first(info.block_bytes), view);
                 },
                 [this, id](Status status) { OnPromoted(id, std::move(status)); });
  }
  if (!queued) {
    dst->Free(*slot);
    return false;
  }
  Pin(id);  // the promotion's own pin: the block cannot go while it moves
  blocks_[id].promoting = true;
  promotions_[id] = Promotion{to, *slot, {}, upload};
  if (waiter != 0) promotions_[id].waiters.push_back(waiter);
  ++moves_in_flight_;
  return true;
}

void CacheEngine::OnPromoted(EntryId id, Status status) {
  --moves_in_flight_;
  Promotion p = std::move(promotions_[id]);
  promotions_.erase(id);
  blocks_[id].promoting = false;
  if (status.ok() && blocks_[id].state == State::kReady) {
    const uint64_t bytes = BlockBytes(id);
    const SlotId on_disk = blocks_[id].slot;
    const bool keep_shadow = write_through_ && !p.upload;
    if (!p.upload && blocks_[id].stored != Quantize::kOff) ++stats_.dequantized_blocks;
    Emit(BlockEvent::Kind::kRemoved, id, blocks_[id].tier);
    LeaveTier(id, /*free_slot=*/!keep_shadow);
    EnterTier(id, p.to, p.slot);
    Emit(BlockEvent::Kind::kStored, id, p.to);
    if (keep_shadow) {  // the disk copy stays, as the block's shadow
      blocks_[id].has_shadow = true;
      blocks_[id].shadow = on_disk;
      ++shadows_;
    }
    TierStats& in = stats_.tiers[Index(p.to)];
    in.bytes_in += bytes;
    ++in.promotions_in;
  } else {
    tiers_[Index(p.to)]->Free(p.slot);
    if (!status.ok() && p.upload) {
      // The copy failed, not the block: it stays where it is, served from
      // there; the acquirer gets the run up to it.
      ++stats_.io_errors;
      LogLimited(copy_log_, "copy of a block to the " + std::string(TierKindName(p.to)) +
                                " tier failed; it stays in the " +
                                std::string(TierKindName(blocks_[id].tier)) + ": " +
                                status.ToString());
    } else if (!status.ok()) {
      if (status.code() == StatusCode::kCorruption) {
        ++stats_.checksum_failures;
        LogLimited(checksum_log_,
                   "block " + index_.key(id).ToHex() +
                       " failed its check on the ssd; dropped: " + status.ToString());
      } else {
        IoFailed(status, /*pause=*/true, "read");  // a failing disk: stop writing to it a while
      }
      // Never served again: gone from lookups now, freed at its last unpin.
      Emit(BlockEvent::Kind::kRemoved, id, blocks_[id].tier);
      blocks_[id].state = State::kDoomed;
      index_.SetVisible(id, false);
    }
  }
  Unpin(id);  // the promotion's pin
  for (uint64_t waiter : p.waiters) {
    auto it = pending_acquires_.find(waiter);
    if (it != pending_acquires_.end() && --it->second.outstanding == 0) FinishAcquire(waiter);
  }
}

bool CacheEngine::DemoteAsync(EntryId id, TierKind to) {
  if (blocks_[id].has_shadow && !blocks_[id].shadow_pending) {
    // Written through already: the shadow becomes the block, no I/O.
    const SlotId shadow = blocks_[id].shadow;
    blocks_[id].has_shadow = false;
    --shadows_;
    Emit(BlockEvent::Kind::kRemoved, id, blocks_[id].tier);
    LeaveTier(id);
    EnterTier(id, to, shadow);
    Emit(BlockEvent::Kind::kStored, id, to);
    ++stats_.tiers[Index(to)].demotions_in;
    return true;
  }
  if (clock_.Now() < ssd_paused_until_) return false;
  const Quantize form = LowerForm(index_.ns(id));
  const uint64_t stored_bytes = StoredBytes(index_.ns(id), form);
  if (!SsdBudgetAllows(stored_bytes)) return false;
  Pin(id);  // making room below must not pick it (nor its removal drop it)
  Result<SlotId> slot = MakeRoom(to, stored_bytes);
  if (!slot) {
    Unpin(id);
    return false;
  }
  // Copy the block out now, so its slot is free for whoever needed room;
  // the write goes from the copy, and the block is invisible until it lands.
  auto checksum = std::make_shared<uint64_t>(0);
  IoExecutor::Work work = SsdWriteWork(id, to, *slot, checksum);
  const bool queued = work && io_->Submit(std::move(work), [this, id, checksum](Status status) {
    blocks_[id].checksum = *checksum;
    OnDemoted(id, std::move(status));
  });
  if (!queued) {
    tiers_[Index(to)]->Free(*slot);
    Unpin(id);
    return false;
  }
  SpendSsdBudget(stored_bytes);
  Emit(BlockEvent::Kind::kRemoved, id, blocks_[id].tier);
  LeaveTier(id);
  EnterTier(id, to, *slot);
  blocks_[id].state = State::kArriving;
  index_.SetVisible(id, false);
  ++moves_in_flight_;
  TierStats& in = stats_.tiers[Index(to)];
  in.bytes_in += stored_bytes;
  ++in.demotions_in;
  return true;
}

IoExecutor::Work CacheEngine::SsdWriteWork(EntryId id, TierKind to, SlotId slot,
                                           std::shared_ptr<uint64_t> checksum) {
  std::shared_ptr<std::vector<std::byte>> copy;
  if (!CopyOut(id, &copy).ok()) return nullptr;
  blocks_[id].stored = LowerForm(index_.ns(id));
  return [dst = tiers_[Index(to)].get(), slot, info = InfoOf(id), copy, checksum,
          layout = LayoutOf(index_.ns(id))]() -> Status {
    KVTIER_ASSIGN_OR_RETURN(std::span<const std::byte> stored,
                            internal::EncodeStored(layout, info.quantize, *copy));
    if (info.quantize != Quantize::kOff) {  // padded to its slot: one direct I/O
      stored = {stored.data(), AlignUp(stored.size(), kSlotPageBytes)};
    }
    KVTIER_ASSIGN_OR_RETURN(*checksum, dst->WriteBlock(slot, info, stored));
    return Status::Ok();
  };
}

Status CacheEngine::CopyOut(EntryId id, std::shared_ptr<std::vector<std::byte>>* out) {
  const uint64_t bytes = BlockBytes(id);
  Tier& src = *tiers_[Index(blocks_[id].tier)];
  *out = std::make_shared<std::vector<std::byte>>(bytes);
  const std::span<std::byte> view = src.HostView(blocks_[id].slot, bytes);
  if (view.empty()) return src.Read(blocks_[id].slot, **out);
  std::memcpy((*out)->data(), view.data(), bytes);
  return Status::Ok();
}

void CacheEngine::OnDemoted(EntryId id, Status status) {
  --moves_in_flight_;
  Block& b = blocks_[id];
  if (status.ok() && b.stored != Quantize::kOff) ++stats_.quantized_blocks;
  if (b.state == State::kArriving && status.ok()) {
    b.state = State::kReady;
    index_.SetVisible(id, true);
    Emit(BlockEvent::Kind::kStored, id, b.tier);
  }
  if (!status.ok()) {
    // The bytes did not land: the block is gone; stop writing to a disk
    // that fails until the pause ends (a block fp8 cannot hold is no
    // fault of the disk's).
    if (status.code() == StatusCode::kInvalidArgument) {
      QuantizeRefused(id, status);
    } else {
      IoFailed(status, /*pause=*/true, "write");
    }
    b.state = State::kDoomed;
    index_.SetVisible(id, false);
  }
  Unpin(id);  // drops it if doomed or orphaned meanwhile
}

BlockInfo CacheEngine::InfoOf(EntryId id) const {
  BlockInfo info;
  info.ns = tier_ns_[index_.ns(id)];
  info.key = index_.key(id);
  const EntryId parent = index_.parent(id);
  if (parent != kNoEntry) info.parent = index_.key(parent);
  info.block_bytes = StoredBytes(index_.ns(id), blocks_[id].stored);
  info.priority = blocks_[id].priority;
  info.checksum = blocks_[id].checksum;
  info.quantize = blocks_[id].stored;
  return info;
}

void CacheEngine::QuantizeRefused(EntryId id, const Status& status) {
  ++stats_.quantize_refused;
  LogLimited(quantize_log_,
             "block " + index_.key(id).ToHex() + " of '" + namespaces_[index_.ns(id)].model +
                 "' was not kept below memory (quantize_lower): " + status.ToString());
}

void CacheEngine::IoFailed(const Status& status, bool pause, const char* what) {
  ++stats_.io_errors;
  if (pause && clock_.Now() >= ssd_paused_until_) {
    ssd_paused_until_ = clock_.Now() + ssd_pause_ns_;
    ++ssd_pauses_;
    last_io_error_ = status;
    LogLimited(io_log_, std::string("ssd ") + what + " failed (" + status.ToString() +
                            "); no demotions to the ssd for " +
                            std::to_string(ssd_pause_ns_ / kNsPerSec) + " s");
  } else {
    LogLimited(io_log_, "ssd I/O error: " + status.ToString());
  }
}

}  // namespace kvtier::engine
