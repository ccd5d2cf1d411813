// Write-through (EngineOptions::ssd_write_through): a committed block's
// shadow copy on the ssd while the block lives in memory, so a crash loses
// nothing committed and a later demotion costs no write (moves.cc turns the
// shadow into the block).
#include <memory>

#include "engine/cache_engine.h"

namespace kvtier::engine {

using prefix_index::EntryId;
using prefix_index::kNoEntry;

void CacheEngine::StartShadow(EntryId id) {
  Tier* ssd = tier(TierKind::kSsd);
  if (blocks_[id].has_shadow || blocks_[id].tier == TierKind::kSsd) return;
  const Quantize form = LowerForm(index_.ns(id));
  const uint64_t stored_bytes = StoredBytes(index_.ns(id), form);
  Result<SlotId> slot = clock_.Now() < ssd_paused_until_
                            ? Result<SlotId>(UnavailableError("paused"))
                        : !SsdBudgetAllows(stored_bytes)
                            ? Result<SlotId>(ResourceExhaustedError("write budget spent"))
                            : MakeRoom(TierKind::kSsd, stored_bytes);
  if (!slot) {
    ++stats_.write_through_skipped;
    return;
  }
  auto checksum = std::make_shared<uint64_t>(0);
  IoExecutor::Work work = SsdWriteWork(id, TierKind::kSsd, *slot, checksum);
  const bool queued = work && io_->Submit(std::move(work), [this, id, checksum](Status status) {
    OnShadowWritten(id, std::move(status), *checksum);
  });
  if (!queued) {
    ssd->Free(*slot);
    ++stats_.write_through_skipped;
    return;
  }
  SpendSsdBudget(stored_bytes);
  Pin(id);  // until the write lands, so the shadow cannot outlive its block
  Block& b = blocks_[id];
  b.has_shadow = true;
  b.shadow_pending = true;
  b.shadow = *slot;
  ++shadows_;
  ++moves_in_flight_;
}

void CacheEngine::OnShadowWritten(EntryId id, Status status, uint64_t checksum) {
  --moves_in_flight_;
  Block& b = blocks_[id];
  b.shadow_pending = false;
  if (status.ok()) {
    b.checksum = checksum;
    if (b.stored != Quantize::kOff) ++stats_.quantized_blocks;
  } else {
    if (status.code() == StatusCode::kInvalidArgument) {
      QuantizeRefused(id, status);  // stays in memory, without a shadow
    } else {
      IoFailed(status, /*pause=*/true, "write");
    }
    FreeShadow(id);
  }
  Unpin(id);
}

void CacheEngine::FreeShadow(EntryId id) {
  Block& b = blocks_[id];
  if (!b.has_shadow) return;
  Tier* ssd = tier(TierKind::kSsd);
  const BlockInfo info = InfoOf(id);
  ssd->FreeBlock(b.shadow, info);
  if (!io_->Submit([ssd, slot = b.shadow, info] { return ssd->ForgetBlock(slot, info); },
                   [](const Status&) {})) {
    ++stats_.stale_records;
  }
  b.has_shadow = false;
  --shadows_;
}

}  // namespace kvtier::engine
