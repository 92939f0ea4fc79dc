"""Storage: writing a run's event files and reading them back, without torch.

Writing: :mod:`~xray_tb.io.sink` (``EventSink``, what every part of a recording writes through) over
:mod:`~xray_tb.io.event_file` (local) or :mod:`~xray_tb.io.remote_event_file` (``s3://``, ``gs://``,
... through :mod:`~xray_tb.io.storage`; its segments wait in :mod:`~xray_tb.io.segment_queue` for
:mod:`~xray_tb.io.segment_uploader`), with :mod:`~xray_tb.io.checksums` for the CRC.
Reading: :mod:`~xray_tb.io.records` reads event files record by record (and says where one is
damaged), :mod:`~xray_tb.io.run_files` reads a run folder's files on from where it stopped,
:mod:`~xray_tb.io.run_contents` holds what they say, :mod:`~xray_tb.io.recorded_run` answers
questions about a run (``RecordedRun``), and :mod:`~xray_tb.io.reader` is ``open_run``.
"""
