#include "tiers/block_seal.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/private_file.h"
#include "tiers/internal/aes_gcm.h"

namespace kvtier::tiers {
namespace {

constexpr uint8_t kSealVersion = 1;
// HKDF's salt: names the purpose, so that a ring key used elsewhere too
// (it should not be) gives other keys here.
constexpr std::string_view kKdfSalt = "kvtier block seal v1";
constexpr size_t kNonceBytes = internal::kGcmNonceBytes;
// A file of keys is small; more than this is not one.
constexpr size_t kMaxKeyFileBytes = 64 << 10;
// Derived keys cached at most (one per namespace and sealing process).
constexpr size_t kMaxDataKeys = 4096;

void PutLE(std::byte* p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
uint64_t GetLE(const std::byte* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The associated data: the seal's version and everything of the identity
// (the write time only where the tier keeps one).
struct AssociatedData {
  explicit AssociatedData(const SealIdentity& id) {
    std::byte* p = bytes.data();
    *p++ = static_cast<std::byte>(kSealVersion);
    std::memcpy(p, id.ns.data(), id.ns.size());
    p += id.ns.size();
    PutLE(p, id.key.hi, 8);
    PutLE(p + 8, id.key.lo, 8);
    p += 16;
    *p++ = static_cast<std::byte>(id.form);
    *p++ = static_cast<std::byte>(id.tier);
    PutLE(p, id.bytes, 8);
    p += 8;
    if (id.written != 0) {
      PutLE(p, id.written, 8);
      p += 8;
    }
    size = static_cast<size_t>(p - bytes.data());
  }
  std::array<std::byte, 1 + 32 + 16 + 1 + 1 + 8 + 8> bytes{};
  size_t size = 0;
};

std::array<std::byte, kNonceBytes> Nonce(uint64_t counter) {
  std::array<std::byte, kNonceBytes> iv{};
  PutLE(iv.data(), counter, 8);
  return iv;
}

// A GCM stream under `key` with the nonce of `counter`, the identity fed as
// associated data; nullptr when the library fails.
std::unique_ptr<internal::GcmStream> StartGcm(std::shared_ptr<const internal::GcmKey> key,
                                              bool encrypt, uint64_t counter,
                                              const SealIdentity& id) {
  const AssociatedData ad(id);
  const auto iv = Nonce(counter);
  return internal::GcmStream::Start(std::move(key), encrypt, iv,
                                    std::span<const std::byte>(ad.bytes.data(), ad.size));
}

}  // namespace

// ---- KeyRing -------------------------------------------------------------------

Result<KeyRing> KeyRing::Parse(std::string_view text) {
  KeyRing ring;
  size_t entry = 0;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',') {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && text[end] != ' ' && text[end] != '\t' && text[end] != '\n' &&
           text[end] != '\r' && text[end] != ',' && text[end] != '#') {
      ++end;
    }
    const std::string_view item = text.substr(i, end - i);
    i = end;
    ++entry;
    const std::string where = "key entry " + std::to_string(entry);
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos || colon == 0 || colon > 10) {
      return InvalidArgumentError(where + ": expected <id>:<64 hex digits>");
    }
    uint64_t id = 0;
    for (char d : item.substr(0, colon)) {
      if (d < '0' || d > '9') return InvalidArgumentError(where + ": the id is not a number");
      id = id * 10 + static_cast<uint64_t>(d - '0');
    }
    if (id == 0 || id > UINT32_MAX) {
      return InvalidArgumentError(where + ": the id must be 1 to 4294967295");
    }
    const std::string_view hex = item.substr(colon + 1);
    if (hex.size() != 2 * kSealKeyBytes) {
      return InvalidArgumentError(where + " (id " + std::to_string(id) + "): the key must be " +
                                  std::to_string(2 * kSealKeyBytes) + " hex digits, not " +
                                  std::to_string(hex.size()));
    }
    SealKey key{};
    for (size_t b = 0; b < kSealKeyBytes; ++b) {
      const int hi = HexDigit(hex[2 * b]), lo = HexDigit(hex[2 * b + 1]);
      if (hi < 0 || lo < 0) {
        return InvalidArgumentError(where + " (id " + std::to_string(id) +
                                    "): the key holds a character that is not a hex digit");
      }
      key[b] = static_cast<std::byte>(hi << 4 | lo);
    }
    if (ring.Find(static_cast<uint32_t>(id)) != nullptr) {
      return InvalidArgumentError(where + ": id " + std::to_string(id) + " appears twice");
    }
    ring.keys_.emplace_back(static_cast<uint32_t>(id), key);
  }
  if (ring.keys_.empty()) return InvalidArgumentError("no key: expected <id>:<64 hex digits>");
  return ring;
}

