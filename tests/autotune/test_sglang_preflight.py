from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.errors import ServerError
from perfgate.server._sglang import (
    check_flags,
    flags_from_source,
    known_flags,
    release_tuple,
    sglang_help_text,
    sglang_version_from_tree,
    sglang_versions,
)
from perfgate.server._sglang_launch import server_flags

# The scenario's launch (GLM-5-NVFP4 on 8x RTX PRO 6000, SGLang 0.5.12 era).
SCENARIO_ARGS = [
    "--model-path",
    "lukealonso/GLM-5-NVFP4",
    "--tp",
    "8",
    "--quantization",
    "modelopt_fp4",
    "--kv-cache-dtype",
    "fp8_e4m3",
    "--moe-runner-backend",
    "auto",
    "--nsa-decode-backend",
    "trtllm",
    "--nsa-prefill-backend=flashinfer",
    "--disable-cuda-graph",
    "--disable-radix-cache",
    "--max-running-requests",
    "1024",
    "--num-continuous-decode-steps",
    "8",
    "--mem-fraction-static",
    "0.85",
    "--enable-metrics",
    "--log-level",
    "info",
]


def test_the_scenario_launch_on_0_5_12(sglang_0_5_12: Path) -> None:
    known = flags_from_source(sglang_0_5_12)
    warnings = check_flags(SCENARIO_ARGS, known, "0.5.12")
    assert warnings == [
        (
            "--num-continuous-decode-steps has no effect: SGLang's scheduler does not read it "
            "(checked in 0.5.3 - 0.5.23), so any gain attributed to it is noise"
        )
    ]
    assert "--dsa-decode-backend" not in known


def test_the_scenario_launch_on_0_5_23_names_the_renames(sglang_0_5_23: Path) -> None:
    known = flags_from_source(sglang_0_5_23)
    with pytest.raises(ServerError) as err:
        check_flags(SCENARIO_ARGS, known, "0.5.23")
    message = str(err.value)
    assert message.startswith("SGLang 0.5.23 does not accept these server flags ([server] args): ")
    assert "--nsa-decode-backend is unknown: renamed to --dsa-decode-backend (SGLang 0.5.20+)" in message
    assert "--nsa-prefill-backend is unknown: renamed to --dsa-prefill-backend (SGLang 0.5.20+)" in message
    assert "--model-path" not in message and "--tp " not in message

    fixed = [a.replace("--nsa-", "--dsa-") for a in SCENARIO_ARGS]
    fixed += ["--enable-flashinfer-allreduce-fusion"]
    warnings = check_flags(fixed, known, "0.5.23")
    assert [w.split()[0] for w in warnings] == [
        "--disable-cuda-graph",
        "--num-continuous-decode-steps",
        "--enable-flashinfer-allreduce-fusion",
    ]
    assert "deprecated since SGLang 0.5.14" in warnings[0]
    assert "raises on SM120" in warnings[2]


def test_flags_from_source_covers_both_generations(sglang_0_5_12: Path, sglang_0_5_23: Path) -> None:
    unchanged = {
        "--tp-size",
        "--tensor-parallel-size",
        "--max-running-requests",
        "--moe-runner-backend",
        "--attention-backend",
        "--disable-radix-cache",
        "--quantization",
        "--kv-cache-dtype",
        "--mem-fraction-static",
        "--enable-metrics",
        "--log-level",
        "--model-path",
        "--port",
        "--host",
        "--disable-flashinfer-autotune",
    }
    old, new = flags_from_source(sglang_0_5_12), flags_from_source(sglang_0_5_23)
    assert unchanged <= old and unchanged <= new
    # 0.5.23 declares most flags as annotated fields, aliases and cli_name included.
    assert {"--model", "--dsa-decode-backend", "--sampling-backend", "--config"} <= new
    assert "--nsa-decode-backend" in old and "--nsa-decode-backend" not in new
    assert len(new) > 400


def test_abbreviations_ambiguity_and_typos() -> None:
    known = {
        "--tp-size",
        "--tensor-parallel-size",
        "--disable-radix-cache",
        "--disable-cuda-graph",
        "--max-running-requests",
        "-h",
        "--help",
    }
    assert check_flags(["--tp", "8", "--max-running=64", "--", "--not-a-flag"], known, "0.5.12") == []
    with pytest.raises(ServerError) as err:
        check_flags(["--disable", "--max-runing-requests", "64"], known, "0.5.12")
    message = str(err.value)
    assert "--disable is ambiguous (matches --disable-cuda-graph, --disable-radix-cache)" in message
    assert "--max-runing-requests is unknown (did you mean --max-running-requests?)" in message


