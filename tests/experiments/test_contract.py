"""Every registered experiment kind fulfils nqf.experiments.contract: its stage functions (the
figure's in its figure module nqf.experiments.<kind>.figure) take the arguments the workflow
passes, its STAGE_KEYS cover the six stages and name only keys its schema defines; and the checker
does catch a kind that breaks the contract."""
import types

import pytest

from nqf.experiments import KINDS, figure_of, schema_path
from nqf.experiments.contract import STAGES, PaperFigure, breaches, figure_module
from nqf.pipeline.config import load_schema


def schema_keys(kind: str) -> set[str]:
    return set(load_schema()["$defs"][kind]["properties"])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_conforms(kind):
    assert breaches(KINDS[kind], schema_keys(kind)) == []
    assert schema_path(kind).parent.name == kind and schema_path(kind).is_file()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_figure_stage_lives_in_the_figure_module(kind):
    assert figure_module(kind).__name__ == f"nqf.experiments.{kind}.figure"
    assert figure_of({"kind": kind}) is figure_module(kind).figure
    # the kind package's attribute `figure` is its figure module once imported, never a stage of its own
    assert getattr(KINDS[kind], "figure") is figure_module(kind), "the figure stage belongs in the figure module"


def _fake_kind(**changes) -> types.ModuleType:
    module = types.ModuleType("nqf.experiments.fake")
    module.KIND = "fake"
    module.STAGE_KEYS = {stage: ("seeds",) for stage in STAGES}
    module.runs = lambda cfg: ["run"]
    module.make_data = lambda cfg: None
    module.train_run = lambda data, cfg, run, device="auto": None
    module.theory = lambda structure, cfg: None
    module.fit = lambda structure, theory, runs, cfg: None
    return _changed(module, changes)


def _fake_figures(**changes) -> types.ModuleType:
    module = types.ModuleType("nqf.experiments.fake.figure")
    module.figure = lambda theory, fit, runs, cfg, paths, *, font_size=9, dpi=150: None
    return _changed(module, changes)


def _changed(module: types.ModuleType, changes: dict) -> types.ModuleType:
    """``module`` with each name in ``changes`` set to its value, or removed where it is None."""
    for name, value in changes.items():
        if value is None:
            delattr(module, name)
        else:
            setattr(module, name, value)
    return module


def test_the_fake_kind_conforms():
    assert breaches(_fake_kind(), {"seeds"}, _fake_figures()) == []
    facts = {"NONFINITE": {"train": {"loss_*": "why"}}, "FIT_VARIABLES": ("t_star",),
             "PAPER_FIGURE": PaperFigure("Fig. 9", "a title", order=10), "config_sizes": lambda cfg: {}}
    assert breaches(_fake_kind(**facts), {"seeds"}, _fake_figures()) == []


def test_the_paper_figures_have_distinct_places_on_the_page():
    papers = [KINDS[k].PAPER_FIGURE for k in KINDS if getattr(KINDS[k], "PAPER_FIGURE", None)]
    assert len({p.label for p in papers}) == len({p.order for p in papers}) == len(papers)


@pytest.mark.parametrize("changes, message", [
    ({"fit": None}, "lacks the stage function fit"),
    ({"theory": lambda structure: None}, "theory takes 1-1 positional arguments, the workflow passes 2"),
    ({"STAGE_KEYS": {"data": (), "train": ()}}, "STAGE_KEYS has stages"),
    ({"STAGE_KEYS": {stage: ("seeds", "epz") for stage in STAGES}}, "names keys its schema does not define: ['epz']"),
    ({"run_config": lambda cfg: cfg}, "run_config (optional hook) takes 1-1 positional arguments"),
    ({"KIND": None}, "defines no KIND string"),
    ({"FIT_VARIABLES": ["t_star"]}, "FIT_VARIABLES is not a tuple of names"),
    ({"NONFINITE": {"fitt": {"z": "why"}}}, "NONFINITE is not a mapping of stages"),
    ({"PAPER_FIGURE": ("Fig. 9", "a title")}, "PAPER_FIGURE is not a PaperFigure"),
    ({"config_sizes": lambda: {}}, "config_sizes (optional hook) takes 0-0 positional arguments"),
])
def test_a_broken_kind_is_named(changes, message):
    found = breaches(_fake_kind(**changes), {"seeds"}, _fake_figures())
    assert any(message in p for p in found), found


@pytest.mark.parametrize("changes, message", [
    ({"figure": None}, "nqf.experiments.fake.figure lacks the stage function figure"),
    ({"figure": lambda theory, fit, runs, cfg, paths: None},
     "nqf.experiments.fake.figure.figure lacks the keyword argument(s) font_size, dpi"),
    ({"figure": lambda theory, fit, runs, *, font_size, dpi: None},
     "figure takes 3-3 positional arguments, the workflow passes 5"),
])
def test_a_broken_figure_module_is_named(changes, message):
    found = breaches(_fake_kind(), {"seeds"}, _fake_figures(**changes))
    assert any(message in p for p in found), found


def test_a_kind_without_a_figure_module_is_named():
    found = breaches(_fake_kind(), {"seeds"})  # there is no nqf.experiments.fake.figure
    assert found == ["nqf.experiments.fake has no figure module nqf.experiments.fake.figure (its figure stage figure)"]