const SealKey* KeyRing::Find(uint32_t id) const {
  for (const auto& [k, key] : keys_) {
    if (k == id) return &key;
  }
  return nullptr;
}

std::vector<uint32_t> KeyRing::ids() const {
  std::vector<uint32_t> out;
  for (const auto& entry : keys_) out.push_back(entry.first);
  return out;
}

Result<KeyRing> LoadKeyRing(const std::string& path) {
  if (path.empty()) {
    const char* env = std::getenv(kBlockKeysEnv);
    if (env == nullptr || *env == '\0') return NotFoundError("no block keys configured");
    Result<KeyRing> ring = KeyRing::Parse(env);
    if (!ring) return ring.status().WithContext(std::string(kBlockKeysEnv));
    return ring;
  }
  KVTIER_ASSIGN_OR_RETURN(std::string text,
                          ReadPrivateFile(path, "block keys file", kMaxKeyFileBytes));
  Result<KeyRing> ring = KeyRing::Parse(text);
  OPENSSL_cleanse(text.data(), text.size());
  if (!ring) return ring.status().WithContext("block keys file " + path);
  return ring;
}

std::array<std::byte, 32> NamespaceFingerprint(std::string_view model, std::string_view salt,
                                               std::string_view layout) {
  std::string text;
  for (std::string_view part : {std::string_view("kvtier namespace"), model, salt, layout}) {
    std::byte len[8];
    PutLE(len, part.size(), 8);
    text.append(reinterpret_cast<const char*>(len), sizeof(len));
    text.append(part);
  }
  std::array<std::byte, 32> out{};
  unsigned int n = 0;
  const int ok = EVP_Digest(text.data(), text.size(), reinterpret_cast<unsigned char*>(out.data()),
                            &n, EVP_sha256(), nullptr);
  if (ok != 1 || n != out.size()) {
    std::fprintf(stderr, "kvtier: OpenSSL's SHA-256 failed\n");
    std::abort();
  }
  return out;
}

// ---- Seal ------------------------------------------------------------------------

uint64_t SealToken(const Seal& seal) { return GetLE(seal.tag.data(), 8); }

std::array<std::byte, kSealBytes> EncodeSeal(const Seal& seal) {
  std::array<std::byte, kSealBytes> out{};
  out[0] = static_cast<std::byte>(kSealVersion);
  PutLE(&out[4], seal.key_id, 4);
  PutLE(&out[8], seal.writer, 8);
  PutLE(&out[16], seal.counter, 8);
  std::memcpy(&out[24], seal.tag.data(), kSealTagBytes);
  return out;
}

Result<Seal> DecodeSeal(std::span<const std::byte> bytes) {
  if (bytes.size() != kSealBytes) {
    return CorruptionError("block seal of " + std::to_string(bytes.size()) + " bytes, not " +
                           std::to_string(kSealBytes));
  }
  if (bytes[0] != static_cast<std::byte>(kSealVersion)) {
    return CorruptionError("block seal of version " +
                           std::to_string(static_cast<unsigned>(bytes[0])) + ", not " +
                           std::to_string(kSealVersion));
  }
  if (bytes[1] != std::byte{0} || bytes[2] != std::byte{0} || bytes[3] != std::byte{0}) {
    return CorruptionError("block seal with its reserved bytes set");
  }
  Seal seal;
  seal.key_id = static_cast<uint32_t>(GetLE(&bytes[4], 4));
  seal.writer = GetLE(&bytes[8], 8);
  seal.counter = GetLE(&bytes[16], 8);
  std::memcpy(seal.tag.data(), &bytes[24], kSealTagBytes);
  if (seal.key_id == 0 || seal.counter == 0) {
    return CorruptionError("block seal without a key id or a counter");
  }
  return seal;
}

// ---- BlockSealer -------------------------------------------------------------------

