// AES-256-GCM in parts, for the block seals (block_seal.h), from one of two
// well-kept libraries, never our own code:
//   - Intel's ipsec-mb (Debian's libipsec-mb-dev, x86-64 only): GCM over
//     AVX-512 VAES and VPCLMULQDQ, which encrypts 2 to 3 times as many bytes
//     per second on one core as OpenSSL 3.0's (about 15 against 6 GB/s on
//     this project's machines; bench/bench_seal). Used where the build found
//     the library and the CPU has those instructions.
//   - OpenSSL's EVP (AES-NI where the CPU has it): everywhere else.
// Both compute the same function: a block sealed by one opens with the
// other (tests/tiers/aes_gcm_test.cc checks them against each other and
// against the GCM specification's vectors).
//
// Thread-safety: a GcmKey is immutable once made and may be shared between
// threads; a GcmStream belongs to one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace kvtier::tiers::internal {

enum class GcmEngine : uint8_t {
  kOpenSsl,  // OpenSSL's EVP_aes_256_gcm
  kIpsecMb,  // Intel ipsec-mb's VAES implementation
};

inline constexpr size_t kGcmKeyBytes = 32;
inline constexpr size_t kGcmNonceBytes = 12;
inline constexpr size_t kGcmTagBytes = 16;

// The engines this build can run on this CPU, the fastest first (never
// empty: OpenSSL is always there).
std::vector<GcmEngine> AvailableGcmEngines();
// "OpenSSL" or "Intel ipsec-mb (AVX-512 VAES)", for logs and reports.
std::string_view GcmEngineName(GcmEngine engine);

// A 256-bit key made ready for one engine (its round keys and hash-key
// powers, computed once), wiped when destroyed.
class GcmKey {
 public:
  // REQUIRES: `engine` is among AvailableGcmEngines().
  static std::shared_ptr<const GcmKey> Make(GcmEngine engine,
                                            std::span<const std::byte, kGcmKeyBytes> key);
  ~GcmKey();
  GcmKey(const GcmKey&) = delete;
  GcmKey& operator=(const GcmKey&) = delete;

  GcmEngine engine() const { return engine_; }

 private:
  friend class GcmStream;
  struct Ipsec;
  explicit GcmKey(GcmEngine engine);

  GcmEngine engine_;
  std::byte raw_[kGcmKeyBytes]{};  // OpenSSL's
  std::unique_ptr<Ipsec> ipsec_;   // ipsec-mb's expanded key
};

// One message, encrypted or decrypted in parts, in order.
class GcmStream {
 public:
  // nullptr only if OpenSSL fails to make a context (it does not on valid
  // input); the associated data is fed here, whole.
  static std::unique_ptr<GcmStream> Start(std::shared_ptr<const GcmKey> key, bool encrypt,
                                          std::span<const std::byte, kGcmNonceBytes> nonce,
                                          std::span<const std::byte> associated);
  ~GcmStream();
  GcmStream(const GcmStream&) = delete;
  GcmStream& operator=(const GcmStream&) = delete;

  // The next `n` bytes of the message from `in` to `out`, which may be `in`
  // itself but may not otherwise overlap it. False only if OpenSSL fails.
  bool Update(const std::byte* in, std::byte* out, size_t n);
  // Encryption's end: the tag. False only if OpenSSL fails.
  bool Tag(std::span<std::byte, kGcmTagBytes> tag);
  // Decryption's end: whether the message, its associated data and
  // `expected` are what was encrypted (compared in constant time).
  bool Verify(std::span<const std::byte, kGcmTagBytes> expected);

 private:
  struct State;
  explicit GcmStream(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace kvtier::tiers::internal