# -- every stage reads only the keys it is handed ---------------------------------------------
# The experiments of config/test.yaml (one per kind at the workflow test's sizes), plus a small
# Fourier experiment (that kind is not in the workflow test). Each stage runs on exactly the
# config its rule would get (stage_config / run_config, a StageConfig): reading any other key,
# even with .get(key, default), raises StageKeyError here.
def _small_experiments() -> dict:
    import yaml
    from helpers import ROOT

    from nqf.pipeline.config import validate_config

    raw = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    # fewer seeds, bootstrap draws and eps values than the workflow test: the stages, not the
    # claims, are under test here
    shrink = {"featurewise_powerlaw": {"seeds": [0, 1], "n_boot": 20, "crossover_eps": [1.0e-2, 1.0e-5]},
              "samplewise_powerlaw": {"seeds": [0, 1], "n_boot": 20},
              "init_scaling": {"seeds": [0, 1, 2, 3]}, "competition": {"n_record": 60}}
    for exp_id, over in shrink.items():
        raw["experiments"][exp_id].update(over)
    raw["experiments"]["fourier_small"] = {"kind": "fourier_powerlaw", "P": 8, "M": 32, "thetas": [0.0],
                                           "seeds": [0], "steps": 1500, "loss": "half_sum", "n_record": 50, "raw_width": 4,
                                           "raw_seeds": [0], "raw_steps": 50}
    return validate_config(raw)["experiments"]


SMALL = _small_experiments()


def test_the_small_experiments_cover_every_kind():
    assert {exp["kind"] for exp in SMALL.values()} == set(KINDS)


@pytest.mark.parametrize("exp_id", sorted(SMALL))
def test_every_stage_reads_only_its_params(exp_id, tmp_path, monkeypatch):
    """... and its figure passes a referee's checks (helpers.figure_problems: no legend over
    data, no repeated legend label)."""
    from helpers import capture_figures, figure_problems

    from nqf import experiments as E

    saved = capture_figures(monkeypatch)

    exp = SMALL[exp_id]
    kind = E.kind_of(exp)
    data = kind.make_data(E.stage_config(exp, "data"))
    structure = E.structure_of(data, E.stage_config(exp, "structure"))
    runs = {}
    for run in E.run_ids(exp):
        base, block = E.split_run_id(exp, run)
        runs[run] = kind.train_run(data, E.run_config(exp, run), base, device="cpu")
        if block is not None:  # as the train rule marks a seed block's file
            runs[run].attrs.update(run=run, seed_block_of=base)
    runs = E.merge_seed_blocks(runs)
    theory = kind.theory(structure, E.stage_config(exp, "theory"))
    fit = kind.fit(structure, theory, runs, E.stage_config(exp, "fit"))
    assert fit.sizes.get("claim", 0) > 0, "the fit checked no claim"
    E.figure_of(exp)(theory, fit, runs, E.stage_config(exp, "figure"), [tmp_path / f"{exp_id}.png"],
                     font_size=8, dpi=50)
    assert (tmp_path / f"{exp_id}.png").stat().st_size > 0
    assert saved and [problem for fig in saved for problem in figure_problems(fig)] == []


def test_a_stage_reading_a_key_outside_its_params_is_named():
    from nqf.experiments.contract import StageConfig, StageKeyError

    cfg = StageConfig({"kind": "featurewise", "eps": 1e-3}, "theory")
    assert cfg["eps"] == 1e-3 and cfg.get("eps", 0) == 1e-3 and "lr" not in cfg
    for read in (lambda: cfg["lr"], lambda: cfg.get("lr", 0.1)):
        with pytest.raises(StageKeyError, match=r"stage 'theory' of kind 'featurewise' reads config key 'lr'.*STAGE_KEYS\['theory'\]"):
            read()
    import pickle
    back = pickle.loads(pickle.dumps(cfg))
    assert isinstance(back, StageConfig) and back == cfg and back.stage == "theory"
    assert repr(back) == repr(dict(cfg))  # snakemake compares params by repr: no spurious reruns


def test_a_stage_config_reads_alike_whatever_the_order_of_nested_keys():
    """Snakemake compares a rule's params by repr: the same settings written in another key order
    (yaml.safe_dump sorts keys) must not rerun a stage."""
    import pickle

    from nqf.experiments import run_config, stage_config
    from nqf.pipeline.config import validate_config

    def experiment(sizes, steps):
        exp = {"kind": "real_data", "dataset": "digits8x8", "architectures": ["mlp", "cnn"], "sizes": sizes,
               "steps": steps}
        return validate_config({"device": "cpu", "experiments": {"r": exp}})["experiments"]["r"]

    a = experiment({"cnn": {"width": 8, "kernel": [4, 4]}, "mlp": {"width": 20}}, {"mlp": 60, "cnn": 60})
    b = experiment({"mlp": {"width": 20}, "cnn": {"kernel": [4, 4], "width": 8}}, {"cnn": 60, "mlp": 60})
    for stage in ("data", "train"):
        assert repr(stage_config(a, stage)) == repr(stage_config(b, stage))
    assert repr(run_config(a, "mlp")) == repr(run_config(b, "mlp"))
    cfg = stage_config(a, "data")
    assert repr(pickle.loads(pickle.dumps(cfg))) == repr(cfg)
    assert list(cfg["sizes"]) == sorted(cfg["sizes"]) and list(cfg["sizes"]["cnn"]) == ["kernel", "width"]


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_module_of_a_kind_folder_names_its_kind(kind):
    """A module in nqf/experiments/<kind>/ that declares KIND (stamped into the files it writes)
    declares that kind, whatever its own file name."""
    import importlib
    import pkgutil

    package = KINDS[kind]
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        assert getattr(module, "KIND", kind) == kind, f"{module.__name__} declares KIND {module.KIND!r}"
