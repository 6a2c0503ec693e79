#!/usr/bin/env bash
# The library from a plain (non-editable) install: build the wheel, install it into a fresh venv
# outside the checkout, and from a folder outside it validate the default config, run one small
# experiment end to end and read its files back (.ci/wheel_check.py); it must bring no workflow
# package (snakemake, scikit-learn, mlxtend, dask: the `workflow` extra); then the library example.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$root/.venv/bin/pip" wheel --quiet --no-deps --wheel-dir "$work/dist" "$root"
python3 -m venv "$work/venv"
# the pinned CPU wheel first, as in the README (an unpinned torch may be a multi-GB CUDA build)
"$work/venv/bin/pip" install --quiet torch==2.13.0
"$work/venv/bin/pip" install --quiet "$work"/dist/nqf-*.whl
cd "$work"
"$work/venv/bin/python" "$root/.ci/wheel_check.py" "$root"
# the library example (docs/library.md) from the same plain install
"$work/venv/bin/python" "$root/examples/own_layer.py" "$work/example" --small
