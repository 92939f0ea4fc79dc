"""Judging and writing one block of health rows, once the rows have reached the host.

A block is what :class:`~xray_tb.health.monitor.HealthMonitor` buffered since its last write: the rows of
the measured iterations, those of the health steps, and the per-unit vectors. :class:`BlockWriter`
locates the first non-finite value, runs the rules (their findings accumulate in a
:class:`~xray_tb.health.findings.FindingBook`), and writes the series and vectors as plugin data, a few
model-level scalars, the prune plan, the findings, and the per-layer scalars only with ``layer_scalars``.
It also keeps the per-epoch moments written by :meth:`BlockWriter.end_epoch`.
"""

from __future__ import annotations

import time
import warnings
from typing import Optional

import numpy as np
from tensorboard.compat.proto import event_pb2

from tb_plugin import health_metadata
from xray_tb.health import model_scalars, nonfinite, writing
from xray_tb.health.buffer import Block
from xray_tb.health.epochs import EpochAccumulator
from xray_tb.health.findings import Finding, FindingBook, NonFinite
from xray_tb.health.rules import Rule, RuleInput
from xray_tb.health.scope import Scope
from xray_tb.health.sentinel import NonFiniteSentinel
from xray_tb.health.stats import ActivationStatistic, ForwardChecks, IterationStatistic
from xray_tb.io.sink import EventSink


