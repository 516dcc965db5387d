"""Building the tiny model for real: needs the ``tinymodel`` extra (torch, transformers, ...)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="needs the perfgate[tinymodel] extra")

import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from perfgate.errors import PerfgateError
from perfgate.testing import (
    CHAT_TEMPLATE,
    SPECIAL_TOKENS,
    banned_token_ids,
    build_tiny_model,
    ensure_tiny_model,
)

SRC = Path(__file__).resolve().parents[2] / "src"


def _digests(model_dir: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(model_dir.iterdir())}


def _cli(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen(
        [sys.executable, "-m", "perfgate.testing.tinymodel", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> transformers.PreTrainedTokenizerBase:
    return transformers.AutoTokenizer.from_pretrained(model_dir)


def test_writes_a_safetensors_llama_with_the_tiny_shape(model_dir: Path) -> None:
    assert {p.name for p in model_dir.iterdir()} >= {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    shape = {
        k: config[k]
        for k in (
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "head_dim",
            "intermediate_size",
            "max_position_embeddings",
            "vocab_size",
        )
    }
    assert shape == {
        "hidden_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "head_dim": 64,
        "intermediate_size": 256,
        "max_position_embeddings": 4096,
        "vocab_size": 2048,
    }
    assert config["tie_word_embeddings"] is False
    weights = load_file(model_dir / "model.safetensors")
    assert {t.dtype for t in weights.values()} == {torch.float32}
    assert "lm_head.weight" in weights


def test_seed_changes_weights_but_not_tokenizer(model_dir: Path, tmp_path: Path) -> None:
    other = build_tiny_model(tmp_path / "seed1", seed=1)
    a, b = _digests(model_dir), _digests(other)
    assert a["model.safetensors"] != b["model.safetensors"]
    assert a["tokenizer.json"] == b["tokenizer.json"]


def test_tokenizer_has_special_tokens_and_chatml_template(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    assert len(tokenizer) == 2048
    assert tokenizer.bos_token == "<|startoftext|>"
    assert tokenizer.eos_token == "<|endoftext|>"
    assert set(SPECIAL_TOKENS) <= set(tokenizer.all_special_tokens)
    assert tokenizer.chat_template == CHAT_TEMPLATE
    ids = tokenizer("x = 1")["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert (
        rendered == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    # Each ChatML marker is one token, not spelled out in pieces.
    encoded = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert encoded.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3


@settings(max_examples=200, deadline=None)
@given(text=st.text())
def test_tokenizer_round_trips_any_text(tokenizer: transformers.PreTrainedTokenizerBase, text: str) -> None:
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.decode(ids[1:], skip_special_tokens=False) == text


def test_banned_head_rows_are_zero_but_for_the_ban_channel(
    model_dir: Path, tokenizer: transformers.PreTrainedTokenizerBase
) -> None:
    banned = banned_token_ids(tokenizer)
    assert tokenizer.eos_token_id in banned
    assert set(tokenizer.all_special_ids) <= set(banned)
    # Byte tokens of non-ASCII UTF-8 are banned; most of the vocabulary stays usable.
    assert tokenizer.convert_tokens_to_ids("Ã") in banned
    assert 100 < len(banned) < 1024
    allowed = [i for i in range(len(tokenizer)) if i not in set(banned)]
    assert all(tokenizer.decode([i]).isascii() and tokenizer.decode([i]).isprintable() for i in allowed)

    head = load_file(model_dir / "model.safetensors")["lm_head.weight"]
    assert torch.count_nonzero(head[banned, 1:]) == 0
    assert bool((head[banned, 0] < 0).all())
    assert torch.count_nonzero(head[allowed, 0]) == 0
    assert torch.count_nonzero(head[allowed, 1:]) == head[allowed, 1:].numel()


def _ban_gap(model_dir: Path, tokenizer: transformers.PreTrainedTokenizerBase) -> float:
    """The smallest logit gap between any allowed and any banned token over random prompts."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    ids = torch.randint(0, len(tokenizer), (4, 96), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(ids).logits
    banned = torch.zeros(len(tokenizer), dtype=torch.bool)
    banned[banned_token_ids(tokenizer)] = True
    return float((logits[..., ~banned].min(dim=-1).values - logits[..., banned].max(dim=-1).values).min())


