"""Xray on big models, on CPU: tracing and construction against one forward+backward (issue 20, part 4).

    python bench/bench_big_models.py [--models seq1k,seq5k,seq15k,rg1k,rg5k,rg15k,resnet50,gpt2] [--repeats 3]

Models: ``nn.Sequential`` of Linear(8, 8) + ReLU pairs with 1k, 5k and 15k modules (batch 4x8:
the layers cost almost nothing, so Xray's per-module overhead shows), random graph models of about
1k, 5k and 15k nodes (bench/random_graph_model.py, after TorchLens's scale-test models: chains,
residual, fan-out and attention blocks, width 64, batch 16x64), the ResNet-50-shaped model of
bench/bench_tab.py (batch 1x3x224x224) and a GPT-2-small-sized transformer (tests/transformer.py:
d = 768, 12 blocks, 12 heads, vocabulary 50,257, 128 tokens). Each model runs in its own process,
so that its peak memory is its own, with denormals flushed to zero (``torch.set_flush_denormal``:
the random graph models' gradients fade into subnormal floats, which would make their backward 60x
slower and every ratio to it look better than it is). For each, side by side:

* fwd+bwd: one plain forward + ``sum().backward()`` (min of ``--repeats`` after a warm-up);
* trace: ``xray_tb.trace.tracer.trace`` (min of ``--repeats``), and its ratio to fwd+bwd;
* Xray(): construction with the defaults (trace, drafted plan, health), min of ``--repeats`` (as the
  two above: a single one moved by a third between runs on the 2-core VM), and its ratio;
* plan: the drafted plan's layers with something to record, and its kinds (count per kind);
* capture: one ``take_graphs()`` after a training step at the defaults (16 MiB budget): time,
  bytes written, frames, frames skipped for the budget;
* peak extra memory: the process's peak RSS after construction and the capture, less its peak
  before (``ru_maxrss``; model, input and a plain forward+backward already done);
* held between captures: what Xray keeps while training goes on between two captures, against the
  model's parameter bytes. A second Xray (``every=5``, ``optimizer=`` an SGD) trains 7 steps (captures
  at steps 0 and 5), then, at step 7, the bytes of every tensor storage reachable by the garbage
  collector that is not the model's (parameters, gradients, buffers), the optimizer's or the input's,
  less the same count after the same steps of the plain loop, plus the Python heap Xray allocated
  since its construction began (``tracemalloc``: its graph, plan, buffers and numpy arrays).

Goals (issue 20): trace <= 2x fwd+bwd, Xray() <= 2x fwd+bwd, held between captures <= 1% of the
parameter bytes; each is printed as holds / misses.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ("seq1k", "seq5k", "seq15k", "rg1k", "rg5k", "rg15k", "resnet50", "gpt2")
GOAL_RATIO = 2.0
GOAL_HELD = 0.01  # of the parameter bytes


def _model(name: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if name.startswith("seq"):
        modules = int(name[3:-1]) * 1000
        layers: list[nn.Module] = []
        for _ in range(modules // 2):
            layers += [nn.Linear(8, 8), nn.ReLU()]
        return nn.Sequential(*layers), torch.randn(4, 8)
    if name.startswith("rg"):
        sys.path.insert(0, str(ROOT / "bench"))
        from random_graph_model import RandomGraphModel

        return RandomGraphModel(int(name[2:-1]) * 1000), torch.randn(16, 64)
    if name == "resnet50":
        sys.path.insert(0, str(ROOT / "bench"))
        from bench_tab import resnet50

        return resnet50(), torch.randn(1, 3, 224, 224)
    if name == "gpt2":
        from tests.transformer import GPT

        return GPT(blocks=12, heads=12, width=768, context=128, vocab=50257), torch.randint(0, 50257, (1, 128))
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def _forward_backward(model: nn.Module, x: torch.Tensor) -> None:
    model(x).float().sum().backward()
    model.zero_grad(set_to_none=True)


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def measure(name: str, repeats: int) -> dict:
    """All the figures of one model, in this process."""
    from xray_tb import Xray

    # The random graph models' gradients fade through hundreds of blocks into subnormal floats, which
    # a CPU multiplies 50 to 100 times slower: their forward and backward would look 60x dearer.
    torch.set_flush_denormal(True)
    from xray_tb.trace.tracer import trace

    model, x = _model(name)
    model.train()
    _forward_backward(model, x)  # torch's one-time costs
    passes = [_seconds(lambda: _forward_backward(model, x)) for _ in range(repeats)]
    nodes = len(trace(model, (x,))["nodes"])  # and the tracer's one-time costs (signature tables)
    traces = [_seconds(lambda: trace(model, (x,))) for _ in range(repeats)]
    before = _peak_rss_bytes()
    with tempfile.TemporaryDirectory() as logdir:
        constructions = []
        for attempt in range(repeats):  # each a run of its own; the last one captures
            start = time.perf_counter()
            xray = Xray(model, x, logdir=f"{logdir}/{attempt}")
            constructions.append(time.perf_counter() - start)
            if attempt < repeats - 1:
                xray.close()
        construct = min(constructions)
        plan = xray.plan
        kinds = collections.Counter(kind for entry in plan.values() for kind, on in entry.items() if on)
        layers = sum(1 for entry in plan.values() if any(entry.values()))
        _forward_backward(model, x)
        capture = _seconds(xray.take_graphs)
        report = xray.last_report
        xray.close()
    peak_extra = _peak_rss_bytes() - before
    held, python_heap = _held_between_captures(model, x)
    return {
        "model": name,
        "modules": sum(1 for _ in model.modules()) - 1,
        "nodes": nodes,
        "params": sum(p.numel() for p in model.parameters()),
        "fwd_bwd": min(passes),
        "trace": min(traces),
        "construct": construct,
        "plan_layers": layers,
        "plan_kinds": dict(sorted(kinds.items())),
        "capture": capture,
        "capture_bytes": report.bytes,
        "frames": report.frames,
        "skipped": len(report.skipped),
        "peak_extra": peak_extra,
        "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "held_tensors": held,
        "held_python": python_heap,
    }


HELD_STEPS, HELD_EVERY = 7, 5


def _held_between_captures(model: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """(tensor bytes, Python heap bytes) Xray holds at step HELD_STEPS, between two captures."""
    from xray_tb import Xray

    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)

    def train(xray=None) -> int:
        for step in range(HELD_STEPS):
            optimizer.zero_grad(set_to_none=True)
            model(x).float().sum().backward()
            if xray is not None:
                xray.take_graphs(step)
            optimizer.step()
        return _tensor_bytes(model, optimizer, x)

    plain = train()
    with tempfile.TemporaryDirectory() as logdir:
        tracemalloc.start()
        start = tracemalloc.get_traced_memory()[0]
        xray = Xray(model, x, logdir=logdir, every=HELD_EVERY, optimizer=optimizer)
        with_xray = train(xray)
        python_heap = tracemalloc.get_traced_memory()[0] - start
        tracemalloc.stop()
        xray.close()
    return with_xray - plain, python_heap


def _tensor_bytes(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> int:
    """Bytes of the tensor storages the garbage collector reaches, less the model's, the optimizer's
    and the input's (each storage once)."""
    gc.collect()
    own = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers(), x)}
    own |= {p.grad.untyped_storage().data_ptr() for p in model.parameters() if p.grad is not None}
    own |= {v.untyped_storage().data_ptr() for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)}
    seen, total = set(), 0
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and not obj.is_meta:
            storage = obj.untyped_storage()
            pointer = storage.data_ptr()
            if pointer and pointer not in own and pointer not in seen:
                seen.add(pointer)
                total += storage.nbytes()
    return total


