"""The README's library tour runs as written, and its table of architecture inputs is true.

Every ```python block of the README's "The library" section runs in order in one namespace (in a
fresh interpreter, so nothing of the test session leaks in); the blocks of "Opening results"
need a finished run and run in tests/workflow/test_workflow.py. The input table is rebuilt from
the modules themselves (input_layout, sample_inputs, forward) and must appear verbatim.
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_library_tour_runs_as_written(tmp_path):
    blocks = python_blocks(section("The library"))
    assert len(blocks) >= 4
    script = tmp_path / "tour.py"
    # the blocks as one script; torch on one thread like every test; warnings are errors (a
    # DeprecationWarning only where the tour's own code triggers it: torch's internals raise some)
    script.write_text("import torch\ntorch.set_num_threads(1)\n" + "\n".join(blocks))
    flags = ["-W", "error::UserWarning", "-W", "error::RuntimeWarning", "-W", "error::DeprecationWarning:__main__"]
    proc = subprocess.run([sys.executable, *flags, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the tour prints the regime predict picked and Theorem 8's times beside the GLV's
    assert proc.stdout.splitlines()[0].startswith("mflow 0.0 ")


def input_table() -> str:
    import torch

    from nqf.architectures import ARCHITECTURES

    rows = ["| name | module | inputs, m samples (axes) | outputs | p |", "|---|---|---|---|---|"]
    for name, arch in sorted(ARCHITECTURES.items()):
        module = arch.build()
        x = module.sample_inputs(3, torch.Generator().manual_seed(0))
        parts = x if isinstance(x, tuple) else (x,)
        assert len(parts) == len(module.input_layout), name
        shown = []
        for (part, axes), tensor in zip(module.input_layout, parts):
            assert tensor.shape[0] == 3 and len(axes) == tensor.ndim - 1, (name, part)
            dims = "".join(f", {n}" for n in tensor.shape[1:])
            names = ", ".join(axes)
            shown.append(f"`{part}` (m{dims})" + (f" ({names})" if names else ""))
        out = module(x)
        assert out.ndim == 2 and out.shape[0] == 3, name
        dense = module.structure(x).dense()
        assert dense.shape == (3 * out.shape[1], module.p, module.p), name
        rows.append(f"| `{name}` | `{type(module).__name__}` | {'; '.join(shown)} | (m, {out.shape[1]}) | "
                    f"{module.p} |")
    return "\n".join(rows)


def test_readme_table_of_inputs_matches_the_modules():
    table = input_table()
    assert table in README, "README's input table is out of date; it should read:\n" + table


if __name__ == "__main__":  # print the table (to paste into the README)
    print(input_table())
    pytest.main([__file__, "-q"])
