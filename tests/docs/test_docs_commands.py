"""Every command the documentation shows (docs/*.md and README.md) names things that exist.

A command in a page is found in a ```bash block, in an indented block, or in an inline code span,
when its program is one of perfgate's (``perfgate``, ``pytest``, ``python -m perfgate...``,
``python benchmarks/...``, ``bash benchmarks/...``, ``tox -e``, ``pip install -e '.[extra]'``).
Each is checked against what it calls: the module, script, tox environment, extra or file exists,
and every option it passes is one that program accepts (its ``--help``, or the benchmark's source);
perfgate's own environment variables are ones the code reads. So a renamed option, module,
benchmark, profile or variable fails here, not in a reader's terminal.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from perfgate import _toml
from perfgate.cli import main as perfgate_main

REPO = Path(__file__).resolve().parents[2]
PAGES = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]

# The programs whose commands are checked; others (git, sed, cp, mkdocs, ruff ...) are not perfgate's.
PROGRAMS = {"perfgate", "pytest", "python", "python3", "tox", "bash", "pip"}
# Other commands a command line may start with (their own arguments are not checked).
SHELL = {"cd", "cp", "sed", "git", "mkdir", "rm", "export"}
# Spans that start like a command but are messages perfgate prints.
MESSAGES = {"perfgate received SIGTERM; stopping the server and exiting"}
# Modules of other projects that a page runs (their options are theirs).
FOREIGN_MODULES = {"venv", "pip", "sglang.benchmark.serving"}
# Variables a command may set that perfgate does not read (pip's, the shell's).
FOREIGN_VARIABLES = {"PIP_CACHE_DIR", "NO_MKDOCS_2_WARNING"}


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def _blocks(text: str) -> list[tuple[int, str]]:
    """(line, command) from fenced shell blocks and indented blocks, continuation lines joined."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    pending: tuple[int, str] | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:].strip()
            continue
        in_shell = fence in ("bash", "sh", "shell", "console")
        indented = fence is None and line.startswith("    ") and not line.startswith("     ") and not pending
        if not (in_shell or indented or (pending and fence is None and line.startswith("    "))):
            continue
        if pending is not None:
            pending = (pending[0], pending[1] + " " + stripped)
        else:
            pending = (lineno, stripped)
        if re.search(r"(\\|&&|\|)$", pending[1]):
            pending = (pending[0], pending[1].rstrip("\\").rstrip())
            continue
        out.append(pending)
        pending = None
    return out


def _spans(text: str) -> list[tuple[int, str]]:
    """(line, text) of every inline code span."""
    return [(text[: m.start()].count("\n") + 1, m.group(1)) for m in re.finditer(r"(?<!`)`([^`\n]+)`(?!`)", text)]


