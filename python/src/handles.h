// The Python Lease and WriteHandle, and the zero-copy views of their slots.
#pragma once

#include <nanobind/nanobind.h>

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

}  // namespace kvtier::python
