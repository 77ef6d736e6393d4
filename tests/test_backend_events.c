/* test_backend_events: event_query, the backends' look at an event that
 * does not wait (ZeRO stage 3 frees a gathered buffer once the copies that
 * read it are done: session/zero3.c). emu: an event never recorded is
 * done; one recorded after a copy that lasts 1 s (simulated latency) is
 * not done right after, and is done once event_sync returns, as the copy
 * is (its bytes arrived). cpu: work completes on the calling thread, so a
 * recorded event is done at once. The cuda backend's (cudaEventQuery) is
 * checked in tests/gpu/test_gpu_backend.c. */
#include "backend/backend.h"
#include "core/core.h" /* hx__now */
#include "hetex_checks.h"
#include "testutil.h"

#include <string.h>

enum { BYTES = 4096 };

static void test_emu(void)
{
    hx_backend *b = NULL;
    hx_emu_options o = {0};
    o.cost.launch_latency_s = 1.0; /* every copy lasts at least 1 s */
    CHECK(hx__backend_emu_create((size_t)1 << 20, &o, &b) == HX_OK, "emu: %s", hx_last_error());
    if (!b) return;
    hx_stream *s = NULL;
    hx_event *e = NULL;
    void *dev = NULL;
    static unsigned char host[BYTES], back[BYTES];
    memset(host, 0x5a, sizeof host);
    OK(b->stream_create(b, &s));
    OK(b->event_create(b, &e));
    OK(b->alloc(b, BYTES, HX_MEM_TRANSIENT, "event test", &dev));
    bool done = false;
    OK(b->event_query(b, e, &done));
    CHECK(done, "an event never recorded is done");
    OK(b->copy_h2d(b, s, (hx_h2d_copy){.dev = dev, .host = host, .bytes = BYTES}));
    OK(b->event_record(b, e, s));
    double t0 = hx__now();
    OK(b->event_query(b, e, &done));
    double took = hx__now() - t0;
    CHECK(!done, "recorded after a copy of 1 s: not done right after");
    CHECK(took < 0.5, "the query waited %.3f s", took);
    OK(b->event_sync(b, e));
    OK(b->event_query(b, e, &done));
    CHECK(done, "done once event_sync has returned");
    OK(b->copy_d2h(b, s, (hx_d2h_copy){.host = back, .dev = dev, .bytes = BYTES}));
    OK(b->stream_sync(b, s));
    CHECK(!memcmp(back, host, BYTES), "the copy the event followed arrived");
    b->free(b, dev);
    b->event_destroy(b, e);
    b->stream_destroy(b, s);
    b->destroy(b);
}

static void test_cpu(void)
{
    hx_backend *b = NULL;
    CHECK(hx__backend_cpu_create(&b) == HX_OK, "cpu: %s", hx_last_error());
    if (!b) return;
    hx_stream *s = NULL;
    hx_event *e = NULL;
    OK(b->stream_create(b, &s));
    OK(b->event_create(b, &e));
    OK(b->event_record(b, e, s));
    bool done = false;
    OK(b->event_query(b, e, &done));
    CHECK(done, "cpu: a recorded event is done");
    b->event_destroy(b, e);
    b->stream_destroy(b, s);
    b->destroy(b);
}

static const test_case cases[] = {
    {"emu", test_emu},
    {"cpu", test_cpu},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "backend_events", cases, TEST_COUNT(cases));
}
