// RocksDB's status as ours, for the SSD store's index (ssd_store.cc and
// ssd_store_seals.cc): `what` says which operation failed.
#pragma once

#include <rocksdb/status.h>

#include <string>
#include <string_view>

#include "common/status.h"

namespace kvtier::tiers::internal {

inline Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::Ok();
  const std::string msg = std::string(what) + ": " + s.ToString();
  if (s.IsNoSpace()) return ResourceExhaustedError(msg);
  if (s.IsCorruption()) return CorruptionError(msg);
  if (s.IsIOError()) return IoError(msg);
  if (s.IsNotFound()) return NotFoundError(msg);
  if (s.IsInvalidArgument() || s.IsNotSupported()) return InvalidArgumentError(msg);
  if (s.IsBusy() || s.IsTryAgain() || s.IsTimedOut()) return UnavailableError(msg);
  return InternalError(msg);
}

}  // namespace kvtier::tiers::internal
