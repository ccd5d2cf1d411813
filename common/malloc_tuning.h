// glibc malloc settings for a process that moves MiB-sized transient
// buffers (remote-tier values, inline PUT/GET payloads, hiredis replies):
// with glibc's defaults each such buffer is an mmap, faulted in page by
// page, and an munmap at its free, or heap memory trimmed back to the
// kernel after a burst; both cost more than the copy itself (measured in
// bench/bench_remote.cc: 700k page faults per GB written from four threads,
// 0.3x raw Redis SET). Buffers up to 32 MiB come from the heap instead, and
// up to 256 MiB of freed heap is kept for reuse. kvtierd calls it first thing;
// the benchmarks that stand in for it too.
#pragma once

namespace kvtier {

void TuneMallocForLargeBuffers();

}  // namespace kvtier
