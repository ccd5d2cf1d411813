// The SSD store's index records (SsdStore, ssd_store.h): how a block's
// record and a namespace's entry are encoded as RocksDB keys and values.
// Keys are big-endian, so that they sort by (namespace, key); values are
// little-endian with a leading version byte. Pure functions of their bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/units.h"
#include "prefix_index/block_key.h"
#include "tiers/internal/block_file.h"
#include "tiers/internal/ssd_store.h"

namespace kvtier::tiers::internal {

// The first byte of every block record's key, and of every namespace entry's.
inline constexpr char kRecordPrefix = 'b';
inline constexpr char kNamespacePrefix = 'n';
inline constexpr uint64_t kMaxSlotBytes = AlignUp(kMaxBlockBytes, kBlockFileAlignment);

// A slot size a record may name: a positive multiple of 4 KiB, at most
// kMaxSlotBytes.
bool ValidSlotBytes(uint64_t slot_bytes);

std::string RecordKey(NamespaceId ns, const BlockKey& key);
std::string NamespaceKey(uint32_t id);

// A block's record: version 2 without a seal (readable by a kvtierd from
// before seals), version 3 with one.
std::string EncodeRecord(const SsdRecord& r);
// False unless `value` is a record of a known version whose fields are
// valid and whose key is `key`.
bool DecodeRecord(std::string_view key, std::string_view value, SsdRecord* r);

std::string EncodeNamespace(const SsdNamespace& ns);
// False unless `value` is a namespace entry of a known version with a valid
// layout.
bool DecodeNamespace(std::string_view value, SsdNamespace* ns);

}  // namespace kvtier::tiers::internal