def test_versions_of_a_tree(sglang_0_5_12: Path, tmp_path: Path) -> None:
    assert sglang_version_from_tree(sglang_0_5_12) == "0.5.12"
    old = tmp_path / "sglang"
    old.mkdir()
    (old / "version.py").write_text('__version__ = "0.5.3"\n')
    assert sglang_version_from_tree(old) == "0.5.3"
    (old / "version.py").unlink()
    assert sglang_version_from_tree(old) == "unknown"
    assert release_tuple("0.5.12.post1") == (0, 5, 12) and release_tuple("dev") == ()


def test_sglang_versions_of_an_interpreter(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist = site / "sglang-0.5.12.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.12\n")
    kernel = site / "sgl_kernel-0.3.21.dist-info"
    kernel.mkdir()
    (kernel / "METADATA").write_text("Metadata-Version: 2.1\nName: sgl-kernel\nVersion: 0.3.21\n")
    (site / "torch").mkdir()
    # torch/__init__.py must not run: reading the CUDA version from version.py text only.
    (site / "torch" / "__init__.py").write_text("raise RuntimeError('imported torch')\n")
    (site / "torch" / "version.py").write_text("cuda: Optional[str] = '12.9'\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    versions = sglang_versions(str(wrapper))
    assert versions == {"sglang": "0.5.12", "flashinfer": None, "sgl-kernel": "0.3.21", "torch": None, "cuda": "12.9"}


_FLAG = st.from_regex(r"--[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,5}){0,3}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(
    options=st.lists(
        st.tuples(
            st.lists(_FLAG, min_size=1, max_size=3),
            st.sampled_from(["store", "store_true", "choices", "nargs"]),
            st.text(alphabet="abc --xyz,.", max_size=120),
        ),
        max_size=12,
    ),
    width=st.integers(40, 200),
)
def test_known_flags_reads_argparse_help(options, width: int) -> None:
    parser = argparse.ArgumentParser(
        prog="launch_server",
        formatter_class=lambda prog: argparse.HelpFormatter(prog, width=width),
    )
    group = parser.add_argument_group("MoE")
    expected = {"-h", "--help"}
    for i, (names, kind, help_text) in enumerate(options):
        names = [n for n in dict.fromkeys(names) if n not in expected and n != "--help"]
        if not names:
            continue
        target = group if i % 2 else parser
        kwargs: dict = {"help": help_text.replace("%", "")}
        if kind == "store_true":
            kwargs["action"] = "store_true"
        elif kind == "choices":
            kwargs["choices"] = ["auto", "flashinfer_cutlass", "triton"]
        elif kind == "nargs":
            kwargs["nargs"] = "+"
        target.add_argument(*names, **kwargs)
        expected.update(names)
    assert known_flags(parser.format_help()) == expected


def test_help_text_of_an_interpreter(tmp_path: Path) -> None:
    package = tmp_path / "site" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(
        "import argparse\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--model-path', '--model')\n"
        "parser.add_argument('--tp-size', '--tensor-parallel-size', type=int)\n"
        "parser.parse_args()\n"
    )
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={package.parent} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    flags = known_flags(sglang_help_text(str(python)))
    assert flags == {"-h", "--help", "--model-path", "--model", "--tp-size", "--tensor-parallel-size"}
    with pytest.raises(ServerError, match="without a flag list"):
        sglang_help_text(sys.executable)


def test_the_flags_of_an_install_are_read_once_per_process(tmp_path: Path) -> None:
    """[gate] boots = 3 launches SGLang three times: its --help (torch and SGLang imported, 15-25 s
    on the H200) runs once, and again only when server_args.py changed."""
    root = tmp_path / "site" / "sglang"
    (root / "srt").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "srt" / "server_args.py").write_text("")
    runs = tmp_path / "runs"
    (root / "launch_server.py").write_text(
        f"open({str(runs)!r}, 'a').write('x')\n"
        "import argparse\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--model-path')\n"
        "parser.parse_args()\n"
    )
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={root.parent} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    env = {"PATH": os.environ["PATH"]}
    first = server_flags(str(python), env, root)
    assert first == ({"-h", "--help", "--model-path"}, "launch_server --help")
    assert server_flags(str(python), env, root) == first and runs.read_text() == "x"
    # Another environment, or the install changed: asked again.
    assert server_flags(str(python), {**env, "X": "1"}, root) == first and runs.read_text() == "xx"
    os.utime(root / "srt" / "server_args.py", ns=(1, 1))
    assert server_flags(str(python), env, root) == first and runs.read_text() == "xxx"
