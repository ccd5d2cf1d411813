// WriteHandle and ReadLease: RAII over an allocation and a lease.
#include <cassert>
#include <cstdint>
#include <string>
#include <utility>

#include "client/client.h"

namespace kvtier::client {

WriteHandle::WriteHandle(WriteHandle&& other) noexcept
    : client_(std::exchange(other.client_, nullptr)),
      id_(other.id_),
      tier_(other.tier_),
      block_bytes_(other.block_bytes_),
      states_(std::move(other.states_)),
      blocks_(std::move(other.blocks_)),
      offsets_(std::move(other.offsets_)) {}

WriteHandle& WriteHandle::operator=(WriteHandle&& other) noexcept {
  if (this != &other) {
    if (open()) Abort().IgnoreError();  // the slots this handle held are given up
    client_ = std::exchange(other.client_, nullptr);
    id_ = other.id_;
    tier_ = other.tier_;
    block_bytes_ = other.block_bytes_;
    states_ = std::move(other.states_);
    blocks_ = std::move(other.blocks_);
    offsets_ = std::move(other.offsets_);
  }
  return *this;
}

WriteHandle::~WriteHandle() {
  // A write never committed must not hold slots until the session ends.
  if (open()) Abort().IgnoreError();
}

size_t WriteHandle::allocated() const {
  size_t n = 0;
  for (WireWriteState s : states_) n += s == WireWriteState::kAllocated ? 1 : 0;
  return n;
}

std::span<std::byte> WriteHandle::Bytes(size_t i) const {
  assert(open() && i < blocks_.size() && blocks_[i] != nullptr);
  return {blocks_[i], static_cast<size_t>(block_bytes_)};
}

Status WriteHandle::Commit() {
  if (!open()) return FailedPreconditionError("the write was committed or aborted already");
  return std::exchange(client_, nullptr)->Commit(id_);
}

Status WriteHandle::Abort() {
  if (!open()) return FailedPreconditionError("the write was committed or aborted already");
  return std::exchange(client_, nullptr)->Abort(id_);
}

ReadLease::ReadLease(ReadLease&& other) noexcept
    : client_(std::exchange(other.client_, nullptr)),
      id_(other.id_),
      tier_(other.tier_),
      block_bytes_(other.block_bytes_),
      blocks_(std::move(other.blocks_)),
      offsets_(std::move(other.offsets_)) {}

ReadLease& ReadLease::operator=(ReadLease&& other) noexcept {
  if (this != &other) {
    if (held()) Release().IgnoreError();  // the blocks this lease pinned are let go
    client_ = std::exchange(other.client_, nullptr);
    id_ = other.id_;
    tier_ = other.tier_;
    block_bytes_ = other.block_bytes_;
    blocks_ = std::move(other.blocks_);
    offsets_ = std::move(other.offsets_);
  }
  return *this;
}

ReadLease::~ReadLease() {
  // Pinned blocks cannot be evicted or moved: never leave them pinned.
  if (held()) Release().IgnoreError();
}

std::span<const std::byte> ReadLease::Bytes(size_t i) const {
  assert(held() && i < blocks_.size() && blocks_[i] != nullptr);
  return {blocks_[i], static_cast<size_t>(block_bytes_)};
}

Status ReadLease::Release() {
  if (!held()) return FailedPreconditionError("the lease was released already");
  return std::exchange(client_, nullptr)->ReleaseDeferred(id_);
}

Result<std::vector<int32_t>> ReadLease::BlockTable(uint64_t stride_bytes) const {
  std::vector<int32_t> table;
  table.reserve(offsets_.size());
  for (uint64_t off : offsets_) {
    if (stride_bytes == 0 || off % stride_bytes != 0 || off / stride_bytes > INT32_MAX) {
      return InvalidArgumentError("block at offset " + std::to_string(off) +
                                  " is not slot-indexable with a stride of " +
                                  std::to_string(stride_bytes) + " bytes");
    }
    table.push_back(static_cast<int32_t>(off / stride_bytes));
  }
  return table;
}

}  // namespace kvtier::client
