// Writes one prompt's blocks through an installed kvtier client library and
// reads them back in place. Usage: consumer_cpp SOCKET. Exit 0 when every
// byte came back.
#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

#include "client/client.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  kvtier::client::ClientOptions o;
  o.socket_path = argv[1];
  o.model = "consumer";
  o.layout = {2, 2, 64, kvtier::DType::kFloat16, 16};
  auto client = kvtier::client::Client::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  std::vector<kvtier::prefix_index::TokenId> tokens(64);
  std::iota(tokens.begin(), tokens.end(), 1000);
  const auto keys = (*client)->Keys(tokens);
  auto w = (*client)->Allocate(keys);
  if (!w.ok()) return std::fprintf(stderr, "allocate: %s\n", w.status().ToString().c_str()), 1;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::memset(w->Bytes(i).data(), static_cast<int>(i + 1), w->Bytes(i).size());
  }
  if (!w->Commit().ok()) return 1;
  auto r = (*client)->Acquire(keys);
  if (!r.ok() || r->size() != keys.size()) return std::fprintf(stderr, "acquire failed\n"), 1;
  for (size_t i = 0; i < r->size(); ++i) {
    for (std::byte b : r->Bytes(i)) {
      if (b != static_cast<std::byte>(i + 1)) return std::fprintf(stderr, "wrong byte\n"), 1;
    }
  }
  std::printf("consumer_cpp: %zu blocks written and read back\n", keys.size());
  return 0;
}
