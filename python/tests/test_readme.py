"""The README's Python example runs and prints what it says."""
import os
import re
import subprocess
import sys

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def test_readme_example(tmp_path):
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 20
    env = dict(os.environ, HX_PLACEMENT_CACHE="")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, text=True,
                         capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr
    m = re.match(r"loss (\d+\.\d+) on (\w+) (\{.*\})", out.stdout)
    assert m, out.stdout
    assert float(m.group(1)) < 0.6
    assert m.group(2) in ("emu", "cuda")
    placed = eval(m.group(3))  # noqa: S307 - the example's own dict
    assert placed["hidden"] == "device" and placed["loss"] == "cpu"
