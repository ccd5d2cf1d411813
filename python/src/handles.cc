#include "handles.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <string>

#include "sequence_copy.h"

namespace kvtier::python {

using client::WireTier;
using client::WireWriteState;
using Bytes1D = nb::ndarray<nb::array_api, uint8_t, nb::ndim<1>, nb::c_contig>;
using ConstBytes1D = nb::ndarray<nb::array_api, const uint8_t, nb::ndim<1>, nb::c_contig>;

namespace {

constexpr int kDLCpu = 1;   // DLPack's kDLCPU
constexpr int kDLCuda = 2;  // DLPack's kDLCUDA

size_t Index(int64_t i, size_t n) {
  const int64_t size = static_cast<int64_t>(n);
  if (i < -size || i >= size) {
    throw nb::index_error(
        ("block index " + std::to_string(i) + " out of range for " + std::to_string(n) + " blocks")
            .c_str());
  }
  return static_cast<size_t>(i < 0 ? i + size : i);
}

// Where block i of a lease or write lives, as a view sees it: host memory
// (the host arena, or an emulated device arena, mapped) or a GPU's.
struct Place {
  std::byte* data = nullptr;
  int device_type = kDLCpu;
  int device_id = 0;
};

// Where block i of a lease or write lives and how long it is, as a view
// sees it: in mapped host memory (the host arena, or an emulated device
// arena) or on the daemon's GPU.
template <typename Handle>
Place PlaceOf(ClientCore& core, const Handle& h, size_t i, uint64_t* bytes) {
  return core.Peek([&](client::Client& c) {
    *bytes = c.block_bytes();
    if (c.mapped(h.tier())) return Place{const_cast<std::byte*>(h.Bytes(i).data()), kDLCpu, 0};
    if (c.device_ordinal() < 0 || h.tier() != WireTier::kDevice) {
      Throw(FailedPreconditionError("this block's arena is not mapped in this process"));
    }
    return Place{core.DeviceBaseLocked(c) + h.offset(i), kDLCuda, c.device_ordinal()};
  });
}

template <typename Handle>
std::vector<uint64_t> Offsets(const Handle& h) {
  std::vector<uint64_t> out;
  for (size_t i = 0; i < h.size(); ++i) out.push_back(h.offset(i));
  return out;
}

// A capsule owning one reference to T's core: a view keeps it alive.
template <typename T>
nb::capsule Owner(std::shared_ptr<T> core) {
  return nb::capsule(new std::shared_ptr<T>(std::move(core)),
                     [](void* p) noexcept { delete static_cast<std::shared_ptr<T>*>(p); });
}

// Counts a write's live views, so that it cannot commit under them.
struct WriteViewToken {
  explicit WriteViewToken(std::shared_ptr<WriteCore> c) : core(std::move(c)) { ++core->views; }
  ~WriteViewToken() { --core->views; }
  std::shared_ptr<WriteCore> core;
};

// Per-layer K or V tensors ([kv_heads, seq, head_dim], or with a leading
// batch of 1) as SequenceTensors, checked against the layout: CPU memory,
// the dtype's width, head_dim contiguous, seq long enough for `tokens`.
using AnyCpuTensor = nb::ndarray<nb::device::cpu>;
std::vector<SequenceTensor> SequenceTensors(const std::vector<AnyCpuTensor>& layers,
                                            const Layout& lo, int64_t tokens, const char* what) {
  if (lo.kind != KvKind::kKeyValue) {
    Throw(InvalidArgumentError("MLA latent blocks have no K and V tensors to copy to or from (" +
                               lo.ToString() + " is not a K/V layout)"));
  }
  if (layers.size() != lo.layers) {
    Throw(InvalidArgumentError(std::string(what) + ": " + std::to_string(layers.size()) +
                               " tensors for " + std::to_string(lo.layers) + " layers"));
  }
  std::vector<SequenceTensor> out;
  for (const AnyCpuTensor& t : layers) {
    const size_t nd = t.ndim();
    const bool shaped = (nd == 3 || (nd == 4 && t.shape(0) == 1)) &&
                        t.shape(nd - 3) == lo.kv_heads && t.shape(nd - 1) == lo.head_dim;
    if (!shaped || t.stride(nd - 1) != 1 || t.dtype().bits != 8 * DTypeBytes(lo.dtype)) {
      Throw(InvalidArgumentError(std::string(what) + ": each must be a CPU tensor [1,] " +
                                 std::to_string(lo.kv_heads) + " x seq x " +
                                 std::to_string(lo.head_dim) + " of " +
                                 std::string(DTypeName(lo.dtype)) + ", head_dim contiguous"));
    }
    if (static_cast<int64_t>(t.shape(nd - 2)) < tokens) {
      Throw(InvalidArgumentError(std::string(what) + ": " + std::to_string(t.shape(nd - 2)) +
                                 " positions, the blocks need " + std::to_string(tokens)));
    }
    out.push_back({static_cast<std::byte*>(t.data()), t.stride(nd - 3), t.stride(nd - 2),
                   static_cast<int64_t>(t.shape(nd - 2))});
  }
  return out;
}

}  // namespace

std::byte* RowOf(const ByteRows& rows, int64_t row, uint64_t bytes) {
  const uint64_t width = rows.shape(1) * (rows.dtype().bits / 8);
  if (rows.stride(1) != 1 || width != bytes) {
    Throw(InvalidArgumentError("rows must be a 2-D CPU array whose rows are one block each (" +
                               std::to_string(bytes) + " bytes, contiguous); its rows are " +
                               std::to_string(width) + " bytes"));
  }
  if (row < 0 || static_cast<uint64_t>(row) >= rows.shape(0)) {
    throw nb::index_error(("row " + std::to_string(row) + " out of range for " +
                           std::to_string(rows.shape(0)) + " rows")
                              .c_str());
  }
  return static_cast<std::byte*>(rows.data()) +
         row * rows.stride(0) * static_cast<int64_t>(rows.dtype().bits / 8);
}

const std::shared_ptr<LeaseCore>& PyLease::core() const {
  if (core_ == nullptr) Throw(FailedPreconditionError("the lease was released"));
  return core_;
}

const std::shared_ptr<WriteCore>& PyWriteHandle::core() const {
  if (core_ == nullptr) Throw(FailedPreconditionError("the write was committed or aborted"));
  return core_;
}

void PyWriteHandle::Commit() {
  const std::shared_ptr<WriteCore> w = core();
  if (const int views = w->views.load(); views > 0) {
    throw nb::buffer_error(
        (std::to_string(views) +
         " view(s) of this write's slots are still alive: drop them (del) before commit(), "
         "since no one may write into a published block")
            .c_str());
  }
  core_.reset();  // closed whatever the outcome, as the daemon ends it either way
  const Status s = w->client()->Call([&](client::Client&) { return w->write().Commit(); });
  if (!s.ok()) Throw(s);
}

void PyWriteHandle::Abort() {
  const std::shared_ptr<WriteCore> w = core();
  core_.reset();
  const Status s = w->client()->Call([&](client::Client&) { return w->write().Abort(); });
  if (!s.ok()) Throw(s);
}

void BindHandles(nb::module_& m) {
  nb::class_<PyLease>(m, "Lease",
                      R"(The leading cached blocks of Client.acquire(), pinned in one tier.

A pinned block is never evicted or moved. ``lease[i]`` is a read-only,
zero-copy view of block i's bytes (buffer protocol and DLPack:
``numpy.asarray(lease[i])``, ``torch.from_dlpack(lease[i])``), laid out as
``Layout.block_shape``. Release the lease (``release()`` or leaving its
``with`` block) when done: the pin is dropped once the lease is released and
no view of its blocks is alive any more, so a view never shows another
block's bytes.)")
      .def(
          "__len__", [](const PyLease& l) { return l.held() ? l.core()->lease().size() : 0; },
          "Blocks leased: the leading hits of the keys asked for (0 once released).")
      .def(
          "__getitem__",
          [](const PyLease& self, int64_t i) {
            const std::shared_ptr<LeaseCore>& core = self.core();
            const client::ReadLease& l = core->lease();
            const size_t k = Index(i, l.size());
            uint64_t bytes = 0;
            const Place p = PlaceOf(*core->client(), l, k, &bytes);
            const size_t shape[1] = {static_cast<size_t>(bytes)};
            return ConstBytes1D(p.data, 1, shape, Owner(core), nullptr, nb::dtype<uint8_t>(),
                                p.device_type, p.device_id);
          },
          nb::arg("i"), "A read-only zero-copy view (uint8, block_bytes long) of block i.")
      .def_prop_ro(
          "tier", [](const PyLease& l) { return l.core()->lease().tier(); },
          "The tier the blocks are pinned in.")
      .def_prop_ro("id", [](const PyLease& l) { return l.core()->lease().id(); })
      .def_prop_ro("held", &PyLease::held, "False once released.")
      .def_prop_ro(
          "offsets", [](const PyLease& l) { return Offsets(l.core()->lease()); },
          "Byte offset of each block in its tier's arena.")
      .def(
          "block_table",
          [](const PyLease& l, uint64_t stride) {
            return ValueOrThrow(l.core()->lease().BlockTable(stride));
          },
          nb::arg("stride_bytes") = 4096,
          "The blocks as a kernel's block table: offset / stride_bytes each (kernels/ address "
          "slot k at arena + k * stride).")
      .def(
          "copy_into",
          [](const PyLease& self, const std::vector<AnyCpuTensor>& keys,
             const std::vector<AnyCpuTensor>& values, int64_t first_block) {
            const std::shared_ptr<LeaseCore>& core = self.core();
            const client::ReadLease& l = core->lease();
            const Layout lo = core->client()->Peek([&](client::Client& c) {
              if (!c.mapped(l.tier())) {
                Throw(FailedPreconditionError("copy_into reads host-addressable blocks only"));
              }
              return c.options().layout;
            });
            const int64_t end = (first_block + static_cast<int64_t>(l.size())) * lo.block_tokens;
            if (first_block < 0) Throw(InvalidArgumentError("first_block is negative"));
            const auto k = SequenceTensors(keys, lo, end, "keys");
            const auto v = SequenceTensors(values, lo, end, "values");
            std::vector<BlockAt> blocks;
            for (size_t i = 0; i < l.size(); ++i) {
              blocks.push_back({const_cast<std::byte*>(l.Bytes(i).data()),
                                first_block + static_cast<int64_t>(i)});
            }
            nb::gil_scoped_release nogil;
            CopySequence(lo, blocks, k, v, CopyDirection::kBlocksToSequence);
          },
          nb::arg("keys"), nb::arg("values"), nb::arg("first_block") = 0,
          nb::sig("def copy_into(self, keys: collections.abc.Sequence[object], values: "
                  "collections.abc.Sequence[object], first_block: int = 0) -> None"),
          R"(Copies every leased block into per-layer K and V tensors, one pass per block.

keys, values: one CPU tensor per layer, [kv_heads, seq, head_dim] or
[1, kv_heads, seq, head_dim] (a DynamicCache layer's), of the layout's dtype,
head_dim contiguous. Leased block i lands at sequence positions
(first_block + i) * block_tokens onward. Runs without the GIL. K/V layouts
only: InvalidArgumentError for a latent (MLA) one.)")
      .def(
          "read_rows",
          [](const PyLease& self, ByteRows rows, const std::vector<int64_t>& row_ids) {
            const std::shared_ptr<LeaseCore>& core = self.core();
            const client::ReadLease& l = core->lease();
            if (row_ids.size() < l.size()) {
              Throw(InvalidArgumentError("read_rows: " + std::to_string(row_ids.size()) +
                                         " rows for " + std::to_string(l.size()) + " blocks"));
            }
            std::vector<std::pair<const std::byte*, std::byte*>> copies;
            for (size_t i = 0; i < l.size(); ++i) {
              uint64_t bytes = 0;
              const Place p = PlaceOf(*core->client(), l, i, &bytes);
              if (p.device_type != kDLCpu) {
                Throw(FailedPreconditionError("read_rows reads host-addressable blocks only"));
              }
              copies.emplace_back(p.data, RowOf(rows, row_ids[i], bytes));
            }
            const uint64_t bytes =
                core->client()->Peek([](client::Client& c) { return c.block_bytes(); });
            nb::gil_scoped_release nogil;
            for (const auto& [src, dst] : copies) std::memcpy(dst, src, bytes);
          },
          nb::arg("rows"), nb::arg("row_ids"),
          nb::sig("def read_rows(self, rows: object, row_ids: collections.abc.Sequence[int]) "
                  "-> None"),
          R"(Copies leased block i into row row_ids[i] of rows (a 2-D CPU array, one block a
row, e.g. numpy's view of a buffer of chunks), every block in one call without the GIL.)")
      .def("release", &PyLease::Release,
           "Unpins the blocks (once no view of them is alive). Idempotent.")
      .def(
          "__enter__", [](nb::handle self) { return self; }, nb::rv_policy::reference,
          nb::sig("def __enter__(self) -> Lease"))
      .def(
          "__exit__", [](PyLease& l, nb::handle, nb::handle, nb::handle) { l.Release(); },
          nb::arg("exc_type").none(), nb::arg("exc").none(), nb::arg("tb").none());

  nb::class_<PyWriteHandle>(
      m, "WriteHandle",
      R"(Slots reserved by Client.allocate(), invisible to lookups until commit().

For each index in ``allocated``, fill ``handle[i]`` (a writable zero-copy view,
uint8, block_bytes long, laid out as ``Layout.block_shape``) or call
``write(i, data)``; then ``commit()`` publishes those blocks. Keys already
cached come back EXISTS and keys after a refused one SKIPPED: nothing to write
for them. Leaving the ``with`` block without commit() aborts, freeing the
slots. commit() refuses (BufferError) while views of the slots are alive.)")
      .def(
          "__len__", [](const PyWriteHandle& w) { return w.core()->write().size(); },
          "One entry per key given to allocate().")
      .def_prop_ro(
          "states",
          [](const PyWriteHandle& w) {
            std::vector<WireWriteState> out;
            const client::WriteHandle& h = w.core()->write();
            for (size_t i = 0; i < h.size(); ++i) out.push_back(h.state(i));
            return out;
          },
          "The state of each key: ALLOCATED (to fill), EXISTS (cached already) or SKIPPED.")
      .def_prop_ro(
          "allocated",
          [](const PyWriteHandle& w) {
            std::vector<size_t> out;
            const client::WriteHandle& h = w.core()->write();
            for (size_t i = 0; i < h.size(); ++i) {
              if (h.state(i) == WireWriteState::kAllocated) out.push_back(i);
            }
            return out;
          },
          "Indices of the keys whose slots this write fills.")
      .def(
          "__getitem__",
          [](const PyWriteHandle& self, int64_t i) {
            const std::shared_ptr<WriteCore>& core = self.core();
            client::WriteHandle& h = core->write();
            const size_t k = Index(i, h.size());
            if (h.state(k) != WireWriteState::kAllocated) {
              throw nb::value_error(("block " + std::to_string(k) +
                                     " has no slot in this write (it is cached already or "
                                     "was skipped)")
                                        .c_str());
            }
            uint64_t bytes = 0;
            const Place p = PlaceOf(*core->client(), h, k, &bytes);
            const size_t shape[1] = {static_cast<size_t>(bytes)};
            nb::capsule owner(new WriteViewToken(core),
                              [](void* t) noexcept { delete static_cast<WriteViewToken*>(t); });
            return Bytes1D(p.data, 1, shape, owner, nullptr, nb::dtype<uint8_t>(), p.device_type,
                           p.device_id);
          },
          nb::arg("i"), "A writable zero-copy view (uint8, block_bytes long) of slot i.")
      .def(
          "write",
          [](const PyWriteHandle& self, int64_t i,
             nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> data) {
            const std::shared_ptr<WriteCore>& core = self.core();
            client::WriteHandle& h = core->write();
            const size_t k = Index(i, h.size());
            if (h.state(k) != WireWriteState::kAllocated ||
                !core->client()->Peek([&](auto& c) { return c.mapped(h.tier()); })) {
              throw nb::value_error(
                  ("block " + std::to_string(k) + " has no host-addressable slot in this write")
                      .c_str());
            }
            const std::span<std::byte> slot = h.Bytes(k);
            if (data.nbytes() != slot.size()) {
              Throw(InvalidArgumentError("write() takes exactly one block, " +
                                         std::to_string(slot.size()) + " bytes, not " +
                                         std::to_string(data.nbytes())));
            }
            const void* src = data.data();
            nb::gil_scoped_release nogil;
            std::memcpy(slot.data(), src, slot.size());
          },
          nb::arg("i"), nb::arg("data"), nb::sig("def write(self, i: int, data: object) -> None"),
          "Copies one block's bytes (any C-contiguous CPU buffer of block_bytes bytes) into "
          "slot i.")
      .def(
          "write_rows",
          [](const PyWriteHandle& self, ByteRows rows, const std::vector<int64_t>& row_ids) {
            const std::shared_ptr<WriteCore>& core = self.core();
            client::WriteHandle& h = core->write();
            if (row_ids.size() != h.size()) {
              Throw(InvalidArgumentError("write_rows: " + std::to_string(row_ids.size()) +
                                         " rows for " + std::to_string(h.size()) + " keys"));
            }
            if (!core->client()->Peek([&](auto& c) { return c.mapped(h.tier()); })) {
              Throw(FailedPreconditionError("write_rows writes host-addressable slots only"));
            }
            std::vector<std::pair<const std::byte*, std::span<std::byte>>> copies;
            for (size_t i = 0; i < h.size(); ++i) {
              if (h.state(i) != WireWriteState::kAllocated) continue;
              const std::span<std::byte> slot = h.Bytes(i);
              copies.emplace_back(RowOf(rows, row_ids[i], slot.size()), slot);
            }
            nb::gil_scoped_release nogil;
            for (const auto& [src, slot] : copies) std::memcpy(slot.data(), src, slot.size());
          },
          nb::arg("rows"), nb::arg("row_ids"),
          nb::sig("def write_rows(self, rows: object, row_ids: collections.abc.Sequence[int]) "
                  "-> None"),
          R"(Fills every ALLOCATED slot i from row row_ids[i] of rows (a 2-D CPU array, one
block a row; row_ids has one entry per key given to allocate()), every slot in one call
without the GIL.)")
      .def(
          "copy_from",
          [](const PyWriteHandle& self, const std::vector<AnyCpuTensor>& keys,
             const std::vector<AnyCpuTensor>& values, int64_t first_block) {
            const std::shared_ptr<WriteCore>& core = self.core();
            client::WriteHandle& h = core->write();
            const Layout lo = core->client()->Peek([&](client::Client& c) {
              if (!c.mapped(h.tier())) {
                Throw(FailedPreconditionError("copy_from writes host-addressable slots only"));
              }
              return c.options().layout;
            });
            if (first_block < 0) Throw(InvalidArgumentError("first_block is negative"));
            std::vector<BlockAt> blocks;
            int64_t end = 0;
            for (size_t i = 0; i < h.size(); ++i) {
              if (h.state(i) != WireWriteState::kAllocated) continue;
              blocks.push_back({h.Bytes(i).data(), first_block + static_cast<int64_t>(i)});
              end = (first_block + static_cast<int64_t>(i) + 1) * lo.block_tokens;
            }
            const auto k = SequenceTensors(keys, lo, end, "keys");
            const auto v = SequenceTensors(values, lo, end, "values");
            nb::gil_scoped_release nogil;
            CopySequence(lo, blocks, k, v, CopyDirection::kSequenceToBlocks);
          },
          nb::arg("keys"), nb::arg("values"), nb::arg("first_block") = 0,
          nb::sig("def copy_from(self, keys: collections.abc.Sequence[object], values: "
                  "collections.abc.Sequence[object], first_block: int = 0) -> None"),
          R"(Fills every ALLOCATED slot from per-layer K and V tensors, one pass per block.

keys, values: as for Lease.copy_into. Slot i takes the tokens of sequence
block first_block + i (the keys given to allocate() being that sequence's
blocks from first_block on). Runs without the GIL.)")
      .def_prop_ro(
          "offsets", [](const PyWriteHandle& w) { return Offsets(w.core()->write()); },
          "Byte offset of each slot in its tier's arena (0 where not ALLOCATED).")
      .def_prop_ro("tier", [](const PyWriteHandle& w) { return w.core()->write().tier(); })
      .def_prop_ro("id", [](const PyWriteHandle& w) { return w.core()->write().id(); })
      .def_prop_ro("open", &PyWriteHandle::open, "False once committed or aborted.")
      .def("commit", &PyWriteHandle::Commit,
           "Publishes the ALLOCATED blocks. The handle is closed whatever the outcome.")
      .def("abort", &PyWriteHandle::Abort, "Frees the slots. The handle is closed.")
      .def(
          "__enter__", [](nb::handle self) { return self; }, nb::rv_policy::reference,
          nb::sig("def __enter__(self) -> WriteHandle"))
      .def(
          "__exit__",
          [](PyWriteHandle& w, nb::handle, nb::handle, nb::handle) {
            if (!w.open()) return;
            try {
              w.Abort();
            } catch (const StatusError&) {
              // The daemon frees an unfinished write when the session ends,
              // and an error here would hide the one that ended the block.
            }
          },
          nb::arg("exc_type").none(), nb::arg("exc").none(), nb::arg("tb").none());
}

}  // namespace kvtier::python
