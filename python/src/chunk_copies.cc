#include "chunk_copies.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace kvtier::python {

using client::WireTier;
using client::WireWriteState;

namespace {

uint64_t BlockBytes(ClientCore& core) {
  return core.Peek([](client::Client& c) { return c.block_bytes(); });
}

// head + data must need exactly `n` blocks of `bytes`.
void CheckConcat(const char* what, uint64_t total, size_t n, uint64_t bytes) {
  if (n == 0 || total > n * bytes || total <= (n - 1) * bytes) {
    Throw(InvalidArgumentError(std::string(what) + ": " + std::to_string(total) +
                               " bytes do not fill " + std::to_string(n) + " blocks of " +
                               std::to_string(bytes)));
  }
}

// The pieces of each of `n` blocks of `bytes`: how many a block, checked to
// add up to one block each.
size_t PiecesPerBlock(const char* what, size_t n, const Spans& spans, uint64_t bytes) {
  const size_t total = spans.addrs.size();
  if (spans.sizes.size() != total || n == 0 || total % n != 0 || total == 0) {
    Throw(InvalidArgumentError(std::string(what) + ": " + std::to_string(total) +
                               " addresses and " + std::to_string(spans.sizes.size()) +
                               " sizes for " + std::to_string(n) +
                               " keys (the same number of pieces a key)"));
  }
  const size_t m = total / n;
  for (size_t i = 0; i < n; ++i) {
    uint64_t sum = 0;
    for (size_t j = 0; j < m; ++j) {
      if (spans.addrs[i * m + j] == 0) {
        Throw(InvalidArgumentError(std::string(what) + ": a null address"));
      }
      sum += spans.sizes[i * m + j];
    }
    if (sum != bytes) {
      Throw(InvalidArgumentError(std::string(what) + ": block " + std::to_string(i) +
                                 "'s pieces are " + std::to_string(sum) +
                                 " bytes, not a block of " + std::to_string(bytes)));
    }
  }
  return m;
}

}  // namespace

std::vector<WireWriteState> PutRows(ClientCore& core, std::span<const client::BlockKey> keys,
                                    const ByteRows& rows, const std::vector<int64_t>& row_ids,
                                    std::optional<client::BlockKey> parent, WireTier tier) {
  if (row_ids.size() != keys.size()) {
    Throw(InvalidArgumentError("put_rows: " + std::to_string(row_ids.size()) + " rows for " +
                               std::to_string(keys.size()) + " keys"));
  }
  const uint64_t bytes = BlockBytes(core);
  std::vector<const std::byte*> src;
  for (int64_t row : row_ids) src.push_back(RowOf(rows, row, bytes));
  return ValueOrThrow(core.Call([&](client::Client& c) -> Result<std::vector<WireWriteState>> {
    if (!c.mapped(tier))
      return FailedPreconditionError("put_rows writes host-addressable tiers only");
    KVTIER_ASSIGN_OR_RETURN(client::WriteHandle w, c.Allocate(keys, parent, tier));
    std::vector<WireWriteState> states;
    for (size_t i = 0; i < w.size(); ++i) {
      states.push_back(w.state(i));
      if (w.state(i) == WireWriteState::kAllocated) std::memcpy(w.Bytes(i).data(), src[i], bytes);
    }
    KVTIER_RETURN_IF_ERROR(w.Commit());
    return states;
  }));
}

size_t GetRows(ClientCore& core, std::span<const client::BlockKey> keys, const ByteRows& rows,
               const std::vector<int64_t>& row_ids, WireTier tier) {
  if (row_ids.size() != keys.size()) {
    Throw(InvalidArgumentError("get_rows: " + std::to_string(row_ids.size()) + " rows for " +
                               std::to_string(keys.size()) + " keys"));
  }
  const uint64_t bytes = BlockBytes(core);
  std::vector<std::byte*> dst;
  for (int64_t row : row_ids) dst.push_back(RowOf(rows, row, bytes));
  return ValueOrThrow(core.Call([&](client::Client& c) -> Result<size_t> {
    if (!c.mapped(tier))
      return FailedPreconditionError("get_rows reads host-addressable tiers only");
    // From the host tier, blocks read before are copied without a request
    // (direct reads, client/client.h Read).
    if (tier == WireTier::kHost) return c.Read(keys, dst);
    KVTIER_ASSIGN_OR_RETURN(client::ReadLease l, c.Acquire(keys, tier));
    for (size_t i = 0; i < l.size(); ++i) std::memcpy(dst[i], l.Bytes(i).data(), bytes);
    const size_t n = l.size();
    KVTIER_RETURN_IF_ERROR(l.Release());
    return n;
  }));
}

