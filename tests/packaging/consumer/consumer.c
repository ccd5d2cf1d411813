/* The C API of an installed kvtier, built with pkg-config: puts a prompt's
 * blocks inline and gets them back. Usage: consumer_c SOCKET. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/kvtier_c.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  kvtier_layout layout = {2, 2, 64, KVTIER_DTYPE_FP16, 16, KVTIER_KIND_KV};
  kvtier_client* c = NULL;
  if (kvtier_connect(argv[1], "consumer-c", NULL, &layout, &c) != 0) {
    fprintf(stderr, "connect: %s\n", kvtier_last_error(NULL));
    return 1;
  }
  uint32_t tokens[48];
  for (int i = 0; i < 48; ++i) tokens[i] = 7u * (uint32_t)i;
  kvtier_key keys[3];
  size_t n = 0, written = 0, hits = 0;
  const size_t bytes = (size_t)kvtier_block_bytes(c);
  unsigned char* in = malloc(3 * bytes);
  unsigned char* out = malloc(3 * bytes);
  for (size_t i = 0; i < 3 * bytes; ++i) in[i] = (unsigned char)(i * 31);
  if (kvtier_keys(c, tokens, 48, keys, 3, &n) != 0 || n != 3 ||
      kvtier_put(c, keys, n, in, 3 * bytes, &written) != 0 ||
      kvtier_get(c, keys, n, out, 3 * bytes, &hits) != 0 || hits != 3 ||
      memcmp(in, out, 3 * bytes) != 0) {
    fprintf(stderr, "round trip failed: %s\n", kvtier_last_error(c));
    return 1;
  }
  printf("consumer_c: %zu blocks put and got back\n", hits);
  free(in);
  free(out);
  kvtier_close(c);
  return 0;
}
