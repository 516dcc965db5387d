"""The SGLang bundle builder's offline parts: the host list, the carry walk, strip, split/join."""

from __future__ import annotations

import io
import random
import subprocess
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.testing import _sglang_bundle as sb
from perfgate.testing._sglang_bundle import (
    Candidate,
    SGLangBundleError,
    load_have,
    parse_have,
    select_carry,
    split,
    strip_kernel,
    write_scripts,
)
from perfgate.testing.sglang_bundle import DEFAULT_HAVE
from perfgate.testing.sglang_bundle import main as bundle_main


def cand(name: str, version: str, *requires: str) -> Candidate:
    return Candidate(name, version, f"https://x/{name}-{version}-py3-none-any.whl", "", tuple(requires))


# -- the host's package list ----------------------------------------------------------------


def test_parse_have_names_versions_comments_and_commas() -> None:
    have = parse_have("# c\ntorch==2.11.0\nNumPy\nfoo_bar==1.0, baz  # x\n\n", source="t")
    assert have == {"torch": "2.11.0", "numpy": None, "foo-bar": "1.0", "baz": None}


@pytest.mark.parametrize("bad", ["torch==", "to rch", "torch==not-a-version", "==1.0", "torch>=2"])
def test_parse_have_refuses_bad_entries_naming_line(bad: str) -> None:
    with pytest.raises(SGLangBundleError, match=r"f\.txt, line 2: .*"):
        parse_have(f"ok\n{bad}\n", source="f.txt")


def test_load_have_file_list_and_missing_file(tmp_path: Path) -> None:
    f = tmp_path / "h.txt"
    f.write_text("torch==2.11.0\n")
    assert load_have(str(f)) == {"torch": "2.11.0"}
    assert load_have("a,b==1") == {"a": None, "b": "1"}
    with pytest.raises(SGLangBundleError, match="no such file"):
        load_have(str(tmp_path / "missing.txt"))


def test_the_h200_list_parses_and_pins_what_the_bundle_depends_on() -> None:
    have = load_have(str(DEFAULT_HAVE))
    assert have["torch"] == "2.11.0" and have["transformers"] == "5.17.0" and have["tokenizers"] == "0.23.2"
    assert "sniffio" not in have and "httptools" not in have
    assert len(have) > 150


@settings(max_examples=50, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9]{0,8}(-[a-z0-9]{1,4})?", fullmatch=True),
        st.one_of(st.none(), st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,2}", fullmatch=True)),
        max_size=8,
    )
)
def test_parse_have_round_trips(have: dict[str, str | None]) -> None:
    text = "\n".join(f"{k}=={v}" if v else k for k, v in have.items())
    assert parse_have(text, source="t") == have


# -- what to carry ---------------------------------------------------------------------------

CANDS = {
    c.name: c
    for c in [
        cand("sglang", "0.5.17", "torch==2.11.0", "transformers==5.12.1", "aiohttp", "flash-attn-4", "fastapi"),
        cand("transformers", "5.12.1", "tokenizers<=0.23.0,>=0.22.0", "numpy>=1.17", "huggingface-hub>=1.0"),
        cand("tokenizers", "0.22.2", "huggingface-hub<2.0,>=0.16.4"),
        cand("fastapi", "0.165.0", "starlette>=0.40", "pydantic>=2.7", 'uvloop; extra == "standard"'),
        cand("starlette", "1.10.0", "anyio<5,>=3.6.2", 'typing-extensions; python_version < "3.10"'),
        cand("pydantic", "2.14.4"),
        cand("flash-attn-4", "4.0.0b19", "nvidia-cutlass-dsl"),
        cand("openai", "2.6.1", "sniffio"),
        cand("sniffio", "1.3.1"),
    ]
}
HAVE = {
    "torch": "2.11.0",
    "transformers": "5.17.0",
    "tokenizers": "0.23.2",
    "numpy": "2.5.2",
    "huggingface-hub": "1.33.0",
    "aiohttp": None,
    "anyio": None,
    "typing-extensions": None,
    "pydantic": None,
}


def test_carry_is_what_the_host_lacks_and_versions_it_does_not_satisfy() -> None:
    plan = select_carry(CANDS, ["sglang==0.5.17", "openai"], HAVE, {"flash-attn-4": "heavy"}, "3.12")
    # transformers 5.17.0 and tokenizers 0.23.2 on the host do not satisfy the pins: carried.
    assert sorted(plan.carry) == ["fastapi", "openai", "sglang", "sniffio", "starlette", "tokenizers", "transformers"]
    assert plan.left_out == {"flash-attn-4": "heavy"}
    assert plan.satisfied["torch"] == "on the host (2.11.0)"
    assert "version not listed" in plan.satisfied["aiohttp"]
    # Neither a left-out package's needs nor an extra nobody asked for are followed.
    assert "nvidia-cutlass-dsl" not in plan.carry and "uvloop" not in plan.carry
    assert plan.shadows(HAVE) == {
        "tokenizers": "carried 0.22.2 over the host's 0.23.2",
        "transformers": "carried 5.12.1 over the host's 5.17.0",
    }


