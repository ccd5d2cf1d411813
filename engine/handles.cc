// Allocation and Lease (engine/cache_engine.h): the RAII handles of an open
// write and of pinned blocks. Moving one hands over its engine; destroying
// an open one aborts the write or releases the blocks.
#include <algorithm>
#include <cassert>
#include <utility>

#include "engine/cache_engine.h"

namespace kvtier::engine {

using prefix_index::EntryId;
using prefix_index::kNoEntry;

Allocation::Allocation(Allocation&& other) noexcept
    : engine_(std::exchange(other.engine_, nullptr)),
      id_(other.id_),
      block_bytes_(other.block_bytes_),
      states_(std::move(other.states_)),
      locations_(std::move(other.locations_)) {}

Allocation& Allocation::operator=(Allocation&& other) noexcept {
  if (this != &other) {
    Abort();
    engine_ = std::exchange(other.engine_, nullptr);
    id_ = other.id_;
    block_bytes_ = other.block_bytes_;
    states_ = std::move(other.states_);
    locations_ = std::move(other.locations_);
  }
  return *this;
}

Allocation::~Allocation() { Abort(); }

size_t Allocation::allocated() const {
  return static_cast<size_t>(std::count(states_.begin(), states_.end(), WriteState::kAllocated));
}

std::span<std::byte> Allocation::Bytes(size_t i) const {
  assert(open() && states_[i] == WriteState::kAllocated);
  return engine_->BytesAt(locations_[i], block_bytes_);
}

Status Allocation::Commit() {
  assert(open());
  CacheEngine* engine = std::exchange(engine_, nullptr);
  return engine->CommitAllocation(id_);
}

void Allocation::Abort() {
  if (CacheEngine* engine = std::exchange(engine_, nullptr)) engine->AbortAllocation(id_);
}

Lease::Lease(Lease&& other) noexcept
    : engine_(std::exchange(other.engine_, nullptr)),
      id_(other.id_),
      block_bytes_(other.block_bytes_),
      locations_(std::move(other.locations_)) {}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    engine_ = std::exchange(other.engine_, nullptr);
    id_ = other.id_;
    block_bytes_ = other.block_bytes_;
    locations_ = std::move(other.locations_);
  }
  return *this;
}

Lease::~Lease() { Release(); }

std::span<const std::byte> Lease::Bytes(size_t i) const {
  assert(open());
  return engine_->BytesAt(locations_[i], block_bytes_);
}

void Lease::Release() {
  if (CacheEngine* engine = std::exchange(engine_, nullptr)) engine->ReleaseLease(id_);
}

}  // namespace kvtier::engine
