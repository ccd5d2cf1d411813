// Copies between blocks ([layer][k|v][token][kv_head][head_dim], DESIGN.md
// §1) and a model's per-layer K and V tensors laid out [kv_head][seq][dim]
// (Hugging Face's DynamicCache, a leading batch dimension of 1): one pass
// per block, head_dim-long runs, the layers split across threads. torch's
// own strided copy_ of a permuted block moves the same bytes at a quarter of
// memcpy's speed here, as one small op per block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/layout.h"

namespace kvtier::python {

// One layer's K or V: element (h, s, d) at base + h*head_stride + s*seq_stride
// + d (strides in elements; d is contiguous).
struct SequenceTensor {
  std::byte* base = nullptr;
  int64_t head_stride = 0;
  int64_t seq_stride = 0;
  int64_t seq_len = 0;
};

enum class CopyDirection { kBlocksToSequence, kSequenceToBlocks };

// A block and the sequence block it holds: tokens [index * block_tokens, ...).
struct BlockAt {
  std::byte* data = nullptr;  // block_bytes, [layer][k|v][token][kv_head][head_dim]
  int64_t index = 0;
};

// For each block and each layer, copies its tokens to or from their positions
// in the layer's K (k[layer]) and V (v[layer]). REQUIRES: k.size() ==
// v.size() == layout.layers, every tensor long enough and of layout.dtype,
// layout.kind kKeyValue (the caller checks). Touches no Python; run it without the GIL.
void CopySequence(const Layout& layout, const std::vector<BlockAt>& blocks,
                  const std::vector<SequenceTensor>& k, const std::vector<SequenceTensor>& v,
                  CopyDirection direction);

}  // namespace kvtier::python
