"""Data parallel from Python (hetex.Comm), run under mpirun by .ci/python.sh:

    mpirun -np 2 --oversubscribe python -m pytest python/tests_mpi

Every rank runs these tests in the same order (their collective calls
match); alone (no mpirun) they run as one rank. As tests/mpi/mpi_ddp.c and
mpi_zero.c do in C: N ranks train a small MLP on their B/N rows of each
global batch of B, against one session on this rank training the whole
batch alone; the parameters agree within 1e-6 relative (not bitwise: the
ranks' partial gradient sums associate differently), and ZeRO stages 1
and 2 give stage 0's parameters bitwise, and their sharded checkpoints
load into one plain process. A table sharded over the ranks
trains as a table of one process does. A failure on one rank would leave
the others waiting in a collective: the communicators time out after 60 s,
so the job ends with a CommError instead of hanging.
"""
import os

import numpy as np
import pytest

import hetex

B, W, STEPS = 12, 8, 12
TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def comm():
    c = hetex.Comm(timeout_s=TIMEOUT_S)
    assert 0 <= c.rank < c.size
    assert B % c.size == 0, f"{c.size} ranks do not divide the batch of {B}"
    return c


def _mlp(rows, layers=2):
    g = hetex.Graph()
    x = g.input("x", (rows, W))
    y = g.input("y", (rows, W))
    h = x
    params = []
    for i in range(layers):
        w = g.param(f"w{i}", (W, W), init=hetex.init.xavier_uniform())
        b = g.param(f"b{i}", (W,))
        params += [w.name, b.name]
        h = hetex.bias_add(h @ w, b).tanh()
    loss = hetex.mse(h, y)
    g.backward(loss)
    g.apply_optimizer(hetex.optim.Adam(lr=0.01))
    return g, x, y, loss, params


def _batch(step):
    """The global batch of a step, the same on every rank."""
    r = np.random.default_rng(1000 + step)
    return (r.uniform(-1, 1, (B, W)).astype(np.float32),
            r.uniform(-1, 1, (B, W)).astype(np.float32))


def _job_dir(tmp_path, comm):
    """A folder every rank of this mpirun job names alike (the job's PMIx
    namespace), or pytest's own alone."""
    job = os.environ.get("PMIX_NAMESPACE") or os.environ.get("OMPI_MCA_orte_ess_jobid")
    if comm.size == 1 or not job:
        assert comm.size == 1, "under mpirun without PMIX_NAMESPACE: no folder the ranks share"
        return str(tmp_path)
    d = os.path.join("/tmp", "hx-pytest-" + "".join(ch if ch.isalnum() else "-" for ch in job))
    os.makedirs(d, exist_ok=True)
    return d


def _train(comm, rows, accelerator="none", **config):
    """A session of the MLP for `rows` rows a step (this rank's share of B when
    comm is given), trained STEPS steps; its parameters by name, its losses."""
    g, x, y, loss, params = _mlp(rows)
    s = hetex.Session(g, accelerator=accelerator, n_threads=1, seed=5, comm=comm, **config)
    run = s.runner([x, y], loss, train=True)
    first = comm.rank * rows if comm is not None else 0
    losses = []
    for step in range(STEPS):
        xb, yb = _batch(step)
        losses.append(float(run(xb[first:first + rows], yb[first:first + rows])))
    return {p: s.read(p) for p in params}, losses, s


@pytest.mark.parametrize("accelerator,offload", [("none", None), ("emu", None),
                                                 ("emu", {"offload_param": "cpu"})])
def test_ddp_matches_one_process(comm, accelerator, offload):
    n = B // comm.size
    dp, dp_losses, s = _train(comm, n, accelerator, offload_config=offload)
    alone, alone_losses, _ = _train(None, B, accelerator, offload_config=offload)
    assert s.train_stats()["step"] == STEPS
    for name, want in alone.items():
        got = dp[name]
        err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-12)
        assert err <= 1e-6, f"{accelerator} {offload}: {name} is {err:.3g} off the lone run's"
    # the ranks trained: the parameters moved from where the seed put them
    g0 = hetex.Session(_mlp(n)[0], accelerator="none", n_threads=1, seed=5)
    assert not np.array_equal(dp["w0"], g0.read("w0"))
    if comm.size == 1:  # one rank is the lone run
        assert dp_losses == alone_losses
    assert comm.bytes_sent > 0 or comm.size == 1


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_stage_gives_stage0_bits(comm, stage, tmp_path):
    n = B // comm.size
    chunk = {"chunk_size": 200}  # the weights in chunks of their own, as mpi_zero.c does
    base, base_losses, _ = _train(comm, n, offload_config=chunk)
    got, losses, s = _train(comm, n, offload_config=chunk, zero_stage=stage)
    assert losses == base_losses
    for name, want in base.items():
        np.testing.assert_array_equal(got[name], want, err_msg=f"stage {stage}: {name}")
    # a sharded checkpoint (every rank its shard, rank 0 the manifest), in a
    # folder every rank of this job names alike, loads into one plain process
    path = os.path.join(_job_dir(tmp_path, comm), f"zero{stage}.ckpt")
    s.save(path)
    g = _mlp(n)[0]
    plain = hetex.Session(g, accelerator="none", n_threads=1, seed=7)
    plain.load(path)
    for name, want in got.items():
        np.testing.assert_array_equal(plain.read(name), want, err_msg=f"stage {stage} checkpoint: {name}")


