/* Compiled as C: the header is plain C99, and every function links. Without
 * a daemon it checks the one thing it can: connecting to a missing socket
 * fails with KVTIER_UNAVAILABLE and says why. */
#include <stdio.h>
#include <string.h>

#include "client/kvtier_c.h"

/* Taking each function's address makes the link prove it exists. */
typedef void (*AnyFunction)(void);
static const AnyFunction kFunctions[] = {
    (AnyFunction)&kvtier_connect,    (AnyFunction)&kvtier_close,
    (AnyFunction)&kvtier_last_error, (AnyFunction)&kvtier_block_bytes,
    (AnyFunction)&kvtier_keys,       (AnyFunction)&kvtier_lookup,
    (AnyFunction)&kvtier_put,        (AnyFunction)&kvtier_get,
    (AnyFunction)&kvtier_allocate,   (AnyFunction)&kvtier_write_block,
    (AnyFunction)&kvtier_commit,     (AnyFunction)&kvtier_abort,
    (AnyFunction)&kvtier_acquire,    (AnyFunction)&kvtier_read_count,
    (AnyFunction)&kvtier_read_block, (AnyFunction)&kvtier_release,
    (AnyFunction)&kvtier_remove,     (AnyFunction)&kvtier_stats_json,
    (AnyFunction)&kvtier_set_retention, (AnyFunction)&kvtier_hint,
    (AnyFunction)&kvtier_unhint,
};

int main(void) {
  kvtier_layout layout = {2, 2, 64, KVTIER_DTYPE_FP16, 16, KVTIER_KIND_KV};
  kvtier_client* client = (kvtier_client*)&layout; /* must be reset to NULL */
  const char* msg;
  int rc = kvtier_connect("/nonexistent/kvtierd.sock", "model", NULL, &layout, &client);
  for (size_t i = 0; i < sizeof(kFunctions) / sizeof(kFunctions[0]); ++i) {
    if (kFunctions[i] == NULL) return 1;
  }
  if (rc != KVTIER_UNAVAILABLE || client != NULL) {
    fprintf(stderr, "kvtier_connect: rc %d, client %p\n", rc, (void*)client);
    return 1;
  }
  msg = kvtier_last_error(NULL);
  if (msg == NULL || strstr(msg, "/nonexistent/kvtierd.sock") == NULL) {
    fprintf(stderr, "kvtier_last_error: '%s'\n", msg ? msg : "(null)");
    return 1;
  }
  printf("ok: %s\n", msg); /* msg is valid until the next call on this thread */
  layout.dtype = 99;
  if (kvtier_connect(NULL, "model", "", &layout, &client) != KVTIER_INVALID_ARGUMENT) return 1;
  layout.dtype = KVTIER_DTYPE_FP16;
  layout.kind = 2; /* neither KVTIER_KIND_KV nor KVTIER_KIND_LATENT */
  if (kvtier_connect(NULL, "model", "", &layout, &client) != KVTIER_INVALID_ARGUMENT) return 1;
  kvtier_close(NULL);
  return 0;
}
