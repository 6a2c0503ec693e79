"""Every registered experiment kind fulfils nqf.experiments.contract: its stage functions take
the arguments the workflow passes, its STAGE_KEYS cover the five stages and name only keys its
schema defines; and the checker does catch a kind that breaks the contract."""
import types

import pytest

from nqf.config import load_schema
from nqf.experiments import KINDS
from nqf.experiments.contract import STAGES, ExperimentKind, problems


def schema_keys(kind: str) -> set[str]:
    return set(load_schema()["$defs"][kind]["properties"])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_conforms(kind):
    module = KINDS[kind]
    assert isinstance(module, ExperimentKind)
    assert problems(module, schema_keys(kind)) == []


def _fake_kind(**changes) -> types.ModuleType:
    module = types.ModuleType("nqf.experiments.fake")
    module.KIND = "fake"
    module.STAGE_KEYS = {stage: ("seeds",) for stage in STAGES}
    module.runs = lambda cfg: ["run"]
    module.make_data = lambda cfg: None
    module.train_run = lambda data, cfg, run, device="auto": None
    module.theory = lambda structure, cfg: None
    module.fit = lambda structure, theory, runs, cfg: None
    module.figure = lambda theory, fit, runs, cfg, paths, *, font_size=9, dpi=150: None
    for name, value in changes.items():
        if value is None:
            delattr(module, name)
        else:
            setattr(module, name, value)
    return module


def test_the_fake_kind_conforms():
    assert problems(_fake_kind(), {"seeds"}) == []


@pytest.mark.parametrize("changes, message", [
    ({"fit": None}, "lacks the stage function fit"),
    ({"theory": lambda structure: None}, "theory takes 1-1 positional arguments, the workflow passes 2"),
    ({"figure": lambda theory, fit, runs, cfg, paths: None}, "lacks the keyword argument(s) font_size, dpi"),
    ({"STAGE_KEYS": {"data": (), "train": ()}}, "STAGE_KEYS has stages"),
    ({"STAGE_KEYS": {stage: ("seeds", "epz") for stage in STAGES}}, "names keys its schema does not define: ['epz']"),
    ({"run_config": lambda cfg: cfg}, "run_config (optional hook) takes 1-1 positional arguments"),
    ({"KIND": None}, "defines no KIND string"),
])
def test_a_broken_kind_is_named(changes, message):
    found = problems(_fake_kind(**changes), {"seeds"})
    assert any(message in p for p in found), found
