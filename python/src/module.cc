// kvtier._kvtier: the Python binding of kvtier's C++ client library
// (client/client.h). The protocol, the key hashing and the arena mapping are
// the C++ client's; this file only converts between Python and C++, and
// releases the GIL around every call that waits for the daemon.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <charconv>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "chunk_copies.h"
#include "common/fp8.h"
#include "core.h"
#include "handles.h"
#include "host_buffers.h"
#include "keys.h"
#include "prefix_index/key_hasher.h"
#include "prefix_index/namespace_secret.h"

namespace kvtier::python {
namespace {

using client::BlockKey;
using client::TokenId;
using client::WireTier;
using client::WireWriteState;

struct LookupResult {
  std::vector<WireTier> tiers;  // one per leading hit
};

// What the C++ client checks before connecting, checked here first so that
// an invalid argument the daemon answers at HELLO can only concern the
// layout (kvtier.LayoutError).
void CheckOptions(const client::ClientOptions& o) {
  Status s = o.model.empty() ? InvalidArgumentError("model must not be empty") : Status::Ok();
  for (const std::string* text : {&o.model, &o.salt, &o.client_name}) {
    if (s.ok() && text->size() > protocol::kMaxStringBytes) {
      s = InvalidArgumentError("model, salt and client_name are limited to " +
                               std::to_string(protocol::kMaxStringBytes) + " bytes");
    }
  }
  if (s.ok()) s = o.layout.Validate();
  if (s.ok()) s = CheckQuantize(o.layout, o.quantize_lower);
  if (!s.ok()) Throw(s);
}

std::string DefaultSocket() {
  const char* env = std::getenv("KVTIER_SOCKET");
  return env != nullptr && *env != '\0' ? env : client::kDefaultSocketPath;
}

// A read-only CPU buffer's bytes.
template <typename Array>
std::span<const std::byte> ConstBytesOf(const Array& a) {
  return {static_cast<const std::byte*>(a.data()), a.nbytes()};
}

class PyClient {
 public:
  PyClient(std::string model, const Layout& layout, std::optional<std::string> socket,
           std::string salt, std::string client_name, uint32_t timeout_ms, bool map_arenas,
           uint32_t busy_poll_us, const std::string& quantize_lower) {
    options_.socket_path = socket.value_or(DefaultSocket());
    options_.model = std::move(model);
    options_.salt = std::move(salt);
    options_.layout = layout;
    options_.client_name = std::move(client_name);
    options_.io_timeout_ms = timeout_ms;
    options_.map_arenas = map_arenas;
    options_.busy_poll_us = busy_poll_us;
    if (!ParseQuantize(quantize_lower, &options_.quantize_lower)) {
      Throw(InvalidArgumentError("quantize_lower must be 'off', 'fp8_e4m3' or 'fp8_e5m2', not '" +
                                 quantize_lower + "'"));
    }
    CheckOptions(options_);
    Result<std::unique_ptr<client::Client>> c = [&] {
      nb::gil_scoped_release nogil;
      return client::Client::Connect(options_);
    }();
    if (!c.ok()) throw StatusError{c.status(), /*at_attach=*/true};
    session_ = (*c)->session();
    hasher_.emplace((*c)->hasher());
    core_ = std::make_shared<ClientCore>(*std::move(c));
  }

  const std::shared_ptr<ClientCore>& core() const {
    if (core_ == nullptr) Throw(FailedPreconditionError("the kvtier client is closed"));
    return core_;
  }
  const client::ClientOptions& options() const { return options_; }
  const protocol::HelloReply& session() const { return session_; }
  const prefix_index::KeyHasher& hasher() const { return *hasher_; }
  void Close() { core_.reset(); }
  bool closed() const { return core_ == nullptr; }

 private:
  client::ClientOptions options_;
  protocol::HelloReply session_;
  std::optional<prefix_index::KeyHasher> hasher_;
  std::shared_ptr<ClientCore> core_;
};

std::vector<TokenId> Tokens(const std::vector<int64_t>& ids) {
  std::vector<TokenId> out;
  out.reserve(ids.size());
  for (int64_t t : ids) {
    if (t < 0 || t > static_cast<int64_t>(UINT32_MAX)) {
      throw nb::value_error(("token id " + std::to_string(t) + " is outside 0..2^32-1").c_str());
    }
    out.push_back(static_cast<TokenId>(t));
  }
  return out;
}

// "123" -> int, "0.25" -> float, anything else stays text.
nb::object StatValue(const std::string& v) {
  int64_t i = 0;
  if (auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), i);
      ec == std::errc() && p == v.data() + v.size() && !v.empty()) {
    return nb::int_(i);
  }
  uint64_t u = 0;
  if (auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), u);
      ec == std::errc() && p == v.data() + v.size() && !v.empty()) {
    return nb::steal(PyLong_FromUnsignedLongLong(u));
  }
  double d = 0;
  if (auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
      ec == std::errc() && p == v.data() + v.size() && !v.empty()) {
    return nb::float_(d);
  }
  return nb::str(v.c_str(), v.size());
}

