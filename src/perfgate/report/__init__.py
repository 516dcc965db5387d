"""Report: the terminal summary table, results JSON, Markdown summary and plots, of a gate run
(:class:`~perfgate.session.RunSummary`) and of an A/B (:class:`~perfgate.ab.AbSummary`)."""

from perfgate.report._ab import ab_document, report_lines, write_ab_results
from perfgate.report._results import markdown_summary, results_document, write_results
from perfgate.report._table import Row, align, render_markdown, render_text, rows

__all__ = [
    "Row",
    "ab_document",
    "align",
    "markdown_summary",
    "render_markdown",
    "render_text",
    "report_lines",
    "results_document",
    "rows",
    "write_ab_results",
    "write_results",
]
