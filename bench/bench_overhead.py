"""Training-loop overhead of Xray and its peers, side by side in one run, as ratios to the plain loop.

    python bench/bench_overhead.py                               # lenet,mlp-wide; the default variants
    python bench/bench_overhead.py --rounds 3 --steps 100        # a quick look
    python bench/bench_overhead.py --clock wall                  # wall-clock time instead of process CPU time
    python bench/bench_overhead.py --models lenet,mlp-wide,cnn,mlp --variants all --every 10 --threads 2

Models (--models, default lenet,mlp-wide):
  lenet      LeNet-5 on 1x28x28 inputs, batch 64: conv 1->6 k5 pad 2, ReLU, avgpool 2, conv 6->16 k5,
             ReLU, avgpool 2, fc 400->120->84->10 with ReLU
  mlp-wide   MLP 784-1024-1024-10 with tanh, batch 128
  cnn        the digits CNN of examples/digits.py on scikit-learn's 8x8 digits, batch 32
  mlp        MLP 64-256-256-10 with ReLU on the 8x8 digits, batch 32
The 28x28 data is generated (torch.randn images, random labels, fixed seed): no dataset download.

Variants (--variants, default: defaults,health-off,wandb,hooks,histograms; `all` adds the rest).
EVERY is --every (default 10), the capture frequency of every variant:
  plain          the loop without any tool
  defaults       Xray(model, example_input, logdir=..., every=EVERY) with all defaults (training
                 health on), take_graphs() each step after backward
  health-off     the same with health=False
  wandb          wandb.init(mode="offline", dir=...); wandb.watch(model, log="all", log_freq=EVERY);
                 wandb.log({"step": step}) every EVERY steps commits the row (skipped if wandb is missing)
  hooks          a user's forward hooks on every leaf module, every step: mean, std, abs max and
                 fraction of zeros of the output as Python floats (.item()), written with
                 SummaryWriter.add_scalar every EVERY steps
  histograms     SummaryWriter.add_histogram of every parameter and its grad every EVERY steps
  and, with --variants all (or by name):
  idle           Xray(every=...) attached, take_graphs() called each step, no step due: not capturing
  armed          Xray without a schedule (hooks armed on every forward), never capturing
  every          Xray(every=EVERY) with the drafted plan, health off, take_graphs() each step
  every-writer   the same, writing through a user's SummaryWriter (writer=) instead of logdir=
  every-all      Xray(every=EVERY) recording weight, weight_grad, output, activation (where one
                 follows) and grad of every conv and linear layer
  manual         no schedule, drafted plan, `if step % EVERY == 0: xray.take_graphs(step)`
  health         Xray with training health on and no capture due: per-iteration statistics only
  every-health   (every) with training health on
  health-thin    (health) thinned: HealthOptions(every=4)
  act-thin       (defaults) with the activation statistics at one capture in four:
                 HealthOptions(activations=4 * EVERY)

Each variant's loop is set up once and warmed up, as in a long training. Then, round after round
and in a new shuffled order each round, every variant runs three windows of steps on --threads
intra-op threads (default 2): the plain loop's, its own loop with the variant switched off (same
model instance and optimizer, nothing of the variant called, Xray's and the user's hooks removed or
disarmed, training health's global optimizer hooks set aside: bench/optimizer_hooks.py), and its
own loop switched on; each window runs with its own loop's global optimizer hooks only, none of the
other variants'; in that order in even rounds and in the reverse order in
odd ones, so that a machine whose speed drifts during the run does not bias every round's ratios the
same way. "vs own" is the median over rounds of on / off: the variant's cost with model-instance
effects (memory placement, caches) cancelled. "vs plain" is on / the plain window of its round. The
plain loop runs as --plain-copies instances (default 3) of the same model, taken in turn: on a 2-core
VM with 2 intra-op threads, instances of one model differ by up to 15% in time per step, and the
script prints that spread, the noise floor of every "vs plain" ratio. With --clock wall, times are wall-clock seconds instead (what a user's
training takes; a noisy VM moves them more). By default times are process CPU time: every thread of ours (the event writer's and
wandb's in-process threads included; wandb's separate service process is not counted), nothing of
other tenants. Each model ends with lines naming the cheapest variant, whether Xray's defaults cost
less than every peer measured (wandb, hooks, histograms: the tools a user would pick instead) and
whether they stay within 1.10x the plain loop.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.tensorboard import SummaryWriter

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from examples.digits import LeNetDigits, digits_loader  # noqa: E402
from optimizer_hooks import OwnHooks  # noqa: E402
from xray_tb import Xray  # noqa: E402
from xray_tb.schedules import at  # noqa: E402
from xray_tb.health import HealthOptions  # noqa: E402

os.environ.setdefault("WANDB_SILENT", "true")  # wandb's banners off; nothing leaves the machine (offline)
os.environ.setdefault("WANDB_DISABLE_GIT", "true")

EVERY = 10  # set from --every in main()
CLOCK = time.process_time  # set from --clock in main()
DEFAULT_VARIANTS = ["defaults", "health-off", "wandb", "hooks", "histograms"]
# variant: (schedule, record every kind of every conv and linear layer rather than the draft, write
# through a user's SummaryWriter rather than logdir=, training health); "every" stands for EVERY
XRAY_VARIANTS = {
    "defaults": ("every", False, False, True),
    "health-off": ("every", False, False, False),
    "idle": (at([]), True, False, False),
    "armed": (None, False, False, False),
    "every": ("every", False, False, False),
    "every-writer": ("every", False, True, False),
    "every-all": ("every", True, False, False),
    "manual": (None, False, False, False),
    "health": (at([]), False, False, True),
    "every-health": ("every", False, False, True),
    "health-thin": (at([]), False, False, HealthOptions(every=4)),
    "act-thin": ("every", False, False, "act-thin"),
}
# the variants whose take_graphs() is called on every step (manual calls it on due steps only)
TAKE_EACH_STEP = {variant for variant in XRAY_VARIANTS if variant != "manual"}
PLAIN = "plain"
# the peers: the tools a user would pick instead of Xray for the same view (Xray's defaults must cost less)
OTHER_VARIANTS = ["wandb", "hooks", "histograms"]


def mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def lenet5() -> nn.Module:
    """LeNet-5 for 1x28x28 inputs (the first conv pads by 2, as for MNIST)."""
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.AvgPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 10),
    )


def mlp_wide() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.Tanh(), nn.Linear(1024, 1024), nn.Tanh(), nn.Linear(1024, 10))


def digits_batches(count: int, batch_size: int = 32) -> list:
    data = [b for b in digits_loader(batch_size, seed=0)]
    return [data[i % len(data)] for i in range(count)]


def generated_batches(count: int, batch_size: int, pool: int = 32) -> list:
    """Random 1x28x28 images and labels (fixed seed), ``pool`` distinct batches cycled."""
    generator = torch.Generator().manual_seed(0)
    data = [(torch.randn(batch_size, 1, 28, 28, generator=generator), torch.randint(0, 10, (batch_size,), generator=generator))
            for _ in range(min(pool, count))]
    return [data[i % len(data)] for i in range(count)]


# name: (title, model factory, one sample's shape, batches(count))
MODELS = {
    "lenet": ("LeNet-5 28x28, batch 64", lenet5, (1, 28, 28), lambda count: generated_batches(count, 64)),
    "mlp-wide": ("MLP 784-1024-1024-10 tanh, batch 128", mlp_wide, (1, 28, 28), lambda count: generated_batches(count, 128)),
    "cnn": ("digits CNN, batch 32", LeNetDigits, (1, 8, 8), digits_batches),
    "mlp": ("MLP 64-256-256-10, batch 32", mlp, (1, 8, 8), digits_batches),
}


def full_plan(xray: Xray) -> dict:
    """Every kind of every conv and linear layer (activation where one follows)."""
    plan = xray.draft_plan()
    types = {node["module"]: node["type"] for node in xray.architecture["nodes"] if node["kind"] == "module"}
    for layer, entry in plan.items():
        if types[layer] in ("Conv2d", "Linear"):
            entry.update(weight=True, weight_grad=True, grad=True, output=True)
    return plan


class UserHooks:
    """What a user writes by hand: a forward hook on every leaf module that reduces the output to a
    few Python floats on every step, written as scalars every EVERY steps."""

    def __init__(self, model: nn.Module, writer: SummaryWriter):
        self.leaves = [(name, module) for name, module in model.named_modules() if not list(module.children())]
        self.writer = writer
        self.latest: dict[str, tuple[float, float, float, float]] = {}
        self.handles: list = []

    def _hook(self, name: str):
        def hook(module, inputs, output) -> None:
            with torch.no_grad():
                out = output.detach()
                self.latest[name] = (out.mean().item(), out.std().item(), out.abs().max().item(), (out == 0).float().mean().item())

        return hook

    def attach(self) -> None:
        if not self.handles:
            self.handles = [module.register_forward_hook(self._hook(name)) for name, module in self.leaves]

    def detach(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def write(self, step: int) -> None:
        for name, (mean, std, absmax, zeros) in self.latest.items():
            self.writer.add_scalar(f"{name}/mean", mean, step)
            self.writer.add_scalar(f"{name}/std", std, step)
            self.writer.add_scalar(f"{name}/absmax", absmax, step)
            self.writer.add_scalar(f"{name}/zeros", zeros, step)


class Loop:
    """One variant's training loop: set up once, then timed over windows of steps, as in a long
    training (one-time costs such as the trace or the first capture are not per-step costs)."""

    def __init__(self, variant: str, make_model, sample_shape: tuple, example_input: torch.Tensor, logdir: str):
        self.own_hooks = OwnHooks()  # the global optimizer hooks this loop's tool registers, installed for its windows only
        with self.own_hooks.owning():
            self._set_up(variant, make_model, sample_shape, example_input, logdir)

    def _set_up(self, variant: str, make_model, sample_shape: tuple, example_input: torch.Tensor, logdir: str) -> None:
        torch.manual_seed(0)
        self.variant = variant
        self.model = make_model()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.step = 0
        self.xray = self.writer = self.hooks = None
        if variant in XRAY_VARIANTS:
            schedule, everything, shared, health = XRAY_VARIANTS[variant]
            schedule = EVERY if schedule == "every" else schedule
            health = HealthOptions(activations=4 * EVERY) if health == "act-thin" else health
            if shared:
                self.writer = SummaryWriter(logdir)
            where = {"writer": self.writer} if shared else {"logdir": logdir}
            if variant in ("defaults", "health-off"):  # as a user writes it: an example batch, defaults
                options = {} if health is True else {"health": health}
                self.xray = Xray(self.model, example_input, every=schedule, **options, **where)
            else:
                self.xray = Xray(self.model, input_size=sample_shape, every=schedule, health=health, **where)
            if everything:
                self.xray.set_plan(full_plan(self.xray))
        if variant in ("histograms", "hooks"):
            self.writer = SummaryWriter(logdir)
        if variant == "hooks":
            self.hooks = UserHooks(self.model, self.writer)
            self.hooks.attach()
        if variant == "wandb":
            import wandb

            wandb.init(mode="offline", dir=logdir, project="xray-tb-bench", name=f"bench-{Path(logdir).parent.name}")
            wandb.watch(self.model, log="all", log_freq=EVERY)

    def window(self, data, instrumented: bool = True) -> float:
        """CPU seconds per step over ``data``; ``instrumented=False`` trains the same model with the
        same optimizer but calls nothing of the variant's (Xray's hooks disarmed, the user's hooks
        removed meanwhile), so the two can be compared on one model instance (wandb's hooks are not
        lifted: it is always on)."""
        paused = self.xray.recording.paused() if self.xray is not None and not instrumented else contextlib.nullcontext()
        if self.hooks is not None and not instrumented:
            self.hooks.detach()
        gc.collect()  # collected before the clock starts, for every variant alike
        # Xray's hooks and training health's, armed again after; the global optimizer hooks of this
        # loop's Xray only, and none when switched off (health would run its iteration from the step)
        with self.own_hooks.owning(active=instrumented), paused:
            start = CLOCK()
            for x, y in data:
                self._step(x, y, instrumented)
            elapsed = (CLOCK() - start) / len(data)
        if self.hooks is not None:
            self.hooks.attach()
        return elapsed

    def _step(self, x, y, instrumented: bool) -> None:
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        due = self.step % EVERY == 0
        if not instrumented:
            pass
        elif self.variant in TAKE_EACH_STEP:
            self.xray.take_graphs()
        elif self.variant == "manual" and due:
            self.xray.take_graphs(self.step)
        elif self.variant == "histograms" and due:
            for name, param in self.model.named_parameters():
                self.writer.add_histogram(name, param, self.step)
                self.writer.add_histogram(name + "/grad", param.grad, self.step)
        elif self.variant == "hooks" and due:
            self.hooks.write(self.step)
        elif self.variant == "wandb" and due:
            import wandb

            wandb.log({"step": self.step})  # commits the row wandb.watch's hooks filled
        self.optimizer.step()
        self.step += 1

    def close(self) -> None:
        with self.own_hooks.owning():
            self._close()

    def _close(self) -> None:
        if self.hooks is not None:
            self.hooks.detach()
        if self.xray is not None:
            self.xray.close()
        if self.writer is not None:
            self.writer.close()
        if self.variant == "wandb":
            import wandb

            wandb.finish()


def _spread(per_copy: dict[str, list[float]]):
    """How far apart the plain instances' medians are (max / min - 1), None with one instance."""
    if len(per_copy) < 2:
        return None
    medians = [statistics.median(times) for times in per_copy.values()]
    return max(medians) / min(medians) - 1


