"""benchmarks/workloads.py on a tiny subset (--quick): every column present, every number positive."""
import json
import subprocess
import sys

from helpers import time_limit

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_workloads_quick_subset(tmp_path):
    out = tmp_path / "workloads"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "workloads.py"), "--quick", "--configs", "default",
                    "--only", "featurewise/gd,fourier_powerlaw/nqf,deep/mlp_gd", "--out", str(out)],
                   check=True, cwd=ROOT, timeout=time_limit(240), capture_output=True)
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["machine"] and res["torch"] and res["date"]
    (p,) = res["passes"]
    assert p["threads"] == 1 and p["peak_gflops"]["float32"] > 0 and p["peak_gflops"]["float64"] > 0
    rows = {r["workload"]: r for r in p["rows"]}
    assert set(rows) == {"default featurewise/gd NQF", "default fourier_powerlaw/nqf", "default deep/mlp_gd trio"}
    for name, row in rows.items():
        assert set(res["columns"]) <= set(row), name
        for col in ("matmul_mflop", "ms_per_step", "gflops", "pct_peak"):
            assert row[col] > 0, (name, col, row[col])
        assert row["record_steps"] >= 0 and row["dtype"] in ("float32", "float64")
    text = out.with_suffix(".txt").read_text()
    for word in ("matmul peak float32", "torch", "load average", "ms/step", "% peak", *rows):
        assert word in text


def test_resources_table_of_a_run(tmp_path):
    # benchmarks/resources.py on a fake finished run: one train job's benchmark file
    bench = tmp_path / "results" / "benchmarks" / "train" / "featurewise"
    bench.mkdir(parents=True)
    (bench / "gd.tsv").write_text("s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
                                  "12.5\t0:00:12\t400.0\t1\t1\t1\t0\t0\t0\t10\n")
    (tmp_path / "results" / "benchmarks" / "summary.tsv").write_text(
        "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n2\t0:00:02\t150\t1\t1\t1\t0\t0\t0\t1\n")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "resources.py"), "--workdir", str(tmp_path),
                          "--configfile", str(ROOT / "config" / "config.yaml")],
                         capture_output=True, text=True, check=True).stdout
    row = next(line for line in out.splitlines() if line.startswith("train "))
    assert row.split()[1:3] == ["featurewise", "gd"] and float(row.split()[4]) == 400.0
    assert "memory asked / peak: smallest" in out and "over 2 jobs" in out


def test_resources_table_from_the_job_servers_usage_record(tmp_path):
    # --usage reads results/benchmarks/jobs.tsv: a training, a stage job, a failed attempt (left
    # out) and a seed block of a run this config does not split (left out)
    bench = tmp_path / "results" / "benchmarks"
    bench.mkdir(parents=True)
    header = "rule\toutput\twall_s\tcpu_s\tuser_s\tsystem_s\tmax_rss_mb\texit_status\n"
    (bench / "jobs.tsv").write_text(header + "\n".join([
        "train\tresults/runs/featurewise/gd.nc\t12.5\t12.0\t11.9\t0.1\t400.0\t1",
        "train\tresults/runs/featurewise/gd.nc\t13.5\t13.0\t12.9\t0.1\t420.0\t0",
        "fit\tresults/fits/featurewise.nc\t2.0\t1.9\t1.8\t0.1\t350.0\t0",
        "train\tresults/runs/featurewise/gd.seeds-0-1.nc\t3.0\t3.0\t3.0\t0.0\t300.0\t0",
    ]) + "\n")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "resources.py"), "--usage", "--workdir",
                          str(tmp_path), "--configfile", str(ROOT / "config" / "config.yaml")],
                         capture_output=True, text=True, check=True).stdout
    row = next(line for line in out.splitlines() if line.startswith("train "))
    assert row.split()[1:3] == ["featurewise", "gd"] and float(row.split()[4]) == 420.0
    assert float(row.split()[7]) == 13.5
    fit = next(line for line in out.splitlines() if line.startswith("fit "))
    assert fit.split()[1] == "featurewise" and float(fit.split()[4]) == 350.0
    assert "jobs.tsv" in out and "over 2 jobs" in out


def test_usage_by_experiment_groups_the_job_servers_record(tmp_path):
    # two experiments' jobs, a failed training attempt (counted, marked) and the summary job
    bench = tmp_path / "results" / "benchmarks"
    bench.mkdir(parents=True)
    header = "rule\toutput\twall_s\tcpu_s\tuser_s\tsystem_s\tmax_rss_mb\texit_status\n"
    (bench / "jobs.tsv").write_text(header + "\n".join([
        "train\tresults/runs/deep/mlp_gd.nc\t10.0\t9.0\t8.9\t0.1\t500.0\t1",
        "train\tresults/runs/deep/mlp_gd.nc\t11.0\t10.0\t9.9\t0.1\t520.0\t0",
        "figure\tresults/figures/deep.pdf\t3.0\t2.5\t2.4\t0.1\t300.0\t0",
        "data\tresults/data/featurewise.nc\t1.0\t0.5\t0.5\t0.0\t200.0\t0",
        "summary\tresults/summary.csv\t1.0\t1.0\t1.0\t0.0\t250.0\t0",
    ]) + "\n")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "usage_by_experiment.py"), "--workdir",
                          str(tmp_path)], capture_output=True, text=True, check=True).stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()[3:] if line and not line.startswith("-")}
    assert rows["deep"][1:6] == ["3", "21.5", "19.0", "24.0", "520"] and "(1 failed)" in out
    assert rows["featurewise"][1:3] == ["1", "0.5"] and rows["(summary)"][1:3] == ["1", "1.0"]
    assert rows["total"][1:3] == ["5", "23.0"]
    # on 2 cores: the summed job wall times 26 s over 2 cores (13 s) exceed the longest job (11 s)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "usage_by_experiment.py"), "--workdir",
                          str(tmp_path), "--cores", "2", "--wall", "19.5"], capture_output=True, text=True,
                         check=True).stdout
    assert "least wall time on 2 cores: 13 s" in out and "longest job 11 s, results/runs/deep/mlp_gd.nc" in out
    assert "the run's wall time: 20 s, 1.50 x that bound" in out
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "usage_by_experiment.py"), "--workdir",
                          str(tmp_path), "--cores", "4"], capture_output=True, text=True, check=True).stdout
    assert "least wall time on 4 cores: 11 s" in out  # the longest job bounds it
