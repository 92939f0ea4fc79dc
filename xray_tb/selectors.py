"""Stable alias of :mod:`xray_tb.capture.selectors`: subclass :class:`Selector` from here (or from
:mod:`xray_tb`) to choose the filters or rows a capture keeps."""

from xray_tb.capture.selectors import (
    FirstN,
    KeepAll,
    RandomFilters,
    ScoredRows,
    Selection,
    SelectionInfo,
    Selector,
    TopVariance,
    check_selection,
)

__all__ = ["Selector", "Selection", "SelectionInfo", "RandomFilters", "FirstN", "KeepAll", "TopVariance", "ScoredRows", "check_selection"]
