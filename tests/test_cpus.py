"""CPU lists in the kernel's cpulist syntax: what a profile's cpu_affinity says, as recorded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate._cpus import CPU_MAX, format_cpu_list, parse_cpu_list


@pytest.mark.parametrize(
    ("text", "cpus", "normal"),
    [
        ("0", {0}, "0"),
        ("0-7", set(range(8)), "0-7"),
        ("0,2,4-6", {0, 2, 4, 5, 6}, "0,2,4-6"),
        ("3-3", {3}, "3"),
        (" 1 , 0 - 2 ,2", {0, 1, 2}, "0-2"),
        ("4-5,0-1,1,5", {0, 1, 4, 5}, "0-1,4-5"),
        ("007", {7}, "7"),
        (f"{CPU_MAX}", {CPU_MAX}, str(CPU_MAX)),
    ],
)
def test_lists_are_read_merged_and_written_in_one_form(text, cpus, normal):
    assert parse_cpu_list(text) == cpus
    assert format_cpu_list(parse_cpu_list(text)) == normal


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "it names no CPU"),
        (" ", "it names no CPU"),
        ("0,,1", "'0,,1' has an empty entry"),
        ("0,", "'0,' has an empty entry"),
        ("-1", "'-1' is negative or a range without a start; CPUs are numbered from 0"),
        ("3-", "'3-' is a range without an end"),
        ("7-0", "'7-0' runs backwards; write 0-7"),
        ("a", "'a' is not a CPU number or a range a-b of them"),
        ("0-3-5", "'0-3-5' is not a CPU number"),
        ("0x1", "'0x1' is not a CPU number"),
        ("1.5", "'1.5' is not a CPU number"),
        ("0-10:2", "'0-10:2' is not a CPU number"),
        ("٣", "'٣' is not a CPU number"),  # int() would take the Arabic-Indic digit
        ("1 2", "'1 2' is not a CPU number"),
        ("0-99999999999", f"'0-99999999999' names a CPU above {CPU_MAX:,}"),
    ],
)
def test_bad_lists_say_what_is_wrong(text, why):
    with pytest.raises(ValueError) as err:
        parse_cpu_list(text)
    assert why in str(err.value)
    assert "\n" not in str(err.value)


@given(st.sets(st.integers(0, CPU_MAX), max_size=64) | st.sets(st.integers(0, 40)))
def test_the_written_form_reads_back_as_the_same_set(cpus):
    text = format_cpu_list(cpus)
    if cpus:
        assert parse_cpu_list(text) == cpus
        assert format_cpu_list(parse_cpu_list(text)) == text
    else:
        assert text == ""


@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40)), min_size=1, max_size=8), st.randoms())
def test_any_order_and_overlap_of_ranges_reads_as_their_union(spans, rng):
    entries = [f"{lo}-{lo + n}" if n else str(lo) for lo, n in spans]
    rng.shuffle(entries)
    assert parse_cpu_list(",".join(entries)) == {c for lo, n in spans for c in range(lo, lo + n + 1)}
