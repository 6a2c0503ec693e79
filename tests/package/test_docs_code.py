"""Every fenced block of README.md and docs/**/*.md is tested against what it names, as the marker
on the line before it says (docs/development.md, "Documentation and its tests"):

* every block carries a known marker for its language (a block without one fails here);
* `library` blocks run as written in a fresh interpreter (nothing of the test session leaks in),
  each page's blocks in order in one namespace;
* `run` blocks run as written from the repository root;
* `names` and `dry-run` blocks: every file, config, profile, extra, module, environment variable
  and option they name exists (the dry runs themselves, and the `results` blocks, need the
  snakemake CLI or a finished run: tests/workflow/test_docs_results.py);
* `paths` blocks: every path they name exists.

Beside the blocks: the table of architecture inputs in docs/library.md is rebuilt from the modules,
every kind has its page with exactly its schema keys, links between the pages resolve, dotted
`nqf.` names resolve, and the README stays a front door (at most 12 kB).
"""
import importlib
import json
import re
import subprocess
import sys

import pytest
import yaml
from docs_blocks import (
    ROOT,
    TREATMENTS,
    all_blocks,
    commands,
    name_problems,
    pages,
    path_lines_problems,
    program,
)
from helpers import time_limit

BLOCKS = all_blocks()


def of(treatment):
    return [b for b in BLOCKS if b.treatment == treatment]


def test_every_block_carries_a_known_marker():
    problems = [f"{b.name}: ```{b.lang} block without a `<!-- test: ... -->` marker on the line before it"
                for b in BLOCKS if b.treatment is None]
    problems += [f"{b.name}: unknown treatment {b.treatment!r} (known: {sorted(TREATMENTS)})"
                 for b in BLOCKS if b.treatment is not None and b.treatment not in TREATMENTS]
    problems += [f"{b.name}: a ```{b.lang} block cannot be `{b.treatment}` (that takes {sorted(TREATMENTS[b.treatment])})"
                 for b in BLOCKS if b.treatment in TREATMENTS and b.lang not in TREATMENTS[b.treatment]]
    assert not problems, "\n".join(problems)
    assert of("library") and of("results") and of("names") and of("run") and of("dry-run") and of("paths")


def test_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_bytes()
    assert len(readme) <= 12_000, f"README.md is {len(readme)} bytes; move detail to docs/"
    text = readme.decode()
    for heading in ("## Set-up: two commands", "## What comes out", "## Read on"):
        assert heading in text
    # .ci/run runs the README's second command as it stands
    assert "\n.venv/bin/python -m pytest\n" in text and ".venv/bin/python -m pytest\n" in (ROOT / ".ci" / "run").read_text()


def test_library_blocks_run_as_written(tmp_path):
    """One fresh interpreter; each page's `library` blocks in order in their own namespace, torch on
    one thread like every test; warnings are errors (a DeprecationWarning only where the blocks'
    own code triggers it: torch's internals raise some)."""
    by_page = {}
    for block in of("library"):
        by_page.setdefault(block.page, []).append(block.substituted())
    script = tmp_path / "library_blocks.py"
    script.write_text(
        "import io, contextlib, json, sys, warnings\nimport torch\ntorch.set_num_threads(1)\n"
        f"pages = {json.dumps(by_page)}\nprinted = {{}}\n"
        "for page, codes in pages.items():\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        "        exec(compile('\\n'.join(codes), page, 'exec'), {'__name__': '__main__'})\n"
        "    printed[page] = out.getvalue()\n"
        "print(json.dumps(printed))\n")
    flags = ["-W", "error::UserWarning", "-W", "error::RuntimeWarning", "-W", "error::DeprecationWarning:__main__"]
    proc = subprocess.run([sys.executable, *flags, str(script)], capture_output=True, text=True,
                          timeout=time_limit(300), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout.splitlines()[-1])
    assert set(printed) == set(by_page)
    # the examples print the regime predict picked first
    assert printed["README.md"].startswith("mflow ") and printed["docs/library.md"].startswith("mflow 0.0 ")


@pytest.mark.parametrize("block", of("run"), ids=lambda b: b.name)
def test_run_blocks_run_as_written(block):
    code = block.substituted().replace(".venv/bin/", f"{sys.executable.rsplit('/', 1)[0]}/")
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", code], capture_output=True, text=True,
                          timeout=time_limit(300), cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


