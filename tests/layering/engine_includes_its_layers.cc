// Must compile: engine/ may use tiers/, eviction/, prefix_index/, kernels/
// and common/ (DESIGN.md §2).
#include "common/status.h"
#include "eviction/eviction_policy.h"
#include "kernels/kernels.h"
#include "prefix_index/prefix_index.h"
#include "tiers/tier.h"