def test_carry_over_host_and_keep_host() -> None:
    plan = select_carry(
        CANDS,
        ["fastapi", "transformers==5.12.1"],
        {**HAVE, "numpy": "1.0"},
        {},
        "3.12",
        carry_over_host={"pydantic": "measured"},
        keep_host={"numpy": "the host's"},
    )
    assert "pydantic" in plan.carry and "numpy" not in plan.carry
    assert plan.satisfied["numpy"].startswith("on the host, kept")


def test_an_asked_extra_is_followed() -> None:
    plan = select_carry({**CANDS, "uvloop": cand("uvloop", "0.23.0")}, ["fastapi[standard]"], HAVE, {}, "3.12")
    assert "uvloop" in plan.carry


def test_a_root_is_taken_under_the_targets_markers() -> None:
    """perfgate's own requirements are roots with markers: tomli only below Python 3.11, which a
    3.12 target never resolves (the bundle build of 2026-12-02 stopped on it)."""
    plan = select_carry(CANDS, ["openai", 'tomli>=1.1; python_version < "3.11"'], HAVE, {}, "3.12")
    assert "tomli" not in plan.carry and "openai" in plan.carry
    with pytest.raises(SGLangBundleError, match="holds no tomli"):
        select_carry(CANDS, ['tomli>=1.1; python_version < "3.11"'], HAVE, {}, "3.10")


def test_a_requirement_the_resolution_lacks_or_contradicts_is_an_error() -> None:
    with pytest.raises(SGLangBundleError, match="holds no sniffio"):
        select_carry({"openai": CANDS["openai"]}, ["openai"], {}, {}, "3.12")
    with pytest.raises(SGLangBundleError, match=r"pip resolved transformers 5\.12\.1"):
        select_carry(CANDS, ["transformers==5.17.0"], {}, {}, "3.12")


def test_candidates_from_report() -> None:
    report = {
        "install": [
            {
                "metadata": {"name": "Foo_Bar", "version": "1.0", "requires_dist": ["baz>=1"]},
                "download_info": {
                    "url": "https://h/foo_bar-1.0-py3-none-any.whl",
                    "archive_info": {"hashes": {"sha256": "ab"}},
                },
            }
        ]
    }
    got = sb.candidates_from_report(report)
    assert got == {"foo-bar": Candidate("foo-bar", "1.0", "https://h/foo_bar-1.0-py3-none-any.whl", "ab", ("baz>=1",))}
    assert got["foo-bar"].filename == "foo_bar-1.0-py3-none-any.whl"
    with pytest.raises(SGLangBundleError, match="no 'install' list"):
        sb.candidates_from_report({})


# -- strip ------------------------------------------------------------------------------------


def _kernel_tree(site: Path) -> None:
    for rel in ("sm90/common_ops.abi3.so", "sm100/common_ops.abi3.so", "flash_ops.abi3.so", "__init__.py"):
        p = site / "sgl_kernel" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    info = site / "sglang_kernel-0.4.5.dist-info"
    info.mkdir()
    (info / "RECORD").write_text(
        "sgl_kernel/__init__.py,sha256=a,1\nsgl_kernel/sm100/common_ops.abi3.so,sha256=b,1\n"
        "sgl_kernel/sm90/common_ops.abi3.so,sha256=c,1\nsgl_kernel/flash_ops.abi3.so,sha256=d,1\n"
    )


def test_strip_keeps_one_architecture_and_edits_record(tmp_path: Path) -> None:
    _kernel_tree(tmp_path)
    removed = strip_kernel(tmp_path, "sm90")
    assert set(removed) == {"sgl_kernel/sm100/", "sgl_kernel/flash_ops.abi3.so"}
    assert (tmp_path / "sgl_kernel/sm90/common_ops.abi3.so").exists()
    assert not (tmp_path / "sgl_kernel/sm100").exists() and not (tmp_path / "sgl_kernel/flash_ops.abi3.so").exists()
    record = (tmp_path / "sglang_kernel-0.4.5.dist-info/RECORD").read_text()
    assert "sm100" not in record and "flash_ops" not in record and "sm90/common_ops" in record
    # Idempotent: a second strip removes nothing more.
    assert strip_kernel(tmp_path, "sm90") == {}


def test_strip_to_an_architecture_the_wheel_lacks_is_an_error(tmp_path: Path) -> None:
    _kernel_tree(tmp_path)
    with pytest.raises(SGLangBundleError, match=r"no sm80/common_ops \(architectures there: \['sm100', 'sm90'\]\)"):
        strip_kernel(tmp_path, "sm80")
    assert (tmp_path / "sgl_kernel/sm100/common_ops.abi3.so").exists()


# -- split, join, verify ------------------------------------------------------------------------


