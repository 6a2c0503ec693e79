"""nqf.pipeline.stages: the workflow's rule bodies called directly, without Snakemake, and through
run_stage with a stand-in for Snakemake's ``snakemake`` object; the provenance they record is
the Origin they are handed (nqf.io.provenance), never the process's environment."""
import re
from types import SimpleNamespace

import pytest
import xarray as xr

from nqf.experiments import stage_config
from nqf.io.provenance import Origin, command_line, provenance
from nqf.pipeline import stages
from nqf.pipeline.config import load_workflow_config, validate_config
from nqf.pipeline.snakefile import RunContext
from tests.helpers import ROOT

EXP = "featurewise"  # the smallest experiment of config/test.yaml
ORIGIN = Origin(command="snakemake --cores 2 --configfile config/test.yaml", commit="0123abc")


@pytest.fixture(scope="module")
def test_config():
    return validate_config(load_workflow_config([ROOT / "config" / "test.yaml"], {}, ROOT / "config" / "config.yaml"))


def test_the_data_stage_runs_without_snakemake(tmp_path, test_config):
    exp_cfg = test_config["experiments"][EXP]
    out, log = tmp_path / "results" / "data" / f"{EXP}.nc", tmp_path / "data.log"
    stages.data(EXP, stage_config(exp_cfg, "data"), out, log=log, origin=ORIGIN)
    with xr.open_dataset(out) as ds:
        assert ds.attrs["experiment"] == EXP and ds.attrs["title"] == f"nqf data of experiment {EXP}"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: " + re.escape(ORIGIN.command) + r" \(written by nqf .*\)",
                            ds.attrs["history"])
        assert ds.attrs["git_commit"] == ORIGIN.commit != ds.attrs["nqf_git_commit"]
    assert "start data" in log.read_text() and "done data" in log.read_text()
    # the next stages read it back, checked against the experiment's config
    structure = tmp_path / "results" / "structure" / f"{EXP}.nc"
    stages.structure(EXP, stage_config(exp_cfg, "structure"), exp_cfg, out, structure, origin=ORIGIN)
    with xr.open_dataset(structure) as ds:
        assert {"r", "C"} <= set(ds.variables) and ds.attrs["experiment"] == EXP


class _Files(list):
    """Snakemake's named lists: by position and by name."""

    def __init__(self, *items, **named):
        super().__init__([*items, *named.values()])
        self.__dict__.update(named)


def test_run_stage_hands_the_rule_s_files_and_params_to_the_stage(tmp_path, test_config):
    exp_cfg = test_config["experiments"][EXP]
    out = tmp_path / f"{EXP}.nc"
    smk = SimpleNamespace(
        wildcards=SimpleNamespace(exp=EXP), input=_Files(), output=_Files(str(out)), log=_Files(str(tmp_path / "l.log")),
        threads=1, params=SimpleNamespace(cfg=stage_config(exp_cfg, "data"),
                                          context=RunContext(test_config, {}, ORIGIN)))
    stages.run_stage("data", smk)
    with xr.open_dataset(out) as ds:
        assert ds.attrs["git_commit"] == ORIGIN.commit and ORIGIN.command in ds.attrs["history"]
    with pytest.raises(ValueError, match="no workflow stage 'dat'"):
        stages.run_stage("dat", smk)


def test_every_workflow_script_is_one_call_into_a_stage():
    # _checkout.py is the scripts' helper (nqf from the checkout where a conda environment lacks it)
    scripts = sorted(p for p in (ROOT / "workflow" / "scripts").glob("*.py") if not p.name.startswith("_"))
    assert len(scripts) >= 9
    for script in scripts:
        text = script.read_text()
        calls = re.findall(r"^run_stage\(\"(\w+)\", snakemake\)", text, re.M)
        assert calls == [script.stem], script.name
        assert re.findall(r"^ensure_nqf\(snakemake\.scriptdir\)", text, re.M), script.name
        assert text.count("snakemake") == 2, script.name
        assert callable(getattr(stages, script.stem)), script.name


def test_provenance_reads_no_environment_variable(monkeypatch):
    """What ran a file is an argument: without one, this process and nqf's checkout."""
    monkeypatch.setenv("NQF_COMMAND", "snakemake --from-the-environment")
    monkeypatch.setenv("NQF_WORKFLOW_COMMIT", "from-the-environment")
    attrs = provenance({"a": 1})
    assert attrs["git_commit"] == attrs["nqf_git_commit"] != "from-the-environment"
    assert "from-the-environment" not in command_line()
    assert provenance({}, ORIGIN)["git_commit"] == ORIGIN.commit and command_line(ORIGIN) == ORIGIN.command


def test_the_run_context_is_not_a_rerun_trigger(test_config):
    """Snakemake reruns a job whose params changed, comparing the reprs of params of builtin
    types; the context param (the command line and commit of each call among them) must not be
    one of them, or every new snakemake call would rerun every job."""
    from snakemake.persistence import UNREPRESENTABLE, PersistenceBase

    context = RunContext(test_config, {"sha256": "x"}, ORIGIN)
    assert PersistenceBase._serialize_param_builtin(None, context) is UNREPRESENTABLE
    assert repr(context) == repr(RunContext({}, {}, Origin("other", "other"))) and "<" not in repr(context)
    assert context.experiment(EXP) is test_config["experiments"][EXP]