class BlockWriter:
    """Findings and events from the blocks of one monitor; ``sink`` None once closed.

    ``iteration_families`` and ``activation_families`` are the monitor's own lists (a family added later
    is seen here too); ``checks`` are the forward checks whose columns end each activation row."""

    def __init__(self, sink: EventSink, scope: Scope, rules: list[Rule], layer_scalars: bool,
                 iteration_families: list[IterationStatistic], activation_families: list[ActivationStatistic],
                 checks: ForwardChecks, sentinel: NonFiniteSentinel, earlier_findings: Optional[list[dict]] = None):
        """``earlier_findings``: those an earlier process wrote in the run (resumed): the ones first seen
        before the first step this one writes are kept, and the list is written at the first block,
        so that findings of steps recorded again (a crashed attempt's NaN) are gone."""
        self.sink: Optional[EventSink] = sink
        self.layer_scalars = layer_scalars
        self.first_nonfinite: Optional[NonFinite] = None
        #: Steps whose batch held a NaN or Inf (the monitor adds them where the sentinel found one on a CPU).
        self.nonfinite_inputs: set[int] = set()
        #: ``{step: layer}``: the first layer whose output was not finite when the forward of a step whose
        #: gradients only were found non-finite ran again (health/forward_replay.py).
        self.forward_origins: dict[int, str] = {}
        #: The flags of a location put off because its step's weights and gradients were not checked yet.
        self._put_off: Optional[nonfinite.FlagRows] = None
        self._scope = scope
        self._rules = rules
        self._iteration_families = iteration_families
        self._activation_families = activation_families
        self._checks = checks
        self._sentinel = sentinel
        self._book = FindingBook()
        self._failed_rules: set[str] = set()  # rules that raised (warned once each)
        self._prune_plan = model_scalars.PrunePlan()
        self._epochs = EpochAccumulator()
        self._epoch = 0
        self._earlier = earlier_findings
        self._findings_version = 0  # the step of a findings list: the highest is current, across processes

    def write(self, iterations: Optional[Block], activations: Optional[Block], vectors: list, last_step: int,
              unchecked: Optional[int] = None) -> None:
        """Locate, judge and write one block (nothing to write: no event); ``last_step`` is the step of
        the latest iteration, under which the prune plan and the count of findings are filed; ``unchecked``:
        a step whose activations are in the block but whose weights and gradients the sentinel checks
        later (at its optimizer step): a first non-finite value found there or after is located then."""
        located = False
        if self.first_nonfinite is None:
            self.first_nonfinite = self._locate_nonfinite(iterations, activations, unchecked)
            located = self.first_nonfinite is not None
        if iterations is None and activations is None and not vectors and not located:
            return
        series = writing.block_series(iterations, self._iteration_families)
        activation_series = writing.block_series(activations, self._activation_families)
        if self._earlier is not None:
            firsts = [int(block.steps.min()) for block in (iterations, activations) if block is not None and len(block)]
            self._book.inherit(self._earlier, min(firsts, default=last_step))
            self._earlier = None
        self._judge(iterations, series, activations, activation_series)
        for stat, entry in series.items():
            self._epochs.add(stat, entry.layers, entry.values, entry.absent)
        events = model_scalars.model_scalar_events(iterations, series, activations, activation_series, self._scope.sharing)
        for block, block_series in ((iterations, series), (activations, activation_series)):
            if block is not None and block_series:
                if self.layer_scalars:
                    events += writing.scalar_events(block.steps, block.walls, block_series)
                events.append(writing.series_event(block.steps, float(block.walls[0]), block_series))
        vector_events, dead_vectors = writing.vector_events(vectors)
        events += vector_events
        now = time.time()
        plan = self._prune_plan.event({layer.name: layer for layer in self._scope.activations}, dead_vectors, last_step, now)
        if plan is not None:
            events.append(plan)
        if self._book.changed:
            findings = [finding.to_dict() for finding in self._book.findings()]
            # milliseconds since the epoch, at least one more each write: a later process's list is current
            self._findings_version = max(self._findings_version + 1, int(now * 1000))
            events.append(event_pb2.Event(step=self._findings_version, wall_time=now, summary=health_metadata.findings_summary(findings)))
            events.append(model_scalars.findings_count_event(last_step, now, len(findings)))
            self._book.written()
        for event in events:
            self.sink.add_event(event)
        self.sink.flush()

    def findings(self) -> list[Finding]:
        """The findings so far, in the order first seen."""
        return self._book.findings()

    def end_epoch(self) -> dict[str, dict[str, tuple[float, float]]]:
        """Close the epoch: write and return each statistic's per-layer (mean, std) over it."""
        moments = self._epochs.close_epoch()
        if moments and self.sink is not None:
            self.sink.add_event(writing.epochs_event(self._epoch, time.time(), moments))
            if self.layer_scalars:
                self.sink.add_event(writing.epoch_event(self._epoch, time.time(), moments))
            self.sink.flush()
        self._epoch += 1
        return moments

    def shift_forward_finds(self, delta: int) -> None:
        """File the forward origins and non-finite batches noted so far ``delta`` steps later (renumbered)."""
        self.forward_origins = {step + delta: layer for step, layer in self.forward_origins.items()}
        self.nonfinite_inputs = {step + delta for step in self.nonfinite_inputs}

    def _locate_nonfinite(self, iterations: Optional[Block], activations: Optional[Block],
                          unchecked: Optional[int] = None) -> Optional[NonFinite]:
        flags, self._put_off = self._put_off or nonfinite.FlagRows(), None
        self._sentinel.take(flags)  # weights and gradients, every iteration
        flags.add_block(iterations, self._iteration_families, frozenset(flags.by_step))
        flags.add_checks(activations, len(self._activation_families), self._checks.layers)
        for step, layer in self.forward_origins.items():
            flags.by_step.setdefault(step, {}).setdefault("output", set()).add(layer)
        found = nonfinite.first_nonfinite(flags, self._scope.order, self._scope.activation_modules)
        if found is not None and unchecked is not None and found.step >= unchecked:
            # a weight of that step, found at its check, would come first (a NaN BatchNorm weight before the ReLU it feeds)
            self._put_off = flags
            return None
        return found

    def _judge(self, iterations: Optional[Block], series: dict, activations: Optional[Block], activation_series: dict) -> None:
        empty = np.zeros(0, dtype=np.int64)
        block = RuleInput(
            steps=iterations.steps if iterations is not None else empty,
            layers=list(self._iteration_families[0].layers),
            stats={stat: np.where(entry.absent, np.nan, entry.values) for stat, entry in series.items()},
            sizes=np.asarray([layer.size for layer in self._scope.weighted], dtype=np.float64),
            health_steps=activations.steps if activations is not None else empty,
            health_layers=[layer.name for layer in self._scope.activations],
            health_stats={stat: np.where(entry.absent, np.nan, entry.values) for stat, entry in activation_series.items()},
            first_nonfinite=self.first_nonfinite,
            zero_clamped=frozenset(layer.name for layer in self._scope.activations if layer.zero_clamped),
            # this rank's batches, and those the ranks' agreement says another rank's batch held (DDP, FSDP)
            nonfinite_inputs=frozenset(self.nonfinite_inputs | self._sentinel.input_finds.keys()),
        )
        for rule in self._rules:
            try:
                hits = [(hit, rule.message(hit)) for hit in rule.check(block)]
            except Exception as error:  # noqa: BLE001 - a failing rule costs its own findings, not the block
                self._rule_failed(rule, error)
                continue
            for hit, message in hits:
                self._book.add(rule.name, hit, message)

    def _rule_failed(self, rule: Rule, error: Exception) -> None:
        """A rule raised on a block: its findings there are skipped (warned once per rule); the block's
        statistics and the other rules' findings are written all the same."""
        if rule.name not in self._failed_rules:
            self._failed_rules.add(rule.name)
            warnings.warn(f"the finding rule {rule.name!r} failed ({type(error).__name__}: {error}); its findings are "
                          "skipped where it fails, and the statistics and the other rules' findings are written. Switch it "
                          f"off with HealthOptions(rules={{{rule.name!r}: False}})", stacklevel=2)
