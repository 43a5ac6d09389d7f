// SPDX-License-Identifier: MIT
// libfuse's low-level API at the version ckptfs is written for: the one header that includes
// libfuse, included only by the adapter's own .cpp files (never by another header).
#pragma once

// The API of libfuse 3.12, which Debian 12's 3.14 provides: nothing newer is used.
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <fuse_lowlevel.h>
