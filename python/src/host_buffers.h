// Host buffers for the K and V that kvtier.hf loads into a model's cache.
//
// A load writes tens of MiB into fresh memory, and on first touch every 4 KiB
// page costs a fault: measured here, a 32 MiB copy into new memory took 6x as
// long as into memory written before. Buffers given back (when the last view
// of one goes, as DynamicCache replaces its tensors) are kept for the next
// load, up to a cap, the way torch's CUDA allocator caches blocks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier::python {

// A page-aligned buffer of at least `bytes`, reused when one of that size
// class was given back; `*capacity` is its real size. Thread-safe.
void* TakeHostBuffer(uint64_t bytes, uint64_t* capacity);
// Gives a buffer back; kept for reuse while the cache holds less than its cap,
// else unmapped. Thread-safe; never touches Python.
void GiveHostBuffer(void* buffer, uint64_t capacity);
// The cap on the bytes kept for reuse (default 1 GiB); 0 keeps none.
void SetHostBufferCacheBytes(uint64_t bytes);
uint64_t HostBufferCacheBytes();
uint64_t HostBufferCachedBytes();

}  // namespace kvtier::python
