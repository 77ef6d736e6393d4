"""python/examples/*.py give bitwise the numbers of the CLI's same commands
(same seed and flags): the per-epoch metrics and the checkpoint files."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = os.path.join(ROOT, "python", "examples")


def _cli():
    path = os.environ.get("HX_HETEX") or os.path.join(ROOT, "build", "hetex")
    if not os.access(path, os.X_OK):
        pytest.fail(f"the hetex CLI is not at {path}: build it (./build.sh) or set HX_HETEX")
    return path


def _run(cmd, cwd):
    env = dict(os.environ, HX_PLACEMENT_CACHE="")
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{cmd[:3]}: {out.stderr}"
    return out.stdout


def test_widedeep_matches_the_cli(tmp_path):
    flags = ["--epochs", "2", "--batch", "512", "--accelerator", "emu", "--threads", "2",
             "--hidden", "32,16", "--seed", "7", "--embedding-optimizer", "lazy-adam"]
    c, p = tmp_path / "c", tmp_path / "py"
    _run([_cli(), "widedeep", "--quiet", "--data", os.path.join(ROOT, "data", "adult"), *flags,
          "--curve", str(tmp_path / "c.csv"), "--save", str(c)], tmp_path)
    out = _run([sys.executable, os.path.join(EXAMPLES, "widedeep.py"), *flags,
                "--curve", str(tmp_path / "py.csv"), "--save", str(p)], tmp_path)
    assert "epoch  2" in out
    want = (tmp_path / "c.csv").read_text()
    assert len(want.splitlines()) == 3
    assert (tmp_path / "py.csv").read_text() == want
    for f in ("session", "deep", "wide"):  # parameters, optimizer state, tables: every bit
        assert (p / f).read_bytes() == (c / f).read_bytes(), f


def _numbers(out):
    """The step lines' step, train loss, val loss and lr (rates left out)."""
    return [line.split()[:10] for line in out.splitlines() if line.startswith("step ")]


def _gpt(cmd, flags, out, tmp_path):
    return _numbers(_run(cmd + flags + ["--save", str(tmp_path / out)], tmp_path))


def test_gpt_matches_the_cli(tmp_path):
    data = os.path.join(ROOT, "data", "tinyshakespeare", "input.txt")
    cli = [_cli(), "gpt", "--quiet", "--data", data]
    py = [sys.executable, os.path.join(EXAMPLES, "gpt.py"), "--data", data]
    flags = ["--steps", "8", "--eval-every", "4", "--eval-iters", "2", "--accelerator", "emu",
             "--threads", "2", "--layers", "2", "--width", "32", "--context", "16", "--batch", "4",
             "--warmup", "3", "--dropout", "0.1", "--seed", "5"]
    # bf16 copies of f32 masters, AdamW on the host; then f32 with the
    # optimizer on the device and a tighter clip
    for k, more in enumerate([[], ["--dtype", "f32", "--offload", "none", "--clip", "0.5"]]):
        want = _gpt(cli, flags + more, f"c{k}", tmp_path)
        assert len(want) == 2
        assert _gpt(py, flags + more, f"py{k}", tmp_path) == want
        # every parameter, bf16 copy and AdamW moment, the step: the same
        # file (gpt.py builds in a GCC build's order: see its Model.linear)
        assert (tmp_path / f"py{k}" / "session").read_bytes() == \
            (tmp_path / f"c{k}" / "session").read_bytes()
