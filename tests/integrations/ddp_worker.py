"""One rank of the DDP tests (:mod:`tests.integrations.test_ddp`): ``python -m tests.integrations.ddp_worker
CASE RANK PORT LOGDIR``. Joins a 2-process gloo group on 127.0.0.1, trains a small model wrapped in
``DistributedDataParallel`` under an :class:`~xray_tb.Xray`, and writes what it saw to
``LOGDIR/result<rank>.json``."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from xray_tb import Xray
from xray_tb.devices import device_path_on_cpu
from xray_tb.distributed import DistributedMismatch, Group
from xray_tb.health import HealthOptions

WORLD = 2


def full_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """The batch the ranks split between them (rank k takes rows k::2)."""
    generator = torch.Generator().manual_seed(3)
    return torch.randn(8, 4, generator=generator), torch.randn(8, 2, generator=generator)


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


class Branches(nn.Module):
    """Three layers of the same size; ``skip`` names one the forward leaves out."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c, self.skip = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4), None

    def forward(self, x):
        x = torch.relu(self.a(x))
        for name in ("b", "c"):
            x = x if self.skip == name else torch.relu(getattr(self, name)(x))
        return x


class Lookup(nn.Module):
    """An embedding of 10 rows and a head: the ranks' batches look up rows 0 to 6 only."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embedding, self.head = nn.Embedding(10, 4), nn.Linear(4, 2)

    def forward(self, tokens):
        return self.head(torch.relu(self.embedding(tokens).mean(dim=1)))


def gated() -> nn.Module:
    """Unit 0 fires on rank 0's input, unit 1 on rank 1's, unit 2 on neither."""
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]]))
        model[0].bias.zero_()
    return model


def train_with_a_nan_batch(model: nn.Module, xray: Xray, x: torch.Tensor, y: torch.Tensor, rank: int, planted: int,
                           lr: float, steps: int = 25) -> None:
    """``steps`` SGD steps, ``take_graphs()`` after each backward; rank 1's batch holds a NaN at step ``planted``."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        batch = x.clone()
        if step == planted and rank == 1:
            batch[0, 0] = float("nan")
        optimizer.zero_grad()
        nn.MSELoss()(model(batch), y).backward()
        xray.take_graphs()
        optimizer.step()


def train(ddp, xray, x, y, steps: int, skip: int = -1, offset: int = 0) -> None:
    loss_fn = nn.MSELoss()
    for step in range(steps):
        ddp.zero_grad()
        loss_fn(ddp(x), y).backward()
        if step != skip:
            xray.take_graphs(step + offset)


#: The cases of one process: ``one`` on the CPU with gloo, ``cuda`` on a GPU with NCCL (a machine with one
#: GPU runs one NCCL rank: two ranks may not share a device).
SINGLE = ("one", "cuda")