@pytest.mark.parametrize("block", of("names") + of("dry-run"), ids=lambda b: b.name)
def test_commands_name_only_what_exists(block):
    assert not name_problems(block), f"{block.name}: " + "; ".join(name_problems(block))


@pytest.mark.parametrize("block", of("dry-run"), ids=lambda b: b.name)
def test_dry_run_blocks_are_snakemake_commands(block):
    assert all(program(words)[1] == "snakemake" for words in commands(block.substituted())), block.name


@pytest.mark.parametrize("block", of("paths"), ids=lambda b: b.name)
def test_paths_blocks_name_existing_paths(block):
    assert not path_lines_problems(block), f"{block.name}: " + "; ".join(path_lines_problems(block))


# -- what the pages state beside their blocks -----------------------------------------------------

def test_links_between_pages_resolve():
    """Relative links of README.md and docs/ lead to files (and, with an anchor, to a heading);
    docs/extending.md is written apart and only excused while it does not exist yet."""
    problems = []
    for page in pages():
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                if dest != ROOT / "docs" / "extending.md":
                    problems.append(f"{page.relative_to(ROOT)}: {target}")
                continue
            if anchor and dest.is_file():
                slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                         for h in re.findall(r"^#+ (.+)$", dest.read_text(), flags=re.M)}
                if anchor not in slugs:
                    problems.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not problems, problems


def test_dotted_nqf_names_resolve():
    """Every `nqf.x.y` the pages name is a module or an attribute of one."""
    missing = []
    for page in pages():
        for name in sorted(set(re.findall(r"(?<![\w./-])nqf(?:\.[A-Za-z_]\w*)+", page.read_text()))):
            parts = name.split(".")
            for i in range(len(parts), 0, -1):
                try:
                    obj = importlib.import_module(".".join(parts[:i]))
                except ImportError:
                    continue
                try:
                    for attr in parts[i:]:
                        obj = getattr(obj, attr)
                except AttributeError:
                    missing.append(f"{page.relative_to(ROOT)}: {name}")
                break
    assert not missing, missing


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


def test_table_of_inputs_matches_the_modules():
    table = input_table()
    assert table in (ROOT / "docs" / "library.md").read_text(), \
        "docs/library.md's input table is out of date; it should read:\n" + table


def _section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _open_runs_rows() -> dict[str, str]:
    text = (ROOT / "docs" / "results.md").read_text()
    return {m.group(1): f"{m.group(2)} gives the dimensions {m.group(3)}"
            for m in re.finditer(r"^\| `(\w+)` \| (`open_runs[^|]+`) \| ([^|]+?) \|$", text, flags=re.M)}


def test_every_kind_has_its_page_with_its_keys_and_runs():
    """docs/kinds/<kind>.md per kind: its config keys are exactly the schema's, its table of the
    default config's experiments and runs is the config's, and its open_runs line is docs/results.md's."""
    from nqf.experiments import KINDS
    from nqf.pipeline.config import load_schema, validate_config

    schema = load_schema()
    default = validate_config(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))["experiments"]
    opens = _open_runs_rows()
    pages_of_kinds = {p.stem for p in (ROOT / "docs" / "kinds").glob("*.md")}
    assert pages_of_kinds == set(KINDS), f"docs/kinds/ has pages {sorted(pages_of_kinds)} for kinds {sorted(KINDS)}"
    for kind, module in KINDS.items():
        text = (ROOT / "docs" / "kinds" / f"{kind}.md").read_text()
        assert text.startswith(f"# Kind `{kind}`\n"), kind
        first = re.sub(r"\([^)]*\)", "", _section(text, "Config keys").split(". ", 1)[0])  # asides left out
        named = set(re.findall(r"`(\w+)`", first)) - {"kind"}
        keys = set(schema["$defs"][kind]["properties"]) - {"kind"}
        assert named == keys, f"{kind}: missing {sorted(keys - named)}, not in the schema {sorted(named - keys)}"
        rows = {m.group(1): re.findall(r"`([\w.-]+)`", m.group(2))
                for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \|$", _section(text, "In the default config"), re.M)}
        assert rows == {e: list(module.runs(c)) for e, c in default.items() if c["kind"] == kind}, kind
        if kind in opens:
            assert opens[kind] in text, f"{kind}: its page should say, as docs/results.md does: {opens[kind]}"
