// The SSD store's sealed records and what it counts (SsdStore's members,
// beside ssd_store.cc): the seal identity of a record, the record on disk
// a sealed read must match, a sealed record replaced with the count of
// blocks by key kept, and the reads refused by cause.
#include <rocksdb/db.h>

#include <chrono>
#include <string>

#include "tiers/internal/rocks_status.h"
#include "tiers/internal/ssd_records.h"
#include "tiers/internal/ssd_store.h"

namespace kvtier::tiers::internal {

void SsdStore::Rejected(SsdRejection cause, const Status& status) const {
  const auto i = static_cast<size_t>(cause);
  rejected_[i].fetch_add(1, std::memory_order_relaxed);
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = rejected_noted_[i].load(std::memory_order_relaxed);
  if (last != 0 && now - last < int64_t{10'000'000'000}) return;
  if (!rejected_noted_[i].compare_exchange_strong(last, now)) return;
  static constexpr const char* kWhy[kSsdRejections] = {
      "its record is not the one written (replaced, replayed, missing or in the clear)",
      "it does not open under its seal (changed bytes, another block's, or a wrong key)",
      "its checksum differs (changed bytes)"};
  Note(std::string("a block read back is refused: ") + kWhy[i] + "; a miss, never served (" +
       std::to_string(rejected_[i].load(std::memory_order_relaxed)) +
       " so far for this cause; at most one line per cause every 10 s): " + status.ToString());
}

std::map<std::string, uint64_t> SsdStore::RejectedByCause() const {
  static constexpr const char* kNames[kSsdRejections] = {"record", "seal", "checksum"};
  std::map<std::string, uint64_t> out;
  for (size_t i = 0; i < kSsdRejections; ++i) {
    out[kNames[i]] = rejected_[i].load(std::memory_order_relaxed);
  }
  return out;
}

Result<SealIdentity> SsdStore::IdentityOf(const SsdRecord& record) const {
  SealIdentity id;
  {
    std::lock_guard lock(ns_mu_);
    if (record.ns_id >= ns_fingerprints_.size()) {
      return CorruptionError("block " + record.key.ToHex() + " of namespace " +
                             std::to_string(record.ns_id) + ", which is not registered");
    }
    id.ns = ns_fingerprints_[record.ns_id];
  }
  id.key = record.key;
  id.form = static_cast<uint8_t>(record.quantize);
  id.tier = kSealTierSsd;
  id.bytes = record.block_bytes;
  return id;
}

Result<SsdRecord> SsdStore::StoredVersionOf(const SsdRecord& record) const {
  const std::string key = RecordKey(record.ns_id, record.key);
  std::string value;
  const rocksdb::Status got = db_->Get(rocksdb::ReadOptions(), key, &value);
  if (got.IsNotFound()) {
    return CorruptionError("block " + record.key.ToHex() + ": no record on disk");
  }
  KVTIER_RETURN_IF_ERROR(FromRocks(got, "get record of block " + record.key.ToHex()));
  SsdRecord stored;
  if (!DecodeRecord(key, value, &stored)) {
    return CorruptionError("block " + record.key.ToHex() + ": its record does not decode");
  }
  if (!stored.seal) {
    return CorruptionError("block " + record.key.ToHex() +
                           ": its record on disk is in the clear, refused while block keys are "
                           "configured");
  }
  if (stored.slot != record.slot || stored.block_bytes != record.block_bytes ||
      stored.quantize != record.quantize || stored.checksum != record.checksum ||
      stored.checksum != SealToken(*stored.seal)) {
    return CorruptionError("block " + record.key.ToHex() +
                           ": its record on disk is not the version written (replaced or "
                           "replayed)");
  }
  return stored;
}

Status SsdStore::ReplaceSealedRecord(NamespaceId ns, const BlockKey& key, const SsdRecord* record) {
  const std::string name = RecordKey(ns, key);
  std::lock_guard lock(record_mu_);
  // The key id the record being replaced was sealed under (0: none).
  uint32_t before = 0;
  std::string value;
  const rocksdb::Status got = db_->Get(rocksdb::ReadOptions(), name, &value);
  if (got.ok()) {
    SsdRecord old;
    if (DecodeRecord(name, value, &old) && old.seal) before = old.seal->key_id;
  } else if (!got.IsNotFound()) {
    return FromRocks(got, "get record of block " + key.ToHex());
  }
  if (record != nullptr) {
    KVTIER_RETURN_IF_ERROR(FromRocks(db_->Put(rocksdb::WriteOptions(), name, EncodeRecord(*record)),
                                     "put record of block " + key.ToHex()));
  } else {
    KVTIER_RETURN_IF_ERROR(FromRocks(db_->Delete(rocksdb::WriteOptions(), name),
                                     "erase record of block " + key.ToHex()));
  }
  const uint32_t after = record != nullptr && record->seal ? record->seal->key_id : 0;
  std::lock_guard count(by_key_mu_);
  if (auto it = sealed_by_key_.find(before); before != 0 && it != sealed_by_key_.end()) {
    if (--it->second == 0) sealed_by_key_.erase(it);
  }
  if (after != 0) ++sealed_by_key_[after];
  return Status::Ok();
}

std::map<uint32_t, uint64_t> SsdStore::SealedBlocksByKey() const {
  std::lock_guard lock(by_key_mu_);
  return sealed_by_key_;
}

}  // namespace kvtier::tiers::internal
