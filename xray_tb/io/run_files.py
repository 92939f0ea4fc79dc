"""Reading the event files of one run directory into a :class:`~xray_tb.io.run_contents.RunContents`,
each read going on from where the last one stopped."""

from __future__ import annotations

import os

from xray_tb.io import storage
from xray_tb.io.records import RecordReader
from xray_tb.io.run_contents import RunContents


class RunFiles:
    """The event files directly in one run directory, and what they hold as read so far (:attr:`contents`).

    Args:
        logdir: the run directory.
        warn: whether a damaged record or an unreadable value gives a
            :class:`~xray_tb.io.records.DamagedEventFileWarning`.
    """

    def __init__(self, logdir: str, *, warn: bool = True):
        self.logdir = logdir
        self._warn = warn
        #: What the files hold, as read so far.
        self.contents = RunContents(warn=warn)
        self._readers: dict[str, RecordReader] = {}
        self._sizes: dict[str, tuple[int, int]] = {}  # local file → (size, mtime) when last read

    def read(self) -> None:
        """Read what was written to the event files since the last read (new files too) into :attr:`contents`."""
        for path in _event_files(self.logdir):
            reader = self._readers.setdefault(path, RecordReader(path, warn=self._warn))
            for record in reader.read():
                self.contents.add_record(path, record)
            if not storage.is_remote(path):
                self._sizes[path] = _size_and_time(path)

    def unchanged_but_appended(self) -> bool:
        """Whether every file read is still there, grown or as it was (local files only)."""
        if not self._readers or any(storage.is_remote(path) for path in self._readers):
            return False
        for path, (size, mtime) in self._sizes.items():
            try:
                now = _size_and_time(path)
            except OSError:
                return False
            if now[0] < size or (now[0] == size and now[1] != mtime):
                return False
        return True


#: The most run directories an error lists by name.
_LISTED_RUNS = 10


def _event_files(logdir: str) -> list[str]:
    """The event files directly in ``logdir``, in name order."""
    if not storage.isdir(logdir):
        if not storage.is_remote(logdir) and os.path.isfile(logdir):
            raise NotADirectoryError(f"{logdir!r} is a file, not a run directory: give the folder that holds the event files")
        raise FileNotFoundError(f"no such run directory: {logdir!r}")
    paths = storage.event_files(logdir)  # local or remote (s3://...), through TensorBoard's file layer
    if paths:
        return paths
    runs = storage.run_folders_below(logdir)
    if runs:
        listed = ", ".join(runs[:_LISTED_RUNS]) + (f", and {len(runs) - _LISTED_RUNS} more" if len(runs) > _LISTED_RUNS else "")
        raise ValueError(
            f"{logdir!r} holds no event file but {len(runs)} run director{'y' if len(runs) == 1 else 'ies'} below it do: "
            f"{listed}; open one of them, e.g. open_run({storage.join(logdir, runs[0])!r})"
        )
    raise ValueError(f"{logdir!r} holds no event file ({storage.EVENT_FILE_PREFIX}*), nor does any folder below it")


def _size_and_time(path: str) -> tuple[int, int]:
    status = os.stat(path)
    return status.st_size, status.st_mtime_ns
