#include "core.h"

#include <dlfcn.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <string>

namespace kvtier::python {

void Throw(const Status& status) { throw StatusError{status, false}; }

void RegisterErrors() {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      // kvtier.errors builds the exception of the code; imported here, not
      // at module load, so that the extension imports on its own (stubgen).
      nb::object make = nb::module_::import_("kvtier.errors").attr("_from_status");
      nb::object error =
          make(static_cast<int>(e.status.code()), std::string(e.status.message()), e.at_attach);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
    }
  });
}

namespace {

// The few CUDA runtime calls a view of a GPU slot needs, from whichever
// libcudart the process can load (torch's, the toolkit's): the extension
// links no CUDA, so it installs and imports on machines without it.
struct IpcHandle {
  char reserved[protocol::kCudaIpcHandleBytes];
};
struct CudaRuntime {
  int (*set_device)(int) = nullptr;
  int (*get_device)(int*) = nullptr;
  int (*ipc_open)(void**, IpcHandle, unsigned int) = nullptr;
  int (*ipc_close)(void*) = nullptr;
  std::string error;
};

const CudaRuntime& Cuda() {
  static const CudaRuntime rt = [] {
    CudaRuntime r;
    void* lib = nullptr;
    for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12"}) {
      lib = ::dlopen(name, RTLD_NOW | RTLD_GLOBAL);
      if (lib != nullptr) break;
    }
    if (lib == nullptr) {
      r.error = "no CUDA runtime (libcudart) could be loaded";
      return r;
    }
    r.set_device = reinterpret_cast<int (*)(int)>(::dlsym(lib, "cudaSetDevice"));
    r.get_device = reinterpret_cast<int (*)(int*)>(::dlsym(lib, "cudaGetDevice"));
    r.ipc_open = reinterpret_cast<int (*)(void**, IpcHandle, unsigned int)>(
        ::dlsym(lib, "cudaIpcOpenMemHandle"));
    r.ipc_close = reinterpret_cast<int (*)(void*)>(::dlsym(lib, "cudaIpcCloseMemHandle"));
    if (!r.set_device || !r.get_device || !r.ipc_open || !r.ipc_close) {
      r.error = "the loaded libcudart lacks the CUDA IPC calls";
    }
    return r;
  }();
  return rt;
}

}  // namespace

ClientCore::~ClientCore() {
  // The last owner is gone: no view can see the arenas any more.
  FinishParkedLocked();
  if (device_base_ != nullptr) Cuda().ipc_close(device_base_);
  client_.reset();
}

void ClientCore::FinishParkedLocked() {
  if (!any_parked_.load(std::memory_order_acquire)) return;
  std::vector<client::ReadLease> leases;
  std::vector<client::WriteHandle> writes;
  {
    std::lock_guard<std::mutex> parked(parked_mu_);
    any_parked_.store(false, std::memory_order_relaxed);
    leases.swap(parked_leases_);
    writes.swap(parked_writes_);
  }
  // Their destructors release and abort, here, under mu.
  leases.clear();
  writes.clear();
}

std::byte* ClientCore::DeviceBaseLocked(const client::Client& c) {
  if (device_base_ != nullptr) return static_cast<std::byte*>(device_base_);
  const CudaRuntime& cuda = Cuda();
  if (!cuda.error.empty())
    Throw(UnavailableError("a view of a GPU slot needs CUDA: " + cuda.error));
  IpcHandle handle{};
  std::memcpy(handle.reserved, c.device_ipc_handle().data(), sizeof handle.reserved);
  int previous = 0;
  cuda.get_device(&previous);
  if (int err = cuda.set_device(c.device_ordinal()); err != 0) {
    Throw(UnavailableError("cudaSetDevice(" + std::to_string(c.device_ordinal()) +
                           ") failed: CUDA error " + std::to_string(err)));
  }
  void* base = nullptr;
  constexpr unsigned int kLazyEnablePeerAccess = 1;  // cudaIpcMemLazyEnablePeerAccess
  const int err = cuda.ipc_open(&base, handle, kLazyEnablePeerAccess);
  cuda.set_device(previous);
  if (err != 0) {
    Throw(UnavailableError("cudaIpcOpenMemHandle of kvtierd's GPU arena failed: CUDA error " +
                           std::to_string(err)));
  }
  device_base_ = base;
  return static_cast<std::byte*>(base);
}

}  // namespace kvtier::python
