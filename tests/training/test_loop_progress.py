"""Long training jobs report progress (step, loss, time left) to the job's log."""
import logging
import re

import numpy as np
import torch

from nqf.experiments import teacher_student as ts
from nqf.training.approximation import train_online_side_by_side
from nqf.training.deep import DeepMLP, train_deep_trio
from nqf.training.loop import progress_message, train

LINE = re.compile(r"step (\d+)/(\d+) \((\d+)%\), ([\d.]+) s elapsed, ~([\d.]+) s left")


def test_progress_message_extrapolates_the_time_left():
    """A quarter done in 3 s leaves 9 s at the same rate."""
    m = LINE.search(progress_message(25, 100, 3.0))
    assert m and m.groups() == ("25", "100", "25", "3.0", "9.0")
    assert "~0.0 s left" in progress_message(100, 100, 5.0)


def _progress_lines(caplog):
    return [LINE.search(r.getMessage()) for r in caplog.records if LINE.search(r.getMessage())]


def _check(lines, steps):
    assert lines, "no progress line was logged"
    done = [int(m.group(1)) for m in lines]
    assert done == sorted(done) and all(int(m.group(2)) == steps for m in lines)
    assert all(float(m.group(5)) >= 0 for m in lines)


def test_every_training_loop_logs_steps_loss_and_time_left(caplog):
    """progress_seconds = 0 logs every step: the generic loop, the deep trio and the online SGD of
    teacher_student all name the step, the loss and the time left."""
    caplog.set_level(logging.INFO, logger="nqf.train")

    class Quad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.full((2, 3), 0.1, dtype=torch.float64))

        def forward(self):
            return (self.w ** 2).sum(-1, keepdim=True).expand(2, 4)

    train(Quad(), np.ones(4), lr=0.01, steps=5, optimizer="gd", progress_seconds=0.0)
    _check(_progress_lines(caplog), 5)
    assert all("mean loss" in m.string for m in _progress_lines(caplog))

    caplog.clear()
    model = DeepMLP()
    g = torch.Generator().manual_seed(1)
    x = model.sample_inputs(20, g)
    y = model.forward(model.init(1, 1.0, g, fan_in=True), x)[0].detach()
    train_deep_trio(model, model.init(2, 0.01, g, fan_in=True), x, y, x, y, lr=0.05, steps=4,
                    optimizer="gd", record_steps=[0, 4], progress_seconds=0.0)
    _check(_progress_lines(caplog), 4)
    assert all("train loss deep" in m.string for m in _progress_lines(caplog))

    caplog.clear()
    cfg = dict(architectures=["mlp"], sizes={"mlp": {"D": 4, "width": 5}}, teacher_std=1.0,
               teacher_fan_in=False, n_probe=8, data_seed=0)
    data = ts.make_data(cfg)
    module = ts._module_for(data, "mlp", cfg["sizes"]["mlp"], cfg["data_seed"])
    W_star = torch.as_tensor(data["mlp_teacher_W"].values)
    W0 = 1e-3 * torch.randn(1, module.p, module.width, dtype=torch.float64, generator=g)
    train_online_side_by_side(module, W_star, W0, ts.probe_inputs(data, "mlp"), lr=0.05, steps=3,
                              batch_size=4, seeds=[0], threshold=0.05, progress_seconds=0.0)
    _check(_progress_lines(caplog), 3)
    assert all("probe loss module" in m.string for m in _progress_lines(caplog))
