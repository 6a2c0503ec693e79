"""Test-wide settings: one torch thread. The tests train small models, where a second intra-op
thread only adds synchronisation (and on a loaded 2-core machine makes steps 5-20x slower).

What test files share lives in tests/helpers.py (importable as ``helpers``), not in fixtures here:
an experiment's config (``experiment_config``, with the kinds' small sizes in ``SMALL``) and the
time limits (``time_limit``, scaled by NQF_TEST_TIMEOUT_SCALE) take arguments and are called from
module-level partials and helper functions, module fixtures and tests alike."""
import torch

torch.set_num_threads(1)