def test_banned_tokens_can_never_be_sampled(model_dir: Path, tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    # e^-50 per token: not drawn in any realistic number of steps, even at temperature 1.
    assert _ban_gap(model_dir, tokenizer) > 50.0


def test_bfloat16_and_custom_shape(tmp_path: Path) -> None:
    out = build_tiny_model(
        tmp_path / "bf16", hidden_size=64, num_layers=1, num_heads=1, intermediate_size=128, dtype="bfloat16"
    )
    config = json.loads((out / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["head_dim"], config["dtype"]) == (
        64,
        1,
        64,
        "bfloat16",
    )
    assert {t.dtype for t in load_file(out / "model.safetensors").values()} == {torch.bfloat16}


def test_concurrent_ensure_builds_once_and_identically_to_another_process(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    small = {"hidden_size": 64, "num_heads": 1, "num_layers": 1}
    link = tmp_path / "current"
    argv = ("--cache", str(cache), "--link", str(link), "--hidden", "64", "--heads", "1", "--layers", "1")
    procs = [_cli(*argv) for _ in range(2)]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        outs.append(out.strip().splitlines()[-1])
    assert outs[0] == outs[1]
    entry = Path(outs[0])
    assert entry.parent == cache
    assert link.is_symlink() and link.resolve() == entry.resolve()
    # Only the finished entry and its lock remain: no temporary build directories.
    assert sorted(p.name for p in cache.iterdir()) == sorted([entry.name, f".{entry.name}.lock"])
    # This process has other hash seeds: training and saving must not depend on them.
    before = _digests(entry)
    assert before == _digests(build_tiny_model(tmp_path / "here", **small))
    mtime = (entry / "model.safetensors").stat().st_mtime_ns
    # A later call with the same parameters reuses the entry untouched.
    assert ensure_tiny_model(cache, **small) == entry
    assert (entry / "model.safetensors").stat().st_mtime_ns == mtime
    assert _digests(entry) == before


WEAK = {"hidden_size": 64, "num_heads": 1, "num_layers": 1}


def test_a_model_whose_ban_is_too_weak_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfgate.testing import _tinymodel

    # The shapes whose ban is weak at the smallest constant are 4096 wide and more (hidden 4096 x
    # 16 layers: a gap of 41 at 100, fp32): too big for a unit test. A constant far too small for
    # this small one (0.01: gap 3.6) weakens its ban the same way.
    monkeypatch.setattr(_tinymodel, "_BAN_CHANNEL_VALUES", (0.01,))
    with pytest.raises(
        PerfgateError,
        match=r"banned tokens are only 3\.\d logits below allowed ones \(need 10; ban channel constant "
        r"tried: 3\.\d at 0\.01\)",
    ):
        ensure_tiny_model(tmp_path / "cache", **WEAK)
    # Nothing half-built is left where a later call would find it.
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [next((tmp_path / "cache").glob(".*.lock")).name]


def test_a_weak_ban_is_raised_until_the_gap_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfgate.testing import _tinymodel

    monkeypatch.setattr(_tinymodel, "_BAN_CHANNEL_VALUES", (0.01, 100.0))
    built = load_file(str(build_tiny_model(tmp_path / "m", **WEAK) / "model.safetensors"))
    # The second constant is the one saved, in every token's embedding.
    assert set(built["model.embed_tokens.weight"][:, 0].tolist()) == {100.0}


def _teacher_forced_logprobs(model_dir: Path, ids: torch.Tensor) -> torch.Tensor:
    """Each position's logprob of the next given token, as a server's teacher-forced scoring gives it."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits.float(), dim=-1)
    return logprobs[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]


@pytest.fixture(scope="module")
def scored_ids(tokenizer: transformers.PreTrainedTokenizerBase) -> torch.Tensor:
    allowed = torch.tensor(sorted(set(range(len(tokenizer))) - set(banned_token_ids(tokenizer))))
    picks = torch.randint(0, len(allowed), (4, 64), generator=torch.Generator().manual_seed(1))
    return allowed[picks]


def test_perturbed_defect_keeps_shapes_and_tokenizer_but_moves_logprobs_clearly(
    model_dir: Path, tmp_path: Path, tokenizer: transformers.PreTrainedTokenizerBase, scored_ids: torch.Tensor
) -> None:
    wrong = build_tiny_model(tmp_path / "perturbed", defect="perturbed")
    a, b = _digests(model_dir), _digests(wrong)
    # Same config and tokenizer files: a server serves it under the same name and shapes.
    assert {k: v for k, v in a.items() if k != "model.safetensors"} == {
        k: v for k, v in b.items() if k != "model.safetensors"
    }
    right_w, wrong_w = load_file(model_dir / "model.safetensors"), load_file(wrong / "model.safetensors")
    assert [k for k in right_w if not torch.equal(right_w[k], wrong_w[k])] == ["lm_head.weight"]
    assert {k: v.shape for k, v in right_w.items()} == {k: v.shape for k, v in wrong_w.items()}
    banned = banned_token_ids(tokenizer)
    # The banned rows (and so the ban) are untouched.
    assert torch.equal(right_w["lm_head.weight"][banned], wrong_w["lm_head.weight"][banned])

    right_lp = _teacher_forced_logprobs(model_dir, scored_ids)
    wrong_lp = _teacher_forced_logprobs(wrong, scored_ids)
    delta = (wrong_lp - right_lp).abs()
    # Measured 0.32 mean / 1.24 max here; the bfloat16 copy moves the same logprobs by 1.3e-6 / 5.2e-6.
    assert float(delta.mean()) > 0.1
    assert bool(torch.isfinite(wrong_lp).all())


def test_bfloat16_copy_is_the_float32_model_rounded(model_dir: Path, tmp_path: Path, scored_ids: torch.Tensor) -> None:
    copy = build_tiny_model(tmp_path / "bf16", dtype="bfloat16")
    right_w, copy_w = load_file(model_dir / "model.safetensors"), load_file(copy / "model.safetensors")
    assert all(torch.equal(right_w[k].to(torch.bfloat16), copy_w[k]) for k in right_w)
    # The "interesting middle": it moves logprobs, but by orders of magnitude less than the perturbed model.
    delta = (_teacher_forced_logprobs(copy, scored_ids) - _teacher_forced_logprobs(model_dir, scored_ids)).abs()
    assert 0 < float(delta.max()) < 1e-3


def test_nan_defect_has_one_nan_weight_and_nan_logits(
    model_dir: Path, tmp_path: Path, scored_ids: torch.Tensor
) -> None:
    wrong = build_tiny_model(tmp_path / "nan", defect="nan")
    a, b = _digests(model_dir), _digests(wrong)
    assert {k: v for k, v in a.items() if k != "model.safetensors"} == {
        k: v for k, v in b.items() if k != "model.safetensors"
    }
    weights = load_file(wrong / "model.safetensors")
    assert sum(int(torch.isnan(w).sum()) for w in weights.values()) == 1
    assert bool(torch.isnan(weights["model.layers.1.mlp.down_proj.weight"]).any())
    assert bool(torch.isnan(_teacher_forced_logprobs(wrong, scored_ids)).all())


def test_defects_are_cached_beside_the_right_model_under_their_own_names(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    small = {"hidden_size": 64, "num_heads": 1, "num_layers": 1}
    right = ensure_tiny_model(cache, **small)
    nan = ensure_tiny_model(cache, defect="nan", **small)
    assert nan != right and "-nan-" in nan.name and "-nan-" not in right.name
    out = _cli("--cache", str(cache), "--defect", "nan", "--hidden", "64", "--heads", "1", "--layers", "1")
    stdout, stderr = out.communicate(timeout=300)
    assert out.returncode == 0, stderr
    # The CLI finds the entry built above rather than building another.
    assert stdout.strip().splitlines()[-1] == str(nan)
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 2


def test_a_mixtral_style_moe_keeps_the_ban_and_routes_to_its_experts(tmp_path: Path) -> None:
    """--experts 4: a MixtralForCausalLM in the checkpoint layout serving engines load (one w1/w2/w3
    per expert), whose experts never write the ban channel, so banned tokens stay out of reach."""
    cache = tmp_path / "cache"
    out = ensure_tiny_model(cache, num_experts=4, experts_per_token=2)
    assert out.name.startswith("mixtral-h128-l2-e4k2-float32-")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["MixtralForCausalLM"]
    assert (config["num_local_experts"], config["num_experts_per_tok"], config["intermediate_size"]) == (4, 2, 256)
    weights = load_file(out / "model.safetensors")
    for layer in range(2):
        prefix = f"model.layers.{layer}.block_sparse_moe"
        assert weights[f"{prefix}.gate.weight"].shape == (4, 128)
        for e in range(4):
            assert weights[f"{prefix}.experts.{e}.w1.weight"].shape == (256, 128)
            # No expert writes channel 0, which carries the constant behind the ban.
            assert torch.count_nonzero(weights[f"{prefix}.experts.{e}.w2.weight"][0]) == 0
    assert _ban_gap(out, transformers.AutoTokenizer.from_pretrained(out)) > 50.0
    # Its NaN defect reaches every logit whichever experts the router picks.
    nan = ensure_tiny_model(cache, num_experts=4, experts_per_token=2, defect="nan")
    nan_weights = load_file(nan / "model.safetensors")
    assert sum(int(torch.isnan(w).sum()) for w in nan_weights.values()) == 4
    ids = torch.randint(0, 2048, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert bool(torch.isnan(transformers.AutoModelForCausalLM.from_pretrained(nan)(ids).logits).all())