struct BlockSealer::Gcm {
  std::unique_ptr<internal::GcmStream> stream;
  Seal seal;
  uint64_t expected = 0;  // the block's bytes
  uint64_t fed = 0;       // through Update so far
  bool failed = false;
};

BlockSealer::Opener::Opener(std::unique_ptr<Gcm> state) : state_(std::move(state)) {}
BlockSealer::Opener::Opener(Opener&&) noexcept = default;
BlockSealer::Opener& BlockSealer::Opener::operator=(Opener&&) noexcept = default;
BlockSealer::Opener::~Opener() = default;

Status BlockSealer::Opener::Update(std::span<std::byte> part) {
  Gcm& s = *state_;
  if (s.failed) return CorruptionError("block seal: an earlier part failed");
  s.fed += part.size();
  if (!s.stream->Update(part.data(), part.data(), part.size())) {
    s.failed = true;
    return InternalError("block seal: AES-256-GCM decryption failed");
  }
  return Status::Ok();
}

Status BlockSealer::Opener::Finish(std::span<const std::byte, kSealTagBytes> tag) {
  std::memcpy(state_->seal.tag.data(), tag.data(), kSealTagBytes);
  return Finish();
}

Status BlockSealer::Opener::Finish() {
  Gcm& s = *state_;
  if (s.failed) return CorruptionError("block seal: an earlier part failed");
  if (s.fed != s.expected) {
    return CorruptionError("block seal: " + std::to_string(s.fed) + " bytes opened of " +
                           std::to_string(s.expected));
  }
  if (!s.stream->Verify(s.seal.tag)) {
    s.failed = true;
    return CorruptionError("the block does not open under its seal (key " +
                           std::to_string(s.seal.key_id) +
                           "): its bytes, its seal or its identity (namespace, key, form, tier, "
                           "length) differ from what was sealed");
  }
  return Status::Ok();
}

BlockSealer::BlockSealer(KeyRing keys)
    : BlockSealer(std::move(keys), internal::AvailableGcmEngines().front()) {}

BlockSealer::BlockSealer(KeyRing keys, internal::GcmEngine engine)
    : keys_(std::move(keys)), engine_(engine) {
  // An engine this build or CPU lacks would key nothing: OpenSSL instead.
  const std::vector<internal::GcmEngine> engines = internal::AvailableGcmEngines();
  if (std::find(engines.begin(), engines.end(), engine_) == engines.end()) {
    engine_ = internal::GcmEngine::kOpenSsl;
  }
  // A writer id of 0 is never drawn (DecodeSeal accepts it, but a fixed
  // value would be the first thing to collide).
  while (writer_ == 0) {
    if (RAND_bytes(reinterpret_cast<unsigned char*>(&writer_), sizeof(writer_)) != 1) {
      std::fprintf(stderr, "kvtier: OpenSSL's RAND_bytes failed: no writer id for block seals\n");
      std::abort();
    }
  }
}

BlockSealer::~BlockSealer() = default;

std::string BlockSealer::cipher() const {
  return "AES-256-GCM, " + std::string(internal::GcmEngineName(engine_));
}

Result<std::shared_ptr<const internal::GcmKey>> BlockSealer::DataKey(
    uint32_t key_id, const SealKey& ring_key, const std::array<std::byte, 32>& ns,
    uint64_t writer) {
  const auto cache_key = std::make_tuple(key_id, ns, writer);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = data_keys_.find(cache_key); it != data_keys_.end()) return it->second;
  }
  // info = namespace || writer: a key per namespace and sealing process.
  std::array<std::byte, 40> info{};
  std::memcpy(info.data(), ns.data(), ns.size());
  PutLE(info.data() + 32, writer, 8);
  SealKey out{};
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  EVP_KDF_CTX* kctx = kdf != nullptr ? EVP_KDF_CTX_new(kdf) : nullptr;
  EVP_KDF_free(kdf);
  if (kctx == nullptr) return InternalError("block seal: OpenSSL has no HKDF");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<std::byte*>(ring_key.data()),
                                        ring_key.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<char*>(kKdfSalt.data()),
                                        kKdfSalt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info.data(), info.size()),
      OSSL_PARAM_construct_end()};
  const int ok =
      EVP_KDF_derive(kctx, reinterpret_cast<unsigned char*>(out.data()), out.size(), params);
  EVP_KDF_CTX_free(kctx);
  if (ok != 1) {
    OPENSSL_cleanse(out.data(), out.size());
    return InternalError("block seal: HKDF failed");
  }
  std::shared_ptr<const internal::GcmKey> key = internal::GcmKey::Make(engine_, out);
  OPENSSL_cleanse(out.data(), out.size());
  std::lock_guard<std::mutex> lock(mu_);
  if (data_keys_.size() >= kMaxDataKeys) data_keys_.clear();
  data_keys_.emplace(cache_key, key);
  return key;
}

