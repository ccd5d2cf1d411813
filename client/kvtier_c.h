/* The C API of the kvtier client (client/client.h), for workers written in
 * C or reached through an FFI (Python ctypes, Rust, Go).
 *
 * Every function returns a kvtier status code (KVTIER_OK = 0, else one of
 * the codes below, equal to kvtier::StatusCode) and never lets a C++
 * exception out (an unexpected one is KVTIER_INTERNAL).
 * kvtier_last_error() gives the message of the last failure.
 *
 * Thread-safety: a kvtier_client is not thread-safe; use one per thread.
 * Handles (kvtier_write, kvtier_read) belong to their client, are used on
 * its thread, and must be finished (commit/abort, release) before
 * kvtier_close() of that client.
 */
#ifndef KVTIER_CLIENT_KVTIER_C_H_
#define KVTIER_CLIENT_KVTIER_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. */
#define KVTIER_OK 0
#define KVTIER_NOT_FOUND 1
#define KVTIER_INVALID_ARGUMENT 2
#define KVTIER_RESOURCE_EXHAUSTED 3
#define KVTIER_IO_ERROR 4
#define KVTIER_CORRUPTION 5
#define KVTIER_UNAVAILABLE 6
#define KVTIER_INTERNAL 7
#define KVTIER_FAILED_PRECONDITION 8
#define KVTIER_PERMISSION_DENIED 9

/* Element types of a layout (kvtier::DType). */
#define KVTIER_DTYPE_FP16 0
#define KVTIER_DTYPE_BF16 1
#define KVTIER_DTYPE_FP32 2
#define KVTIER_DTYPE_FP8_E4M3 3
#define KVTIER_DTYPE_FP8_E5M2 4

/* What a block holds per token and layer (kvtier::KvKind). */
#define KVTIER_KIND_KV 0 /* K and V: [layer][k|v][token][kv_head][head_dim] */
#define KVTIER_KIND_LATENT                                 \
  1 /* one MLA latent vector (DeepSeek-V2/V3), kv_heads 1: \
       [layer][token][kv_head][head_dim] */

/* Write states of kvtier_write_block() and kvtier_put(). */
#define KVTIER_WRITE_ALLOCATED 0 /* the slot is yours to fill */
#define KVTIER_WRITE_EXISTS 1    /* the block is cached already */
#define KVTIER_WRITE_SKIPPED 2   /* no room, or its parent is missing */

/* Tiers of kvtier_allocate() and kvtier_acquire(). */
#define KVTIER_TIER_DEVICE 0 /* only when the daemon emulates it in host memory */
#define KVTIER_TIER_HOST 1

#define KVTIER_DEFAULT_SOCKET "/run/kvtier/kvtierd.sock"

/* The block layout of a namespace (DESIGN.md §1). */
typedef struct kvtier_layout {
  uint32_t layers;
  uint32_t kv_heads;
  uint32_t head_dim;
  uint32_t dtype; /* KVTIER_DTYPE_* */
  uint32_t block_tokens;
  uint32_t kind; /* KVTIER_KIND_KV 0, KVTIER_KIND_LATENT 1 */
} kvtier_layout;

/* A 128-bit block key. */
typedef struct kvtier_key {
  uint64_t hi;
  uint64_t lo;
} kvtier_key;

typedef struct kvtier_client kvtier_client;
typedef struct kvtier_write kvtier_write;
typedef struct kvtier_read kvtier_read;

/* Connects, says HELLO for the namespace (model, salt, layout) and maps the
 * shared arenas. socket_path NULL: KVTIER_DEFAULT_SOCKET; salt NULL: "".
 * On failure *out is NULL and kvtier_last_error(NULL) says why. */
int kvtier_connect(const char* socket_path, const char* model, const char* salt,
                   const kvtier_layout* layout, kvtier_client** out);
/* Closes the session; NULL is ignored. */
void kvtier_close(kvtier_client* client);

/* The message of the last failed call on `client` (NULL: of the last failed
 * call on this thread, e.g. kvtier_connect). "" when none. Valid until the
 * next call on the same client or thread. */
const char* kvtier_last_error(const kvtier_client* client);

/* Bytes of one block. */
uint64_t kvtier_block_bytes(const kvtier_client* client);

/* The keys of the full blocks of `tokens`. *nkeys = n / block_tokens; at
 * most `cap` are written; KVTIER_INVALID_ARGUMENT when cap < *nkeys. */
