// An engine's chunks of bytes in and out of kvtierd, one call each without
// the GIL (Client.put_rows / get_rows / put_concat / get_concat): the copy
// between the engine's buffer and the mapped arena happens inside the one
// client call that allocates or acquires, so a thread that moves chunks
// waits for the GIL once a call, not once a block (the scheduler of an
// engine holds it most of the time).
//
// Client.put_spans / get_spans do the same for blocks scattered over an
// engine's host pool in pieces (SGLang's page: its K and V halves, or one
// piece per layer), given by address and size.
//
// Thread-safety: as ClientCore::Call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "client/client.h"
#include "core.h"
#include "handles.h"

namespace kvtier::python {

// allocate(keys, tier, parent); each ALLOCATED slot i filled from row
// row_ids[i] of rows; commit. Returns the states.
std::vector<client::WireWriteState> PutRows(ClientCore& core,
                                            std::span<const client::BlockKey> keys,
                                            const ByteRows& rows,
                                            const std::vector<int64_t>& row_ids,
                                            std::optional<client::BlockKey> parent,
                                            client::WireTier tier);

// acquire(keys, tier); leased block i copied into row row_ids[i]; release.
// Returns the blocks leased.
size_t GetRows(ClientCore& core, std::span<const client::BlockKey> keys, const ByteRows& rows,
               const std::vector<int64_t>& row_ids, client::WireTier tier);

// allocate; the ALLOCATED slots filled with their share of head + data laid
// end to end over the blocks (the last zero-padded; the keys' blocks must be
// just enough); commit. Returns the states.
std::vector<client::WireWriteState> PutConcat(
    ClientCore& core, std::span<const client::BlockKey> keys, std::span<const std::byte> head,
    std::span<const std::byte> data, std::optional<client::BlockKey> parent, client::WireTier tier);

// acquire; if every key is leased and the blocks begin with head's bytes,
// the bytes after them copied into data; release. Returns the blocks leased,
// or -1 when they begin with other bytes (nothing copied).
int64_t GetConcat(ClientCore& core, std::span<const client::BlockKey> keys,
                  std::span<const std::byte> head, std::span<std::byte> data,
                  client::WireTier tier);

// A block laid out over pieces of host memory: piece j of block i is
// `sizes[i * m + j]` bytes at address `addrs[i * m + j]`, m pieces a block.
// The addresses are the caller's to keep valid for the call; kvtier cannot
// check them (kvtier.sglang checks them against the pool's tensors first).
struct Spans {
  std::vector<uint64_t> addrs;
  std::vector<uint64_t> sizes;
};

// allocate; each ALLOCATED slot i filled with block i's pieces end to end;
// commit. Returns the states. The pieces of each block must add up to
// exactly one block.
std::vector<client::WireWriteState> PutSpans(ClientCore& core,
                                             std::span<const client::BlockKey> keys,
                                             const Spans& spans,
                                             std::optional<client::BlockKey> parent,
                                             client::WireTier tier);

// acquire; leased block i copied out over its pieces; release. Returns the
// blocks leased.
size_t GetSpans(ClientCore& core, std::span<const client::BlockKey> keys, const Spans& spans,
                client::WireTier tier);

}  // namespace kvtier::python
