"""One rank of the FSDP tests (:mod:`tests.integrations.test_fsdp`): ``python -m tests.integrations.fsdp_worker
CASE RANK PORT LOGDIR``. Joins a 2-process gloo group on 127.0.0.1, shards a small MLP with
``fully_shard``, trains it under an :class:`~xray_tb.Xray`, and writes what it saw (the full weights
and gradients at each step, from ``full_tensor()``, and every warning) to ``LOGDIR/result<rank>.json``."""

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
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor.debug import CommDebugMode

from tests.integrations.ddp_worker import WORLD, full_batch, train_with_a_nan_batch
from xray_tb import Xray
from xray_tb.capture.selectors import RandomFilters, TopVariance
from xray_tb.devices import device_path_on_cpu
from xray_tb.distributed import DistributedMismatch
from xray_tb.health import HealthOptions

#: Layer 2's rows (the model's outputs) per case: one row leaves rank 1 an empty shard.
OUTPUTS = {"empty_shard": 1}
#: The processes of a case other than 2: hsdp4 is HSDP on a 2 x 2 mesh (two replicas of a weight sharded in two);
#: one is a single process (one shard: the whole tensor), and cuda the same on a GPU with NCCL (a machine with
#: one GPU runs one NCCL rank: two ranks may not share a device).
WORLDS = {"hsdp4": 4, "one": 1, "cuda": 1}


