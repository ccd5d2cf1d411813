// Quantize on demote, the I/O threads' half (NamespaceSpec::quantize_lower,
// docs/fp8.md): a block encoded into its stored fp8 form on its way to the
// ssd or the remote tier, and decoded back to the namespace's dtype on its
// way up. The engine's thread only decides; these run where the I/O runs.
#pragma once

#include <cstddef>
#include <span>

#include "common/fp8.h"
#include "common/layout.h"
#include "common/result.h"

namespace kvtier::engine::internal {

// This thread's buffer of at least `bytes`, 4 KiB aligned and with room to
// the next 4 KiB boundary past `bytes` (direct I/O writes and reads it
// without a bounce), reused by the next call; empty when no memory could be
// had.
std::span<std::byte> ThreadScratch(size_t bytes);

// Maps the pages under `bytes` writable in one call, before they are
// written: a slot of the host arena is new to this process's page tables
// until first touched, and a fault per 4 KiB page cost a restored 2 MiB
// block more CPU than the restore itself. Best effort (MADV_POPULATE_WRITE,
// Linux 5.14+; nothing happens before it).
void PrefaultForWrite(std::span<std::byte> bytes);

// `block` (of `layout`) in form `q`, in this thread's scratch (valid until
// its next use), followed there by zeros to the next 4 KiB boundary (so the
// ssd writes it padded, in one direct I/O): the block itself for kOff.
// InvalidArgument, naming the slice, for a block holding NaN or infinity.
Result<std::span<const std::byte>> EncodeStored(const Layout& layout, Quantize q,
                                                std::span<const std::byte> block);

// Restores `stored` (form `q` of `layout`) into `out` (layout's size),
// its pages mapped first (PrefaultForWrite; an O_DIRECT read into `out`, as
// with the setting off, maps them in the kernel instead).
// Corruption when it is no valid block of that form (a NaN code, a bad
// scale): `out` then holds no block.
Status DecodeStored(const Layout& layout, Quantize q, std::span<const std::byte> stored,
                    std::span<std::byte> out);

}  // namespace kvtier::engine::internal