int kvtier_keys(const kvtier_client* client, const uint32_t* tokens, size_t n, kvtier_key* out,
                size_t cap, size_t* nkeys);

/* *hits = the number of leading keys present. */
int kvtier_lookup(kvtier_client* client, const kvtier_key* keys, size_t n, size_t* hits);

/* Writes n blocks inline: data holds n x block_bytes bytes (`bytes`).
 * *written = the blocks newly stored (KVTIER_WRITE_ALLOCATED). */
int kvtier_put(kvtier_client* client, const kvtier_key* keys, size_t n, const void* data,
               size_t bytes, size_t* written);
/* Reads the leading present blocks inline into `out` (cap >= n x
 * block_bytes bytes); *hits = blocks copied. */
int kvtier_get(kvtier_client* client, const kvtier_key* keys, size_t n, void* out, size_t cap,
               size_t* hits);

/* Zero-copy write: reserves slots; fill the ALLOCATED ones in place, then
 * commit or abort. kvtier_commit and kvtier_abort free `w` whatever their
 * result. */
int kvtier_allocate(kvtier_client* client, const kvtier_key* keys, size_t n, uint32_t tier,
                    kvtier_write** out);
/* *ptr: the slot (block_bytes bytes) when *state is KVTIER_WRITE_ALLOCATED,
 * else NULL. Either out-pointer may be NULL. */
int kvtier_write_block(kvtier_write* w, size_t i, void** ptr, int* state);
int kvtier_commit(kvtier_write* w);
int kvtier_abort(kvtier_write* w);

/* Zero-copy read: pins the leading present blocks until kvtier_release,
 * which frees `r`. */
int kvtier_acquire(kvtier_client* client, const kvtier_key* keys, size_t n, uint32_t tier,
                   kvtier_read** out);
size_t kvtier_read_count(const kvtier_read* r);
int kvtier_read_block(const kvtier_read* r, size_t i, const void** ptr);
int kvtier_release(kvtier_read* r);

/* Copies the leading present blocks out of the host arena into `out` (cap
 * >= n x block_bytes bytes, block i at i x block_bytes); *hits = blocks
 * copied. A block this client copied before is read straight from its slot,
 * without a request, while it is still there (Client::Read). */
int kvtier_copy(kvtier_client* client, const kvtier_key* keys, size_t n, void* out, size_t cap,
                size_t* hits);

/* Removes the keys; *removed (may be NULL) = blocks removed. */
int kvtier_remove(kvtier_client* client, const kvtier_key* keys, size_t n, uint64_t* removed);

/* Retention for token ranges of the prompt whose chain is `keys`: priority
 * 0-100 (lower is evicted first, 35 the default), back to 35 after
 * duration_ms (0 = never). A block takes the highest priority of the ranges
 * overlapping it. *updated (may be NULL) = cached blocks updated. */
typedef struct kvtier_retention_range {
  uint64_t token_begin;
  uint64_t token_end; /* exclusive */
  uint8_t priority;
  uint64_t duration_ms;
} kvtier_retention_range;
int kvtier_set_retention(kvtier_client* client, const kvtier_key* keys, size_t n,
                         const kvtier_retention_range* ranges, size_t nranges, size_t* updated);

/* Hints that this worker will soon run a request whose chain is `keys`: the
 * daemon keeps its cached blocks for ttl_ms (0 = the daemon's default) or
 * until acquired, and reads those on the SSD into host memory meanwhile.
 * *protected_blocks and *prefetching (each may be NULL) = cached blocks now
 * protected, of which being read from the SSD. Past the daemon's bound of
 * hinted blocks per session: KVTIER_RESOURCE_EXHAUSTED, nothing changed.
 * Keys never cached are ignored. */
int kvtier_hint(kvtier_client* client, const kvtier_key* keys, size_t n, uint32_t ttl_ms,
                size_t* protected_blocks, size_t* prefetching);
/* Ends this session's hints on `keys`; *withdrawn (may be NULL) = blocks
 * whose protection ended. */
int kvtier_unhint(kvtier_client* client, const kvtier_key* keys, size_t n, size_t* withdrawn);

/* The daemon's STATS as a JSON object, NUL-terminated. *len = its length
 * without the NUL; KVTIER_INVALID_ARGUMENT (and a truncated copy) when
 * cap <= *len. */
int kvtier_stats_json(kvtier_client* client, char* buf, size_t cap, size_t* len);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVTIER_CLIENT_KVTIER_C_H_ */