def mlp(outputs: int = 3) -> nn.Module:
    """Uneven shards: 7 rows split 4 + 3, 3 rows split 2 + 1 (1 row: 1 + 0)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 7), nn.ReLU(), nn.Linear(7, outputs))


def targets(y: torch.Tensor, outputs: int = 3) -> torch.Tensor:
    return torch.cat([y, y[:, :1]], dim=1)[:, :outputs]


def shard(model: nn.Module, root_only: bool = False, hsdp: tuple[int, int] | None = None, device: str | None = None,
          mixed: bool = False) -> nn.Module:
    """``fully_shard`` per layer and at the root; ``hsdp``: on a mesh of that shape (replicate x shard);
    ``device``: on a mesh of every rank of that device type (else FSDP's default mesh); ``mixed``: the
    forward and backward in bfloat16, gradients reduced in float32 (FSDP's mixed precision)."""
    if hsdp:
        mesh = init_device_mesh("cpu", hsdp, mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh(device, (dist.get_world_size(),)) if device else None
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed else MixedPrecisionPolicy()
    if not root_only:
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def full(model: nn.Module) -> dict:
    """Every layer's full weight and gradient, as lists."""
    out = {}
    for name in ("0", "2"):
        weight = getattr(model, name).weight
        out[name] = {"weight": weight.full_tensor().tolist(),
                     "weight_grad": None if weight.grad is None else weight.grad.full_tensor().tolist()}
    return out


#: A NaN at step 3, after the last measured iteration (HealthOptions(every=10): iterations 0 and 1): in rank 1's
#: shard of layer 2's weight (late_weight, never_closes), or of layer 0's gradient, which rank 0 never sees (late_grad).
LATE = ("late_weight", "late_grad", "never_closes")


def plant_nan(case: str, rank: int, step: int, model: nn.Module, backward_done: bool) -> None:
    """A NaN in rank 1's shard only: of layer 2's weight before the forward (nonfinite: at step 2, an
    iteration the statistics skip; late_weight, never_closes: at step 3), of layer 0's gradient after it (late_grad)."""
    if case not in ("nonfinite", *LATE) or rank != 1 or step != (2 if case == "nonfinite" else 3):
        return
    if backward_done == (case == "late_grad"):
        with torch.no_grad():
            tensor = model[0].weight.grad if case == "late_grad" else model[2].weight
            tensor.to_local()[0, 0] = float("nan")


def close_late(case: str, rank: int, xray: Xray, result: dict) -> None:
    """The ranks close at different times; in never_closes rank 1 stays alive without closing."""
    result["before_close"] = _where(xray.first_nonfinite)
    if (case, rank) in (("late_weight", 1), ("late_grad", 0), ("never_closes", 1)):
        time.sleep(8 if case == "never_closes" else 2)
    if case == "never_closes" and rank == 1:
        return
    start = time.monotonic()
    try:
        xray.close()
    except DistributedMismatch as error:
        result["error"] = str(error)
    result["close_seconds"] = time.monotonic() - start
    result["nonfinite"] = _where(xray.first_nonfinite)


def _where(found) -> list | None:
    return None if found is None else [found.step, found.layer, found.kind]


def main(case: str, rank: int, port: str, logdir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    world = WORLDS.get(case, WORLD)
    device = "cuda" if case == "cuda" else "cpu"
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=30))
    result: dict = {"rank": rank, "steps": []}
    if case in ("batch_device", "batch_device_late", "batch_cpu", "batch_cpu_late"):
        return batch_with_a_nan(rank, logdir, result, 23 if case.endswith("late") else 13, case.startswith("batch_device"))
    if case == "accumulate":
        return accumulate_unsharded(rank, logdir, result)
    x, y = (part[rank::world].to(device) for part in full_batch())
    outputs = OUTPUTS.get(case, 3)
    y = targets(y, outputs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = shard(mlp(outputs).to(device), root_only=case == "root", hsdp={"hsdp": (WORLD, 1), "hsdp4": (2, 2)}.get(case),
                      device=device if case in ("one", "cuda") else None, mixed=case == "mixed")
        result["device"] = model[0].weight.device.type
        plan = {"0": {"weight": True, "weight_grad": True, "activation": True}, "2": {"weight": True, "weight_grad": True}}
        options = {"ranks": "all"} if case == "all" else {}
        # nonfinite: iterations 0, 1 and 3 are measured (1 for the update ratio), the NaN comes at 2. LATE:
        # no health step after 0 either (their gather would carry the ranks' finds): agreed at close.
        health = HealthOptions(every=2) if case == "nonfinite" else HealthOptions(every=10, activations=10) if case in LATE else \
            HealthOptions(every=1, update_every=1)
        selector = TopVariance(max_rows=3) if case == "topvariance" else RandomFilters(max_rows=3)
        if case == "late_start" and rank == 1:
            time.sleep(8)  # rank 0 meets no one within its timeout
        start = time.monotonic()
        try:
            xray = Xray(model, x, logdir=logdir, every=1, plan=plan, selector=selector, health=health,
                        collective_timeout=3 if case in ("never_closes", "late_start") else 20, **options)
        except DistributedMismatch as error:
            if case != "late_start":
                raise
            result.update(error=str(error), construct_seconds=time.monotonic() - start)
            return _finish(result, caught, logdir, rank)
        result["layers"] = sorted(xray.draft_plan())
        result["drafted"] = xray.draft_plan()
        result["types"] = {node["module"]: node["type"] for node in xray.architecture["nodes"] if node["kind"] == "module"}
        result["sharded_after_construction"] = type(model[0].weight).__name__
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4 if case == "nonfinite" or case in LATE else 3):
            optimizer.zero_grad()
            plant_nan(case, rank, step, model, backward_done=False)
            nn.MSELoss()(model(x).float(), y).backward()  # (a bfloat16 output in the mixed case)
            plant_nan(case, rank, step, model, backward_done=True)
            if case == "sparse" and step:  # a loop that calls take_graphs() at step 0 only
                optimizer.step()
                continue
            with CommDebugMode() as comms:  # every collective of a capture and a measured iteration: Xray's own
                xray.take_graphs()
            result.setdefault("collectives", []).extend(str(op) for op in comms.get_comm_counts())
            result["steps"].append(full(model))
            optimizer.step()
        if case in LATE:
            close_late(case, rank, xray, result)
        else:
            result["nonfinite"] = _where(xray.first_nonfinite)
            result["prune"] = [[entry.layer, entry.parameters, entry.reason] for entry in xray.prune()]  # a dry run
            xray.close()
    _finish(result, caught, logdir, rank)


def batch_with_a_nan(rank: int, logdir: str, result: dict, planted: int, device_path: bool) -> None:
    """Rank 1's batch holds a NaN at step ``planted`` (captures every 10, the last at 20); ``device_path``:
    the accelerator's path, forced on the CPU."""
    x, y = (part[rank::WORLD] for part in full_batch())
    y = targets(y)
    with warnings.catch_warnings(record=True) as caught, (device_path_on_cpu() if device_path else contextlib.nullcontext()):
        warnings.simplefilter("always")
        model = shard(mlp())
        xray = Xray(model, x, logdir=logdir, every=10)
        train_with_a_nan_batch(model, xray, x, y, rank, planted, lr=0.1)
        xray.close()
        result["nonfinite"] = _where(xray.first_nonfinite)
    _finish(result, caught, logdir, rank)


def accumulate_unsharded(rank: int, logdir: str, result: dict) -> None:
    """Gradient accumulation as FSDP2 recommends it: the parameters stay unsharded between the micro-batches
    (``set_reshard_after_backward(False)``), and ``take_graphs()`` runs after every backward, its weight frames
    read from the unsharded parameters; FSDP's next reshard frees their storage by resizing it."""
    x, y = (part[rank::WORLD] for part in full_batch())
    y = targets(y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = shard(mlp())
        xray = Xray(model, x, logdir=logdir, every=2, plan={"0": {"weight": True}, "2": {"weight": True}},
                    selector=RandomFilters(max_rows=3))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for micro in range(6):
            last = micro % 2 == 1
            model.set_requires_gradient_sync(last)
            model.set_reshard_after_backward(last)
            nn.MSELoss()(model(x), y).backward()
            if xray.take_graphs() is not None:  # a weight left unsharded is a plain tensor, whole on every rank
                result["steps"].append({name: (w.full_tensor() if hasattr(w, "full_tensor") else w).tolist()
                                        for name in ("0", "2") for w in [getattr(model, name).weight]})
            if last:
                optimizer.step()
                optimizer.zero_grad()
        xray.close()
        result["micro_batches"] = micro + 1
    _finish(result, caught, logdir, rank)


def _finish(result: dict, caught: list, logdir: str, rank: int) -> None:
    result["warnings"] = [str(warning.message) for warning in caught]
    with open(os.path.join(logdir, f"result{rank}.json"), "w") as file:
        json.dump(result, file)
    if "construct_seconds" not in result:  # the group is broken after a failed collective: exit without it
        dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # see ddp_worker: the TCPStore's thread may abort the interpreter's teardown


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
