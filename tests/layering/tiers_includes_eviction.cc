// Must not compile: tiers/ knows no eviction policy: the engine decides what lives where (DESIGN.md
// §2).
#include "eviction/eviction_policy.h"