def _bundle(tmp_path: Path, chunk_bytes: int) -> tuple[Path, list[Path]]:
    """A real .tar.xz of a tiny site tree (a fake sglang module), split into chunks."""
    site = tmp_path / "build" / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "payload.bin").write_bytes(random.Random(0).randbytes(20000))
    archive = tmp_path / "b.tar.xz"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        tar.add(site, arcname="site")
    archive.write_bytes(buf.getvalue())
    dirs = split(archive, tmp_path / "dist", chunk_bytes)
    write_scripts(dirs[0], archive.name)
    return archive, dirs


def _stage(tmp_path: Path, dirs: list[Path]) -> Path:
    stage = tmp_path / "stage"
    stage.mkdir()
    for d in dirs:
        for f in d.iterdir():
            (stage / f.name).write_bytes(f.read_bytes())
    return stage


def _join(stage: Path) -> subprocess.CompletedProcess[str]:
    # The import check runs the host's python; here a stand-in that imports only sglang.
    check = stage / "fakepython"
    check.write_text("#!/usr/bin/env bash\nexec python3 -c \"import sglang; print('join: imports ok')\"\n")
    check.chmod(0o755)
    return subprocess.run(
        ["bash", str(stage / "join.sh")],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(check)},
    )


def test_split_join_round_trip(tmp_path: Path) -> None:
    archive, dirs = _bundle(tmp_path, chunk_bytes=4096)
    assert len(dirs) == -(-archive.stat().st_size // 4096) > 1
    assert {p.name for p in dirs[0].iterdir()} >= {"SHA256SUMS", "join.sh", "env.sh", "b.tar.xz.000"}
    stage = _stage(tmp_path, dirs)
    proc = _join(stage)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (stage / "site" / "sglang" / "payload.bin").read_bytes() == random.Random(0).randbytes(20000)
    assert "join: imports ok" in proc.stdout
    # Joined twice: the unpacked tree is reused.
    again = _join(stage)
    assert again.returncode == 0 and "already unpacked" in again.stdout
    env = (stage / "env.sh").read_text()
    assert "export SGLANG_IS_FLASHINFER_AVAILABLE=false" in env and 'PYTHONPATH="$BUNDLE_DIR/site' in env


def test_join_refuses_a_corrupted_or_missing_chunk(tmp_path: Path) -> None:
    _, dirs = _bundle(tmp_path, chunk_bytes=4096)
    stage = _stage(tmp_path, dirs)
    piece = stage / "b.tar.xz.001"
    data = bytearray(piece.read_bytes())
    data[10] ^= 0xFF
    piece.write_bytes(bytes(data))
    (stage / "b.tar.xz.002").unlink()
    proc = _join(stage)
    assert proc.returncode == 3
    assert "join: chunk b.tar.xz.001 is corrupted (sha256 differs from SHA256SUMS): send it again" in proc.stdout
    assert "join: chunk b.tar.xz.002 is missing" in proc.stdout
    assert not (stage / "site").exists()


def test_join_reports_a_tree_that_does_not_import(tmp_path: Path) -> None:
    _, dirs = _bundle(tmp_path, chunk_bytes=1 << 20)
    stage = _stage(tmp_path, dirs)
    bad = stage / "badpython"
    bad.write_text("#!/usr/bin/env bash\nexit 1\n")
    bad.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(stage / "join.sh")],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(bad)},
    )
    assert proc.returncode == 4 and "does not import on this host" in proc.stdout


# -- the command line ---------------------------------------------------------------------------


def test_cli_errors_are_one_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = bundle_main(["--version", "0.5.17", "--torch", "2.11.0", "--have", "torch==2.13.0", "--out", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "error: SGLang 0.5.17 bundle: --torch 2.11.0: the host list (--have torch==2.13.0) has torch==2.13.0"
    )
    code = bundle_main(["--version", "0.5.17", "--torch", "2.11.0", "--have", "x/y.txt", "--out", str(tmp_path)])
    assert code == 2 and "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bundle_main(["--version", "0.5.17", "--torch", "2.11.0", "--chunk-mib", "64", "--out", str(tmp_path)])


def test_a_full_disk_is_refused_before_anything_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = sb.BundleRecipe("0.5.17", "2.11.0", "sm90", "3.12", {"torch": "2.11.0"})
    with pytest.raises(SGLangBundleError, match=r"holds up to 1e\+06 GB .* GB are free: free space"):
        sb.build_bundle(recipe, tmp_path, min_free_gb=1e6)


def test_a_requirement_missing_from_the_registry_names_it(tmp_path: Path) -> None:
    log = tmp_path / "log"
    argv = ["bash", "-c", "echo 'ERROR: No matching distribution found for nope==9' >&2; exit 1"]
    with pytest.raises(SGLangBundleError, match=r"nope==9 has no wheel on the registry for CPython 3.12"):
        sb._run(argv, "resolving@3.12", "x", log=log)
    argv = ["bash", "-c", "echo 'OSError: [Errno 28] No space left on device' >&2; exit 1"]
    with pytest.raises(SGLangBundleError, match=r"the disk is full \(.* GB free\)"):
        sb._run(argv, "installing", "x", log=log)
