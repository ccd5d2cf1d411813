// Must not compile: prefix_index/ is pure and may not use eviction/.
#include "eviction/eviction_policy.h"