std::string LayoutRepr(const Layout& l) {
  return "Layout(layers=" + std::to_string(l.layers) + ", kv_heads=" + std::to_string(l.kv_heads) +
         ", head_dim=" + std::to_string(l.head_dim) + ", dtype='" +
         std::string(DTypeName(l.dtype)) + "', block_tokens=" + std::to_string(l.block_tokens) +
         (l.kind == KvKind::kKeyValue ? "" : ", kind='" + std::string(KvKindName(l.kind)) + "'") +
         ")";
}

DType ParseDTypeOrThrow(const std::string& name) {
  DType d{};
  if (!ParseDType(name, &d)) {
    throw nb::value_error(
        ("unknown dtype '" + name + "' (fp16, bf16, fp32, fp8_e4m3 or fp8_e5m2)").c_str());
  }
  return d;
}

KvKind ParseKvKindOrThrow(const std::string& name) {
  KvKind k{};
  if (!ParseKvKind(name, &k)) {
    throw nb::value_error(("unknown layout kind '" + name + "' (kv or latent)").c_str());
  }
  return k;
}

void BindLayout(nb::module_& m) {
  nb::class_<Layout>(m, "Layout", R"(The block layout of a namespace (DESIGN.md §1).

A block holds the K and V of ``block_tokens`` tokens for all layers, laid out
``[layer][k|v][token][kv_head][head_dim]`` (``block_shape``), so it is
``2 * layers * kv_heads * head_dim * block_tokens * dtype_bytes`` long.

``kind="latent"`` is an MLA layout (multi-head latent attention, DeepSeek-V2/V3):
one latent vector per token and layer (kv_lora_rank + rope dims, e.g.
512 + 64 = 576, as ``head_dim``), ``kv_heads=1``, no K/V split: the block is
``[layer][token][kv_head][head_dim]``, one plane per layer (``planes``), half
the bytes of the K/V layout of the same numbers.)")
      .def(
          "__init__",
          [](Layout* self, uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
             const std::string& dtype, uint32_t block_tokens, const std::string& kind) {
            new (self) Layout{layers,       kv_heads,
                              head_dim,     ParseDTypeOrThrow(dtype),
                              block_tokens, ParseKvKindOrThrow(kind)};
          },
          nb::arg("layers"), nb::arg("kv_heads"), nb::arg("head_dim"), nb::arg("dtype") = "fp16",
          nb::arg("block_tokens") = 16, nb::arg("kind") = "kv")
      .def_rw("layers", &Layout::layers)
      .def_rw("kv_heads", &Layout::kv_heads, "KV heads (fewer than query heads under GQA/MQA).")
      .def_rw("head_dim", &Layout::head_dim)
      .def_prop_rw(
          "dtype", [](const Layout& l) { return std::string(DTypeName(l.dtype)); },
          [](Layout& l, const std::string& d) { l.dtype = ParseDTypeOrThrow(d); },
          "fp16, bf16, fp32, fp8_e4m3 or fp8_e5m2.")
      .def_rw("block_tokens", &Layout::block_tokens, "Tokens per block.")
      .def_prop_rw(
          "kind", [](const Layout& l) { return std::string(KvKindName(l.kind)); },
          [](Layout& l, const std::string& k) { l.kind = ParseKvKindOrThrow(k); },
          "kv (K and V per layer) or latent (one MLA latent vector per layer; kv_heads 1).")
      .def_prop_ro("planes", &Layout::Planes, "Planes per layer: 2 (K, V) for kv, 1 for latent.")
      .def_prop_ro("block_bytes", &Layout::BlockBytes,
                   "Bytes of a block: its values, then (fp8) its scales.")
      .def_prop_ro("value_bytes", &Layout::ValueBytes, "Bytes of a block's values.")
      .def_prop_ro("scale_bytes", &Layout::ScaleBytes,
                   "Bytes of an fp8 block's scales (fp32 per layer, plane, KV head); 0 otherwise.")
      .def_prop_ro("bytes_per_token", &Layout::BytesPerToken)
      .def_prop_ro(
          "block_shape",
          [](const Layout& l) {
            return nb::make_tuple(l.layers, l.Planes(), l.block_tokens, l.kv_heads, l.head_dim);
          },
          "(layers, planes, block_tokens, kv_heads, head_dim): a block's elements, K before V; "
          "(layers, 1, block_tokens, 1, head_dim) for a latent layout.")
      .def(
          "validate",
          [](const Layout& l) {
            if (Status s = l.Validate(); !s.ok()) Throw(s);
          },
          "Raises kvtier.InvalidArgumentError for a layout kvtierd would refuse.")
      .def(
          "__eq__",
          [](const Layout& a, nb::handle b) {
            return nb::isinstance<Layout>(b) && a == nb::cast<const Layout&>(b);
          },
          nb::sig("def __eq__(self, other: object, /) -> bool"))
      .def("__repr__", &LayoutRepr);
}