def test_sharded_table_matches_one_process(comm):
    """A table sharded row-wise over the ranks (each rank feeding its own
    ids) with the dense layer data parallel, against one process's table
    training the whole batch."""
    rows, dim, n = 40, 4, B // comm.size

    def train(c, per_rank):
        t = hetex.EmbeddingTable(rows, dim, name="emb", seed=3, init=hetex.init.uniform(-0.5, 0.5),
                                 optimizer=hetex.optim.SparseAdagrad(lr=0.1),
                                 comm=c, sharding="rows")
        g = hetex.Graph()
        ids = g.input("ids", (per_rank,), "i64")
        y = g.input("y", (per_rank, 2))
        w = g.param("w", (dim, 2), init=hetex.init.xavier_uniform())
        loss = hetex.mse(hetex.embedding_lookup(t, ids) @ w, y)
        g.backward(loss)
        g.apply_optimizer(hetex.optim.SGD(lr=0.1))
        s = hetex.Session(g, accelerator="none", n_threads=1, seed=9, comm=c)
        first = c.rank * per_rank if c is not None else 0
        for step in range(STEPS):
            r = np.random.default_rng(step)
            all_ids = r.integers(0, rows, B).astype(np.int64)
            all_y = r.uniform(-1, 1, (B, 2)).astype(np.float32)
            s.run({ids: all_ids[first:first + per_rank], y: all_y[first:first + per_rank]},
                  loss, train=True)
        return t.read_rows(np.arange(rows)), s.read(w), t

    got_rows, got_w, t = train(comm, n)
    want_rows, want_w, _ = train(None, B)
    assert t.comm is comm
    np.testing.assert_allclose(got_rows, want_rows, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got_w, want_w, rtol=1e-6, atol=1e-7)
    assert not np.array_equal(got_rows, hetex.EmbeddingTable(
        rows, dim, seed=3, init=hetex.init.uniform(-0.5, 0.5)).read_rows(np.arange(rows)))


def test_lifetimes_and_refusals(comm):
    c = hetex.Comm(timeout_s=TIMEOUT_S)
    g, x, y, loss, _ = _mlp(B // comm.size)
    s = hetex.Session(g, accelerator="none", n_threads=1, comm=c)
    with pytest.raises(hetex.StateError, match="still use"):
        c.close()  # the session uses it
    assert s.comm is c
    del c  # the session holds it: it still trains
    xb, yb = _batch(0)
    n = B // comm.size
    s.run({x: xb[:n], y: yb[:n]}, loss, train=True)
    s.close()
    s.comm.close()
    with pytest.raises(hetex.StateError, match="closed"):
        s.comm.rank
    with pytest.raises(hetex.InvalidArgumentError, match="mpi4py communicator"):
        hetex.Comm(mpi_comm="world")
    with pytest.raises(hetex.InvalidArgumentError, match="hetex.Comm"):
        hetex.Session(g, accelerator="none", comm=object())
    # a ZeRO stage without a communicator: the library's own refusal
    with pytest.raises(hetex.InvalidArgumentError, match="zero_stage"):
        hetex.Session(g, accelerator="none", zero_stage=1)
    # ranks whose graphs differ: every rank's creation fails, naming the tensor
    if comm.size > 1:
        g2 = _mlp(B // comm.size, layers=1 + (comm.rank == comm.size - 1))[0]
        with pytest.raises(hetex.InvalidArgumentError):
            hetex.Session(g2, accelerator="none", n_threads=1, comm=comm)


def test_comm_over_an_mpi_comm_address(comm):
    """A Comm over the program's own MPI communicator, given by the address
    of its MPI_Comm handle (what mpi4py's MPI._addressof gives): here Open
    MPI's world handle, read through ctypes from the libmpi hetex loaded."""
    import ctypes
    libmpi = ctypes.CDLL("libmpi.so.40")
    world = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.in_dll(libmpi, "ompi_mpi_comm_world")))
    with hetex.Comm(ctypes.addressof(world), timeout_s=TIMEOUT_S) as c:
        assert (c.rank, c.size) == (comm.rank, comm.size)
        # its collectives work: a data-parallel session over it trains
        g, x, y, loss, _ = _mlp(B // c.size)
        s = hetex.Session(g, accelerator="none", n_threads=1, comm=c)
        xb, yb = _batch(0)
        n = B // c.size
        assert np.isfinite(s.run({x: xb[:n], y: yb[:n]}, loss, train=True))
        s.close()
