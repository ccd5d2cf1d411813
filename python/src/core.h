// The state behind the Python objects of kvtier's extension module: a client
// session, the leases and writes made on it, and the rules that keep a view
// of a slot from ever showing the wrong block.
//
// Ownership. A Python Client, Lease or WriteHandle holds a shared_ptr to its
// core; every zero-copy view (numpy array, DLPack tensor) of a slot holds one
// too, through its owner capsule. So:
// - a lease is released when its Python object released it AND the last view
//   of its blocks is gone: a view never outlives the pin on its block;
// - a write with live views cannot commit (BufferError): nothing may write
//   into a slot once its block is published;
// - the client's socket and mapped arenas live until the last core goes, so a
//   view never points into unmapped memory.
//
// Threads. client::Client is single-threaded: every call into it holds
// ClientCore::mu, taken with the GIL released (Call below), and nothing done
// under mu touches Python (which could run a destructor needing mu). Cores
// are destroyed from Python's deallocators, on any thread, with the GIL
// held: they finish their lease or write at once when mu is free, and
// otherwise park it for the next call on the client (FinishOrPark).
#pragma once

#include <nanobind/nanobind.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"
#include "common/status.h"

namespace kvtier::python {

namespace nb = nanobind;

// A failed call: raised in Python as the kvtier.Error subclass of its code
// (kvtier/errors.py). `at_attach` marks errors of the HELLO, where an invalid
// argument from the daemon means it refused the layout (kvtier.LayoutError).
struct StatusError {
  Status status;
  bool at_attach = false;
};

[[noreturn]] void Throw(const Status& status);

template <typename T>
T ValueOrThrow(Result<T> r) {
  if (!r.ok()) Throw(r.status());
  return *std::move(r);
}

// Installs the translator from StatusError to kvtier.errors' classes.
void RegisterErrors();

class ClientCore {
 public:
  explicit ClientCore(std::unique_ptr<client::Client> c) : client_(std::move(c)) {}
  ~ClientCore();
  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;

  // Runs f(client) with the GIL released and mu held, after finishing parked
  // leases and writes. f must not touch Python objects.
  template <typename F>
  auto Call(F&& f) {
    nb::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    FinishParkedLocked();
    return f(*client_);
  }

  // The same without releasing the GIL: for quick calls that only read what
  // the client already has (session facts, arena addresses).
  template <typename F>
  auto Peek(F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    return f(*client_);
  }

  // Ends a lease or a write whose owners are gone: now if mu is free, else at
  // the next Call. Never blocks on mu; may be called with the GIL held.
  void Finish(client::ReadLease lease) { FinishOrPark(std::move(lease), parked_leases_); }
  void Finish(client::WriteHandle write) { FinishOrPark(std::move(write), parked_writes_); }

  // The daemon's GPU arena opened through CUDA IPC (dlopen'ed libcudart),
  // for views of kCuda device slots; opened on first use. REQUIRES: mu held
  // (inside Call/Peek).
  std::byte* DeviceBaseLocked(const client::Client& c);

 private:
  // The handle's own destructor sends the RELEASE or ABORT; it runs here
  // under mu when mu is free, else from `parked` at the next Call.
  template <typename Handle>
  void FinishOrPark(Handle handle, std::vector<Handle>& parked) {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (lock.owns_lock()) {
      Handle ending = std::move(handle);  // destroyed before the lock is released
      return;
    }
    std::lock_guard<std::mutex> guard(parked_mu_);
    parked.push_back(std::move(handle));
    any_parked_.store(true, std::memory_order_release);
  }
  void FinishParkedLocked();

  mutable std::mutex mu_;
  std::unique_ptr<client::Client> client_;
  std::mutex parked_mu_;  // guards the two lists; never held across a client call
  // Set when a list may be non-empty, so that a call finding none parked (the
  // usual case) does not take parked_mu_.
  std::atomic<bool> any_parked_{false};
  std::vector<client::ReadLease> parked_leases_;
  std::vector<client::WriteHandle> parked_writes_;
  void* device_base_ = nullptr;
};

class LeaseCore {
 public:
  LeaseCore(std::shared_ptr<ClientCore> c, client::ReadLease l)
      : client_(std::move(c)), lease_(std::move(l)) {}
  ~LeaseCore() {
    if (lease_.held()) client_->Finish(std::move(lease_));
  }
  LeaseCore(const LeaseCore&) = delete;
  LeaseCore& operator=(const LeaseCore&) = delete;

  const std::shared_ptr<ClientCore>& client() const { return client_; }
  const client::ReadLease& lease() const { return lease_; }

 private:
  std::shared_ptr<ClientCore> client_;
  client::ReadLease lease_;
};

class WriteCore {
 public:
  WriteCore(std::shared_ptr<ClientCore> c, client::WriteHandle w)
      : client_(std::move(c)), write_(std::move(w)) {}
  ~WriteCore() {
    if (write_.open()) client_->Finish(std::move(write_));
  }
  WriteCore(const WriteCore&) = delete;
  WriteCore& operator=(const WriteCore&) = delete;

  const std::shared_ptr<ClientCore>& client() const { return client_; }
  client::WriteHandle& write() { return write_; }
  // Zero-copy views of this write's slots still alive.
  std::atomic<int> views{0};

 private:
  std::shared_ptr<ClientCore> client_;
  client::WriteHandle write_;
};

}  // namespace kvtier::python