void BindEnums(nb::module_& m) {
  nb::enum_<WireTier>(m, "Tier", "A tier of kvtierd, fastest first.")
      .value("DEVICE", WireTier::kDevice, "GPU memory (or an emulated arena in host memory)")
      .value("HOST", WireTier::kHost, "the shared host arena")
      .value("SSD", WireTier::kSsd, "local disk")
      .value("REMOTE", WireTier::kRemote, "the remote tier shared by several nodes (lookups only)");
  nb::enum_<WireWriteState>(m, "WriteState", "What allocate() did with one key.")
      .value("ALLOCATED", WireWriteState::kAllocated, "a slot to fill, published by commit()")
      .value("EXISTS", WireWriteState::kExists, "cached already: nothing to write")
      .value("SKIPPED", WireWriteState::kSkipped, "not stored (an earlier key was refused)");

  nb::class_<LookupResult>(m, "LookupResult", nb::pooled(), "The cached prefix of a key chain.")
      .def_prop_ro(
          "hits", [](const LookupResult& r) { return r.tiers.size(); },
          "Leading keys present: the cached prefix, in blocks.")
      .def_ro("tiers", &LookupResult::tiers, "The tier of each hit, in key order.")
      .def("__len__", [](const LookupResult& r) { return r.tiers.size(); })
      .def("__repr__", [](const LookupResult& r) {
        return "LookupResult(hits=" + std::to_string(r.tiers.size()) + ")";
      });

  nb::class_<protocol::RetentionRange>(m, "Retention",
                                       R"(A retention priority for a token range of a prompt.

TensorRT-LLM's semantics: priority 0-100, lower evicted first, 35 the default;
after ``duration_ms`` (0 = never) the blocks fall back to 35.)")
      .def(
          "__init__",
          [](protocol::RetentionRange* self, uint64_t begin, uint64_t end, uint8_t priority,
             uint64_t duration_ms) {
            new (self) protocol::RetentionRange{begin, end, priority, duration_ms};
          },
          nb::arg("token_begin"), nb::arg("token_end"), nb::arg("priority") = 35,
          nb::arg("duration_ms") = 0)
      .def_rw("token_begin", &protocol::RetentionRange::token_begin)
      .def_rw("token_end", &protocol::RetentionRange::token_end, "exclusive")
      .def_rw("priority", &protocol::RetentionRange::priority)
      .def_rw("duration_ms", &protocol::RetentionRange::duration_ms);
}

std::vector<BlockKey> ChainKeys(const PyClient& self, const std::vector<TokenId>& tokens,
                                const std::optional<nb::bytes>& parent) {
  const BlockKey start = parent ? KeyFromPython(*parent) : self.hasher().root();
  std::vector<BlockKey> keys;
  self.hasher().AppendChain(start, tokens, {}, &keys);
  return keys;
}

