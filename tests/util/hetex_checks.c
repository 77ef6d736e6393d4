#include "hetex_checks.h"

hx_session *test_session_with(hx_graph *g, const hx_session_config *cfg, const char *what)
{
    hx_session_config defaults = hx_session_config_default();
    hx_session *s = NULL;
    hx_status st = hx_session_create(g, cfg ? cfg : &defaults, &s);
    CHECK(st == HX_OK && s, "%s: hx_session_create: %s: %s", what, hx_status_name(st),
          hx_last_error());
    return st == HX_OK ? s : NULL;
}

hx_session *test_session(hx_graph *g, hx_accelerator accelerator, int n_threads)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.accelerator = accelerator;
    cfg.n_threads = n_threads;
    return test_session_with(g, &cfg, "session");
}
