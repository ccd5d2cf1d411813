// The split-K cut of a sequence, shared verbatim by the CPU reference and the
// CUDA kernels so that both agree on which tokens each chunk holds.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KVTIER_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KVTIER_HOST_DEVICE inline
#endif

namespace kvtier::kernels::internal {

// Tokens [begin, end) of a sequence; empty when begin >= end.
struct TokenRange {
  int64_t begin;
  int64_t end;
};

// First attended token: the window keeps the last `window` tokens.
KVTIER_HOST_DEVICE int64_t AttendBegin(int64_t len, int64_t window) {
  return window > 0 && len > window ? len - window : 0;
}

// Tokens of chunk `c`: chunks are counted from the first attended token, so a
// window of W tokens spans at most ceil(W / chunk_tokens) chunks wherever the
// sequence ends.
KVTIER_HOST_DEVICE TokenRange ChunkTokens(int64_t len, int64_t window, int64_t chunk_tokens,
                                          int64_t c) {
  const int64_t begin = AttendBegin(len, window) + c * chunk_tokens;
  const int64_t end = begin + chunk_tokens < len ? begin + chunk_tokens : len;
  return TokenRange{begin, end};
}

// Chunks holding at least one attended token: the merge reads these only.
KVTIER_HOST_DEVICE int64_t LiveChunks(int64_t len, int64_t window, int64_t chunk_tokens) {
  const int64_t span = len - AttendBegin(len, window);
  return span <= 0 ? 0 : (span + chunk_tokens - 1) / chunk_tokens;
}

// Division by a runtime divisor without a divide instruction (integer
// division is ~20 instructions on a GPU): n / d = umulhi(n, multiplier) >>
// shift, exact for 0 <= n < 2^31 and 1 <= d < 2^31 (Granlund-Montgomery;
// CUTLASS's FastDivmod). Built on the host, used in the kernels' inner loop,
// and tested exhaustively on the host.
struct FastDivmod {
  uint32_t divisor = 1;
  uint32_t multiplier = 0;  // 0 encodes divisor 1
  uint32_t shift = 0;

  FastDivmod() = default;
  explicit FastDivmod(uint32_t d) : divisor(d) {
    if (d == 1) return;
    uint32_t ceil_log2 = 0;
    while ((uint64_t{1} << ceil_log2) < d) ++ceil_log2;
    const uint32_t p = 31 + ceil_log2;
    multiplier = static_cast<uint32_t>(((uint64_t{1} << p) + d - 1) / d);
    shift = p - 32;
  }

  // REQUIRES: n < 2^31.
  KVTIER_HOST_DEVICE uint32_t Div(uint32_t n) const {
    if (multiplier == 0) return n;
#if defined(__CUDA_ARCH__)
    return __umulhi(n, multiplier) >> shift;
#else
    return static_cast<uint32_t>((static_cast<uint64_t>(n) * multiplier) >> 32) >> shift;
#endif
  }
  KVTIER_HOST_DEVICE void DivMod(uint32_t n, uint32_t* quotient, uint32_t* remainder) const {
    *quotient = Div(n);
    *remainder = n - *quotient * divisor;
  }
};

// Where the partials live in the workspace (DecodeAttentionPlan's layout).
struct WorkspaceLayout {
  uint64_t lse_offset_bytes;  // o_part starts at 0
  uint64_t total_bytes;
};

KVTIER_HOST_DEVICE WorkspaceLayout PartialsLayout(uint64_t batch, uint64_t num_q_heads,
                                                  uint64_t num_chunks, uint64_t head_dim) {
  const uint64_t rows = batch * num_q_heads * num_chunks;
  const uint64_t o_bytes = (rows * head_dim * sizeof(float) + 15) / 16 * 16;
  return WorkspaceLayout{o_bytes, o_bytes + (rows * sizeof(float) + 15) / 16 * 16};
}

}  // namespace kvtier::kernels::internal
