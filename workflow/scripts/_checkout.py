"""nqf from this workflow's checkout where the job's environment lacks it: a job run in the
conda environment of workflow/envs/nqf.yaml (``--sdm conda``) has nqf's dependencies only, and
imports nqf from the checkout that holds this script (two folders up), the code of the commit
that planned it. Where nqf is installed (the README's set-up), nothing changes."""
import importlib.util
import sys
from pathlib import Path


def ensure_nqf(scriptdir) -> None:
    """Put the checkout above ``scriptdir`` (workflow/scripts) on sys.path when nqf is not importable."""
    if importlib.util.find_spec("nqf") is None:
        sys.path.insert(0, str(Path(scriptdir).resolve().parents[1]))
