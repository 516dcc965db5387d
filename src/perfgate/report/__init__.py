"""Report: the terminal summary table, results JSON, Markdown summary and plots."""

from perfgate.report._results import markdown_summary, results_document, write_results
from perfgate.report._table import INFO_METRICS, Row, render_markdown, render_text, rows

__all__ = ["INFO_METRICS", "Row", "markdown_summary", "render_markdown", "render_text", "results_document", "rows", "write_results"]
