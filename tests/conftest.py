"""Test-wide settings: one torch thread. The tests train small models, where a second intra-op
thread only adds synchronisation (and on a loaded 2-core machine makes steps 5-20x slower)."""
import torch

torch.set_num_threads(1)
