"""Parameter handling and dependency errors of the tiny-model builder: no torch needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.errors import PerfgateError
from perfgate.testing import SIZES, build_tiny_model, ensure_tiny_model, resolve_spec, tinymodel
from perfgate.testing._tinymodel import cache_key

SRC = Path(__file__).resolve().parents[2] / "src"


def test_presets_have_the_documented_shapes() -> None:
    tiny = resolve_spec()
    assert (tiny.hidden_size, tiny.num_layers, tiny.num_heads, tiny.intermediate_size) == (128, 2, 2, 256)
    assert (tiny.context_len, tiny.vocab_size, tiny.dtype) == (4096, 2048, "float32")
    gpu = resolve_spec("gpu")
    assert (gpu.hidden_size, gpu.num_layers, gpu.dtype) == (2048, 16, "bfloat16")
    moe = resolve_spec("gpu-moe")
    assert (moe.hidden_size, moe.num_layers, moe.num_experts, moe.experts_per_token) == (2048, 16, 8, 2)
    assert (moe.intermediate_size, moe.dtype, moe.family, gpu.family) == (1408, "bfloat16", "mixtral", "llama")
    big = resolve_spec("gpu-8b")
    assert (big.hidden_size, big.num_layers, big.num_heads, big.intermediate_size) == (4096, 32, 32, 14336)
    assert (big.dtype, big.family) == ("bfloat16", "llama")
    assert set(SIZES) == {"tiny", "gpu", "gpu-8b", "gpu-moe"}


def test_explicit_fields_override_the_preset() -> None:
    spec = resolve_spec("gpu", num_layers=24, dtype="float16", seed=3)
    assert (spec.hidden_size, spec.num_layers, spec.dtype, spec.seed) == (2048, 24, "float16", 3)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"size": "huge"}, "unknown size 'huge'"),
        ({"hidden_size": 0}, "hidden_size must be an integer >= 1"),
        ({"num_layers": True}, "num_layers must be an integer >= 1"),
        ({"hidden_size": 100, "num_heads": 3}, "not a multiple of num_heads 3"),
        ({"dtype": "int8"}, "dtype must be one of"),
        ({"seed": -1}, "seed must be an integer >= 0"),
        ({"defect": "broken"}, "defect must be one of 'none', 'perturbed', 'nan'"),
        ({"num_experts": -1}, "num_experts must be an integer >= 0"),
        ({"num_experts": 4, "experts_per_token": 0}, "experts_per_token must be an integer >= 1"),
        ({"num_experts": 2, "experts_per_token": 3}, "experts_per_token 3 is more than num_experts 2"),
    ],
)
def test_bad_parameters_raise_one_clear_error(kwargs: dict[str, object], fragment: str, tmp_path: Path) -> None:
    with pytest.raises(PerfgateError, match=fragment):
        resolve_spec(**kwargs)  # type: ignore[arg-type]
    # The cache entry point validates before touching the disk.
    with pytest.raises(PerfgateError, match=fragment):
        ensure_tiny_model(tmp_path / "cache", **kwargs)  # type: ignore[arg-type]
    assert not (tmp_path / "cache").exists()


def test_refuses_a_non_empty_output_directory(tmp_path: Path) -> None:
    (tmp_path / "stale.safetensors").write_bytes(b"x")
    with pytest.raises(PerfgateError, match="exists and is not empty"):
        build_tiny_model(tmp_path)


def test_missing_extra_names_what_to_install(tmp_path: Path) -> None:
    # Hide a dependency even where it is installed: the CLI must say which extra to install.
    code = (
        "import sys; sys.modules['safetensors'] = None; "
        "from perfgate.testing.tinymodel import main; sys.exit(main([sys.argv[1]]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "m")],
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'perfgate[tinymodel]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def _fake_cached_entry(cache: Path) -> Path:
    spec = resolve_spec()
    entry = cache / f"llama-h{spec.hidden_size}-l{spec.num_layers}-{spec.dtype}-{cache_key(spec)}"
    entry.mkdir(parents=True)
    return entry


def test_cached_model_is_reused_and_linked_without_building(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entry = _fake_cached_entry(tmp_path / "cache")
    link = tmp_path / "links" / "tiny"
    assert tinymodel.main(["--cache", str(tmp_path / "cache"), "--link", str(link)]) == 0
    assert capsys.readouterr().out.strip() == str(entry)
    assert link.is_symlink() and link.resolve() == entry.resolve()
    # Re-pointing an existing link works too.
    assert tinymodel.main(["--cache", str(tmp_path / "cache"), "--link", str(link)]) == 0
    assert link.resolve() == entry.resolve()


def test_link_over_a_real_directory_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fake_cached_entry(tmp_path / "cache")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep").write_text("x")
    assert tinymodel.main(["--cache", str(tmp_path / "cache"), "--link", str(taken)]) == 2
    err = capsys.readouterr().err
    assert f"cannot point {taken} at" in err and "--link" in err
    assert (taken / "keep").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "taken"]


def test_a_defect_gets_its_own_cache_key() -> None:
    keys = {cache_key(resolve_spec(defect=d)) for d in ("none", "perturbed", "nan", "none")}
    assert len(keys) == 3


def test_experts_get_their_own_cache_key_and_the_dense_model_keeps_its_own() -> None:
    dense = resolve_spec()
    assert cache_key(dense) == cache_key(resolve_spec(num_experts=0, experts_per_token=4))
    keys = {cache_key(resolve_spec(num_experts=e, experts_per_token=k)) for e, k in ((0, 2), (4, 2), (4, 1), (8, 2))}
    assert len(keys) == 4
