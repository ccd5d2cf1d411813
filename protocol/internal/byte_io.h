// Little-endian byte writing and bounds-checked reading for the wire format
// (docs/protocol.md). Integers are assembled byte by byte with shifts, so the
// code is independent of the host's byte order and never loads through a
// misaligned pointer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvtier::protocol::internal {

// Stores the low `n` bytes of `v` at `out`, least significant first.
inline void StoreLe(uint64_t v, size_t n, std::byte* out) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

inline uint64_t LoadLe(const std::byte* in, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{std::to_integer<uint8_t>(in[i])} << (8 * i);
  return v;
}

// Appends to a byte vector. Thread-compatible; the vector is borrowed.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<std::byte>* out) : out_(out) {}

  void U8(uint8_t v) { out_->push_back(std::byte{v}); }
  void U16(uint16_t v) { Int(v, 2); }
  void U32(uint32_t v) { Int(v, 4); }
  void U64(uint64_t v) { Int(v, 8); }
  void Bytes(std::span<const std::byte> b) { out_->insert(out_->end(), b.begin(), b.end()); }

 private:
  void Int(uint64_t v, size_t n) {
    const size_t at = out_->size();
    out_->resize(at + n);
    StoreLe(v, n, out_->data() + at);
  }

  std::vector<std::byte>* out_;
};

// Reads from a span, front to back. Every read checks the bytes left first
// and fails with InvalidArgument naming the field and the offset; a failed
// read consumes nothing. Never reads outside the span.
class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> in) : in_(in) {}

  size_t offset() const { return pos_; }
  size_t remaining() const { return in_.size() - pos_; }

  Status U8(std::string_view field, uint8_t* v) { return Int(field, 1, v); }
  Status U16(std::string_view field, uint16_t* v) { return Int(field, 2, v); }
  Status U32(std::string_view field, uint32_t* v) { return Int(field, 4, v); }
  Status U64(std::string_view field, uint64_t* v) { return Int(field, 8, v); }

  // `n` bytes as a view into the input.
  Status Bytes(std::string_view field, size_t n, std::span<const std::byte>* out) {
    KVTIER_RETURN_IF_ERROR(Need(field, n));
    *out = in_.subspan(pos_, n);
    pos_ += n;
    return Status::Ok();
  }

  // The rest of the input, which may be empty.
  std::span<const std::byte> Rest() {
    auto rest = in_.subspan(pos_);
    pos_ = in_.size();
    return rest;
  }

  // InvalidArgument unless the whole input has been read.
  Status ExpectEnd() const {
    if (remaining() == 0) [[likely]]
      return Status::Ok();
    return Trailing();
  }

  Status Need(std::string_view field, size_t n) const {
    if (n <= remaining()) [[likely]]
      return Status::Ok();
    return Truncated(field, n);
  }

 private:
  // Need's error, out of line: the check itself inlines into every read, so
  // decoding a frame is a run of compares, not of calls.
  [[gnu::cold, gnu::noinline]] Status Truncated(std::string_view field, size_t n) const {
    return InvalidArgumentError("truncated: " + std::string(field) + " needs " + std::to_string(n) +
                                " bytes at offset " + std::to_string(pos_) + ", " +
                                std::to_string(remaining()) + " left");
  }
  [[gnu::cold, gnu::noinline]] Status Trailing() const {
    return InvalidArgumentError(std::to_string(remaining()) + " trailing bytes after offset " +
                                std::to_string(pos_));
  }

  template <typename T>
  Status Int(std::string_view field, size_t n, T* v) {
    KVTIER_RETURN_IF_ERROR(Need(field, n));
    *v = static_cast<T>(LoadLe(in_.data() + pos_, n));
    pos_ += n;
    return Status::Ok();
  }

  std::span<const std::byte> in_;
  size_t pos_ = 0;
};

}  // namespace kvtier::protocol::internal
