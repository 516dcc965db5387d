"""Every name a profile gives is refused at load with one message, or placed inside its folder
under a file name no other accepted name of the profile shares (perfgate._names)."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from perfgate.baseline import BaselineStore, read_baseline
from perfgate.baseline._fingerprint import Fingerprint
from perfgate.errors import PerfgateError, ProfileError
from perfgate.profile import parse_profile

REPO = Path(__file__).resolve().parents[2]
PROFILE = '[server]\nkind = "simulator"\n'
WORKLOAD = "\n[[workload]]\nname = {name}\nnum_prompts = 8\nconcurrency = 4\ninput_len = 8\noutput_len = 8\n"
FP = Fingerprint("NVIDIA H200", 8, 700, "580", "sglang", "/m", ())
STEM = re.compile(r"[A-Za-z0-9._-]+")


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string; surrogates stay raw (TOML has no escape for them, and
    tomllib, given a str, passes them through) so they reach the name check."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif (ch.isprintable() and ch != "\x7f") or unicodedata.category(ch) == "Cs":
            out.append(ch)
        else:
            out.append(f"\\U{ord(ch):08X}")
    return '"' + "".join(out) + '"'


def profile_of(*names: str) -> str:
    return PROFILE + "".join(WORKLOAD.format(name=toml_string(n)) for n in names)


tricky = st.sampled_from(
    ["..", ".", "/", "\\", "\x00", "\x1b", "\u202e", " ", "_", "@", "-", "é", "e\u0301", "É", "チ", "\ud800", "A", "a"]
)
names = st.one_of(
    st.text(st.characters(), max_size=20),
    st.text(st.characters(categories=["L", "M", "N", "Pd", "Pc"]), min_size=1, max_size=20),
    st.text(st.characters(codec="ascii"), max_size=20),
    st.lists(tricky | st.text(max_size=3), max_size=8).map("".join),
    st.integers(100, 300).map(lambda n: "n" * n),
    st.integers(30, 100).map(lambda n: "名" * n),
)


def _variant(name: str) -> st.SearchStrategy[str]:
    """A second name close to ``name``: the same in another case or normal form, or sanitised."""
    return st.sampled_from(
        [
            name.upper(),
            name.lower(),
            unicodedata.normalize("NFD", name),
            unicodedata.normalize("NFC", name),
            re.sub(r"[^A-Za-z0-9._-]", "_", name),
            name + "x",
        ]
    )


pairs = names.flatmap(lambda n: st.tuples(st.just(n), _variant(n) | names))


@settings(max_examples=400)
@given(pairs)
@example(("a/b", "a_b"))
@example(("チャット", "会話"))
@example(("café", unicodedata.normalize("NFD", "café")))
@example(("Chat", "chat"))
@example(("c16-in32-out16", "x" * 300))
def test_a_name_is_refused_at_load_or_stored_inside_its_folder_under_a_file_of_its_own(pair: tuple[str, str]) -> None:
    first, second = pair
    text = profile_of(first) if first == second else profile_of(first, second)
    try:
        profile = parse_profile(text, Path("names.toml"))
    except ProfileError as e:
        message = str(e)
        event("refused: collision" if " and " in message.split("key 'name': ")[-1][:60] else "refused")
        assert message.startswith("profile names.toml: ") and "\n" not in message
        # Refused for the name (an empty one falls back to the derived default) or as TOML.
        assert (
            "key 'name'" in message
            or "not valid TOML" in message
            or "duplicate" in message.lower()
            or ("must be unique" in message)
        ), message
        return
    event("accepted")
    root = Path("/store")
    store = BaselineStore(root)
    stored = [store.path_for(profile.name, w.name, FP) for w in profile.workloads]
    for path in stored:
        assert STEM.fullmatch(path.name), path
        assert path.parent == root / "names" and len(path.name.encode()) <= 255
    assert len({p.name.lower() for p in stored}) == len(stored), stored


@given(names)
@example("team/prod")
@example("..")
def test_a_profile_name_is_refused_at_load_or_its_folder_is_one_entry_of_the_store(name: str) -> None:
    try:
        profile = parse_profile(f"name = {toml_string(name)}\n" + profile_of("w"), Path("names.toml"))
    except ProfileError as e:
        assert "top level key 'name'" in str(e) or "not valid TOML" in str(e), str(e)
        return
    path = BaselineStore(Path("/store")).path_for(profile.name, "w", FP)
    assert path.parent.parent == Path("/store") and STEM.fullmatch(path.parent.name), path


@given(st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=20), st.sampled_from("-._"))
def test_a_safe_ascii_name_is_its_own_file_name(word: str, joiner: str) -> None:
    from perfgate._names import file_stem

    name = f"{word}{joiner}{word}"
    assert file_stem(name) == name


def test_every_committed_baseline_is_found_under_its_names() -> None:
    files = sorted((REPO / "baselines").glob("*/*.json"))
    assert files
    for path in files:
        b = read_baseline(path)
        assert b is not None
        assert BaselineStore(REPO / "baselines").path_for(b.profile, b.workload, b.fingerprint) == path


@pytest.mark.parametrize("file_name", ["../x", "a/b", "..", ".", "", "x\x00", "n" * 256])
def test_a_file_name_that_is_not_one_entry_of_its_folder_is_refused(file_name: str, tmp_path: Path) -> None:
    from perfgate._names import path_in

    with pytest.raises(PerfgateError, match="is not one entry of"):
        path_in(tmp_path, file_name)


def test_a_results_document_name_cannot_climb_out(tmp_path: Path) -> None:
    # A document from elsewhere (compare, plots) never passed the profile loader.
    from perfgate.report._results import write_documents

    out = write_documents(tmp_path, "results-../../x", {}, "summary", None, lambda doc, folder, out: None)
    assert out.failed == [] and len(out.written) == 2, out
    assert all(p.resolve().is_relative_to(tmp_path.resolve()) for p in out.written), out.written
    (doc,) = [p for p in out.written if p.suffix == ".json"]
    assert doc.parent == tmp_path and json.loads(doc.read_text()) == {}
