"""Sessions: two-target training, targets as scopes and per op, offload
config, reports, checkpoints, persistent reads and writes."""
import numpy as np
import pytest

import hetex


def _mlp(batch=16, hidden=8):
    g = hetex.Graph()
    x = g.input("x", (batch, 4))
    y = g.input("y", (batch,), "i32")
    w1 = g.param("w1", (4, hidden), init=hetex.init.xavier_uniform())
    b1 = g.param("b1", (hidden,))
    w2 = g.param("w2", (hidden, 3), init=hetex.init.xavier_uniform())
    with g.target("device"):
        h = hetex.bias_add(x @ w1, b1).relu()
    with g.target("cpu"):
        logits = h @ w2
        logits.name = "logits"
        loss = hetex.cross_entropy(logits, y, name="loss")
    g.backward(loss)
    g.apply_optimizer(hetex.optim.Adam(lr=0.05))
    return g, x, y, loss


def _data(rng, batch=16):
    xb = rng.uniform(-1, 1, (batch, 4)).astype(np.float32)
    yb = np.argmax(xb[:, :3], 1).astype(np.int32)
    return {"x": xb, "y": yb}


def test_two_target_training_and_placement(rng):
    g, x, y, loss = _mlp()
    s = hetex.Session(g, accelerator="emu", n_threads=2, seed=7)
    info = s.accelerator_info()
    assert info["in_use"] == "emu" and info["why"]
    losses = [float(s.run(_data(rng), loss, train=True)) for _ in range(60)]
    assert np.mean(losses[-10:]) < 0.7 * np.mean(losses[:10])
    assert s.step == 60 and s.train_stats()["step"] == 60
    placed = s.placement()
    assert placed["logits"] == "cpu" and placed["loss"] == "cpu"
    assert "device" in placed.values()
    ps = s.placement_stats()
    assert ps["n_device_ops"] > 0 and ps["n_copies"] > 0
    # the parameters live with their updates on the host; the device holds activations
    assert s.memory_stats()["device_transient_planned_bytes"] > 0
    assert s.pool_stats()["capacity"] > 0
    assert "subgraph" in s.placement_summary() and "digraph" in s.placement_dot()


def test_same_seed_same_bits(rng):
    runs = []
    for _ in range(2):
        g, x, y, loss = _mlp()
        s = hetex.Session(g, accelerator="emu", seed=3, n_threads=1)
        d = np.random.default_rng(5)
        runs.append([s.run(_data(d), loss, train=True) for _ in range(5)] + [s.read("w1")])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_offload_config_keys(rng, tmp_path):
    g, x, y, loss = _mlp()
    s = hetex.Session(g, accelerator="emu", n_threads=1, seed=3,
                      offload_config={"offload_param": "cpu", "chunk_size": "4KB",
                                      "prefetch_depth": 2, "enable_pinned_mem": True})
    r = s.offload_report()
    assert r["offload_param"] == hetex._lib.HX_OFFLOAD_CPU and r["chunk_size"] == 4096
    assert r["prefetch_depth"] == 2
    g2, *_ = _mlp()
    s2 = hetex.Session(g2, accelerator="emu", n_threads=1, seed=3)
    d = _data(rng)
    for _ in range(3):  # offload changes where parameters live, not the bits
        np.testing.assert_array_equal(s.run(d, "loss", train=True), s2.run(d, "loss", train=True))
    spec = hetex.offload_config("offload_param=disk,offload_path=%s,auto_offload=true" % tmp_path)
    assert spec.offload_param == hetex._lib.HX_OFFLOAD_DISK and spec.auto_offload


def test_per_op_target_and_config_fields(rng):
    g = hetex.Graph()
    x = g.input("x", (2, 2))
    y = (x * 2.0).on("cpu")
    z = hetex.relu(y, target="device", name="z")
    assert y.target == "cpu" and z.target == "device" and z.name == "z"
    s = hetex.Session(g, accelerator="emu", n_threads=1, clip_grad_norm=1.0,
                      loss_scale={"enabled": False}, emu_cost={"launch_latency_s": 0.0})
    got = s.run({x: np.array([[1, -2], [3, -4]], np.float32)}, z)
    np.testing.assert_array_equal(got, [[2, 0], [6, 0]])
    placed = s.placement()  # the last run's plan
    assert placed["z"] == "device" and placed[y.name] == "cpu"


