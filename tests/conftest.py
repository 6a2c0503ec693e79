"""Test-wide settings: one torch thread. The tests train small models, where a second intra-op
thread only adds synchronisation (and on a loaded 2-core machine makes steps 5-20x slower).

What test files share lives in tests/helpers.py (importable as ``helpers``), not in fixtures here:
an experiment's config (``experiment_config``, with the kinds' small sizes in ``SMALL``) and the
time limits (``time_limit``, scaled by NQF_TEST_TIMEOUT_SCALE) take arguments and are called from
module-level partials and helper functions, module fixtures and tests alike."""
import torch

torch.set_num_threads(1)


# The heaviest test files first (seconds on 2 CI-kind cores, the sum of their tests' durations
# measured in CI; a rough order is all that matters), every other file after them in collection
# order. pytest-xdist runs a file on one worker (--dist loadfile) and, with --no-loadscope-reorder
# (pyproject.toml), gives files out in this order, so the long ones start first and the short
# ones fill both workers up to the end: its default order (most tests first) left the workflow
# files, few tests each, for the end, and one worker alone with them. test_workflow.py makes the
# finished test run that other workflow files read (tests/workflow/conftest.py); the second
# file needs none of it, so neither worker waits.
HEAVY_FIRST = {  # CI of 94adb21 and (the first three) 3dc1043, 2026-12-08, --durations=0: files over 10 s
    "workflow/test_workflow.py": 314,
    "workflow/test_reliability.py": 219,
    "workflow/test_job_server_results.py": 79,
    "experiments/test_contract.py": 58,
    "pipeline/test_job_server.py": 50,
    "architectures/test_architectures.py": 49,
    "package/test_docs_code.py": 36,
    "experiments/test_seed_blocks.py": 35,
    "experiments/test_competition.py": 35,
    "workflow/test_run_belongs.py": 33,
    "experiments/test_featurewise.py": 30,
    "experiments/test_nqf_approximation.py": 28,
    "experiments/test_init_scaling.py": 26,
    "training/test_loop.py": 24,
    "experiments/test_samplewise.py": 22,
    "workflow/test_config_boundary.py": 22,
    "experiments/test_fourier_powerlaw.py": 19,
    "workflow/test_docs_results.py": 17,
    "workflow/test_gpu_resource.py": 15,
    "package/test_examples.py": 15,
    "pipeline/test_rule_files.py": 15,
    "package/test_benchmarks.py": 15,
    "experiments/test_collapse.py": 14,
    "experiments/test_samplewise_powerlaw.py": 14,
    "package/test_main.py": 13,
    "theory/test_taylor.py": 11,
    "pipeline/test_config.py": 11,
    "package/test_gpu_check.py": 11,
    "plotting/test_layout.py": 10,
}


def pytest_collection_modifyitems(config, items):
    from pathlib import Path

    tests = Path(__file__).parent

    def weight(item) -> float:
        try:
            return HEAVY_FIRST.get(Path(item.path).relative_to(tests).as_posix(), 0)
        except ValueError:
            return 0

    items.sort(key=lambda item: -weight(item))  # stable: the rest keep their order
