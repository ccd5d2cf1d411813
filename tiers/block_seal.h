// Block seals: authenticated encryption of the blocks that leave process
// memory (the SSD tier's slot file; the remote tier), so that whoever reads
// the disk or a Redis node learns nothing of the prompts, and whoever writes
// there cannot make a worker read a block it never computed.
//
// The cipher is AES-256-GCM from a well-kept library, never our own code:
// Intel's ipsec-mb where the CPU has AVX-512 VAES (2-3 times OpenSSL's
// speed), OpenSSL's EVP elsewhere; both compute the same function
// (internal/aes_gcm.h). Keys:
//   - A KeyRing holds the operator's keys (32 bytes each, numbered): the
//     first is the current one, which seals every new block; the others only
//     open blocks sealed before a rotation. A ring comes from a file, which
//     is refused when anyone but its owner may read it, or from an
//     environment variable (LoadKeyRing).
//   - Each block is sealed under a data key derived with HKDF-SHA256 from a
//     ring key, the block's namespace and the id of the sealing process (a
//     random 64-bit number drawn when the BlockSealer is made): a key per
//     namespace and writer.
//   - The 96-bit GCM nonce is a counter of that process, so no nonce ever
//     repeats under one data key: a new process draws a new writer id, hence
//     new data keys, and its counter starts again from 1.
// The associated data is the block's identity (SealIdentity: namespace,
// key, stored form, tier, length, and the write time where the tier keeps
// one): a block copied under another key, into
// another namespace or tier, or cut short does not open.
//
// What is stored beside the ciphertext is a Seal (key id, writer, counter,
// tag: 36 bytes, EncodeSeal/DecodeSeal). The ciphertext has the plaintext's
// length.
//
// Thread-safety: a KeyRing is immutable once made. A BlockSealer's methods
// may be called from any thread at once (the counter is atomic, the derived
// keys' cache is locked).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/result.h"
#include "common/status.h"
#include "prefix_index/block_key.h"

namespace kvtier::tiers {

namespace internal {
enum class GcmEngine : uint8_t;
class GcmKey;
class GcmStream;
}  // namespace internal

inline constexpr size_t kSealKeyBytes = 32;
inline constexpr size_t kSealTagBytes = 16;
// EncodeSeal's output: version (1), reserved (3), key id (4), writer (8),
// counter (8), tag (16).
inline constexpr size_t kSealBytes = 40;
// The environment variable LoadKeyRing reads when no file is named.
inline constexpr const char* kBlockKeysEnv = "KVTIER_BLOCK_KEYS";

using SealKey = std::array<std::byte, kSealKeyBytes>;

// The operator's keys. Text form (a file or the environment variable): one
// key per entry, "<id>:<64 hex digits>", entries separated by white space,
// newlines or commas, '#' starting a comment to the end of its line. Ids are
// 1 to 4294967295 and distinct; the first entry is the current key.
class KeyRing {
 public:
  // InvalidArgument, naming the entry (never echoing key material), for
  // text that is not that form or holds no key.
  static Result<KeyRing> Parse(std::string_view text);

  uint32_t current_id() const { return keys_.front().first; }
  const SealKey& current() const { return keys_.front().second; }
  // The key numbered `id`, or nullptr.
  const SealKey* Find(uint32_t id) const;
  // Ids, the current first.
  std::vector<uint32_t> ids() const;

 private:
  std::vector<std::pair<uint32_t, SealKey>> keys_;
};

// The ring from the file `path` when it is not empty, else from the
// environment variable kBlockKeysEnv when that is set; NotFound when neither
// names a key (none configured: blocks stay in the clear). A file is refused
// with PermissionDenied, naming the path and its mode, when its group or
// others may read or write it (it must be chmod 600 or 400), and with
// InvalidArgument when it is not a regular file; one that cannot be read is
// IoError; bad text is Parse's InvalidArgument, naming the file.
Result<KeyRing> LoadKeyRing(const std::string& path);

// What a seal binds a block to (the GCM associated data). A block opens only
// with the same identity it was sealed with.
struct SealIdentity {
  // The namespace: model, salt, and the layout's text form; the data key is
  // derived from these (NamespaceFingerprint).
  std::array<std::byte, 32> ns;
  prefix_index::BlockKey key;
  uint8_t form = 0;  // how the bytes hold the block (Quantize, as stored)
  uint8_t tier = 0;  // the tier it was written to (kSealTierSsd, kSealTierRemote)
  uint64_t bytes = 0;
  // When it was written (seconds since the epoch), where the tier keeps
  // that beside the block (the remote tier, to refuse stale values); 0 where
  // it keeps none (it is then left out of the associated data).
  uint64_t written = 0;
};

// SealIdentity::tier of each tier that seals.
inline constexpr uint8_t kSealTierSsd = 1;
inline constexpr uint8_t kSealTierRemote = 2;

// SHA-256 of (model, salt, layout), each length-prefixed: the namespace's
// part of a SealIdentity, the same on every node.
std::array<std::byte, 32> NamespaceFingerprint(std::string_view model, std::string_view salt,
                                               std::string_view layout);

// What is kept beside a sealed block.
struct Seal {
  uint32_t key_id = 0;   // the ring key the data key came from
  uint64_t writer = 0;   // the sealing process
  uint64_t counter = 0;  // the nonce under (key_id, namespace, writer)
  std::array<std::byte, kSealTagBytes> tag{};

