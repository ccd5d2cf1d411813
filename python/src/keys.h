// Block keys in Python: kvtier.Keys, the key array every call takes and
// block_keys() returns, and the conversions between Python and BlockKey.
//
// A key's Python form is 16 bytes, `hi` big-endian first, so that
// key.hex() is the C++ BlockKey::ToHex(). A Keys holds n keys in that form
// back to back in one bytes object (16 * n bytes), so that a chain of 64
// keys is one object instead of 64: a call reads it in place, with no
// Python object per key, and a slice shares the buffer.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/variant.h>

#include <cstddef>
#include <span>
#include <variant>
#include <vector>

#include "client/client.h"

namespace kvtier::python {

namespace nb = nanobind;

inline constexpr size_t kKeyBytes = 16;

// An immutable run of keys inside a bytes object shared by its slices.
class PyKeys {
 public:
  // REQUIRES: buffer is a bytes object holding keys [first, first + count).
  PyKeys(nb::bytes buffer, size_t first, size_t count)
      : buffer_(std::move(buffer)), first_(first), count_(count) {}

  size_t size() const { return count_; }
  // The 16 * size() bytes of the keys.
  const char* data() const { return buffer_.c_str() + first_ * kKeyBytes; }
  const nb::bytes& buffer() const { return buffer_; }
  bool whole_buffer() const { return first_ == 0 && count_ * kKeyBytes == buffer_.size(); }
  // Keys [begin, begin + n) of these, sharing the buffer.
  PyKeys Slice(size_t begin, size_t n) const { return PyKeys(buffer_, first_ + begin, n); }

 private:
  nb::bytes buffer_;
  size_t first_ = 0;
  size_t count_ = 0;
};

// What every key-taking call accepts (and the stubs say): a kvtier.Keys, or
// a sequence of 16-byte bytes as before.
using KeysArg = nb::typed<nb::handle, std::variant<PyKeys, nb::typed<nb::sequence, nb::bytes>>>;

// The keys of a call's argument as BlockKeys: a Keys is read straight from
// its buffer, a list or tuple in place, any other sequence through an
// iterator. Raises TypeError for one bytes object (a key, not a sequence of
// them) and ValueError for an item that is not 16 bytes.
class KeyList {
 public:
  explicit KeyList(nb::handle keys);
  KeyList(const KeyList&) = delete;
  KeyList& operator=(const KeyList&) = delete;

  std::span<const client::BlockKey> span() const { return {data_, size_}; }
  operator std::span<const client::BlockKey>() const { return span(); }

 private:
  // Chains up to this long (the usual prompt's) need no allocation.
  static constexpr size_t kInline = 128;
  client::BlockKey* data_ = nullptr;
  size_t size_ = 0;
  std::vector<client::BlockKey> heap_;
  alignas(client::BlockKey) std::byte inline_[kInline * sizeof(client::BlockKey)];
};

// One key, from a 16-byte bytes object (ValueError otherwise), and back.
client::BlockKey KeyFromPython(nb::handle key);
nb::bytes KeyToPython(const client::BlockKey& key);

// A new Keys holding `keys`: one bytes object, no object per key.
nb::object KeysToPython(std::span<const client::BlockKey> keys);

void BindKeys(nb::module_& m);

}  // namespace kvtier::python
