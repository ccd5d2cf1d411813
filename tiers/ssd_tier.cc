// The SSD tier: a Tier over an SsdStore (slot files + RocksDB index).
//
// SlotId is the slot's first page (4 KiB unit) in the slot file; the slot's
// size follows from the block's (rounded up to 4 KiB) where the engine
// passes the block, and from the store's map where it does not (Free). The
// engine calls Allocate/Free/FreeBlock on its thread and WriteBlock/
// ReadBlock/ForgetBlock on its IoExecutor's threads.
//
// A freed slot's old record: FreeBlock hands the slot back at once (the
// engine needs the room now) but the record naming it is deleted later, on
// an I/O thread (ForgetBlock). Until then the slot is "unforgotten": the
// first write into it deletes that record before it writes a byte, so a kill
// at any moment never leaves a record over another block's bytes (which
// its checksum would catch, but as a loss). A newer record of the same
// block replaces the old one, and then there is nothing left to delete.
#include "tiers/internal/ssd_tier.h"

#include <cassert>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvtier::tiers {
namespace {

using internal::SsdRecord;
using internal::SsdSlot;
using internal::SsdStore;

static_assert(internal::SsdSpace::kMaxPages - 1 <= UINT32_MAX, "a page must fit a SlotId");

class SsdTier final : public Tier {
 public:
  explicit SsdTier(std::unique_ptr<SsdStore> store) : store_(std::move(store)) {}

  TierKind kind() const override { return TierKind::kSsd; }
  std::string description() const override {
    const internal::SsdStats st = store_->Stats();
    std::string d = "ssd: " + store_->dir() + ", " + FormatBytes(st.capacity_bytes) +
                    (st.direct_io ? ", direct I/O" : ", buffered I/O");
    if (st.prepared_bytes < st.file_bytes) {
      d += ", " + FormatBytes(st.prepared_bytes) + " of " + FormatBytes(st.file_bytes) +
           (st.preparing ? " prepared so far" : " prepared (preparing stopped)");
    }
    return d;
  }
  uint64_t capacity_bytes() const override { return store_->Stats().capacity_bytes; }
  uint64_t used_bytes() const override { return store_->Stats().used_bytes; }
  uint64_t SlotBytes(uint64_t block_bytes) const override {
    return AlignUp(block_bytes, kSlotPageBytes);
  }

  Result<SlotId> Allocate(uint64_t block_bytes) override {
    KVTIER_ASSIGN_OR_RETURN(const SsdSlot slot, store_->Allocate(block_bytes));
    return static_cast<SlotId>(slot.page);
  }
  void Free(SlotId slot) override {
    const Status freed = store_->Free(store_->SlotAt(slot));
    assert(freed.ok());  // the engine frees only slots it holds
    freed.IgnoreError();
  }
  void FreeBlock(SlotId slot, const BlockInfo& info) override {
    {
      std::lock_guard lock(unforgotten_mu_);
      RememberLocked(slot, Owner{info.ns, info.key});
    }
    Free(slot);
  }

  // The payload goes through WriteBlock/ReadBlock, which know the block.
  Status Read(SlotId, std::span<std::byte>) override {
    return FailedPreconditionError("the ssd tier reads blocks through ReadBlock");
  }
  Status Write(SlotId, std::span<const std::byte>) override {
    return FailedPreconditionError("the ssd tier writes blocks through WriteBlock");
  }
  std::span<std::byte> HostView(SlotId, uint64_t) override { return {}; }
  uint64_t SlotOffset(SlotId slot) const override { return SsdSlot{0, slot}.offset(); }

  bool io_bound() const override { return true; }

  // `bytes` may run past info.block_bytes to the next 4 KiB (a padded
  // buffer, one direct I/O); so may `out` in ReadBlock.
  Result<uint64_t> WriteBlock(SlotId slot, const BlockInfo& info,
                              std::span<const std::byte> bytes) override {
    const uint64_t block = bytes.size() > info.block_bytes ? info.block_bytes : 0;
    KVTIER_RETURN_IF_ERROR(ForgetOwnerOf(slot, std::nullopt));
    KVTIER_ASSIGN_OR_RETURN(const SsdRecord stored,
                            store_->Write(Record(slot, bytes.size(), info), bytes, block));
    // This block's record now names this slot: an older one of it, at a
    // slot freed before, went with the overwrite.
    std::lock_guard lock(unforgotten_mu_);
    if (auto it = slot_of_.find(Owner{info.ns, info.key}); it != slot_of_.end()) {
      owner_of_.erase(it->second);
      slot_of_.erase(it);
    }
    return stored.checksum;
  }
  Status ReadBlock(SlotId slot, const BlockInfo& info, std::span<std::byte> out) override {
    SsdRecord record = Record(slot, info.block_bytes, info);
    record.block_bytes = info.block_bytes;
    record.checksum = info.checksum;
    return store_->Read(record, out);
  }
  Status ForgetBlock(SlotId slot, const BlockInfo& info) override {
    return ForgetOwnerOf(slot, Owner{info.ns, info.key});
  }

  Result<uint32_t> RegisterNamespace(const std::string& model, const std::string& salt,
                                     const Layout& layout) override {
    return store_->RegisterNamespace(model, salt, layout);
  }

