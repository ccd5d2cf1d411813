// FrequencySketch: how often each key was seen lately, approximately, in 4
// bits a counter (TinyLFU's count-min sketch, Einziger et al., ToS'17). Each
// key's four counters lie in one 64-bit word (one memory access a key), a
// word chosen by the key's hash and a counter of each 16-bit quarter by
// four more of its bits; the estimate is the least of the four, never below
// the true count until aging. Aging: after `sample` increments every counter
// is halved, so the sketch forgets what was frequent long ago.
//
// Thread-safety: none; confined to its owner.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/hash.h"

namespace kvtier::eviction::internal {

class FrequencySketch {
 public:
  // Room for about `keys` keys (at least 64): one word a key, rounded up to
  // a power of two; ages every 10 words' worth of increments (sample).
  explicit FrequencySketch(size_t keys = 64) { Resize(keys); }

  // Starts over with room for about `keys` keys (counts are forgotten).
  void Resize(size_t keys) {
    const size_t words = std::bit_ceil(std::max<size_t>(64, keys));
    table_.assign(words, 0);
    sample_ = 10 * static_cast<uint64_t>(words);
    additions_ = 0;
  }

  // Makes room for about `keys` keys, keeping every estimate: a key's word
  // in a table twice as large is its old word's index or that plus the old
  // size, and both start as copies of the old word. `one_in`: only one key
  // in that many (a sample, by a hash of its own) is ever counted, so the
  // table holds that many times fewer words (at least 64) and ages that many
  // times fewer increments apart: it forgets after as many references, and
  // its counters are as crowded, as those of a sketch for every key.
  void Grow(size_t keys, size_t one_in = 1) {
    size_t full = 64;
    while (full < keys) full *= 2;
    const size_t words = std::max<size_t>(64, full / std::max<size_t>(1, one_in));
    while (table_.size() < words) {
      const size_t old = table_.size();
      table_.resize(2 * old);
      std::copy(table_.begin(), table_.begin() + static_cast<std::ptrdiff_t>(old),
                table_.begin() + static_cast<std::ptrdiff_t>(old));
    }
    sample_ = one_in <= 1 ? 10 * static_cast<uint64_t>(table_.size())
                          : std::max<uint64_t>(1, 10 * static_cast<uint64_t>(full) / one_in);
  }

  size_t words() const { return table_.size(); }

  void Increment(uint64_t key) { IncrementHashed(Hash(key)); }

  // Increment of each key in turn, the words of the keys a few places ahead
  // fetched meanwhile: a sketch larger than the caches costs a miss a key,
  // and a chain's keys are known together (a long chain counted one key at
  // a time waits on each miss in turn). Each key is hashed once.
  void IncrementAll(std::span<const uint64_t> keys) {
    constexpr size_t kAhead = 8;
    // (A table of 128 KiB or less stays in the cache: no prefetch.)
    if (table_.size() <= (size_t{1} << 14) || keys.size() <= kAhead) {
      for (uint64_t key : keys) IncrementHashed(Hash(key));
      return;
    }
    uint64_t ahead[kAhead];  // the hashes of keys i .. i + kAhead - 1, by i % kAhead
    for (size_t i = 0; i < kAhead; ++i) {
      ahead[i] = Hash(keys[i]);
      __builtin_prefetch(&table_[Index(ahead[i])], 1);
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint64_t h = ahead[i % kAhead];
      if (i + kAhead < keys.size()) {
        ahead[i % kAhead] = Hash(keys[i + kAhead]);
        __builtin_prefetch(&table_[Index(ahead[i % kAhead])], 1);
      }
      IncrementHashed(h);
    }
  }

  // The estimated count of `key`, 0 to 15.
  unsigned Frequency(uint64_t key) const {
    const uint64_t h = Hash(key);
    const uint64_t word = table_[Index(h)];
    unsigned least = 15;
    for (int i = 0; i < 4; ++i) {
      least = std::min(least, static_cast<unsigned>((word >> Shift(h, i)) & 0xf));
    }
    return least;
  }

  // Halves every counter (and the count of additions since the last aging).
  void Age() {
    for (uint64_t& w : table_) w = (w >> 1) & 0x7777'7777'7777'7777ULL;
    additions_ /= 2;
  }

 private:
  // The key's own hash, salted: keys that share the low bits of Mix64(key)
  // (the adaptive policy's sampled keys, one in 16 by those bits) would
  // otherwise share their counters' places in a word, and their counts
  // would be too high (a filter asked only of sampled keys let almost
  // every block in: 0.2 % hits where the tier's own filter, asked of every
  // key, made 6 %).
  static uint64_t Hash(uint64_t key) { return Mix64(key ^ 0x736b'6574'6368'2121ULL); }
  size_t Index(uint64_t h) const { return static_cast<size_t>(h >> 32) & (table_.size() - 1); }
  // Counter i of a key: one of the 4 of the word's quarter i, by 2 bits of h.
  static unsigned Shift(uint64_t h, int i) {
    return static_cast<unsigned>(16 * i) + 4 * static_cast<unsigned>((h >> (2 * i)) & 3);
  }

  // Raises each of the key's four counters not yet at 15 (without branches:
  // which ones are full is random).
  void IncrementHashed(uint64_t h) {
    uint64_t& word = table_[Index(h)];
    uint64_t add = 0;
    for (int i = 0; i < 4; ++i) {
      const unsigned shift = Shift(h, i);
      add |= uint64_t{((word >> shift) & 0xf) != 0xf} << shift;
    }
    word += add;
    if (add != 0 && ++additions_ >= sample_) Age();
  }

  std::vector<uint64_t> table_;
  uint64_t sample_ = 0;
  uint64_t additions_ = 0;
};

}  // namespace kvtier::eviction::internal
