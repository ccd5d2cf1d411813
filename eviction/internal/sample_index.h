// SampleIndex: the sampled keys an adaptive policy's miniature caches hold,
// one row per fingerprint with a column per cache holding that cache's id
// for it (kNil where it holds none). One lookup serves every cache, where a
// map per cache cost one each; open addressing with linear probing and
// backward-shift deletion, so nothing is allocated per key.
//
// Thread-safety: none; confined to the owning policy.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/hash.h"
#include "eviction/eviction_policy.h"
#include "eviction/internal/id_list.h"

namespace kvtier::eviction::internal {

class SampleIndex {
 public:
  static constexpr uint32_t kNoRow = 0xffff'ffffu;

  explicit SampleIndex(size_t columns) : columns_(columns) { Reset(); }

  size_t columns() const { return columns_; }
  // Fingerprints some column holds.
  size_t size() const { return size_; }

  // fp's row, or kNoRow when no column holds it.
  uint32_t Find(uint64_t fp) const {
    for (size_t i = Home(fp);; i = (i + 1) & mask_) {
      const Slot& s = table_[i];
      if (s.row == kNoRow) return kNoRow;
      if (s.fp == fp) return s.row;
    }
  }

  // The id `column` holds for the fingerprint of `row`, or kNil.
  BlockId Get(uint32_t row, size_t column) const { return ids_[row * columns_ + column]; }

  // Records that `column` holds fp as `id`. REQUIRES: it holds none for fp.
  void Set(uint64_t fp, size_t column, BlockId id) { Set(fp, Find(fp), column, id); }
  // The same, `row` being Find(fp) (kNoRow: none yet).
  void Set(uint64_t fp, uint32_t row, size_t column, BlockId id) {
    assert(row == Find(fp));
    if (row == kNoRow) row = AddRow(fp);
    BlockId& at = ids_[row * columns_ + column];
    assert(at == kNil);
    at = id;
    ++held_[row];
  }

  // `column` no longer holds fp; the row goes with its last column.
  // REQUIRES: it holds it.
  void Clear(uint64_t fp, size_t column) {
    const uint32_t row = Find(fp);
    assert(row != kNoRow && ids_[row * columns_ + column] != kNil);
    ids_[row * columns_ + column] = kNil;
    if (--held_[row] == 0) RemoveRow(fp, row);
  }

  // Forgets everything.
  void Reset() {
    table_.assign(16, Slot{});
    mask_ = table_.size() - 1;
    shift_ = 64 - 4;
    ids_.clear();
    held_.clear();
    free_rows_.clear();
    size_ = 0;
  }

 private:
  struct Slot {
    uint64_t fp = 0;
    uint32_t row = kNoRow;  // kNoRow: empty
  };

  // Fibonacci hashing: the top bits of fp times the golden ratio, one
  // multiply. (The fingerprints are hashes already; sampled ones share
  // their low Mix64 bits, not their own.)
  size_t Home(uint64_t fp) const { return static_cast<size_t>((fp * kGoldenGamma) >> shift_); }

  uint32_t AddRow(uint64_t fp) {
    if ((size_ + 1) * 2 > table_.size()) Grow();
    uint32_t row;
    if (!free_rows_.empty()) {
      row = free_rows_.back();
      free_rows_.pop_back();
    } else {
      row = static_cast<uint32_t>(held_.size());
      held_.push_back(0);
      ids_.resize(ids_.size() + columns_, kNil);
    }
    size_t i = Home(fp);
    while (table_[i].row != kNoRow) i = (i + 1) & mask_;
    table_[i] = Slot{fp, row};
    ++size_;
    return row;
  }

  void RemoveRow(uint64_t fp, uint32_t row) {
    size_t i = Home(fp);
    while (table_[i].fp != fp || table_[i].row == kNoRow) i = (i + 1) & mask_;
    // Backward shift: move up each later entry of the run that may sit at i.
    for (size_t j = (i + 1) & mask_; table_[j].row != kNoRow; j = (j + 1) & mask_) {
      const size_t home = Home(table_[j].fp);
      // j's entry may move to i when its home is not in (i, j], cyclically.
      if (((j - home) & mask_) >= ((j - i) & mask_)) {
        table_[i] = table_[j];
        i = j;
      }
    }
    table_[i] = Slot{};
    free_rows_.push_back(row);
    --size_;
  }

  void Grow() {
    std::vector<Slot> old;
    old.swap(table_);
    table_.assign(old.size() * 2, Slot{});
    mask_ = table_.size() - 1;
    --shift_;
    for (const Slot& s : old) {
      if (s.row == kNoRow) continue;
      size_t i = Home(s.fp);
      while (table_[i].row != kNoRow) i = (i + 1) & mask_;
      table_[i] = s;
    }
  }

  size_t columns_;
  std::vector<Slot> table_;
  size_t mask_ = 0;
  int shift_ = 64;              // 64 - log2(table size)
  std::vector<BlockId> ids_;    // row * columns_ + column
  std::vector<uint32_t> held_;  // columns holding each row
  std::vector<uint32_t> free_rows_;
  size_t size_ = 0;
};

}  // namespace kvtier::eviction::internal
