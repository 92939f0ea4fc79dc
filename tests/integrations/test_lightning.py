"""The Lightning callback, under a real ``Trainer.fit`` on CPU with a tiny model and a few steps."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

# Every capture is whole: step 0 too, when Xray is made at the first training forward.
pytestmark = [pytest.mark.lightning, pytest.mark.filterwarnings("error:take_graphs.*did not record")]
pl = pytest.importorskip("lightning.pytorch", reason="the Lightning tests need the 'lightning' extra: pip install 'xray-tb[lightning]'")

from lightning.pytorch.loggers import TensorBoardLogger  # noqa: E402
from lightning.pytorch.plugins.precision import MixedPrecision  # noqa: E402

from xray_tb import KeepAll, open_run  # noqa: E402
from xray_tb.integrations.lightning import XrayCallback  # noqa: E402

PLAN = {"net.0": {"weight": True, "weight_grad": True, "output": True}}
LR = 0.1


class RecordingSGD(torch.optim.SGD):
    """Plain SGD that keeps the first layer's weight and gradient as each of its steps sees them."""

    def __init__(self, params, lr: float):
        super().__init__(params, lr=lr)
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()  # Lightning runs forward and backward inside the step
        weight = self.param_groups[0]["params"][0]
        self.seen.append((weight.detach().clone(), weight.grad.detach().clone()))
        super().step()
        return loss


class TinyModule(pl.LightningModule):
    def __init__(self, fail_at_batch: int = -1):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        self.fail_at_batch = fail_at_batch
        self.training_batches = 0

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_index):
        if self.training_batches == self.fail_at_batch:
            raise RuntimeError("training failed on purpose")
        self.training_batches += 1
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("loss", loss)
        return loss

    def validation_step(self, batch, batch_index):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        self.recording_optimizer = RecordingSGD(self.parameters(), lr=LR)
        return self.recording_optimizer


def loader(samples: int = 96) -> DataLoader:
    g = torch.Generator().manual_seed(1)
    return DataLoader(TensorDataset(torch.randn(samples, 4, generator=g), torch.randint(0, 3, (samples,), generator=g)), batch_size=4)


def trainer(root: Path, **options) -> pl.Trainer:
    defaults = dict(accelerator="cpu", devices=1, default_root_dir=str(root), enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, max_steps=6)
    return pl.Trainer(**{**defaults, **options})


def test_one_capture_per_due_optimizer_step_with_the_gradient_the_optimizer_saw(tmp_path):
    callback = XrayCallback(every=2, plan=PLAN, selector=KeepAll())
    logger = TensorBoardLogger(str(tmp_path), name="tiny")
    module = TinyModule()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        trainer(tmp_path, logger=logger, callbacks=[callback], accumulate_grad_batches=4, log_every_n_steps=1).fit(
            module, loader(), loader(8))

    assert module.training_batches == 24 and trainer_steps(module) == 6  # 4 micro-batches per optimizer step
    assert callback.xray.closed  # closed when fitting ended
    run = open_run(logger.log_dir)
    assert run.records() == {"net.0": {"weight": [0, 2, 4], "weight_grad": [0, 2, 4], "output": [0, 2, 4]}}
    for step in (0, 2, 4):
        weight_seen, grad_seen = module.recording_optimizer.seen[step]
        torch.testing.assert_close(run.load("net.0", "weight_grad", step)[0], grad_seen, rtol=0, atol=0)
        torch.testing.assert_close(run.load("net.0", "weight", step)[0], weight_seen, rtol=0, atol=0)
        assert run.load("net.0", "output", step)[1].original_shape == [4, 8]  # the last micro-batch's output
    # Training health measures each step on the gradient it applies, though Lightning runs the last
    # micro-batch's backward inside optimizer.step(closure), after the step's pre-hooks: before, each row
    # held the next step's first micro-batch's gradient, one step early, and the last step was missing.
    layers, steps, values = run.health("grad_l2")
    assert list(steps) == list(range(6))
    expected = [float(grad.double().norm()) for _, grad in module.recording_optimizer.seen]
    np.testing.assert_allclose(values[layers.index("net.0")], expected, rtol=1e-5)
    # One run: Xray's event file sits beside Lightning's own, whose scalars are there too.
    names = sorted(path.name for path in Path(logger.log_dir).glob("events.out.tfevents.*"))
    assert len(names) == 2 and sum(name.endswith(".xray") for name in names) == 1


def trainer_steps(module: TinyModule) -> int:
    return len(module.recording_optimizer.seen)


