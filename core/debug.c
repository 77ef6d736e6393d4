/* HX_DEBUG: which diagnostics the user asked for on stderr. */
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

bool hx__debug(const char *what)
{
    const char *v = getenv("HX_DEBUG");
    return v && strstr(v, what);
}
