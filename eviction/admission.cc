// The admission filters NewAdmissionFilter() makes. Both count lookups in a
// FrequencySketch sized to the tier (one 4-bit counter row per block it
// holds, aged every ten turnovers' worth of references, as TinyLFU does).
#include "eviction/admission.h"

#include <array>
#include <string>

#include "eviction/internal/frequency_sketch.h"

namespace kvtier::eviction {
namespace {

constexpr std::array<std::string_view, 3> kNames = {"off", "seen", "tinylfu"};

class SketchFilter : public AdmissionFilter {
 public:
  void Referenced(std::span<const uint64_t> chain) override { sketch_.IncrementAll(chain); }

  void SetCapacity(size_t blocks, size_t one_in) override { sketch_.Grow(blocks, one_in); }

 protected:
  internal::FrequencySketch sketch_;
};

// A newcomer's own lookup counted once: seen before means twice.
class SeenFilter final : public SketchFilter {
 public:
  std::string_view name() const override { return "seen"; }
  bool Admit(uint64_t candidate, uint64_t /*victim*/) override {
    return sketch_.Frequency(candidate) >= 2;
  }
};

class TinyLfuFilter final : public SketchFilter {
 public:
  std::string_view name() const override { return "tinylfu"; }
  bool Admit(uint64_t candidate, uint64_t victim) override {
    return sketch_.Frequency(candidate) > sketch_.Frequency(victim);
  }
};

}  // namespace

std::span<const std::string_view> AdmissionNames() { return kNames; }

Result<std::unique_ptr<AdmissionFilter>> NewAdmissionFilter(std::string_view name) {
  if (name == "off") return std::unique_ptr<AdmissionFilter>();
  if (name == "seen") return std::unique_ptr<AdmissionFilter>(std::make_unique<SeenFilter>());
  if (name == "tinylfu") {
    return std::unique_ptr<AdmissionFilter>(std::make_unique<TinyLfuFilter>());
  }
  std::string names;
  for (std::string_view n : kNames) names += (names.empty() ? "" : ", ") + std::string(n);
  return InvalidArgumentError("unknown admission filter '" + std::string(name) + "' (" + names +
                              ")");
}

}  // namespace kvtier::eviction
