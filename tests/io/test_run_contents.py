"""One read path: a run's contents under one rule (the last write of a step wins, in write order),
read once and kept while the files are unchanged."""

from __future__ import annotations

import time

from tensorboard.compat.proto import event_pb2

from tb_plugin import health_metadata
from xray_tb.health import reading
from xray_tb.io.event_file import EventFile
from xray_tb.io.reader import open_run, read_contents


def findings_event(step: int, rule: str) -> event_pb2.Event:
    finding = {"rule": rule, "layer": "fc", "step": step, "value": 1.0, "message": rule, "last_step": step}
    return event_pb2.Event(step=step, wall_time=time.time(), summary=health_metadata.findings_summary([finding]))


def test_findings_written_last_win_even_at_a_lower_step(tmp_path):
    first = EventFile(str(tmp_path))
    first.add_event(findings_event(50, "dead_units"))
    first.close()
    resumed = EventFile(str(tmp_path))  # a run restarted into the same folder writes a later file
    resumed.add_event(findings_event(10, "saturation"))
    resumed.close()
    assert [finding.rule for finding in reading.findings(str(tmp_path))] == ["saturation"]
    assert [finding.rule for finding in open_run(tmp_path).findings()] == ["saturation"]


def test_contents_are_kept_while_the_files_are_unchanged_and_read_on_when_appended(tmp_path):
    file = EventFile(str(tmp_path))
    file.add_event(findings_event(1, "dead_units"))
    contents = read_contents(tmp_path)
    assert read_contents(str(tmp_path)) is contents  # nothing changed: nothing read again
    file.add_event(findings_event(2, "saturation"))
    assert read_contents(tmp_path) is contents and contents.findings is not None
    assert [finding.rule for finding in reading.findings(tmp_path)] == ["saturation"]
    file.close()


def test_contents_are_read_anew_when_a_file_is_rewritten(tmp_path):
    file = EventFile(str(tmp_path))
    file.add_event(findings_event(1, "dead_units"))
    file.add_event(findings_event(2, "saturation"))
    file.close()
    contents = read_contents(tmp_path)
    rewritten = EventFile(str(tmp_path))
    rewritten.add_event(findings_event(3, "update_ratio"))
    rewritten.close()
    with open(file.path, "r+b") as handle:  # the first file cut short: read it all again
        handle.truncate(100)
    again = read_contents(tmp_path)
    assert again is not contents
    assert [finding.rule for finding in reading.findings(tmp_path)] == ["update_ratio"]
