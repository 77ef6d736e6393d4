/* Checks and a small session builder for the tests of the public API
 * (hetex.h). */
#ifndef HX_TEST_HETEX_CHECKS_H
#define HX_TEST_HETEX_CHECKS_H

#include "hetex.h"
#include "testutil.h"

/* The call returned HX_OK; a failure shows the library's last error. */
#define OK(call) CHECK((call) == HX_OK, "%s", hx_last_error())

/* A session on g with cfg (NULL: the defaults), checked: NULL, and a failure
 * that names `what`, the status and the last error, when it cannot be made. */
hx_session *test_session_with(hx_graph *g, const hx_session_config *cfg, const char *what);

/* The one most tests want: the defaults but the accelerator and threads. */
hx_session *test_session(hx_graph *g, hx_accelerator accelerator, int n_threads);

#endif
