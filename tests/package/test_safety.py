"""Safe loading and numerical guards (issues 9, 16).

What is checked: nqf's own code (nqf/, workflow/, the Snakefile) never passes anything from a config
or data file to eval/exec or an unpickler and reads YAML only with a safe loader (a source scan,
and nqf's config reader refusing Python tags); the theory code handles eps down to 1e-30 and modes
that never switch on (r_k <= 0) without overflow, NaN or warnings (RuntimeWarning is an error in
this suite).

What is not true, and is tested as a fact: a config file is code to Snakemake. Snakemake reads a
--configfile itself before the Snakefile runs, and one with `__use_yte__: true` is a YTE template
whose Python expressions it evaluates; nqf refuses such a file when it reads it, but only after
Snakemake has run it. Run only configs you trust (docs/security.md)."""
import re

import numpy as np
import pytest
from helpers import ROOT

import nqf
from nqf.theory.closed_forms import corollary4, theorem5, theorem7_modes, theorem16
from nqf.theory.ignition import predicted_ignition_times, predicted_seed_scatter
from nqf.theory.lotka_volterra import glv, logistic_solution
from nqf.theory.stability import max_stable_lr
from nqf.theory.staircase import staircase, staircase_from_init

SOURCES = sorted([*(ROOT / "nqf").rglob("*.py"), *(ROOT / "workflow").rglob("*.py"),
                  *(ROOT / "workflow").rglob("*.smk"), ROOT / "Snakefile"])

FORBIDDEN = {
    r"(?<![\w.])eval\(": "eval",
    r"(?<![\w.])exec\(": "exec",
    r"\bpickle\b|\bdill\b|\bjoblib\b|\bmarshal\b": "an unpickler",
    r"yaml\.load\(|yaml\.unsafe_load|yaml\.full_load|Loader\s*=": "an unsafe YAML loader",
    r"yaml\.C?(Unsafe|Full)?Loader\b": "an unsafe YAML loader",  # a loader made directly: Safe ones only
    r"allow_pickle\s*=\s*True": "numpy's pickle loading",
}


# The one unpickler, and why it is not fed from a config or data file: the job server
# (nqf.pipeline.job_server_process) receives Snakemake's own `snakemake` object, which Snakemake pickles
# into every script job anyway, from a process of the same user (SO_PEERCRED) through a socket in
# a folder only that user may enter (docs/security.md); test_job_servers_unpickler_is_guarded.
# The jobs' side (nqf.pipeline.job_server) pickles the request and never unpickles (checked below).
ALLOWED = {"nqf/pipeline/job_server_process.py": {"an unpickler"}, "nqf/pipeline/job_server.py": {"an unpickler"}}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_unsafe_loading_in_nqfs_code(path):
    text = path.read_text()
    allowed = ALLOWED.get(str(path.relative_to(ROOT)), set())
    for pattern, what in FORBIDDEN.items():
        assert what in allowed or not re.search(pattern, text), f"{path.name} uses {what}"
    # torch checkpoints, if any appear, must be loaded with weights_only=True
    for call in re.findall(r"torch\.load\([^)]*\)", text):
        assert "weights_only=True" in call, f"{path.name}: {call}"


def test_job_servers_unpickler_is_guarded():
    """One pickle.loads, of a request the server has read from a peer it checked is this user."""
    text = (ROOT / "nqf" / "pipeline" / "job_server_process.py").read_text()
    assert re.findall(r"pickle\.\w*load\w*\(", text) == ["pickle.loads("]
    start_job = text[text.index("def _start_job"):text.index("def _child")]
    assert start_job.index("_peer_is_us(conn)") < start_job.index("pickle.loads(")
    client = (ROOT / "nqf" / "pipeline" / "job_server.py").read_text()
    assert not re.findall(r"pickle\.\w*load\w*\(", client)  # the jobs' side only pickles
    assert 'tempfile.mkdtemp(prefix="nqf-jobs-")' in client  # the socket's new folder, mode 0700


R = np.array([1.0, 0.5, 0.0, -0.3])  # two modes that grow, one flat, one that decays
C = np.diag([1.0, 2.0, 1.0, 0.5])