def _held(r: dict) -> float:
    return (r["held_tensors"] + r["held_python"]) / r["param_bytes"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of fwd+bwd, trace and Xray() (default 3)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process: one model, JSON out
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.repeats)))
        return 0
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    header = f"{'model':9} {'modules':>7} {'nodes':>6} {'fwd+bwd':>8} {'trace':>14} {'Xray()':>14} {'plan':>6} {'capture':>8} {'bytes':>9} {'frames':>6} {'peak +MiB':>9} {'held %':>7}"
    print(header)
    results, holds = [], True
    for name in args.models.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--one", name, "--repeats", str(args.repeats)],
            env=env, check=True, capture_output=True, text=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        results.append(r)
        t, c = r["trace"] / r["fwd_bwd"], r["construct"] / r["fwd_bwd"]
        print(
            f"{name:9} {r['modules']:>7} {r['nodes']:>6} {r['fwd_bwd']:>7.3f}s {r['trace']:>6.3f}s {t:>5.1f}x {r['construct']:>6.3f}s {c:>5.1f}x "
            f"{r['plan_layers']:>6} {r['capture']:>7.3f}s {r['capture_bytes']:>9,} {r['frames']:>6} {r['peak_extra'] / 2**20:>9.1f} {_held(r):>6.2%}"
        )
    print()
    for r in results:
        t_ok = r["trace"] <= GOAL_RATIO * r["fwd_bwd"]
        c_ok = r["construct"] <= GOAL_RATIO * r["fwd_bwd"]
        m_ok = _held(r) <= GOAL_HELD
        holds &= t_ok and c_ok and m_ok
        print(
            f"{r['model']:9} plan kinds {r['plan_kinds']}, skipped for the budget {r['skipped']}; "
            f"trace <= 2x fwd+bwd: {'holds' if t_ok else 'misses'}; Xray() <= 2x fwd+bwd: {'holds' if c_ok else 'misses'}; "
            f"held between captures {r['held_tensors']:,} B of tensors + {r['held_python']:,} B of Python heap "
            f"= {_held(r):.2%} of {r['param_bytes']:,} parameter bytes (<= 1%: {'holds' if m_ok else 'misses'})"
        )
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
