// The adaptive policy with its recency stamps' limit chosen (tests: the
// renumbering at the limit, which NewAdaptivePolicy reaches only after
// 2^32 stamps, i.e. accesses, inserts, unpins and leaves).
#pragma once

#include <cstdint>
#include <memory>

#include "common/clock.h"
#include "common/result.h"
#include "eviction/eviction_policy.h"

namespace kvtier::eviction::internal {

// NewAdaptivePolicy, its stamps renumbered whenever the clock of stamps
// reaches `stamp_limit` (> the blocks ever tracked at once).
Result<std::unique_ptr<EvictionPolicy>> NewAdaptivePolicyWithStampLimit(const Clock& clock,
                                                                        AdaptiveOptions options,
                                                                        uint32_t stamp_limit);

}  // namespace kvtier::eviction::internal