void BindClient(nb::module_& m) {
  nb::class_<PyClient>(m, "Client", R"(One session with kvtierd, attached to one namespace.

A namespace is (model, salt, layout): blocks of different namespaces never
match, and kvtierd refuses a layout other than the one a namespace was first
registered with (kvtier.LayoutError). The client maps the daemon's shared
arenas, so blocks are read and written in place (Lease, WriteHandle); only
slot numbers cross the socket. Every call that waits for the daemon releases
the GIL. One client may be shared by threads (calls are serialized); for
parallel requests use one client per thread.

Use it as a context manager, or call close(). The session ends when the
client is closed and no lease, write or view of a slot made through it is
alive any more.)")
      .def(nb::init<std::string, const Layout&, std::optional<std::string>, std::string,
                    std::string, uint32_t, bool, uint32_t, const std::string&>(),
           nb::arg("model"), nb::arg("layout"), nb::kw_only(), nb::arg("socket") = nb::none(),
           nb::arg("salt") = "", nb::arg("client_name") = "python", nb::arg("timeout_ms") = 0,
           nb::arg("map_arenas") = true, nb::arg("busy_poll_us") = 50,
           nb::arg("quantize_lower") = "off",
           R"(Connects to kvtierd and attaches to the namespace (model, salt, layout).

socket: kvtierd's Unix socket; default $KVTIER_SOCKET, else /run/kvtier/kvtierd.sock.
timeout_ms: longest wait for the daemon per request, 0 = forever.
map_arenas: False for a client that only looks up, puts and gets inline.
busy_poll_us: poll this long for a reply before sleeping (lower latency, more CPU).
quantize_lower: "fp8_e4m3" or "fp8_e5m2" to have kvtierd keep this namespace's
  blocks in its ssd and remote tiers in that fp8 format (half the bytes; lossy,
  restored to the layout's dtype on the way up; fp16/bf16 only); "off" (exact).
  Every worker of a namespace must ask for the same.

Raises kvtier.UnavailableError when the daemon cannot be reached,
kvtier.LayoutError when it refuses the layout, kvtier.InvalidArgumentError
for an invalid layout or an empty model.)")
      .def_prop_ro("model", [](const PyClient& c) { return c.options().model; })
      .def_prop_ro("salt", [](const PyClient& c) { return c.options().salt; })
      .def_prop_ro("socket", [](const PyClient& c) { return c.options().socket_path; })
      .def_prop_ro("layout", [](const PyClient& c) { return c.options().layout; })
      .def_prop_ro(
          "block_bytes", [](const PyClient& c) { return c.session().block_bytes; },
          "Bytes of one block of this namespace.")
      .def_prop_ro("block_tokens",
                   [](const PyClient& c) { return c.options().layout.block_tokens; })
      .def_prop_ro("session_id", [](const PyClient& c) { return c.session().session_id; })
      .def_prop_ro(
          "direct_reads",
          [](PyClient& c) {
            return c.core()->Peek([](client::Client& cl) { return cl.direct_reads(); });
          },
          "Blocks get_rows copied from the host arena without a request (read before, still "
          "in their slot), since the client was made.")
      .def_prop_ro(
          "max_keys", [](const PyClient& c) { return c.session().max_keys; },
          "Most keys one request may carry.")
      .def_prop_ro(
          "device",
          [](const PyClient& c) -> std::string {
            switch (c.session().device) {
              case protocol::DeviceKind::kNone:
                return "none";
              case protocol::DeviceKind::kEmulated:
                return "emulated";
              case protocol::DeviceKind::kCuda:
                return "cuda";
            }
            return "none";
          },
          "The daemon's device tier: 'none', 'emulated' (host memory) or 'cuda'.")
      .def_prop_ro(
          "healthy",
          [](const PyClient& c) {
            return !c.closed() && c.core()->Peek([](client::Client& cl) { return cl.healthy(); });
          },
          "False once closed, or once a socket error broke the session.")
      .def(
          "block_keys",
          [](const PyClient& self, nb::handle token_ids, const std::optional<nb::bytes>& parent) {
            std::vector<int64_t> ids;
            // A 1-D int64 array or CPU tensor is read in place; anything else
            // is taken as a sequence of ints.
            nb::ndarray<const int64_t, nb::ndim<1>, nb::device::cpu> array;
            if (!PyList_Check(token_ids.ptr()) && !PyTuple_Check(token_ids.ptr()) &&
                nb::try_cast(token_ids, array)) {
              ids.resize(array.shape(0));
              for (size_t i = 0; i < ids.size(); ++i) ids[i] = array(i);
            } else {
              ids = nb::cast<std::vector<int64_t>>(token_ids);
            }
            return KeysToPython(ChainKeys(self, Tokens(ids), parent));
          },
          nb::arg("token_ids"), nb::arg("parent") = nb::none(),
          nb::sig("def block_keys(self, token_ids: collections.abc.Sequence[int] | "
                  "numpy.typing.ArrayLike, parent: bytes | None = None) -> Keys"),
          R"(The chained keys of the full blocks of token_ids (a partial last block gets none).

token_ids: a sequence of ints, or a 1-D int64 array or CPU tensor. parent: the
key of the block before token_ids[0], to continue a chain; None starts at the
namespace root (a prompt's first block). Returns a kvtier.Keys, one buffer of
16 bytes per key, which every call taking keys reads in place; keys[i] is
key i as bytes, key.hex() the C++ client's BlockKey::ToHex().)")
      .def(
          "lookup",
          [](PyClient& self, KeysArg keys) {
            const KeyList k(keys);
            return LookupResult{ValueOrThrow(self.core()->Call([&](client::Client& c) {
                                  return c.Lookup(k);
                                })).tiers};
          },
          nb::arg("keys"),
          "How many leading keys are cached, and in which tier each (no pin, no move).")
      .def(
          "allocate",
          [](PyClient& self, KeysArg keys, WireTier tier, std::optional<nb::bytes> parent) {
            const KeyList k(keys);
            std::optional<BlockKey> p;
            if (parent) p = KeyFromPython(*parent);
            const std::shared_ptr<ClientCore>& core = self.core();
            client::WriteHandle w =
                ValueOrThrow(core->Call([&](client::Client& c) { return c.Allocate(k, p, tier); }));
            return PyWriteHandle(std::make_shared<WriteCore>(core, std::move(w)));
          },
          nb::arg("keys"), nb::arg("tier") = WireTier::kHost, nb::arg("parent") = nb::none(),
          R"(Reserves slots for the keys in a tier (HOST, or DEVICE when the daemon has one).

parent: the key before keys[0] (None when keys[0] is a prompt's first block).
Returns a WriteHandle; fill its ALLOCATED slots, then commit(). Raises
kvtier.ResourceExhaustedError when the tier has no room (every block pinned or
reserved) or the session's limit of open writes is reached.)")
      .def(
          "acquire",
          [](PyClient& self, KeysArg keys, WireTier tier) {
            const KeyList k(keys);
            const std::shared_ptr<ClientCore>& core = self.core();
            client::ReadLease l =
                ValueOrThrow(core->Call([&](client::Client& c) { return c.Acquire(k, tier); }));
            return PyLease(std::make_shared<LeaseCore>(core, std::move(l)));
          },
          nb::arg("keys"), nb::arg("tier") = WireTier::kHost,
          R"(Pins the leading cached blocks of the keys in a tier (HOST or DEVICE), promoting
them there from lower tiers (the SSD included). Returns a Lease over the hits;
len(lease) is 0 when the first key is not cached.)")
      .def(
          "put",
          [](PyClient& self, KeysArg keys, nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> data,
             std::optional<nb::bytes> parent) {
            const KeyList k(keys);
            std::optional<BlockKey> p;
            if (parent) p = KeyFromPython(*parent);
            const std::span<const std::byte> bytes(static_cast<const std::byte*>(data.data()),
                                                   data.nbytes());
            return ValueOrThrow(self.core()->Call(
                                    [&](client::Client& c) { return c.PutInline(k, bytes, p); }))
                .states;
          },
          nb::arg("keys"), nb::arg("data"), nb::arg("parent") = nb::none(),
          nb::sig(
              "def put(self, keys: Keys | collections.abc.Sequence[bytes], data: object, parent: "
              "bytes | None = None) -> list[WriteState]"),
          "Writes len(keys) blocks through the socket (a copy; for clients that cannot map the "
          "arenas). data: len(keys) * block_bytes bytes.")
      .def(
          "put_rows",
          [](PyClient& self, KeysArg keys, ByteRows rows, const std::vector<int64_t>& row_ids,
             std::optional<nb::bytes> parent, WireTier tier) {
            const KeyList k(keys);
            std::optional<BlockKey> p;
            if (parent) p = KeyFromPython(*parent);
            return PutRows(*self.core(), k, rows, row_ids, p, tier);
          },
          nb::arg("keys"), nb::arg("rows"), nb::arg("row_ids"), nb::arg("parent") = nb::none(),
          nb::arg("tier") = WireTier::kHost,
          R"(allocate(keys, tier, parent), each ALLOCATED slot i filled from row row_ids[i] of
rows (a 2-D CPU array, one block a row), and commit(): one call, without the GIL.
Returns the states, as WriteHandle.states.)")
      .def(
          "get_rows",
          [](PyClient& self, KeysArg keys, ByteRows rows, const std::vector<int64_t>& row_ids,
             WireTier tier) { return GetRows(*self.core(), KeyList(keys), rows, row_ids, tier); },
          nb::arg("keys"), nb::arg("rows"), nb::arg("row_ids"), nb::arg("tier") = WireTier::kHost,
          R"(acquire(keys, tier), leased block i copied into row row_ids[i] of rows (a 2-D CPU
array, one block a row), and the lease released: one call, without the GIL.
From the host tier, a block this client read before is copied straight out of
the arena while it is still in the same slot, without a request (a direct read;
kvtierd hears of it afterwards: docs/protocol.md, "Direct reads").
Returns how many leading blocks were copied.)")
      .def(
          "put_spans",
          [](PyClient& self, KeysArg keys, std::vector<uint64_t> addrs, std::vector<uint64_t> sizes,
             std::optional<nb::bytes> parent, WireTier tier) {
            const KeyList k(keys);
            std::optional<BlockKey> p;
            if (parent) p = KeyFromPython(*parent);
            return PutSpans(*self.core(), k, Spans{std::move(addrs), std::move(sizes)}, p, tier);
          },
          nb::arg("keys"), nb::arg("addrs"), nb::arg("sizes"), nb::arg("parent") = nb::none(),
          nb::arg("tier") = WireTier::kHost,
          R"(allocate(keys, tier, parent), each ALLOCATED slot i filled with block i's pieces of
host memory end to end (piece j of block i: sizes[i*m + j] bytes at address
addrs[i*m + j], m pieces a block, adding up to one block), and commit(): one call,
without the GIL. The addresses are the caller's to keep valid; kvtier cannot check
them. Returns the states.)")
      .def(
          "get_spans",
          [](PyClient& self, KeysArg keys, std::vector<uint64_t> addrs, std::vector<uint64_t> sizes,
             WireTier tier) {
            return GetSpans(*self.core(), KeyList(keys), Spans{std::move(addrs), std::move(sizes)},
                            tier);
          },
          nb::arg("keys"), nb::arg("addrs"), nb::arg("sizes"), nb::arg("tier") = WireTier::kHost,
          R"(acquire(keys, tier), leased block i copied out over its pieces of host memory (as
put_spans lays them), and the lease released: one call, without the GIL. Returns how
many leading blocks were copied.)")
      .def(
          "put_concat",
          [](PyClient& self, KeysArg keys, nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> head,
             nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> data,
             std::optional<nb::bytes> parent, WireTier tier) {
            const KeyList k(keys);
            std::optional<BlockKey> p;
            if (parent) p = KeyFromPython(*parent);
            return PutConcat(*self.core(), k, ConstBytesOf(head), ConstBytesOf(data), p, tier);
          },
          nb::arg("keys"), nb::arg("head"), nb::arg("data"), nb::arg("parent") = nb::none(),
          nb::arg("tier") = WireTier::kHost,
          R"(allocate(keys, tier, parent), the ALLOCATED slots filled with their share of
head + data laid end to end over the blocks (the last one zero-padded; len(keys)
blocks must be just enough), and commit(): one call, without the GIL. For an
engine's chunk larger than a block. Returns the states.)")
      .def(
          "get_concat",
          [](PyClient& self, KeysArg keys, nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> head,
             nb::ndarray<nb::c_contig, nb::device::cpu> data, WireTier tier) {
            return GetConcat(
                *self.core(), KeyList(keys), ConstBytesOf(head),
                std::span<std::byte>(static_cast<std::byte*>(data.data()), data.nbytes()), tier);
          },
          nb::arg("keys"), nb::arg("head"), nb::arg("data"), nb::arg("tier") = WireTier::kHost,
          R"(acquire(keys, tier); if every key is leased and the blocks laid end to end begin
with the bytes of head, the bytes after them copied into data (len(keys) blocks must be
just enough for head + data); the lease released: one call, without the GIL. Returns how
many leading blocks were leased (data was filled only if all were), or -1 when they
begin with other bytes than head's (nothing copied).)")
      .def(
          "get",
          [](PyClient& self, KeysArg keys) {
            const KeyList k(keys);
            protocol::GetReply reply =
                ValueOrThrow(self.core()->Call([&](client::Client& c) { return c.GetInline(k); }));
            return nb::bytes(reinterpret_cast<const char*>(reply.data.data()), reply.data.size());
          },
          nb::arg("keys"),
          "The leading cached blocks' bytes through the socket (a copy): hits * block_bytes.")
      .def(
          "remove",
          [](PyClient& self, KeysArg keys) {
            const KeyList k(keys);
            return ValueOrThrow(self.core()->Call([&](client::Client& c) { return c.Remove(k); }));
          },
          nb::arg("keys"), "Removes the keys and what hangs below them; returns how many went.")
      .def(
          "set_retention",
          [](PyClient& self, KeysArg keys, const std::vector<protocol::RetentionRange>& ranges) {
            const KeyList k(keys);
            return ValueOrThrow(
                self.core()->Call([&](client::Client& c) { return c.SetRetention(k, ranges); }));
          },
          nb::arg("keys"), nb::arg("ranges"),
          R"(Sets retention priorities for token ranges of the prompt whose chain is keys.

A block takes the highest priority of the ranges overlapping it. Returns how
many cached blocks were updated.)")
      .def(
          "hint",
          [](PyClient& self, KeysArg keys, uint32_t ttl_ms) {
            const KeyList k(keys);
            const protocol::HintReply r = ValueOrThrow(
                self.core()->Call([&](client::Client& c) { return c.Hint(k, ttl_ms); }));
            return std::make_pair(r.blocks, r.prefetching);
          },
          nb::arg("keys"), nb::arg("ttl_ms") = 0,
          R"(Hints that this worker will soon run a request whose chain is keys.

The daemon keeps the chain's cached blocks for ttl_ms (0: its default) or
until they are acquired, and reads those on the SSD into host memory
meanwhile. Returns (blocks protected, of which being prefetched). Past the
daemon's bound of hinted blocks per session it raises ResourceExhausted and
nothing changes; keys never cached are ignored.)")
      .def(
          "unhint",
          [](PyClient& self, KeysArg keys) {
            const KeyList k(keys);
            return ValueOrThrow(self.core()->Call([&](client::Client& c) { return c.Unhint(k); }));
          },
          nb::arg("keys"),
          "Ends this session's hints on keys (the request will not run); returns how many "
          "blocks it stopped protecting.")
      .def(
          "stats",
          [](PyClient& self) {
            auto entries =
                ValueOrThrow(self.core()->Call([](client::Client& c) { return c.Stats(); }));
            nb::dict out;
            for (const auto& [name, value] : entries) out[name.c_str()] = StatValue(value);
            return out;
          },
          "The daemon's counters and settings (as `kvtier stats --json`): name -> int, float or "
          "str.")
      .def("close", &PyClient::Close,
           "Closes the client; the session ends once no lease, write or view made through it is "
           "alive. Idempotent.")
      .def_prop_ro("closed", &PyClient::closed)
      .def(
          "__enter__", [](nb::handle self) { return self; }, nb::rv_policy::reference,
          nb::sig("def __enter__(self) -> Client"))
      .def(
          "__exit__", [](PyClient& c, nb::handle, nb::handle, nb::handle) { c.Close(); },
          nb::arg("exc_type").none(), nb::arg("exc").none(), nb::arg("tb").none())
      .def("__repr__", [](const PyClient& c) {
        return "Client(model='" + c.options().model +
               "', layout=" + LayoutRepr(c.options().layout) + ", socket='" +
               c.options().socket_path + "'" + (c.closed() ? ", closed" : "") + ")";
      });
}

void BindHostBuffers(nb::module_& m) {
  struct Held {
    void* data;
    uint64_t capacity;
  };
  m.def(
      "host_buffer",
      [](uint64_t bytes) {
        uint64_t capacity = 0;
        void* data = TakeHostBuffer(bytes, &capacity);
        nb::capsule owner(new Held{data, capacity}, [](void* h) noexcept {
          auto* held = static_cast<Held*>(h);
          GiveHostBuffer(held->data, held->capacity);
          delete held;
        });
        const size_t shape[1] = {static_cast<size_t>(bytes)};
        return nb::ndarray<nb::array_api, uint8_t, nb::ndim<1>, nb::c_contig>(data, 1, shape,
                                                                              owner);
      },
      nb::arg("nbytes"),
      R"(A writable, page-aligned host buffer of nbytes (uint8; its bytes are not cleared).

Given back when the last view of it goes, and kept for the next call up to
host_buffer_cache() bytes, so that repeated loads write into memory that is
already paged in (a 32 MiB copy into new memory pays ~8,000 page faults).
kvtier.hf loads prefixes into these.)");
  m.def(
      "set_host_buffer_cache", [](uint64_t bytes) { SetHostBufferCacheBytes(bytes); },
      nb::arg("nbytes"), "Caps the bytes of given-back host buffers kept for reuse (0: none).");
  m.def(
      "host_buffer_cache",
      [] { return std::make_pair(HostBufferCacheBytes(), HostBufferCachedBytes()); },
      "(cap, bytes kept now) of the host buffer cache.");
}

// For KV-aware routers: keys computed from tokens without a daemon.
void BindRouter(nb::module_& m) {
  m.def(
      "deployment_keys",
      [](const std::string& secret_hex, const std::string& model, const std::string& salt,
         uint32_t block_tokens, const std::vector<int64_t>& token_ids) {
        std::string hex;
        for (char c : secret_hex) {
          if (c != ' ' && c != '\n' && c != '\r' && c != '\t') hex.push_back(c);
        }
        if (hex.size() < 32 || hex.size() % 2 != 0 ||
            hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
          throw nb::value_error("the deployment secret is 32 or more hex digits");
        }
        std::vector<std::byte> master;
        for (size_t i = 0; i < hex.size(); i += 2) {
          master.push_back(static_cast<std::byte>(std::stoul(hex.substr(i, 2), nullptr, 16)));
        }
        const auto ns_secret = prefix_index::DeriveNamespaceSecret(master, model, salt);
        auto hasher = prefix_index::KeyHasher::Create(ns_secret, block_tokens);
        if (!hasher) throw nb::value_error(std::string(hasher.status().message()).c_str());
        return KeysToPython(hasher->Chain(Tokens(token_ids)));
      },
      nb::arg("secret_hex"), nb::arg("model"), nb::arg("salt"), nb::arg("block_tokens"),
      nb::arg("token_ids"),
      R"(The block keys a kvtier deployment gives the full blocks of token_ids, without a daemon.

For KV-aware routers: every node of a deployment that shares a remote tier
hashes keys under its deployment secret (remote.secret_file), so a router
holding the same secret computes, from a request's tokens, the keys whose
low 64 bits (event_hash) the nodes' KV events name. model and salt name
the namespace as workers attach to it; block_tokens is its layout's.)");
  m.def(
      "event_hash", [](nb::bytes key) { return KeyFromPython(key).lo; }, nb::arg("key"),
      "The block hash KV events carry for a key: its low 64 bits (vLLM's integer form).");
}

// fp8 blocks (common/fp8.h): the codecs a worker without its own fp8
// kernels uses to write and read an fp8 namespace's blocks.
void BindFp8(nb::module_& m) {
  using In = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
  using Out = nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>, nb::c_contig>;
  const auto owned = [](std::vector<uint8_t>* bytes) {
    nb::capsule owner(bytes,
                      [](void* p) noexcept { delete static_cast<std::vector<uint8_t>*>(p); });
    const size_t shape[1] = {bytes->size()};
    return Out(bytes->data(), 1, shape, owner);
  };
  m.def(
      "quantize_block",
      [owned](const Layout& layout, In block, const std::string& fp8) {
        DType to = ParseDTypeOrThrow(fp8);
        auto out = std::make_unique<std::vector<uint8_t>>(Fp8LayoutOf(layout, to).BlockBytes());
        Status s;
        {
          nb::gil_scoped_release release;
          s = QuantizeBlock(layout, to, std::as_bytes(std::span(block.data(), block.shape(0))),
                            std::as_writable_bytes(std::span(*out)));
        }
        if (!s.ok()) Throw(s);
        return owned(out.release());
      },
      nb::arg("layout"), nb::arg("block"), nb::arg("fp8") = "fp8_e4m3",
      R"(One block of an fp16 or bf16 layout (its block_bytes, uint8) in the fp8 block format.

Returns the block of Layout(..., dtype=fp8) (uint8, that layout's
block_bytes): the values, one byte each, then one fp32 scale per (layer, K
or V, KV head), each scale the slice's largest magnitude over the format's
largest finite (docs/fp8.md). Raises kvtier.InvalidArgumentError for a
block holding NaN or infinity, or of the wrong size.)");
  m.def(
      "dequantize_block",
      [owned](const Layout& fp8_layout, In block, const std::string& dtype) {
        DType to = ParseDTypeOrThrow(dtype);
        Layout wide = fp8_layout;
        wide.dtype = to;
        auto out = std::make_unique<std::vector<uint8_t>>(wide.BlockBytes());
        Status s;
        {
          nb::gil_scoped_release release;
          s = DequantizeBlock(fp8_layout, to,
                              std::as_bytes(std::span(block.data(), block.shape(0))),
                              std::as_writable_bytes(std::span(*out)));
        }
        if (!s.ok()) Throw(s);
        return owned(out.release());
      },
      nb::arg("fp8_layout"), nb::arg("block"), nb::arg("dtype") = "fp16",
      R"(One fp8 block (the fp8 layout's block_bytes, uint8) back to dtype (fp16 or bf16).

Each value times its scale, rounded to nearest even. Raises
kvtier.InvalidArgumentError for a NaN code, a scale that is not positive
and finite, or the wrong size.)");
}

}  // namespace
}  // namespace kvtier::python

NB_MODULE(_kvtier, m) {
  using namespace kvtier::python;
  m.doc() = "kvtier's client library (C++), bound for Python. Use the kvtier package.";
  // Engines that hold a client in a global until the interpreter exits (vLLM's
  // connectors do) would print nanobind's leak report at every exit.
  nb::set_leak_warnings(false);
  RegisterErrors();
  BindLayout(m);
  BindEnums(m);
  BindKeys(m);
  BindHandles(m);
  BindClient(m);
  BindHostBuffers(m);
  BindRouter(m);
  BindFp8(m);
  m.attr("DEFAULT_SOCKET") = kvtier::client::kDefaultSocketPath;
}
