// The SSD tier: a Tier over an SsdStore (slot files + RocksDB index).
//
// SlotId packs the store's slot: the high 8 bits name the slot-size class
// (numbered in order of first use in this process), the low 24 bits the
// index in that class's file. The engine calls Allocate/Free on its thread
// and WriteBlock/ReadBlock/ForgetBlock on its IoExecutor's threads.
#include "tiers/internal/ssd_tier.h"

#include <mutex>
#include <vector>

namespace kvtier::tiers {
namespace {

using internal::SsdRecord;
using internal::SsdSlot;
using internal::SsdStore;

constexpr uint32_t kIndexBits = 24;
constexpr uint64_t kMaxIndex = (uint64_t{1} << kIndexBits) - 1;
constexpr size_t kMaxClasses = 256;

class SsdTier final : public Tier {
 public:
  explicit SsdTier(std::unique_ptr<SsdStore> store) : store_(std::move(store)) {}

  TierKind kind() const override { return TierKind::kSsd; }
  std::string description() const override {
    const internal::SsdStats st = store_->Stats();
    return "ssd: " + store_->dir() + ", " + FormatBytes(st.capacity_bytes) +
           (st.direct_io ? ", direct I/O" : ", buffered I/O");
  }
  uint64_t capacity_bytes() const override { return store_->Stats().capacity_bytes; }
  uint64_t used_bytes() const override { return store_->Stats().used_bytes; }
  uint64_t SlotBytes(uint64_t block_bytes) const override {
    return AlignUp(block_bytes, kSlotPageBytes);
  }

  Result<SlotId> Allocate(uint64_t block_bytes) override {
    KVTIER_ASSIGN_OR_RETURN(const SsdSlot slot, store_->Allocate(block_bytes));
    auto id = Pack(slot);
    if (!id) store_->Free(slot).IgnoreError();  // beyond what a SlotId can name
    return id;
  }
  void Free(SlotId slot) override {
    // A hole that cannot be punched only costs disk space, not correctness.
    store_->Free(Unpack(slot)).IgnoreError();
  }

  // The payload goes through WriteBlock/ReadBlock, which know the block.
  Status Read(SlotId, std::span<std::byte>) override {
    return FailedPreconditionError("the ssd tier reads blocks through ReadBlock");
  }
  Status Write(SlotId, std::span<const std::byte>) override {
    return FailedPreconditionError("the ssd tier writes blocks through WriteBlock");
  }
  std::span<std::byte> HostView(SlotId, uint64_t) override { return {}; }
  uint64_t SlotOffset(SlotId slot) const override { return Unpack(slot).offset(); }

  bool io_bound() const override { return true; }

  Result<uint64_t> WriteBlock(SlotId slot, const BlockInfo& info,
                              std::span<const std::byte> bytes) override {
    KVTIER_ASSIGN_OR_RETURN(const SsdRecord stored, store_->Write(Record(slot, info), bytes));
    return stored.checksum;
  }
  Status ReadBlock(SlotId slot, const BlockInfo& info, std::span<std::byte> out) override {
    SsdRecord record = Record(slot, info);
    record.block_bytes = info.block_bytes;
    record.checksum = info.checksum;
    return store_->Read(record, out);
  }
  Status ForgetBlock(const BlockInfo& info) override { return store_->Erase(info.ns, info.key); }

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
      auto slot = Pack(r.slot);
      if (!slot) {
        store_->Free(r.slot).IgnoreError();
        unusable.push_back(r);
        return Status::Ok();
      }
      BlockInfo info;
      info.ns = r.ns_id;
      info.key = r.key;
      if (r.has_parent) info.parent = r.parent;
      info.block_bytes = r.block_bytes;
      info.priority = r.priority;
      info.checksum = r.checksum;
      return fn(info, *slot);
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

 private:
  SsdRecord Record(SlotId slot, const BlockInfo& info) const {
    SsdRecord r;
    r.ns_id = info.ns;
    r.key = info.key;
    r.has_parent = info.parent.has_value();
    if (info.parent) r.parent = *info.parent;
    r.slot = Unpack(slot);
    r.priority = info.priority;
    return r;
  }

  Result<SlotId> Pack(const SsdSlot& slot) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t cls = 0;
    while (cls < class_bytes_.size() && class_bytes_[cls] != slot.slot_bytes) ++cls;
    if (cls == class_bytes_.size()) {
      if (cls == kMaxClasses) return ResourceExhaustedError("too many block sizes on the ssd");
      class_bytes_.push_back(slot.slot_bytes);
    }
    if (slot.index > kMaxIndex) {
      return ResourceExhaustedError("more than 16M blocks of one size on the ssd");
    }
    return static_cast<SlotId>((cls << kIndexBits) | slot.index);
  }

  SsdSlot Unpack(SlotId slot) const {
    std::lock_guard<std::mutex> lock(mu_);
    return SsdSlot{class_bytes_[slot >> kIndexBits], slot & kMaxIndex};
  }

  std::unique_ptr<SsdStore> store_;
  mutable std::mutex mu_;
  std::vector<uint64_t> class_bytes_;  // GUARDED_BY(mu_)
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
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SsdStore> store, SsdStore::Open(o));
  return internal::NewSsdTierOver(std::move(store));
}

}  // namespace kvtier::tiers
