#include "engine/internal/lower_codec.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <memory>

namespace kvtier::engine::internal {
namespace {

constexpr size_t kScratchAlignment = 4096;

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

}  // namespace

std::span<std::byte> ThreadScratch(size_t bytes) {
  thread_local std::unique_ptr<std::byte, FreeDeleter> buffer;
  thread_local size_t capacity = 0;
  if (capacity < bytes) {
    const size_t rounded = (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
    buffer.reset(static_cast<std::byte*>(std::aligned_alloc(kScratchAlignment, rounded)));
    capacity = buffer == nullptr ? 0 : rounded;
    if (buffer == nullptr) return {};
  }
  return {buffer.get(), bytes};
}

void PrefaultForWrite(std::span<std::byte> bytes) {
  if (bytes.empty()) return;
  const auto begin = reinterpret_cast<uintptr_t>(bytes.data()) & ~uintptr_t{4095};
  const auto end = reinterpret_cast<uintptr_t>(bytes.data() + bytes.size());
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
}

Result<std::span<const std::byte>> EncodeStored(const Layout& layout, Quantize q,
                                                std::span<const std::byte> block) {
  if (q == Quantize::kOff) return block;
  const Layout stored = StoredLayout(layout, q);
  const size_t bytes = stored.BlockBytes();
  const size_t padded = (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
  const std::span<std::byte> out = ThreadScratch(padded);
  if (out.empty()) return ResourceExhaustedError("no memory to quantize a block");
  KVTIER_RETURN_IF_ERROR(QuantizeBlock(layout, stored.dtype, block, out.first(bytes)));
  std::memset(out.data() + bytes, 0, padded - bytes);
  return std::span<const std::byte>(out.first(bytes));
}

Status DecodeStored(const Layout& layout, Quantize q, std::span<const std::byte> stored,
                    std::span<std::byte> out) {
  if (q == Quantize::kOff) {
    if (stored.size() != out.size()) return CorruptionError("stored block of the wrong size");
    if (stored.data() != out.data()) std::memcpy(out.data(), stored.data(), out.size());
    return Status::Ok();
  }
  PrefaultForWrite(out);
  const Status restored = DequantizeBlock(StoredLayout(layout, q), layout.dtype, stored, out);
  if (restored.ok()) return restored;
  return CorruptionError("stored " + std::string(QuantizeName(q)) +
                         " block does not decode: " + std::string(restored.message()));
}

}  // namespace kvtier::engine::internal
