// Must compile: tiers/ may use eviction/ and prefix_index/.
#include "eviction/eviction_policy.h"
#include "prefix_index/prefix_index.h"
#include "tiers/tier.h"