def main(case: str, rank: int, port: str, logdir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    # The default group's own timeout bounds a hang in most cases; in these, Xray's timeout must end the job.
    group_timeout = 600 if case in ("skip", "rank0only") else 30
    if case == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if case == "cuda" else "gloo", rank=rank, world_size=1 if case in SINGLE else WORLD,
                            timeout=datetime.timedelta(seconds=group_timeout))
    result: dict = {"rank": rank}
    try:
        if case in SINGLE:  # DDP of one process, on the CPU or on a GPU: the whole batch, every statistic, frames
            device = "cuda" if case == "cuda" else "cpu"
            ddp = DistributedDataParallel(mlp().to(device), device_ids=[rank] if device == "cuda" else None)
            x, y = (part.to(device) for part in full_batch())
            plan = {"0": {"weight": True, "weight_grad": True, "output": True, "activation": True, "grad": True}}
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                xray = Xray(ddp, x, logdir=logdir, every=1, plan=plan, health=HealthOptions(every=1))
                train(ddp, xray, x, y, 3)
                xray.close()
            result.update(device=next(ddp.parameters()).device.type, warnings=[str(w.message) for w in caught],
                          weight=ddp.module[0].weight.tolist(), weight_grad=ddp.module[0].weight.grad.tolist())
        elif case == "rank0only":  # Xray on rank 0 only: it gives up at construction, and rank 1's DDP step then fails
            ddp = DistributedDataParallel(mlp())
            x, y = (part[rank::WORLD] for part in full_batch())
            start = time.monotonic()
            if rank == 0:
                try:
                    Xray(ddp, x, logdir=logdir, every=1, collective_timeout=3)
                except DistributedMismatch as error:
                    result["error"] = str(error)
                result["seconds"] = time.monotonic() - start
                finish(logdir, result)
            nn.MSELoss()(ddp(x), y).backward()  # waits for rank 0, which never trains: fails once it exits
            finish(logdir, result)
        elif case == "dead":
            ddp = DistributedDataParallel(gated())
            x = torch.tensor([[1.0, 0.0]]) if rank == 0 else torch.tensor([[0.0, 1.0]])
            xray = Xray(ddp, x, logdir=logdir, every=1)
            train(ddp, xray, x, torch.zeros(1, 1), 2)
            result["dead"] = xray.dead_units()
        elif case == "saturation":  # rank 0's input saturates the tanh, rank 1's does not
            model = nn.Sequential(nn.Linear(1, 1), nn.Tanh())
            with torch.no_grad():
                model[0].weight.fill_(1.0)
                model[0].bias.zero_()
            ddp = DistributedDataParallel(model)
            x = torch.full((2, 1), 10.0 if rank == 0 else 0.0)
            xray = Xray(ddp, x, logdir=logdir, every=1)
            train(ddp, xray, x, torch.zeros(2, 1), 2)
        elif case == "probe":  # a probe runs the inner module on rank 0 only, between DDP's steps
            ddp = DistributedDataParallel(mlp())
            x, y = (part[rank::WORLD] for part in full_batch())
            xray = Xray(ddp, x, logdir=logdir, every=1, probe=(x, y), loss_fn=nn.MSELoss(),
                        plan={"0": {"output": True, "grad": True, "weight_grad": True}})
            train(ddp, xray, x, y, 3)
            result["grad"] = ddp.module[0].weight.grad.sum().item()
        elif case == "optimizer":  # steps counted by the optimizer: training health runs in its step pre-hook
            ddp = DistributedDataParallel(mlp())
            x, y = (part[rank::WORLD] for part in full_batch())
            optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
            xray = Xray(ddp, x, logdir=logdir, every=2, optimizer=optimizer, health=HealthOptions(every=1))
            for _ in range(4):
                optimizer.zero_grad()
                nn.MSELoss()(ddp(x), y).backward()
                xray.take_graphs()
                optimizer.step()
            result["dead"] = xray.dead_units()
        elif case in ("layers", "same_size_layers"):  # after tracing, rank 1's forward skips c (and rank 0's b)
            model = Branches()
            ddp = DistributedDataParallel(model, find_unused_parameters=True)
            x, y = (part[rank::WORLD] for part in full_batch())
            xray = Xray(ddp, x, logdir=logdir, every=1, collective_timeout=10)
            model.skip = "c" if rank == 1 else "b" if case == "same_size_layers" else None
            start = time.monotonic()
            try:
                train(ddp, xray, x, y[:, :1].expand(-1, 4), 2)
            except DistributedMismatch as error:
                result["error"] = str(error)
            result["seconds"] = time.monotonic() - start
        elif case == "kinds":  # gathers of different kinds meet, of the same step and size (a rank skipped one)
            group = Group(datetime.timedelta(seconds=10))
            start = time.monotonic()
            try:
                group.gather(3, torch.ones(2), what="iteration" if rank == 0 else "capture")
            except DistributedMismatch as error:
                result["error"] = str(error)
            result["seconds"] = time.monotonic() - start
            finish(logdir, result)
        elif case in ("health_fails", "statistic_fails"):  # on rank 1 only, at step 1: no collective may be skipped
            ddp = DistributedDataParallel(mlp())
            x, y = (part[rank::WORLD] for part in full_batch())
            xray = Xray(ddp, x, logdir=logdir, every=1, health=HealthOptions(every=1), collective_timeout=10)
            state = {"step": 0}

            def fragile(tensor):
                if rank == 1 and state["step"] == 1:
                    raise ValueError("a user statistic failed")
                return float(tensor.abs().sum())

            if case == "statistic_fails":  # a user's statistic: contained, its value missing there
                xray.add_statistic("fragile", fragile)
            else:  # training health itself fails (a fault injected into its measurement)
                from xray_tb.health.monitor import HealthMonitor

                measure = HealthMonitor.iteration

                def failing(monitor, step, *args, **kwargs):
                    if rank == 1 and step == 1:
                        raise ValueError("training health failed on purpose")
                    return measure(monitor, step, *args, **kwargs)

                HealthMonitor.iteration = failing
            start = time.monotonic()
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    for step in range(3):
                        state["step"] = step
                        train(ddp, xray, x, y, 1, offset=step)
                    if case == "statistic_fails":
                        xray.close()
                        result["fragile"] = health_values(logdir, "fragile") if rank == 0 else {}  # rank 0 writes the run
                result["warnings"] = [str(w.message) for w in caught if "fragile" in str(w.message)]
            except DistributedMismatch as error:
                result["error"] = str(error)
            result["seconds"] = time.monotonic() - start
        elif case == "nonfinite":  # rank 1's second batch holds a NaN
            ddp = DistributedDataParallel(mlp())
            x, y = (part[rank::WORLD] for part in full_batch())
            xray = Xray(ddp, x, logdir=logdir, every=1)
            loss_fn = nn.MSELoss()
            for step in range(3):
                ddp.zero_grad()
                batch = x.clone()
                if step == 1 and rank == 1:
                    batch[0, 0] = float("nan")
                loss_fn(ddp(batch), y).backward()
                xray.take_graphs()
            found = xray.first_nonfinite
            result["nonfinite"] = None if found is None else [found.step, found.layer, found.kind]
        elif case in ("late_device", "late_cpu"):  # rank 1's batch holds a NaN at step 13; late_device: the device path (an accelerator's)
            with device_path_on_cpu() if case == "late_device" else contextlib.nullcontext():
                ddp = DistributedDataParallel(mlp())
                x, y = (part[rank::WORLD] for part in full_batch())
                xray = Xray(ddp, x, logdir=logdir, every=10)
                train_with_a_nan_batch(ddp, xray, x, y, rank, planted=13, lr=0.01)
                xray.close()
            found = xray.first_nonfinite
            result["nonfinite"] = None if found is None else [found.step, found.layer, found.kind]
            result["messages"] = [f.message for f in xray.findings() if f.rule == "nonfinite"]
        elif case.startswith("accumulate_nan_"):  # two micro-batches, the first under no_sync(); rank 1's holds a NaN
            planted = int(case.rsplit("_", 1)[1])
            ddp = DistributedDataParallel(mlp())
            x, y = (part[rank::WORLD] for part in full_batch())
            optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
            xray = Xray(ddp, x, logdir=logdir, every=4, health=HealthOptions(every=1))
            for step in range(10):
                optimizer.zero_grad()
                for micro in range(2):
                    batch = x.clone()
                    if step == planted and micro == 0 and rank == 1:
                        batch[0, 0] = float("nan")
                    with ddp.no_sync() if micro == 0 else contextlib.nullcontext():
                        (nn.MSELoss()(ddp(batch), y) / 2).backward()
                xray.take_graphs()  # after the backward that synchronises
                optimizer.step()
            found = xray.first_nonfinite
            result["nonfinite"] = None if found is None else [found.step, found.layer, found.kind]
            result["messages"] = [f.message for f in xray.findings() if f.rule == "nonfinite"]
            xray.close()
        elif case in ("weight_one_rank", "weight_one_rank_stepped"):  # a NaN in rank 1's copy of a weight at step 3, no health step
            # stepped: an optimizer steps after each call, so each iteration's find waits for that step
            ddp = DistributedDataParallel(mlp())
            x, y = (part[rank::WORLD] for part in full_batch())
            optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01) if case.endswith("stepped") else None
            xray = Xray(ddp, x, logdir=logdir, every=10, collective_timeout=10)
            for step in range(6):
                if step == 3 and rank == 1:
                    with torch.no_grad():
                        ddp.module[2].weight[0, 0] = float("nan")
                ddp.zero_grad()
                nn.MSELoss()(ddp(x), y).backward()
                xray.take_graphs()
                if optimizer is not None:
                    optimizer.step()
            found = xray.first_nonfinite
            result["nonfinite"] = None if found is None else [found.step, found.layer, found.kind]
        elif case in ("hidden_weight_one_rank", "hidden_then_seen_6", "hidden_then_seen_14"):  # a NaN written into rank 1's
            # row 7 of an embedding no batch looks up; then_seen_k: from step k every batch looks it up, so the gradients turn
            # NaN on both ranks (6: before the health step at 10 that agrees on rank 1's find; 14: after it)
            seen = int(case.rsplit("_", 1)[1]) if case.startswith("hidden_then") else 99
            ddp = DistributedDataParallel(Lookup())
            tokens = torch.tensor([[0, 1, 2], [3, 4, 5]]) + rank
            xray = Xray(ddp, tokens, logdir=logdir, every=10, collective_timeout=10)
            for step in range(12 if case == "hidden_weight_one_rank" else 18):
                if step == 3 and rank == 1:
                    with torch.no_grad():
                        ddp.module.embedding.weight[7, 0] = float("nan")
                ddp.zero_grad()
                ddp(tokens if step < seen else torch.full_like(tokens, 7)).square().mean().backward()
                xray.take_graphs()
                if step == 5:
                    found = xray.first_nonfinite
                    result["before_health_step"] = None if found is None else [found.step, found.layer, found.kind]
            found = xray.first_nonfinite
            result["nonfinite"] = None if found is None else [found.step, found.layer, found.kind]
        elif case == "late":  # rank 1's batch holds a NaN at step 3, after the last measured iteration (0 and 1)
            ddp = DistributedDataParallel(mlp())
            x, y = (part[rank::WORLD] for part in full_batch())
            xray = Xray(ddp, x, logdir=logdir, every=10, health=HealthOptions(every=10))
            train(ddp, xray, x, y, 3)
            ddp.zero_grad()
            if rank == 1:
                x[0, 0] = float("nan")
            nn.MSELoss()(ddp(x), y).backward()
            xray.take_graphs(3)
            time.sleep(2 * rank)  # rank 1 closes later
            xray.close()
            found = xray.first_nonfinite
            result["nonfinite"] = None if found is None else [found.step, found.layer, found.kind]
        else:
            ddp = DistributedDataParallel(mlp())
            x, y = (part[rank::WORLD] for part in full_batch())
            options = {"ranks": "all"} if case in ("all", "grads") else {}
            if case in ("skip", "last", "steps"):
                options["collective_timeout"] = 3
            xray = Xray(ddp, x, logdir=logdir, every=1, health=HealthOptions(every=1), **options)
            result["layers"] = sorted(xray.plan)
            start = time.monotonic()
            try:
                # skip: rank 1 misses its second take_graphs() call, last: its third and last one, so rank 0
                # is left alone at a health step; steps: rank 1 files its steps one later than rank 0.
                skip = {"skip": 1, "last": 2}.get(case, -1) if rank == 1 else -1
                train(ddp, xray, x, y, 3, skip=skip, offset=int(case == "steps" and rank == 1))
            except DistributedMismatch as error:
                result["error"] = str(error)
            result["seconds"] = time.monotonic() - start
            if case == "last" and rank == 1:
                time.sleep(6)  # alive, not calling: rank 0 must time out, not hang
        xray.close()
    finally:
        write_result(logdir, result)
    if case == "skip" and rank == 0:
        sys.exit(0)  # as a user's script ends, not os._exit: a collective still pending would keep it alive
    dist.destroy_process_group()
    # Rank 0 hosts the group's TCPStore; its thread sometimes aborts the interpreter's teardown
    # ("terminate called without an active exception", torch 2.13), after everything is written.
    sys.stdout.flush()
    os._exit(0)


def health_values(logdir: str, stat: str) -> dict:
    """One training-health statistic of the run rank 0 wrote: {step: [value or None per layer]}."""
    from xray_tb import open_run

    layers, steps, values = open_run(logdir).health(stat)
    return {int(step): [None if value != value else float(value) for value in values[:, k]] for k, step in enumerate(steps)}


def write_result(logdir: str, result: dict) -> None:
    with open(os.path.join(logdir, f"result{result['rank']}.json"), "w") as file:
        json.dump(result, file)


def finish(logdir: str, result: dict) -> None:
    """Write the result and leave at once (the group is left as a failed job leaves it)."""
    write_result(logdir, result)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
