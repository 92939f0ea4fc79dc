"""Run names that TensorBoard's fast loader cannot read, and the error that says so.

A run's name is its folder's path under the logdir, so Xray cannot encode it as it encodes layer
names in tags (:func:`tb_plugin.metadata.encode_name`). The fast loader (the Rust data server,
TensorBoard's default) puts the run and the tag of every blob into a JSON blob key, and it cannot
parse its own key back when that JSON escapes a character: a double quote ``"``, a backslash ``\\``
or a control character (U+0000 to U+001F: tab, newline, ...). It then answers "failed to parse blob
key" for every blob of that run, and nothing of the run can be read. Every other character works,
non-ASCII included. The Python loader (``--load_fast=false``) reads any name.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from tensorboard import errors

_BLOB_KEY_FAILURE = "failed to parse blob key"


class UnreadableRunError(errors.PublicError):
    """A valid request for a run or tag that TensorBoard's fast loader cannot read (HTTP 400)."""

    http_code = 400


def fast_loader_unsafe(name: str) -> list[str]:
    """The characters of ``name`` that the fast loader cannot carry in a blob key, each once."""
    return [char for char in dict.fromkeys(name) if char in '"\\' or ord(char) < 0x20]


def describe(chars: list[str]) -> str:
    """``'"' (U+0022), '\\t' (U+0009)``: characters for an error message."""
    return ", ".join(f"{char!r} (U+{ord(char):04X})" for char in chars)


def unreadable_run_message(run: str, tag: str = "") -> str:
    """Why the fast loader cannot read ``run`` (or ``tag`` of it), and what to do."""
    in_run = fast_loader_unsafe(run)
    if in_run:
        return (
            f"run {run!r} cannot be read by TensorBoard's fast data loader: its folder name contains {describe(in_run)}. "
            f'Rename the run folder without ", \\ or control characters, or start TensorBoard with --load_fast=false.'
        )
    in_tag = fast_loader_unsafe(tag)
    if in_tag:
        return (
            f"tag {tag!r} of run {run!r} cannot be read by TensorBoard's fast data loader: it contains {describe(in_tag)} "
            "(it was written by a version of Xray that did not encode names in tags). "
            "Record the run again, or start TensorBoard with --load_fast=false."
        )
    return f"TensorBoard's fast data loader failed to read run {run!r}; start TensorBoard with --load_fast=false to read it."


@contextlib.contextmanager
def explain_unreadable(run: str, tag: str = "") -> Iterator[None]:
    """Turn the fast loader's "failed to parse blob key" into :class:`UnreadableRunError` with the why."""
    try:
        yield
    except errors.InvalidArgumentError as error:
        if _BLOB_KEY_FAILURE not in str(error):
            raise
        raise UnreadableRunError(unreadable_run_message(run, tag)) from error
