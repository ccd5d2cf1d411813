// The Python Lease and WriteHandle, and the zero-copy views of their slots.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <memory>

#include "core.h"

namespace kvtier::python {

class PyLease {
 public:
  explicit PyLease(std::shared_ptr<LeaseCore> core) : core_(std::move(core)) {}
  const std::shared_ptr<LeaseCore>& core() const;  // raises when released
  void Release() { core_.reset(); }
  bool held() const { return core_ != nullptr; }

 private:
  std::shared_ptr<LeaseCore> core_;
};

class PyWriteHandle {
 public:
  explicit PyWriteHandle(std::shared_ptr<WriteCore> core) : core_(std::move(core)) {}
  const std::shared_ptr<WriteCore>& core() const;  // raises when committed or aborted
  void Commit();
  void Abort();
  bool open() const { return core_ != nullptr; }

 private:
  std::shared_ptr<WriteCore> core_;
};

void BindHandles(nb::module_& m);

// Rows of a 2-D CPU array of equal-sized blocks (an engine's buffer of
// chunks, e.g. vLLM's CPU offloading tier), read or written one block a row
// (Lease.read_rows, WriteHandle.write_rows, Client.put_rows / get_rows).
using ByteRows = nb::ndarray<nb::device::cpu, nb::ndim<2>>;

// Row `row` of `rows`, checked: in range, exactly `bytes` bytes, contiguous
// (InvalidArgumentError or IndexError otherwise).
std::byte* RowOf(const ByteRows& rows, int64_t row, uint64_t bytes);

}  // namespace kvtier::python