def test_checkpoint_roundtrip_and_read_write(rng, tmp_path):
    g, x, y, loss = _mlp()
    s = hetex.Session(g, accelerator="none", n_threads=1)
    d = _data(rng)
    s.run(d, loss, train=True)
    s.save(tmp_path / "c")
    after1 = s.read("w1")
    m = s.read("w1/exp_avg")
    assert m.shape == (4, 8) and np.abs(m).sum() > 0
    s.run(d, loss, train=True)
    s.load(tmp_path / "c")
    np.testing.assert_array_equal(s.read("w1"), after1)
    s.write("w1", np.zeros((4, 8), np.float32))
    assert not s.read("w1").any()
    with pytest.raises(hetex.ShapeError):
        s.write("w1", np.zeros((8, 4), np.float32))
    with pytest.raises(hetex.InvalidArgumentError):
        s.read("logits")  # not persistent: fetch it
    s.set_lr_scale(0.5)
    with pytest.raises(hetex.InvalidArgumentError):
        s.set_lr_scale(-1)


def test_tensor_facts():
    g, x, y, loss = _mlp()
    w1 = g["w1"]
    assert w1.kind == "parameter" and w1.op == "param" and w1.dtype == "f32"
    assert w1.shape == (4, 8) and w1.numel == 32 and w1.nbytes == 128
    assert x.kind == "input" and loss.kind == "intermediate"
    assert w1.grad.shape == (4, 8)
    assert "w1" in g and "nothing" not in g
    assert "w1" in repr(w1)
    with pytest.raises(AttributeError):
        w1.no_such_method


def test_trace(rng, tmp_path):
    import json
    g, x, y, loss = _mlp()
    path = tmp_path / "trace.json"
    s = hetex.Session(g, accelerator="emu", n_threads=1, trace_path=str(path))
    s.run(_data(rng), loss, train=True)
    s.trace_flush()
    events = json.loads(path.read_text())["traceEvents"]
    assert any(e.get("name") for e in events)


def test_placement_units(rng, tmp_path):
    g, x, y, loss = _mlp()
    s = hetex.Session(g, accelerator="emu", n_threads=2, auto_placement=True,
                      placement_cache=str(tmp_path / "op_costs"),
                      emu_cost={"launch_latency_s": 1e-3, "copy_bytes_per_s": 8e9})
    assert s.placement_units() == [] and "no training run" in s.placement_text()
    for _ in range(3):
        s.run(_data(rng), loss, train=True)
    units = s.placement_units()
    assert units and [u["index"] for u in units] == list(range(len(units)))
    for u in units:
        assert u["lane"] in ("host", "device", "h2d", "d2h") and u["n_steps"] > 0
        assert u["first_op"] and u["last_op"] and u["runs"] == 3 and u["measured_s"] > 0
        assert u["ratio"] == pytest.approx(u["measured_s"] / u["predicted_s"])
        assert u["off"] == (u["ratio"] > 1.2 or u["ratio"] < 0.8)
    text = s.placement_text(worst=1)
    lines = text.splitlines()
    assert lines[0].startswith(f"placement report: {len(units)} units")
    assert lines[-1].startswith("  step: predicted") and len(lines) == (3 if len(units) == 1 else 4)
    assert len(s.placement_text().splitlines()) == len(units) + 2
    with pytest.raises(hetex.InvalidArgumentError):
        s.placement_text(worst=-1)


def test_runner_matches_run(rng):
    runs = []
    for prepared in (False, True):
        g, x, y, loss = _mlp()
        s = hetex.Session(g, accelerator="emu", seed=3, n_threads=1)
        d = np.random.default_rng(9)
        r = s.runner([x, y], loss, train=True) if prepared else None
        out = []
        for _ in range(4):
            b = _data(d)
            out.append(r(b["x"], b["y"]) if prepared else s.run(b, loss, train=True))
        out.append(s.read("w1"))
        runs.append(out)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
    g, x, y, loss = _mlp()
    s = hetex.Session(g, accelerator="none", n_threads=1)
    r = s.runner([x, y], [loss, "logits"])
    b = _data(rng)
    o = np.empty((16, 3), np.float32)
    l, lg = r(b["x"], b["y"], out=[np.empty((), np.float32), o])
    assert lg is o
    with pytest.raises(hetex.InvalidArgumentError, match="2 feeds"):
        r(b["x"])
    with pytest.raises(hetex.DtypeError):
        r(b["x"].astype(np.float64), b["y"])
    with pytest.raises(hetex.IndexError):
        r(b["x"], np.full(16, 7, np.int32))
    np.testing.assert_array_equal(r(b["x"], b["y"])[0], l)  # usable after failures
