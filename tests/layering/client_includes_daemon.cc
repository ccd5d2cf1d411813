// Must not compile: client/ (the worker library) may not know the daemon (DESIGN.md §2).
#include "daemon/config.h"