def _simple_commands(text: str) -> list[str]:
    """The simple commands of one command line: split at &&, ||, |, ; and with its comment dropped."""
    text = text.replace("\\|", "|")
    text = re.sub(r"\s+#\s.*$", "", text)
    return [part.strip() for part in re.split(r"&&|\|\||\||;", text) if part.strip()]


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def _program(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """The variables a command sets and its words from the program on (a venv's path dropped)."""
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, _, value = words[0].partition("=")
        env[name] = value
        words = words[1:]
    if words:
        words = [words[0].rsplit("/", 1)[-1] if words[0].startswith((".venv/", "/")) else words[0], *words[1:]]
    return env, words


def _commands() -> list[Command]:
    found: list[Command] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(REPO).as_posix()
        for lineno, line in _blocks(text) + _spans(text):
            if line in MESSAGES:
                continue
            simple_commands = _simple_commands(line)
            first = _program(_words(simple_commands[0]))[1] if simple_commands else []
            if not first or first[0] not in PROGRAMS | SHELL:
                continue  # prose or program output, not a command line
            for simple in simple_commands:
                env, words = _program(_words(simple))
                if not words or words[0] not in PROGRAMS or (len(words) < 2 and not env):
                    continue
                if len(words) > 1 and words[1].endswith(":"):
                    continue  # a message: "perfgate doctor: --python: cannot run ..."
                found.append(Command(name, lineno, simple))
    return found


COMMANDS = _commands()


def _options(words: list[str]) -> list[str]:
    """The options among ``words`` (``--x=1`` as ``--x``), up to a ``--`` that hands the rest on."""
    options = []
    for word in words:
        if word == "--":
            break
        if word.startswith("-") and " " not in word and not re.fullmatch(r"-[0-9.]+", word):
            options.append(word.split("=", 1)[0])
    return options


def _help(argv: tuple[str, ...]) -> str:
    done = subprocess.run(
        [sys.executable, *argv, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"{' '.join(argv)} --help failed: {done.stderr[-2000:]}"
    return done.stdout


@functools.cache
def _help_of(argv: tuple[str, ...]) -> str:
    return _help(argv)


@functools.cache
def _perfgate_help(sub: tuple[str, ...]) -> str | None:
    """``perfgate SUB... --help`` (in this process: the CLI is imported once), or None when SUB is none."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = perfgate_main([*sub, "--help"])
    except SystemExit as stop:
        code = stop.code
    return out.getvalue() if code == 0 else None


def _accepted(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", help_text))


def _unknown(options: list[str], help_text: str) -> list[str]:
    accepted = _accepted(help_text) | {"-h", "--help"}
    return [o for o in options if o not in accepted]


def _repo_paths(words: list[str]) -> list[str]:
    """Positional words that name a file of this repository (not placeholders, globs or outputs)."""
    roots = ("profiles/", "benchmarks/", "tests/", "perf_tests", "src/", "baselines/")
    return [
        w
        for w in words
        if w.startswith(roots)
        and not any(c in w for c in "*<>")
        and "..." not in w
        and not re.search(r"(^|/)[A-Z][A-Z0-9_]*(\.\w+)?$", w)  # a placeholder: benchmarks/NAME.py
    ]


def _extras() -> set[str]:
    doc = _toml.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return set(doc["project"]["optional-dependencies"])


def _tox_envs() -> set[str]:
    text = (REPO / "tox.ini").read_text(encoding="utf-8")
    return set(re.findall(r"^\[testenv:([\w-]+)\]", text, flags=re.M)) | {"py", "perf"}


@functools.cache
def _read_by_code() -> str:
    folders = ("src", "benchmarks", "tests", "perf_tests")
    code = [p for f in folders for p in (REPO / f).rglob("*.py") if p != Path(__file__).resolve()]
    code += [*(REPO / "benchmarks").glob("*.sh"), *(REPO / "src").rglob("*.sh"), REPO / "tox.ini"]
    parts = [p.read_text(encoding="utf-8", errors="replace") for p in code]
    return "\n".join(parts)


def problems(command: Command) -> list[str]:
    """What is wrong with one command: each a short sentence naming the missing thing."""
    env, words = _program(_words(command.text))
    found = [
        f"{name}: no such variable in perfgate's code"
        for name in env
        if name not in FOREIGN_VARIABLES and not re.search(rf"(?<!\w){name}(?!\w)", _read_by_code())
    ]
    program, args = words[0], words[1:]
    for path in _repo_paths(args):
        if not (REPO / path).exists():
            found.append(f"{path}: no such file in the repository")
    if program == "perfgate":
        sub = []
        for word in args:
            if word.startswith("-") or "/" in word or "." in word or not re.fullmatch(r"[a-z][a-z-]*", word):
                break
            sub.append(word)
        while sub and _perfgate_help(tuple(sub)) is None:
            sub.pop()
        if args and args[0] not in ("-h", "--help") and not sub:
            found.append(f"perfgate {args[0]}: no such subcommand")
        else:
            found += [
                f"{o}: not an option of perfgate {' '.join(sub)}"
                for o in _unknown(_options(args), _perfgate_help(tuple(sub[:1])) or "")
            ]
    elif program == "pytest":
        found += [
            f"{o}: not an option of pytest with perfgate's plugin"
            for o in _unknown(_options(args), _help_of(("-m", "pytest", "-p", "no:cacheprovider")))
        ]
    elif program in ("python", "python3"):
        if args[:1] == ["-m"] and len(args) > 1:
            module = args[1]
            if module in FOREIGN_MODULES:
                return found
            if not module.startswith("perfgate"):
                return [
                    *found,
                    f"python -m {module}: not a perfgate module (add it to FOREIGN_MODULES if it is another project's)",
                ]
            found += [
                f"{o}: not an option of python -m {module}"
                for o in _unknown(_options(args[2:]), _help_of(("-m", module)))
            ]
        elif args and args[0].startswith("benchmarks/"):
            script = REPO / args[0]
            if re.search(r"/[A-Z]+\.py$", args[0]):
                return found  # "python benchmarks/NAME.py": the pattern, not a command
            if not script.exists():
                return [*found, f"{args[0]}: no such benchmark"]
            source = script.read_text(encoding="utf-8")
            found += [f"{o}: not an option of {args[0]}" for o in _options(args[1:]) if f'"{o}"' not in source]
    elif program == "bash":
        if args and not args[0].startswith("/") and not (REPO / args[0]).exists():
            found.append(f"{args[0]}: no such script")
    elif program == "tox":
        envs = [args[i + 1] for i, w in enumerate(args[:-1]) if w == "-e"]
        found += [f"tox -e {e}: no such tox environment" for e in envs if e not in _tox_envs()]
    elif program == "pip":
        for word in args:
            extras = re.fullmatch(r".*\[([\w,-]+)\]", word)
            if extras:
                found += [
                    f"{word}: no extra {x!r} in pyproject.toml"
                    for x in extras.group(1).split(",")
                    if x not in _extras()
                ]
    return found


def test_the_pages_show_commands_to_check():
    # The checker finds what the pages show: the quick start, the SGLang steps, the A/B, the benchmarks.
    texts = {c.text for c in COMMANDS}
    assert "PERFGATE_SIM_SLOWDOWN=1.10 .venv/bin/pytest perf_tests" in texts
    assert any(t.startswith("perfgate ab profiles/glm5-nvfp4-rtxpro6000x8.toml --candidate-python") for t in texts)
    assert any(t.startswith("python benchmarks/prefix_cache.py --profile") and "--without-cache" in t for t in texts)
    assert any(t.startswith("python -m perfgate.testing.sglang_bundle") for t in texts)
    assert len(COMMANDS) > 80


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_every_command_in_the_docs_names_what_exists(command):
    assert problems(command) == [], str(command)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("pytest perf_tests --perf-profil profiles/sim-glm5.toml", "--perf-profil: not an option of pytest"),
        ("perfgate ab profiles/sim-glm5.toml --candidate-pyton /x", "--candidate-pyton: not an option of perfgate ab"),
        ("perfgate compar a.json b.json", "perfgate compar: no such subcommand"),
        ("python -m perfgate.catalogue --reference --updat", "--updat: not an option of python -m perfgate.catalogue"),
        ("python -m perfgate.no_such_module --help", "-m perfgate.no_such_module --help failed"),
        ("python benchmarks/client_scale.py --runz 1", "--runz: not an option of benchmarks/client_scale.py"),
        ("python benchmarks/no_such.py", "benchmarks/no_such.py: no such benchmark"),
        ("bash benchmarks/gpu_sglang_old.sh /tmp/x", "benchmarks/gpu_sglang_old.sh: no such script"),
        ("tox -e e2e-vlm", "tox -e e2e-vlm: no such tox environment"),
        ("pip install -e '.[tests]'", "no extra 'tests' in pyproject.toml"),
        ("SGL_BUNDLE=/x bash benchmarks/gpu_sglang.sh /tmp/x", "SGL_BUNDLE: no such variable in perfgate's code"),
        ("pytest perf_tests --perf-profile profiles/no-such.toml", "profiles/no-such.toml: no such file"),
    ],
)
def test_a_renamed_option_module_or_file_is_caught(text, problem):
    try:
        found = problems(Command("x.md", 1, text))
    except AssertionError as err:  # --help of a module that does not exist
        found = [str(err)]
    assert any(problem in p for p in found), found


def test_the_quick_start_is_the_two_commands_and_ci_runs_the_second_verbatim():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = (REPO / "docs" / "getting-started.md").read_text(encoding="utf-8")
    first = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/pytest perf_tests"
    second = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/pytest -n 4"
    block = f"```bash\n{first}\n{second}\n```"
    assert block in readme and block in start
    assert second + "\n" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_the_readme_stays_a_front_page():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move the detail into docs/"


def test_every_pytest_option_the_pages_name_exists():
    # Also those named in prose (`--perf-lock-wait SECONDS`), not only in commands.
    named = {o for page in PAGES for o in re.findall(r"--perf-[a-z][a-z-]*", page.read_text(encoding="utf-8"))}
    assert len(named) >= 15
    assert _unknown(sorted(named), _help_of(("-m", "pytest", "-p", "no:cacheprovider"))) == []