BlockSealer::Sealing::Sealing(std::unique_ptr<Gcm> state) : state_(std::move(state)) {}
BlockSealer::Sealing::Sealing(Sealing&&) noexcept = default;
BlockSealer::Sealing& BlockSealer::Sealing::operator=(Sealing&&) noexcept = default;
BlockSealer::Sealing::~Sealing() = default;

Seal BlockSealer::Sealing::pending() const {
  Seal seal = state_->seal;
  seal.tag = {};
  return seal;
}

Status BlockSealer::Sealing::Update(std::span<const std::byte> in, std::span<std::byte> out) {
  assert(in.size() == out.size());
  Gcm& s = *state_;
  if (s.failed) return InternalError("block seal: an earlier part failed");
  s.fed += in.size();
  if (!s.stream->Update(in.data(), out.data(), in.size())) {
    s.failed = true;
    return InternalError("block seal: AES-256-GCM encryption failed");
  }
  return Status::Ok();
}

Result<Seal> BlockSealer::Sealing::Finish() {
  Gcm& s = *state_;
  if (s.failed) return InternalError("block seal: an earlier part failed");
  if (s.fed != s.expected) {
    return InvalidArgumentError("block seal: " + std::to_string(s.fed) + " bytes sealed of " +
                                std::to_string(s.expected));
  }
  if (!s.stream->Tag(s.seal.tag)) {
    s.failed = true;
    return InternalError("block seal: AES-256-GCM encryption failed");
  }
  return s.seal;
}

Result<BlockSealer::Sealing> BlockSealer::StartSeal(const SealIdentity& id) {
  auto state = std::make_unique<Gcm>();
  state->seal.key_id = keys_.current_id();
  state->seal.writer = writer_;
  state->seal.counter = counter_.fetch_add(1, std::memory_order_relaxed) + 1;
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<const internal::GcmKey> key,
                          DataKey(state->seal.key_id, keys_.current(), id.ns, writer_));
  state->stream = StartGcm(std::move(key), true, state->seal.counter, id);
  if (!state->stream) return InternalError("block seal: AES-256-GCM would not start");
  state->expected = id.bytes;
  return Sealing(std::move(state));
}

Result<Seal> BlockSealer::SealBlock(const SealIdentity& id, std::span<const std::byte> in,
                                    std::span<std::byte> out) {
  assert(in.size() == out.size() && in.size() == id.bytes);
  KVTIER_ASSIGN_OR_RETURN(Sealing sealing, StartSeal(id));
  KVTIER_RETURN_IF_ERROR(sealing.Update(in, out));
  return sealing.Finish();
}

Result<BlockSealer::Opener> BlockSealer::StartOpen(const SealIdentity& id, const Seal& seal) {
  const SealKey* ring_key = keys_.Find(seal.key_id);
  if (ring_key == nullptr) {
    return CorruptionError("the block was sealed under key " + std::to_string(seal.key_id) +
                           ", which is not among the configured keys (rotated out?)");
  }
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<const internal::GcmKey> key,
                          DataKey(seal.key_id, *ring_key, id.ns, seal.writer));
  auto state = std::make_unique<Gcm>();
  state->stream = StartGcm(std::move(key), false, seal.counter, id);
  if (!state->stream) return InternalError("block seal: AES-256-GCM would not start");
  state->seal = seal;
  state->expected = id.bytes;
  return Opener(std::move(state));
}

Status BlockSealer::Open(const SealIdentity& id, const Seal& seal, std::span<std::byte> bytes) {
  KVTIER_ASSIGN_OR_RETURN(Opener opener, StartOpen(id, seal));
  KVTIER_RETURN_IF_ERROR(opener.Update(bytes));
  return opener.Finish();
}

}  // namespace kvtier::tiers
