// Must not compile: engine/ may not know the daemon that drives it (DESIGN.md §2).
#include "daemon/config.h"
