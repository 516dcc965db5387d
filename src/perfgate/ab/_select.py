"""Which workloads an A/B runs: ``-k`` with pytest's own keyword expressions.

The expression is compiled and evaluated by pytest's matcher (``_pytest.mark``: private, but
its ``Expression``/``KeywordMatcher`` API has been stable since pytest 6, and
tests/ab/test_ab_units.py pins the semantics): ``and``, ``or``, ``not``, parentheses, and a
word matches a workload when it is a case-insensitive substring of its name, exactly as
``pytest perf_tests -k c64`` selects that workload's tests.
"""

from __future__ import annotations

from _pytest.mark import KeywordMatcher
from _pytest.mark import expression as _expression
from pytest import UsageError

from perfgate.errors import PerfgateError
from perfgate.profile import Profile, Workload

# pytest < 8.4 raised its own ParseError (``.message``); later ones SyntaxError (``.msg``).
_REFUSED: tuple[type[Exception], ...] = (
    SyntaxError,
    *((_expression.ParseError,) if hasattr(_expression, "ParseError") else ()),
)


def select_workloads(profile: Profile, expression: str) -> tuple[Workload, ...]:
    """The workloads of ``profile`` whose names match ``expression`` (all for ""), in profile order.

    PerfgateError for an expression pytest would refuse, and for one that selects nothing.
    """
    if not expression.strip():
        return profile.workloads
    try:
        compiled = _expression.Expression.compile(expression)
    except _REFUSED as e:
        why = getattr(e, "msg", None) or getattr(e, "message", None) or str(e)
        raise PerfgateError(
            f'-k {expression!r}: not a keyword expression ({why}); e.g. -k "c64 or c1024", -k "not c1024"'
        ) from None
    try:
        selected = tuple(w for w in profile.workloads if compiled.evaluate(KeywordMatcher(frozenset({w.name}))))
    except UsageError as e:
        raise PerfgateError(f"-k {expression!r}: {e}") from None
    if not selected:
        names = ", ".join(w.name for w in profile.workloads)
        raise PerfgateError(
            f"-k {expression!r} selects no workload of profile {profile.path}; its workloads are {names}"
        )
    return selected
