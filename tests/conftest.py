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
HEAVY_FIRST = {
    "workflow/test_workflow.py": 330,
    "workflow/test_reliability.py": 300,
    "workflow/test_job_server_results.py": 70,
    "package/test_docs_code.py": 60,
    "pipeline/test_job_server.py": 40,
    "workflow/test_run_belongs.py": 30,
    "experiments/test_seed_blocks.py": 30,
    "package/test_examples.py": 25,
    "pipeline/test_rule_files.py": 20,
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