  Status ForEachStoredBlock(const StoredBlockFn& fn) override {
    std::vector<SsdRecord> unusable;
    auto scanned = store_->ForEachRecord([&](const SsdRecord& r) -> Status {
      if (!store_->Reserve(r.slot).ok()) {
        unusable.push_back(r);  // a slot another record claims, or beyond capacity
        return Status::Ok();
      }
      BlockInfo info;
      info.ns = r.ns_id;
      info.key = r.key;
      if (r.has_parent) info.parent = r.parent;
      info.block_bytes = r.block_bytes;
      info.priority = r.priority;
      info.checksum = r.checksum;
      info.quantize = r.quantize;
      return fn(info, static_cast<SlotId>(r.slot.page));
    });
    if (!scanned) return scanned.status();
    for (const SsdRecord& r : unusable) store_->Erase(r.ns_id, r.key).IgnoreError();
    return Status::Ok();
  }

  Status ForEachStoredNamespace(const StoredNamespaceFn& fn) override {
    return store_->ForEachNamespace(
        [&](const internal::SsdNamespace& n) { return fn(n.id, n.model, n.salt, n.layout); });
  }

  std::span<const std::byte> persistent_secret() const override { return store_->master_secret(); }
  Status Sync() override { return store_->Sync(); }
  std::map<uint32_t, uint64_t> SealedBlocksByKey() const override {
    return store_->SealedBlocksByKey();
  }
  std::map<std::string, uint64_t> RejectedByCause() const override {
    return store_->RejectedByCause();
  }

 private:
  static SsdRecord Record(SlotId slot, uint64_t block_bytes, const BlockInfo& info) {
    SsdRecord r;
    r.ns_id = info.ns;
    r.key = info.key;
    r.has_parent = info.parent.has_value();
    if (info.parent) r.parent = *info.parent;
    r.slot = SsdSlot{AlignUp(block_bytes, internal::kBlockFileAlignment), slot};
    r.priority = info.priority;
    r.quantize = info.quantize;
    return r;
  }

  struct Owner {
    uint32_t ns = 0;
    prefix_index::BlockKey key;
    friend bool operator==(const Owner&, const Owner&) = default;
  };
  struct OwnerHash {
    size_t operator()(const Owner& o) const {
      return static_cast<size_t>(prefix_index::BlockKeyHash::Mix(o.key, o.ns));
    }
  };

  // REQUIRES: unforgotten_mu_ held.
  void RememberLocked(SlotId slot, const Owner& owner) {
    if (auto it = owner_of_.find(slot); it != owner_of_.end()) slot_of_.erase(it->second);
    if (auto it = slot_of_.find(owner); it != slot_of_.end()) owner_of_.erase(it->second);
    owner_of_[slot] = owner;
    slot_of_[owner] = slot;
  }

  // Deletes the record of the block that last held `slot` if it may still
  // stand (when `only` is given, only if that block is `only`). The entry
  // goes after the delete, so a write into the slot meanwhile deletes it
  // too rather than writing first.
  Status ForgetOwnerOf(SlotId slot, const std::optional<Owner>& only) {
    Owner owner;
    {
      std::lock_guard lock(unforgotten_mu_);
      auto it = owner_of_.find(slot);
      if (it == owner_of_.end() || (only && !(it->second == *only))) return Status::Ok();
      owner = it->second;
    }
    KVTIER_RETURN_IF_ERROR(store_->Erase(owner.ns, owner.key));
    std::lock_guard lock(unforgotten_mu_);
    if (auto it = owner_of_.find(slot); it != owner_of_.end() && it->second == owner) {
      owner_of_.erase(it);
      slot_of_.erase(owner);
    }
    return Status::Ok();
  }

  std::unique_ptr<SsdStore> store_;
  // Freed slots whose record may still stand, and the other way round.
  std::mutex unforgotten_mu_;
  std::unordered_map<SlotId, Owner> owner_of_;            // GUARDED_BY(unforgotten_mu_)
  std::unordered_map<Owner, SlotId, OwnerHash> slot_of_;  // GUARDED_BY(unforgotten_mu_)
};

}  // namespace

namespace internal {
std::unique_ptr<Tier> NewSsdTierOver(std::unique_ptr<SsdStore> store) {
  return std::make_unique<SsdTier>(std::move(store));
}
}  // namespace internal

Result<std::unique_ptr<Tier>> NewSsdTier(const SsdTierOptions& options) {
  internal::SsdOptions o;
  o.dir = options.dir;
  o.capacity_bytes = options.capacity_bytes;
  o.direct_io = options.direct_io;
  o.keys_secret_id = options.keys_secret_id;
  o.sealer = options.sealer;
  if (options.fault_read_errors > 0) {
    auto faults = std::make_shared<internal::FaultInjector>();
    faults->SetReadErrorShare(options.fault_read_errors);
    o.file_factory = internal::FaultInjectingFactory(std::move(faults));
  }
  if (options.note)
    o.note = [note = options.note](std::string_view line) { note(std::string(line)); };
  if (options.prepare == "background") {
    o.preallocate = internal::SsdPreallocate::kBackground;
  } else if (options.prepare == "foreground") {
    o.preallocate = internal::SsdPreallocate::kWrite;
  } else if (options.prepare == "sparse") {
    o.preallocate = internal::SsdPreallocate::kSparse;
  } else {
    return InvalidArgumentError("ssd prepare mode \"" + options.prepare +
                                "\": expected background, foreground or sparse");
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SsdStore> store, SsdStore::Open(o));
  return internal::NewSsdTierOver(std::move(store));
}

}  // namespace kvtier::tiers