  friend bool operator==(const Seal&, const Seal&) = default;
};

// The first 8 bytes of the seal's tag: what a caller that keeps 64 bits per
// block (the engine's checksum field) keeps to name the version it wrote.
uint64_t SealToken(const Seal& seal);

std::array<std::byte, kSealBytes> EncodeSeal(const Seal& seal);
// Corruption, saying what is wrong, unless `bytes` is exactly an EncodeSeal
// output of this version (a non-zero key id, writer and counter).
Result<Seal> DecodeSeal(std::span<const std::byte> bytes);

class BlockSealer {
  // One block's AES-256-GCM context in parts (a Sealing's or an Opener's).
  struct Gcm;

 public:
  // With the fastest engine this build and CPU have.
  explicit BlockSealer(KeyRing keys);
  // With `engine`, or OpenSSL where `engine` is not among
  // internal::AvailableGcmEngines() (cipher() says which).
  BlockSealer(KeyRing keys, internal::GcmEngine engine);
  ~BlockSealer();
  BlockSealer(const BlockSealer&) = delete;
  BlockSealer& operator=(const BlockSealer&) = delete;

  // Encrypts `in` into `out` under the current key; returns the seal.
  // `out` may be `in` itself (in place) but may not otherwise overlap it.
  // REQUIRES: out.size() == in.size() == id.bytes. Internal only if the
  // cipher's library fails (it does not on valid input).
  Result<Seal> SealBlock(const SealIdentity& id, std::span<const std::byte> in,
                         std::span<std::byte> out);

  // Sealing in parts, as they are written: Update encrypts each part of
  // the block in order (into `out`, which may be `in`), Finish gives the
  // seal once id.bytes went through.
  class Sealing {
   public:
    Sealing(Sealing&&) noexcept;
    Sealing& operator=(Sealing&&) noexcept;
    ~Sealing();
    // REQUIRES: out.size() == in.size().
    Status Update(std::span<const std::byte> in, std::span<std::byte> out);
    // InvalidArgument when other than id.bytes went through Update.
    Result<Seal> Finish();
    // The seal the block gets, known from the start but for its tag (zero
    // here): for a format that writes the seal before the bytes and the tag
    // after them.
    Seal pending() const;

   private:
    friend class BlockSealer;
    explicit Sealing(std::unique_ptr<Gcm> state);
    std::unique_ptr<Gcm> state_;
  };
  Result<Sealing> StartSeal(const SealIdentity& id);

  // Opening in parts, as they arrive: Update decrypts each part in place, in
  // order; Finish checks the tag. Until Finish returns OK the bytes are not
  // the block and must not be served.
  class Opener {
   public:
    Opener(Opener&&) noexcept;
    Opener& operator=(Opener&&) noexcept;
    ~Opener();
    Status Update(std::span<std::byte> part);
    // Corruption when the bytes, the seal or the identity differ from what
    // was sealed (or fewer or more bytes than id.bytes came through Update).
    Status Finish();
    // The same with the tag given now, where it trailed the bytes (the
    // remote tier's values) rather than came with the seal.
    Status Finish(std::span<const std::byte, kSealTagBytes> tag);

   private:
    friend class BlockSealer;
    explicit Opener(std::unique_ptr<Gcm> state);
    std::unique_ptr<Gcm> state_;
  };
  // Corruption when the seal's key is not in the ring (rotated out: the
  // message says so).
  Result<Opener> StartOpen(const SealIdentity& id, const Seal& seal);
  // The whole block at once, in place.
  Status Open(const SealIdentity& id, const Seal& seal, std::span<std::byte> bytes);

  const KeyRing& keys() const { return keys_; }
  uint64_t writer() const { return writer_; }
  // "AES-256-GCM, <library>", for the daemon's log.
  std::string cipher() const;

 private:
  // The data key of (ring key, namespace, writer), derived once, made ready
  // for the engine and cached.
  Result<std::shared_ptr<const internal::GcmKey>> DataKey(uint32_t key_id, const SealKey& ring_key,
                                                          const std::array<std::byte, 32>& ns,
                                                          uint64_t writer);

  KeyRing keys_;
  internal::GcmEngine engine_;
  uint64_t writer_ = 0;
  std::atomic<uint64_t> counter_{0};
  std::mutex mu_;
  // (key id, namespace, writer) -> data key; cleared when it grows past a
  // bound (one entry per namespace and sealing process seen). A key is
  // wiped when its last holder lets go.
  std::map<std::tuple<uint32_t, std::array<std::byte, 32>, uint64_t>,
           std::shared_ptr<const internal::GcmKey>>
      data_keys_;  // GUARDED_BY(mu_)
};

}  // namespace kvtier::tiers