def wandb_version() -> str | None:
    try:
        import wandb
    except ImportError:
        return None
    return getattr(wandb, "__version__", "?")


def main() -> None:
    global EVERY, CLOCK
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="steps per window")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--models", default="lenet,mlp-wide", help=f"comma-separated: {', '.join(MODELS)}")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help="comma-separated variants, or 'all' (plain is always run)")
    parser.add_argument("--every", type=int, default=10, help="capture frequency of every variant (default 10)")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="process CPU time (default) or wall-clock time")
    parser.add_argument("--plain-copies", type=int, default=3,
                        help="instances of the plain loop, taken in turn as each window's plain one (default 3)")
    args = parser.parse_args()
    EVERY = args.every
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    known = [*XRAY_VARIANTS, *OTHER_VARIANTS]
    wanted = known if args.variants == "all" else [v for v in args.variants.split(",") if v and v != "plain"]
    unknown = [v for v in wanted if v not in known]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(known)}")
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    if "wandb" in wanted:
        version = wandb_version()
        if version is None:
            print("wandb: not installed, variant skipped (pip install wandb, or the 'bench' extra)")
            wanted.remove("wandb")
        else:
            print(f"wandb {version}, offline")
    if args.plain_copies < 1:
        parser.error("--plain-copies must be at least 1")
    copies = [PLAIN, *(f"{PLAIN}#{index + 1}" for index in range(1, args.plain_copies))]
    variants = [*copies, *wanted]
    others = wanted
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, every={EVERY}, "
          f"{args.rounds} rounds of {args.steps}-step windows, {'process CPU' if args.clock == 'cpu' else 'wall-clock'} time")
    order = random.Random(0)
    warmup = max(2 * EVERY, 50)
    summary = []
    for model_key in args.models.split(","):
        title, make_model, sample_shape, make_batches = MODELS[model_key]
        data = make_batches(max(args.steps, warmup))
        window_data, warm_data = data[: args.steps], data[:warmup]
        per_copy: dict[str, list[float]] = {}  # each plain instance's windows
        on = {variant: [] for variant in others}
        own_off = {variant: [] for variant in others}
        plain_next_to = {variant: [] for variant in others}
        with tempfile.TemporaryDirectory() as tmp:
            loops = {variant: Loop(variant, make_model, sample_shape, data[0][0], f"{tmp}/{variant}") for variant in variants}
            for loop in loops.values():
                loop.window(warm_data)  # warm-up, first captures included
            for round_index in range(args.rounds):
                for index, variant in enumerate(order.sample(others, len(others))):
                    # plain, off, on in even rounds and on, off, plain in odd ones: a machine whose speed
                    # drifts over the run biases the ratios one way, then the other (their median cancels it);
                    # the plain copies take turns, so that no variant is compared with one instance only
                    plain_copy = copies[(round_index + index) % len(copies)]
                    windows = [(plain_copy, plain_next_to, True), (variant, own_off, False), (variant, on, True)]
                    for name, times, instrumented in windows[::-1] if round_index % 2 else windows:
                        elapsed = loops[name].window(window_data, instrumented=instrumented)
                        times[variant].append(elapsed)
                        if name == plain_copy:
                            per_copy.setdefault(name, []).append(elapsed)
            for loop in loops.values():
                loop.close()
        plain = statistics.median(t for ts in plain_next_to.values() for t in ts) if others else float("nan")
        print(f"\n{model_key}: {title}; {'CPU' if args.clock == 'cpu' else 'wall-clock'} time per step, median over {args.rounds} rounds")
        spread = _spread(per_copy)
        if spread is not None:
            medians = ", ".join(f"{statistics.median(times) * 1e3:.3f}" for times in per_copy.values())
            print(f"{len(per_copy)} instances of the plain loop, ms/step {medians}: they differ by up to {spread:.1%}, "
                  f"the noise floor of 'vs plain' (an instance's memory placement); 'vs own' cancels it")
        print(f"{'variant':<13} {'ms/step':>8} {'vs own':>7} {'vs plain':>8}")
        print(f"{'plain':<13} {plain * 1e3:8.3f} {1:7.3f} {1:8.3f}")
        versus, own_ratio = {}, {}
        for variant in others:
            own = own_ratio[variant] = statistics.median(v / o for v, o in zip(on[variant], own_off[variant]))
            versus[variant] = statistics.median(v / p for v, p in zip(on[variant], plain_next_to[variant]))
            own_text = "   --  " if variant == "wandb" else f"{own:7.3f}"
            print(f"{variant:<13} {statistics.median(on[variant]) * 1e3:8.3f} {own_text} {versus[variant]:8.3f}")
        if versus:
            cheapest = min(versus, key=versus.get)
            print(f"cheapest variant on {model_key}: {cheapest} ({versus[cheapest]:.3f}x plain)")
        peers = {variant: ratio for variant, ratio in versus.items() if variant in OTHER_VARIANTS}
        if "defaults" in versus and peers:
            rival = min(peers, key=peers.get)
            verdict = "yes" if versus["defaults"] < peers[rival] else "NO"
            print(f"Xray defaults cheaper than every peer ({', '.join(peers)}) on {model_key}: {verdict} "
                  f"({versus['defaults']:.3f}x against {peers[rival]:.3f}x for {rival})")
        if "defaults" in versus:
            verdict = "yes" if versus["defaults"] <= 1.10 else "NO"
            floor = "" if spread is None else f"; the plain instances differ by up to {spread:.1%}"
            print(f"Xray defaults (health on, every={EVERY}) <= 1.10x plain on {model_key}: {verdict} ({versus['defaults']:.3f}x"
                  f"{floor}; {own_ratio['defaults']:.3f}x against its own loop)")
        summary.append((model_key, versus))
    if len(summary) > 1 and others:
        print(f"\nsummary, ratio vs plain (every={EVERY}, {torch.get_num_threads()} threads)")
        print(f"{'variant':<13}" + "".join(f" {key:>9}" for key, _ in summary))
        for variant in others:
            print(f"{variant:<13}" + "".join(f" {versus[variant]:9.3f}" for _, versus in summary))


if __name__ == "__main__":
    main()
