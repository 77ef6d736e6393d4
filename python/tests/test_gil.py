"""The GIL is released while a run executes: another Python thread makes
progress during a long run."""
import threading
import time

import numpy as np

import hetex


def test_other_thread_runs_during_a_long_run():
    n = 384
    g = hetex.Graph()
    x = g.input("x", (n, n))
    w = g.param("w", (n, n), init=hetex.init.uniform(-0.01, 0.01))
    y = x
    for _ in range(24):
        y = (y @ w).tanh()
    loss = y.mean()
    g.backward(loss)
    g.apply_optimizer(hetex.optim.SGD(lr=0.01))
    s = hetex.Session(g, accelerator="none", n_threads=1)
    feed = {x: np.ones((n, n), np.float32)}
    s.run(feed, loss, train=True)  # plans and warms up

    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(time.perf_counter())

    th = threading.Thread(target=count)
    th.start()
    try:
        time.sleep(0.05)
        t0 = time.perf_counter()
        s.run(feed, loss, train=True)
        t1 = time.perf_counter()
    finally:
        stop.set()
        th.join()
    during = [t for t in ticks if t0 < t < t1]
    assert t1 - t0 > 0.05, f"the run took {t1 - t0:.3f} s: too short to tell"
    # Holding the GIL the whole run, the counter would stop for all of it;
    # with it released it ticks through the run.
    assert len(during) > 1000, f"{len(during)} ticks in a {t1 - t0:.3f} s run"
    gaps = np.diff([t0] + during + [t1])
    assert gaps.max() < 0.5 * (t1 - t0), f"the counter stalled {gaps.max():.3f} s"


def test_two_threads_on_one_session():
    """A run that starts while another thread's run of the same session is in
    progress raises StateError; neither run takes the other's feeds."""
    n = 256
    g = hetex.Graph()
    x = g.input("x", (n, n))
    w = g.param("w", (n, n), init=hetex.init.uniform(-0.01, 0.01))
    y = x
    for _ in range(8):
        y = (y @ w).tanh()
    s = hetex.Session(g, accelerator="none", n_threads=1)
    feeds = [np.full((n, n), v, np.float32) for v in (1.0, -1.0)]
    want = [s.run({x: f}, y) for f in feeds]
    results, errors = {}, []

    def worker(k):
        for _ in range(20):
            try:
                results.setdefault(k, []).append(s.run({x: feeds[k]}, y))
            except hetex.StateError as e:
                errors.append(str(e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in (0, 1):
        for r in results.get(k, []):
            np.testing.assert_array_equal(r, want[k])
    assert sum(len(v) for v in results.values()) + len(errors) == 40