def test_the_gradient_is_captured_after_amp_unscaling(tmp_path):
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    callback = XrayCallback(every=1, plan=PLAN, selector=KeepAll(), health=False)
    module = TinyModule()
    trainer(tmp_path, logger=False, callbacks=[callback], max_steps=3,
            plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)]).fit(module, loader())

    run = open_run(tmp_path / "xray")  # no TensorBoard logger: <default_root_dir>/xray
    assert run.records()["net.0"]["weight_grad"] == [0, 1, 2]
    for step, (_, grad_seen) in enumerate(module.recording_optimizer.seen):
        torch.testing.assert_close(run.load("net.0", "weight_grad", step)[0], grad_seen, rtol=0, atol=0)
    assert run.load("net.0", "weight_grad", 0)[0].abs().max() < 10  # not 1024 times the gradient


def test_the_modules_example_input_array_is_what_gets_traced(tmp_path):
    module = TinyModule()
    module.example_input_array = torch.zeros(2, 4)  # Lightning's own convention; batches hold 4 samples
    callback = XrayCallback(every=1, plan=PLAN)
    trainer(tmp_path, logger=False, callbacks=[callback], max_steps=2).fit(module, loader())
    run = open_run(tmp_path / "xray")
    assert [node["out_shapes"] for node in run.architecture["nodes"] if node["kind"] == "input"] == [[[2, 4]]]
    assert run.records()["net.0"]["output"] == [0, 1]


def test_an_exception_closes_xray_and_keeps_what_was_captured(tmp_path):
    callback = XrayCallback(every=1, plan=PLAN)
    module = TinyModule(fail_at_batch=3)
    with pytest.raises(RuntimeError, match="training failed on purpose"):
        trainer(tmp_path, logger=False, callbacks=[callback]).fit(module, loader())
    assert callback.xray.closed
    assert open_run(tmp_path / "xray").records() == {"net.0": {"weight": [0, 1, 2], "weight_grad": [0, 1, 2], "output": [0, 1, 2]}}


def test_bad_options_are_refused_when_the_callback_is_made():
    with pytest.raises(TypeError, match="unexpected option logdri=.*logdir"):
        XrayCallback(logdri="runs")
    with pytest.raises(TypeError, match="does not take optimizer=.*counts the framework's optimizer steps"):
        XrayCallback(optimizer=None)
    with pytest.raises(TypeError, match="every= takes a whole number"):
        XrayCallback(every="often")
    for options, message in (  # Xray()'s own checks, made before the trainer starts rather than after
        ({"health": "yes"}, r"health= takes True, False or a HealthOptions\(...\), got 'yes'"),
        ({"dtype": "int8"}, r"dtype= stores values as 'float32' or 'float16', got 'int8'"),
        ({"ranks": "some"}, r"ranks= is 'zero' \(rank 0 writes\) or 'all'"),
        ({"selector": "random"}, r"selector= expects a xray_tb.Selector instance"),
        ({"input_size": (0, 8)}, r"input_size is one sample's shape"),
        ({"logdir": 5}, r"logdir= is the run directory"),
    ):
        with pytest.raises((TypeError, ValueError), match=message):
            XrayCallback(**options)


class SubmoduleStep(TinyModule):
    def training_step(self, batch, batch_index):
        x, y = batch
        return F.cross_entropy(self.net(x), y)  # never calls self(x)


def test_a_training_step_that_bypasses_forward_asks_for_an_example_input(tmp_path):
    callback = XrayCallback(every=1)
    with pytest.raises(RuntimeError, match="forward did not run.*example_input="):
        trainer(tmp_path, logger=False, callbacks=[callback]).fit(SubmoduleStep(), loader())
    # Given one, it traces, and every kind is recorded at every step: the layers' own hooks fire
    # whether or not the LightningModule's forward runs.
    kinds = {"weight": True, "weight_grad": True, "output": True, "grad": True}
    callback = XrayCallback(every=1, plan={"net.0": kinds}, input_size=(4,))
    trainer(tmp_path / "given", logger=False, callbacks=[callback], max_steps=3).fit(SubmoduleStep(), loader())
    assert open_run(tmp_path / "given" / "xray").records() == {"net.0": {kind: [0, 1, 2] for kind in kinds}}


@pytest.mark.slow
def test_under_ddp_only_global_rank_zero_records(tmp_path):
    logger = TensorBoardLogger(str(tmp_path), name="ddp")
    callback = XrayCallback(every=1, plan=PLAN)
    trainer(tmp_path, logger=logger, callbacks=[callback], max_steps=3, strategy="ddp_spawn", devices=2).fit(TinyModule(), loader())

    run_folder = tmp_path / "ddp" / "version_0"  # made by rank 0 (this process's logger would now pick version_1)
    files = sorted(run_folder.glob("events.out.tfevents.*"))
    xray_files = [path for path in files if path.name.endswith(".xray")]
    assert len(files) == 2 and len(xray_files) == 1
    # Written by the process that wrote Lightning's own log: rank 0 (names hold the writer's pid).
    assert xray_files[0].name.split(".")[5] == next(path for path in files if path not in xray_files).name.split(".")[5]
    assert open_run(run_folder).records() == {"net.0": {"weight": [0, 1, 2], "weight_grad": [0, 1, 2], "output": [0, 1, 2]}}