std::vector<WireWriteState> PutConcat(ClientCore& core, std::span<const client::BlockKey> keys,
                                      std::span<const std::byte> head,
                                      std::span<const std::byte> data,
                                      std::optional<client::BlockKey> parent, WireTier tier) {
  const uint64_t bytes = BlockBytes(core);
  const uint64_t hn = head.size(), total = hn + data.size();
  CheckConcat("put_concat", total, keys.size(), bytes);
  return ValueOrThrow(core.Call([&](client::Client& c) -> Result<std::vector<WireWriteState>> {
    if (!c.mapped(tier)) {
      return FailedPreconditionError("put_concat writes host-addressable tiers only");
    }
    KVTIER_ASSIGN_OR_RETURN(client::WriteHandle w, c.Allocate(keys, parent, tier));
    std::vector<WireWriteState> states;
    for (size_t i = 0; i < w.size(); ++i) {
      states.push_back(w.state(i));
      if (w.state(i) != WireWriteState::kAllocated) continue;
      // Block i holds bytes [i * bytes, (i + 1) * bytes) of head + data.
      std::byte* slot = w.Bytes(i).data();
      const uint64_t from = i * bytes, to = std::min((i + 1) * bytes, total);
      if (from < std::min(hn, to)) std::memcpy(slot, head.data() + from, std::min(hn, to) - from);
      const uint64_t d_from = std::max(from, hn);
      if (d_from < to)
        std::memcpy(slot + (d_from - from), data.data() + (d_from - hn), to - d_from);
      if (to - from < bytes) std::memset(slot + (to - from), 0, bytes - (to - from));
    }
    KVTIER_RETURN_IF_ERROR(w.Commit());
    return states;
  }));
}

int64_t GetConcat(ClientCore& core, std::span<const client::BlockKey> keys,
                  std::span<const std::byte> head, std::span<std::byte> data, WireTier tier) {
  const uint64_t bytes = BlockBytes(core);
  const uint64_t hn = head.size(), total = hn + data.size();
  const size_t n = keys.size();
  CheckConcat("get_concat", total, n, bytes);
  if (hn > bytes) Throw(InvalidArgumentError("get_concat: a head longer than a block"));
  return ValueOrThrow(core.Call([&](client::Client& c) -> Result<int64_t> {
    if (!c.mapped(tier)) {
      return FailedPreconditionError("get_concat reads host-addressable tiers only");
    }
    KVTIER_ASSIGN_OR_RETURN(client::ReadLease l, c.Acquire(keys, tier));
    int64_t got = static_cast<int64_t>(l.size());
    if (got == static_cast<int64_t>(n) && std::memcmp(l.Bytes(0).data(), head.data(), hn) != 0) {
      got = -1;  // another chunk under these keys: nothing copied
    } else if (got == static_cast<int64_t>(n)) {
      for (size_t i = 0; i < n; ++i) {
        const uint64_t from = std::max(i * bytes, hn), to = std::min((i + 1) * bytes, total);
        if (from < to)
          std::memcpy(data.data() + (from - hn), l.Bytes(i).data() + (from - i * bytes), to - from);
      }
    }
    KVTIER_RETURN_IF_ERROR(l.Release());
    return got;
  }));
}

std::vector<WireWriteState> PutSpans(ClientCore& core, std::span<const client::BlockKey> keys,
                                     const Spans& spans, std::optional<client::BlockKey> parent,
                                     WireTier tier) {
  const size_t m = PiecesPerBlock("put_spans", keys.size(), spans, BlockBytes(core));
  return ValueOrThrow(core.Call([&](client::Client& c) -> Result<std::vector<WireWriteState>> {
    if (!c.mapped(tier))
      return FailedPreconditionError("put_spans writes host-addressable tiers only");
    KVTIER_ASSIGN_OR_RETURN(client::WriteHandle w, c.Allocate(keys, parent, tier));
    std::vector<WireWriteState> states;
    for (size_t i = 0; i < w.size(); ++i) {
      states.push_back(w.state(i));
      if (w.state(i) != WireWriteState::kAllocated) continue;
      std::byte* to = w.Bytes(i).data();
      for (size_t j = i * m; j < (i + 1) * m; ++j) {
        std::memcpy(to, reinterpret_cast<const void*>(spans.addrs[j]), spans.sizes[j]);
        to += spans.sizes[j];
      }
    }
    KVTIER_RETURN_IF_ERROR(w.Commit());
    return states;
  }));
}

size_t GetSpans(ClientCore& core, std::span<const client::BlockKey> keys, const Spans& spans,
                WireTier tier) {
  const size_t m = PiecesPerBlock("get_spans", keys.size(), spans, BlockBytes(core));
  return ValueOrThrow(core.Call([&](client::Client& c) -> Result<size_t> {
    if (!c.mapped(tier))
      return FailedPreconditionError("get_spans reads host-addressable tiers only");
    KVTIER_ASSIGN_OR_RETURN(client::ReadLease l, c.Acquire(keys, tier));
    for (size_t i = 0; i < l.size(); ++i) {
      const std::byte* from = l.Bytes(i).data();
      for (size_t j = i * m; j < (i + 1) * m; ++j) {
        std::memcpy(reinterpret_cast<void*>(spans.addrs[j]), from, spans.sizes[j]);
        from += spans.sizes[j];
      }
    }
    const size_t n = l.size();
    KVTIER_RETURN_IF_ERROR(l.Release());
    return n;
  }));
}

}  // namespace kvtier::python
