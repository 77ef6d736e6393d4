/* memory/'s one header for the rest of the library: device pools by
 * lifetime (pool.h), the pinned host pool (pinned.h), chunks of parameters
 * (chunks.h), the disk tier (disk_tier.h), allocation traces and their
 * replay (memtrace.h). memory/ manages bytes and knows no graph; its
 * errors come back in an hx_mem_err (mem_common.h). */
#ifndef HX_MEMORY_H
#define HX_MEMORY_H

#include "memory/chunks.h"
#include "memory/disk_tier.h"
#include "memory/memtrace.h"
#include "memory/pinned.h"
#include "memory/pool.h"

#endif
