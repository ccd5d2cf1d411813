#include "sequence_copy.h"

#include <algorithm>
#include <cstring>
#include <thread>

namespace kvtier::python {
namespace {

// Bytes below which one thread does it all: a thread costs more than it saves.
constexpr uint64_t kParallelBytes = 4ull << 20;

void CopyLayers(const Layout& lo, const std::vector<BlockAt>& blocks,
                const std::vector<SequenceTensor>& k, const std::vector<SequenceTensor>& v,
                CopyDirection direction, uint32_t layer_begin, uint32_t layer_end) {
  const uint64_t es = DTypeBytes(lo.dtype);
  const uint64_t run = lo.head_dim * es;  // one (token, head): head_dim elements
  const uint64_t part = uint64_t{lo.block_tokens} * lo.kv_heads * run;  // one layer's K or V
  for (uint32_t layer = layer_begin; layer < layer_end; ++layer) {
    for (uint32_t kv = 0; kv < 2; ++kv) {
      const SequenceTensor& t = kv == 0 ? k[layer] : v[layer];
      for (const BlockAt& b : blocks) {
        std::byte* block_part = b.data + (uint64_t{layer} * 2 + kv) * part;
        const int64_t seq0 = b.index * lo.block_tokens;
        for (uint32_t tok = 0; tok < lo.block_tokens; ++tok) {
          for (uint32_t h = 0; h < lo.kv_heads; ++h) {
            std::byte* in_block = block_part + (uint64_t{tok} * lo.kv_heads + h) * run;
            std::byte* in_seq = t.base + (h * t.head_stride + (seq0 + tok) * t.seq_stride) *
                                             static_cast<int64_t>(es);
            if (direction == CopyDirection::kBlocksToSequence) {
              std::memcpy(in_seq, in_block, run);
            } else {
              std::memcpy(in_block, in_seq, run);
            }
          }
        }
      }
    }
  }
}

}  // namespace

void CopySequence(const Layout& layout, const std::vector<BlockAt>& blocks,
                  const std::vector<SequenceTensor>& k, const std::vector<SequenceTensor>& v,
                  CopyDirection direction) {
  const uint64_t bytes = blocks.size() * layout.BlockBytes();
  const uint32_t threads =
      bytes < kParallelBytes
          ? 1
          : std::min<uint32_t>(
                {std::max(1u, std::thread::hardware_concurrency()), layout.layers, 8});
  if (threads <= 1) {
    CopyLayers(layout, blocks, k, v, direction, 0, layout.layers);
    return;
  }
  std::vector<std::thread> pool;
  const uint32_t per = (layout.layers + threads - 1) / threads;
  for (uint32_t begin = per; begin < layout.layers; begin += per) {
    pool.emplace_back(CopyLayers, std::cref(layout), std::cref(blocks), std::cref(k), std::cref(v),
                      direction, begin, std::min(layout.layers, begin + per));
  }
  CopyLayers(layout, blocks, k, v, direction, 0, std::min(layout.layers, per));
  for (std::thread& t : pool) t.join();
}

}  // namespace kvtier::python
