"""Report: the terminal summary table, results JSON, Markdown summary and plots, of a gate run
(:class:`~perfgate.session.RunSummary`) and of an A/B (:class:`~perfgate.ab.AbSummary`)."""

from perfgate.report._ab import ab_document, report_lines, write_ab_results
from perfgate.report._results import (
    RESULTS_SCHEMA,
    Results,
    ResultsWorkload,
    markdown_summary,
    ratchet_note,
    read_results,
    results_document,
    write_results,
)
from perfgate.report._table import Row, align, render_markdown, render_text, rows

__all__ = [
    "RESULTS_SCHEMA",
    "Results",
    "ResultsWorkload",
    "Row",
    "ab_document",
    "align",
    "markdown_summary",
    "ratchet_note",
    "read_results",
    "render_markdown",
    "render_text",
    "report_lines",
    "results_document",
    "rows",
    "write_ab_results",
    "write_results",
]