@pytest.mark.parametrize("eps", [1e-5, 1e-15, 1e-30])
def test_mode_dynamics_at_tiny_eps_and_non_positive_rates(eps):
    t = np.linspace(0.0, 40.0 * np.log(1 / eps), 60)
    z0 = np.full(4, eps)
    for z in (logistic_solution(R, np.diag(C), z0, t), glv(R, C, z0, t), glv(R, C + 0.05, z0, t),
              theorem16(R, np.diag(C), z0, t), theorem7_modes(R, 1.0, z0, t)):
        assert np.all(np.isfinite(z)) and np.all(z >= 0)
        # never learnt: stays at its start (up to the integrators' relative tolerance) or decays
        assert z[-1, 2] <= eps * (1 + 1e-9) and z[-1, 3] < eps
    assert np.all(np.isfinite(corollary4(R, np.diag(C), z0, t)))
    t_star = predicted_ignition_times(R, np.diag(C), eps)
    assert np.all(np.isfinite(t_star[:2])) and np.all(np.isinf(t_star[2:]))
    assert np.all(np.isinf(predicted_seed_scatter(R, 4)[2:]))
    assert np.all(np.isinf(staircase_from_init(R, C, z0, eps).ignition_tau[2:]))


def test_staircase_and_samplewise_flows_with_unlearnable_parts():
    sc = staircase(R, C, -1.0, loss0=1.0)
    assert np.allclose(sc.ignition_tau[:2], [1.0, 2.0]) and np.all(np.isinf(sc.ignition_tau[2:]))
    lam = np.array([[1.0, 0.5, 0.0], [0.0, 0.0, 2.0]])
    z = theorem5(lam, np.array([1.0, -0.5]), np.full(3, 1e-30), np.linspace(0, 200, 40))
    assert np.all(np.isfinite(z)) and np.all(z >= 0)


def test_stable_lr_with_modes_that_are_never_learnt():
    # z* = 0 for the modes with r <= 0: they add nothing to the Hessian at the minimum
    z_star = np.array([1.0, 0.25, 0.0, 0.0])
    assert max_stable_lr(C, z_star) == pytest.approx(2.0)
    assert max_stable_lr(C, np.zeros(4)) == np.inf


def test_exponent_prediction_refuses_modes_that_never_switch_on():
    with pytest.raises(ValueError, match="never do"):
        nqf.predict_exponent(R, np.ones(4), t_star=np.arange(1.0, 5.0))


def test_nqfs_config_reader_builds_only_plain_values(tmp_path):
    """The strict reader is PyYAML's safe loader (SafeConstructor: no tag builds a Python object)."""
    import yaml

    from nqf.errors import ConfigError
    from nqf.pipeline.config_files import _StrictLoader, read_config_file

    assert issubclass(_StrictLoader, yaml.constructor.SafeConstructor)
    assert not issubclass(_StrictLoader, (yaml.constructor.FullConstructor, yaml.constructor.UnsafeConstructor))
    for tag in ("!!python/object/apply:os.system ['touch x']", "!!python/name:os.system", "!!python/tuple [1]"):
        path = tmp_path / "c.yaml"
        path.write_text(f"experiments: {tag}\n")
        with pytest.raises(ConfigError, match="is not valid YAML"):
            read_config_file(path)


def test_snakemake_runs_a_yte_config_before_nqf_can_refuse_it(tmp_path):
    """The trust boundary as it is: Snakemake's own config reader (what `--configfile` uses) runs
    a YTE template's Python; nqf's reader then refuses the file, too late to stop it."""
    from snakemake.common.configfile import load_configfile

    from nqf.errors import ConfigError
    from nqf.pipeline.config_files import read_config_file

    marker = tmp_path / "ran"
    path = tmp_path / "template.yaml"
    path.write_text("__use_yte__: true\nexperiments:\n  f:\n    kind: featurewise\n"
                    f"    description: ?open({str(marker)!r}, 'w').write('code ran') and 'x'\n")
    assert load_configfile(str(path))["experiments"]["f"]["description"] == "x"
    assert marker.read_text() == "code ran"  # Snakemake executed the config's expression
    marker.unlink()
    with pytest.raises(ConfigError, match=r"is a YTE template .* Snakemake evaluates its Python expressions"):
        read_config_file(path)
    assert not marker.exists()  # nqf's reader ran nothing
