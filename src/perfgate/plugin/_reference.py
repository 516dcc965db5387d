"""The options reference (Markdown): the pytest plugin's ``--perf-*`` options and ini keys, and the
``perfgate`` command's subcommands and options, read from the parsers that declare them."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from perfgate import cli, doctor
from perfgate._docs import GeneratedSection
from perfgate.plugin._options import pytest_addoption

SECTION = GeneratedSection("options reference", "python -m perfgate.plugin --reference", "docs/options.md")


class _Recorder:
    """Stands in for pytest's parser: its option groups are argparse parsers (pytest's
    ``addoption`` takes argparse's arguments), its ini keys a list."""

    def __init__(self) -> None:
        self.options = argparse.ArgumentParser(add_help=False)
        self.inis: list[tuple[str, str, Any]] = []

    def getgroup(self, name: str, description: str = "") -> _Recorder:
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.options.add_argument(*names, **kwargs)

    def addini(self, name: str, help: str, type: Any = None, default: Any = None) -> None:
        self.inis.append((name, help, default))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(action: argparse.Action) -> str:
    # A flag's False and a repeatable option's [] say nothing a reader needs.
    if action.nargs == 0 or isinstance(action.default, list) or action.default in (None, ""):
        return "-"
    return f"`{action.default}`"


def _rows(actions: Iterable[argparse.Action]) -> list[str]:
    rows = []
    for a in actions:
        if a.help == argparse.SUPPRESS or a.dest == "help":
            continue
        if a.option_strings:
            name = ", ".join(f"`{o}`" for o in a.option_strings)
            if a.nargs != 0 and not a.choices:
                name += f" `{a.metavar or a.dest.upper()}`"
        else:
            name = f"`{a.metavar or a.dest.upper()}`"
        if a.choices:
            name += " (" + ", ".join(f"`{c}`" for c in a.choices) + ")"
        repeat = " (repeatable)" if isinstance(a.default, list) and "repeatable" not in (a.help or "") else ""
        rows.append(f"| {name} | {_default(a)} | {_cell((a.help or '') + repeat)} |")
    return rows


def _table(actions: Iterable[argparse.Action]) -> list[str]:
    return ["| option | default | what it does |", "|---|---|---|", *_rows(actions)]


def reference_markdown() -> str:
    """Every option of ``pytest`` with perfgate, then every ``perfgate`` subcommand's."""
    plugin = _Recorder()
    pytest_addoption(plugin)  # type: ignore[arg-type]
    lines = ["### `pytest` options (the plugin)", "", *_table(plugin.options._actions), ""]
    lines += ["### `pytest` ini keys", "", "| key | default | what it sets |", "|---|---|---|"]
    lines += [f"| `{name}` | {f'`{d}`' if d else '-'} | {_cell(help)} |" for name, help, d in plugin.inis]
    parser = cli.parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help or "" for c in sub._choices_actions}
    for name, command in sub.choices.items():
        command = doctor.parser() if name == "doctor" else command
        lines += ["", f"### `perfgate {name}`", "", _cell(helps.get(name, "")), "", *_table(command._actions)]
    return "\n".join(lines) + "\n"
