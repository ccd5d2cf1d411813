// A host arena and a worker's per-layer paged K/V tensors for the copy tests
// (CPU and GPU). Canaries are a NaN bit pattern with a payload: an untouched
// element must still hold exactly those bits. For a latent (MLA) layout the
// latents are paged_k; paged_v stays canary and Params() passes no v_layers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "kernels/block_copy.h"

namespace kvtier::kernels::testing {

class CopyFixture {
 public:
  // Every slot holds random bytes (the slack between slots is canary); the
  // paged tensors are canary.
  CopyFixture(const Layout& l, uint32_t slot_count, uint32_t paged_count, uint64_t seed)
      : layout(l),
        part_bytes(l.BlockBytes() / (uint64_t{l.Planes()} * l.layers)),
        stride(l.BlockBytes() + 16),
        num_slots(slot_count),
        paged_num_blocks(paged_count),
        canary(NanBits(l.dtype)) {
    arena.assign(num_slots * stride / 2, canary);
    std::mt19937_64 rng(seed);
    for (uint64_t s = 0; s < num_slots; ++s) {
      for (uint64_t i = 0; i < l.BlockBytes() / 2; ++i) {
        arena[s * stride / 2 + i] = static_cast<uint16_t>(rng());
      }
    }
    paged_k.assign(l.layers, std::vector<uint16_t>(paged_num_blocks * part_bytes / 2, canary));
    paged_v = paged_k;
  }

  void FillArenaWithCanary() { std::fill(arena.begin(), arena.end(), canary); }

  void Use(std::vector<int32_t> from_slots, std::vector<int32_t> to_blocks) {
    slots = std::move(from_slots);
    paged_blocks = std::move(to_blocks);
  }

  // Host pointers; valid until the next Use() or copy of the vectors.
  PagedCopyParams Params() {
    k_ptrs.clear();
    v_ptrs.clear();
    for (uint32_t l = 0; l < layout.layers; ++l) {
      k_ptrs.push_back(paged_k[l].data());
      v_ptrs.push_back(paged_v[l].data());
    }
    PagedCopyParams p;
    p.layout = layout;
    p.num_blocks = static_cast<uint32_t>(slots.size());
    p.num_slots = num_slots;
    p.slot_stride_bytes = stride;
    p.paged_num_blocks = paged_num_blocks;
    p.arena = arena.data();
    p.slots = slots.data();
    p.paged_blocks = paged_blocks.data();
    p.k_layers = k_ptrs.data();
    p.v_layers = layout.Planes() == 2 ? v_ptrs.data() : nullptr;
    return p;
  }

  const uint8_t* ArenaPart(int32_t slot, uint32_t layer, uint32_t kv) const {
    return reinterpret_cast<const uint8_t*>(arena.data()) + static_cast<uint64_t>(slot) * stride +
           (uint64_t{layout.Planes()} * layer + kv) * part_bytes;
  }
  const uint8_t* PagedPart(uint32_t layer, uint32_t kv, int32_t block) const {
    const auto& t = kv == 0 ? paged_k[layer] : paged_v[layer];
    return reinterpret_cast<const uint8_t*>(t.data()) + static_cast<uint64_t>(block) * part_bytes;
  }

  std::vector<uint8_t> PagedBytes() const {
    std::vector<uint8_t> out;
    for (const auto* tensors : {&paged_k, &paged_v}) {
      for (const auto& t : *tensors) {
        const auto* b = reinterpret_cast<const uint8_t*>(t.data());
        out.insert(out.end(), b, b + t.size() * 2);
      }
    }
    return out;
  }

  // "" when every paged block not named in paged_blocks is still canary.
  std::string UntouchedPagedCanaries() const {
    for (uint32_t block = 0; block < paged_num_blocks; ++block) {
      if (Named(paged_blocks, static_cast<int32_t>(block))) continue;
      for (uint32_t layer = 0; layer < layout.layers; ++layer) {
        for (uint32_t kv = 0; kv < 2; ++kv) {  // a latent layout's paged_v: all canary
          if (!AllCanary(PagedPart(layer, kv, static_cast<int32_t>(block)), part_bytes)) {
            return "paged block " + std::to_string(block) + " layer " + std::to_string(layer) +
                   " kv " + std::to_string(kv) + " was written";
          }
        }
      }
    }
    return "";
  }

  // "" when every slot not named in slots, and every slot's slack, is canary.
  std::string UntouchedArenaCanaries() const {
    const auto* base = reinterpret_cast<const uint8_t*>(arena.data());
    for (uint32_t s = 0; s < num_slots; ++s) {
      const uint8_t* slot = base + static_cast<uint64_t>(s) * stride;
      if (!AllCanary(slot + layout.BlockBytes(), stride - layout.BlockBytes())) {
        return "slack after slot " + std::to_string(s) + " was written";
      }
      if (!Named(slots, static_cast<int32_t>(s)) && !AllCanary(slot, layout.BlockBytes())) {
        return "slot " + std::to_string(s) + " was written";
      }
    }
    return "";
  }

  Layout layout;
  uint64_t part_bytes;
  uint64_t stride;
  uint32_t num_slots;
  uint32_t paged_num_blocks;
  uint16_t canary;
  std::vector<uint16_t> arena;
  std::vector<std::vector<uint16_t>> paged_k;  // [layer][paged_num_blocks * part_bytes / 2]
  std::vector<std::vector<uint16_t>> paged_v;
  std::vector<int32_t> slots;
  std::vector<int32_t> paged_blocks;

 private:
  static bool Named(const std::vector<int32_t>& v, int32_t x) {
    for (int32_t y : v) {
      if (y == x) return true;
    }
    return false;
  }
  bool AllCanary(const uint8_t* p, uint64_t bytes) const {
    for (uint64_t i = 0; i + 1 < bytes; i += 2) {
      uint16_t x = 0;
      std::memcpy(&x, p + i, 2);
      if (x != canary) return false;
    }
    return true;
  }

  std::vector<void*> k_ptrs;
  std::vector<void*> v_ptrs;
};

}  // namespace kvtier::kernels::testing
