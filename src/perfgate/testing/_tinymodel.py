"""Build a small Llama (or Mixtral-style MoE) model and tokenizer locally, deterministically, for
real-server tests.

No model can be downloaded where perfgate's own tests run, yet a real serving engine (vLLM on CPU,
``transformers serve``) needs weights and a tokenizer. This builds both from nothing: a byte-level
BPE tokenizer trained on Python standard-library sources and a randomly initialised Llama with a
fixed seed.

The model is shaped so that a request always runs to ``max_tokens`` and streams one chunk per
token, on any server: special tokens (EOS included) and tokens that do not decode to printable
ASCII can never be sampled. Their output-head rows are zero except in one reserved hidden channel
that carries a constant through the network, where they hold a large negative weight, so their
logits sit about 100 below every other token's. (A zero row alone gives logit 0, and a random
model's logits are all near 0: under sampling such tokens would still be drawn.)

torch, transformers, tokenizers and safetensors are optional: they are imported only when a model
is built, and their absence raises a PerfgateError naming the extra to install.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sysconfig
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import filelock

from perfgate.errors import PerfgateError

# Bump when a change here alters the files built for the same parameters: it invalidates caches.
BUILDER_VERSION = 1

BOS_TOKEN = "<|startoftext|>"
EOS_TOKEN = "<|endoftext|>"
IM_START_TOKEN = "<|im_start|>"
IM_END_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = (EOS_TOKEN, BOS_TOKEN, IM_START_TOKEN, IM_END_TOKEN)

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Standard-library modules present in every CPython from 3.11 on: the tokenizer's training text.
_CORPUS_MODULES = (
    "argparse.py",
    "ast.py",
    "calendar.py",
    "configparser.py",
    "dataclasses.py",
    "difflib.py",
    "enum.py",
    "fractions.py",
    "functools.py",
    "inspect.py",
    "random.py",
    "shutil.py",
    "statistics.py",
    "string.py",
    "subprocess.py",
    "tempfile.py",
    "textwrap.py",
    "threading.py",
    "tokenize.py",
    "typing.py",
)

# The hidden channel that carries a constant and gives banned tokens their negative logits.
_BAN_CHANNEL = 0
# How far (in logits) a banned token sits below an ordinary one: e^-100 is never sampled.
_BAN_LOGIT = 100.0
# The constant in that channel, the first of these that gives the built model its gap. It must
# dominate every RMSNorm's input, or the ban weakens as the residual stream grows with depth: at
# 1.0 or 10 the 16-layer "gpu" preset left banned logits within a few units of allowed ones; at
# 100 they sit 99 below. Every layer reads the other channels divided by the norm, so by about
# sqrt(hidden) / value: a wider or deeper model grows its stream faster (hidden 5120 x 40 layers
# left a gap of 1.4 at 100), and a larger constant damps every layer's contribution by as much
# (the attention path linearly, the MLP's gated product quadratically), which gives the gap back.
# The presets pass at 100, so their weights are what they were; the other channels reach the
# logits scaled by ~1/value, so ordinary logits are nearly equal: sampling is close to uniform
# (and a "perturbed" defect moves them value/100 times less than _PERTURB_SIGMA's numbers below).
_BAN_CHANNEL_VALUES = (100.0, 1_000.0, 10_000.0)
# Smallest logit gap between every allowed and every banned token that a built model must show.
# At 10, a sampled step picks any of the ~200 banned tokens with probability below 1e-5 (greedy:
# never); the 4.9 B GPU preset (hidden 4096, 24 layers) measured 12.0 on an H200, the small presets ~99.
_MIN_BAN_GAP = 10.0

_DTYPES = ("float32", "bfloat16", "float16")

# Wrong models that keep the name, shapes and tokenizer of the right one (for the correctness probe):
# "perturbed" adds noise to the output head, "nan" puts one NaN in a decoder layer's weight.
DEFECTS = ("none", "perturbed", "nan")
# The tiny model's hidden state is dominated by the ban channel, which every RMSNorm divides by: the
# decoder layers' contributions reach the logits scaled by ~1e-4, and all allowed tokens' logprobs
# sit within ~5e-4 of -7.52 (measured with transformers, fp32). Noise of 100 % of a decoder layer's
# weights (layer 1 down_proj) therefore moved no logprob by more than 5e-7, less than bfloat16
# rounding moves them (1e-5): the "perturbed" defect has to act on the output head, where the
# allowed rows' ordinary channels reach the logits directly. Noise of standard deviation sigma
# there moved teacher-forced logprobs by mean ~0.02 * sigma, max ~0.075 * sigma nats (fp32,
# transformers, 8 x 64 positions); 15 gave 0.34 mean and 1.28 max on real SGLang 0.5.23 (fp32) and
# vLLM 0.32 (bf16), 32 x 64 positions (docs/correctness-real-engines.md): 10^5 times what bfloat16
# or batching moved them (<= 1e-5), while the shapes, and so the work per token, stay the right
# model's.
_PERTURB_SIGMA = 15.0
# The NaN goes into an ordinary channel of the last decoder layer's MLP output: it reaches every
# position's residual stream, hence every logit.
_NAN_INDEX = (1, 0)

_EXTRA_HINT = (
    "building the tiny model needs torch, transformers, tokenizers and safetensors; "
    "install them with: pip install 'perfgate[tinymodel]' (torch==2.13.0 takes a CPU build)"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """Everything that decides the built files; its hash names the cache entry."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    context_len: int
    vocab_size: int
    dtype: str
    seed: int
    defect: str = "none"
    # A Mixtral-style mixture of experts in every layer when > 0 (intermediate_size is then each
    # expert's), ``experts_per_token`` of them routed per token; 0: the dense Llama.
    num_experts: int = 0
    experts_per_token: int = 2

    @property
    def family(self) -> str:
        return "mixtral" if self.num_experts else "llama"


SIZES: dict[str, TinyModelSpec] = {
    # ~3.4 MB, builds in seconds; for CPU servers in CI.
    "tiny": TinyModelSpec(
        hidden_size=128,
        num_layers=2,
        num_heads=2,
        intermediate_size=256,
        context_len=4096,
        vocab_size=2048,
        dtype="float32",
        seed=0,
    ),
    # ~680 M parameters: enough for a GPU server to have real work per token.
    "gpu": TinyModelSpec(
        hidden_size=2048,
        num_layers=16,
        num_heads=16,
        intermediate_size=4096,
        context_len=4096,
        vocab_size=2048,
        dtype="bfloat16",
        seed=0,
    ),
    # ~7.8 B parameters (Llama-3-8B's widths, full multi-head attention: 512 KB of KV cache per
    # token): an H200's decode step at 256 streams is GPU time (weights, attention over the KV
    # cache), not the host-side scheduler's, which sets the speed of the 680 M "gpu" preset there
    # (issue #29). At 4096 wide the ban weakens with depth (4096 x 16 layers: a gap of 41 at the
    # constant 100, fp32 on CPU; 4096 x 24: 12.0 on an H200), so the build may raise the constant.
    "gpu-8b": TinyModelSpec(
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        intermediate_size=14336,
        context_len=4096,
        vocab_size=2048,
        dtype="bfloat16",
        seed=0,
    ),
    # ~1.4 B parameters, 8 experts (top 2) of FFN 1408 per layer: a MoE whose expert GEMMs a GPU
    # server runs through its MoE kernels (SGLang's --moe-runner-backend, FlashInfer's CUTLASS MoE).
    "gpu-moe": TinyModelSpec(
        hidden_size=2048,
        num_layers=16,
        num_heads=16,
        intermediate_size=1408,
        context_len=4096,
        vocab_size=2048,
        dtype="bfloat16",
        seed=0,
        num_experts=8,
        experts_per_token=2,
    ),
}


def resolve_spec(
    size: str = "tiny",
    *,
    hidden_size: int | None = None,
    num_layers: int | None = None,
    num_heads: int | None = None,
    intermediate_size: int | None = None,
    seed: int = 0,
    dtype: str | None = None,
    defect: str = "none",
    num_experts: int | None = None,
    experts_per_token: int | None = None,
) -> TinyModelSpec:
    """The ``size`` preset with any explicit field overriding it; bad values raise PerfgateError."""
    if size not in SIZES:
        raise PerfgateError(f"tiny model: unknown size {size!r}; expected one of {', '.join(map(repr, SIZES))}")
    overrides: dict[str, Any] = {
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "intermediate_size": intermediate_size,
        "dtype": dtype,
        "num_experts": num_experts,
        "experts_per_token": experts_per_token,
    }
    spec = replace(SIZES[size], seed=seed, defect=defect, **{k: v for k, v in overrides.items() if v is not None})
    for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "experts_per_token"):
        value = getattr(spec, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PerfgateError(f"tiny model: {name} must be an integer >= 1, got {value!r}")
    if isinstance(spec.num_experts, bool) or not isinstance(spec.num_experts, int) or spec.num_experts < 0:
        raise PerfgateError(f"tiny model: num_experts must be an integer >= 0 (0: dense), got {spec.num_experts!r}")
    if spec.num_experts and spec.experts_per_token > spec.num_experts:
        raise PerfgateError(
            f"tiny model: experts_per_token {spec.experts_per_token} is more than num_experts {spec.num_experts}"
        )
    if isinstance(spec.seed, bool) or not isinstance(spec.seed, int) or spec.seed < 0:
        raise PerfgateError(f"tiny model: seed must be an integer >= 0, got {spec.seed!r}")
    if spec.hidden_size % spec.num_heads:
        raise PerfgateError(
            f"tiny model: hidden_size {spec.hidden_size} is not a multiple of num_heads {spec.num_heads}"
        )
    if spec.dtype not in _DTYPES:
        raise PerfgateError(f"tiny model: dtype must be one of {', '.join(map(repr, _DTYPES))}, got {spec.dtype!r}")
    if spec.defect not in DEFECTS:
        raise PerfgateError(f"tiny model: defect must be one of {', '.join(map(repr, DEFECTS))}, got {spec.defect!r}")
    return spec


def _corpus_files() -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = [stdlib / name for name in _CORPUS_MODULES if (stdlib / name).is_file()]
    if not files:
        raise PerfgateError(
            f"tiny model: no Python sources found in {stdlib} to train the tokenizer on "
            f"(looked for {', '.join(_CORPUS_MODULES[:3])}, ...); use a Python that ships its .py files"
        )
    return files


def _corpus_digest(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def cache_key(spec: TinyModelSpec) -> str:
    """Hash of the spec, the builder version and the tokenizer's training text."""
    fields = asdict(spec)
    if spec.defect == "none":
        # The right model keeps the cache entry it had before defects existed.
        del fields["defect"]
    if not spec.num_experts:
        # So does the dense model, which had it before experts existed.
        del fields["num_experts"], fields["experts_per_token"]
    blob = json.dumps(
        {"spec": fields, "builder": BUILDER_VERSION, "corpus": _corpus_digest(_corpus_files())},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _import_deps() -> tuple[Any, Any, Any]:
    try:
        import safetensors  # noqa: F401  (save_pretrained writes through it)
        import tokenizers
        import torch
        import transformers
    except ImportError as e:
        raise PerfgateError(f"{_EXTRA_HINT} ({e})") from None
    return tokenizers, torch, transformers


def _printable_ascii(text: str) -> bool:
    return bool(text) and all(" " <= ch <= "~" for ch in text)


def _build_tokenizer(tokenizers: Any, transformers: Any, spec: TinyModelSpec) -> Any:
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((f.read_text(encoding="utf-8") for f in _corpus_files()), trainer=trainer)
    bos_id = tok.token_to_id(BOS_TOKEN)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B:1",
        special_tokens=[(BOS_TOKEN, bos_id)],
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        additional_special_tokens=[IM_START_TOKEN, IM_END_TOKEN],
        chat_template=CHAT_TEMPLATE,
        model_max_length=spec.context_len,
        clean_up_tokenization_spaces=False,
    )


def banned_token_ids(tokenizer: Any) -> list[int]:
    """Ids the model never generates: special tokens and those not decoding to printable ASCII."""
    special = set(tokenizer.all_special_ids)
    return [
        i
        for i in range(len(tokenizer))
        if i in special or not _printable_ascii(tokenizer.decode([i], skip_special_tokens=False))
    ]


def _build_model(torch: Any, transformers: Any, spec: TinyModelSpec, tokenizer: Any) -> Any:
    vocab = len(tokenizer)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    common = {
        "vocab_size": vocab,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_heads,
        "head_dim": spec.hidden_size // spec.num_heads,
        "max_position_embeddings": spec.context_len,
        "tie_word_embeddings": False,
        "bos_token_id": tokenizer.convert_tokens_to_ids(BOS_TOKEN),
        "eos_token_id": eos_id,
        "pad_token_id": eos_id,
    }
    # Initialise in float32 whatever the target dtype, so a seed gives the same weights in any dtype.
    torch.manual_seed(spec.seed)
    if spec.num_experts:
        config = transformers.MixtralConfig(
            **common, num_local_experts=spec.num_experts, num_experts_per_tok=spec.experts_per_token
        )
        model = transformers.MixtralForCausalLM(config)
    else:
        config = transformers.LlamaConfig(**common)
        model = transformers.LlamaForCausalLM(config)
    c = _BAN_CHANNEL
    with torch.no_grad():
        # Channel c holds the constant from the embedding to the final norm: no layer reads or writes it.
        model.model.embed_tokens.weight[:, c] = _BAN_CHANNEL_VALUES[0]
        for layer in model.model.layers:
            layer.input_layernorm.weight[c] = 0.0
            layer.post_attention_layernorm.weight[c] = 0.0
            layer.self_attn.o_proj.weight[c, :] = 0.0
            for down in _down_projections(layer):
                down[c, :] = 0.0
        # After the final RMSNorm channel c is about sqrt(hidden), as it dominates the norm.
        head = model.lm_head.weight
        head[:, c] = 0.0
        banned = torch.tensor(banned_token_ids(tokenizer), dtype=torch.long)
        head[banned] = 0.0
        head[banned, c] = -_BAN_LOGIT / math.sqrt(spec.hidden_size)
        if spec.defect == "perturbed":
            allowed = torch.ones(vocab, dtype=torch.bool)
            allowed[banned] = False
            # Its own generator: the right model's weights (drawn above) stay those of seed.
            noise = torch.Generator(device="cpu").manual_seed(spec.seed + 1)
            rows = head[allowed]
            rows[:, c + 1 :] += _PERTURB_SIGMA * torch.randn(rows[:, c + 1 :].shape, generator=noise)
            head[allowed] = rows
    model = model.to(getattr(torch, spec.dtype))
    _calibrate_ban(torch, model, banned, spec)
    if spec.defect == "nan":
        # After the ban check, which a NaN model cannot pass (its logits are all NaN).
        with torch.no_grad():
            # Every expert's, so that whichever the router picks carries it.
            for down in _down_projections(model.model.layers[-1]):
                down[_NAN_INDEX] = float("nan")
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=[eos_id, tokenizer.convert_tokens_to_ids(IM_END_TOKEN)],
        pad_token_id=eos_id,
    )
    return model


def _down_projections(layer: Any) -> list[Any]:
    """The weights through which a decoder layer's MLP writes the residual stream, each indexed
    [hidden channel, :]: the dense MLP's down_proj, or every expert's (transformers 5 keeps a MoE's
    experts fused in one [experts, hidden, ffn] tensor; older releases one w2 per expert)."""
    mlp = layer.mlp if hasattr(layer, "mlp") else layer.block_sparse_moe
    if hasattr(mlp, "down_proj"):
        return [mlp.down_proj.weight]
    experts = mlp.experts
    if hasattr(experts, "down_proj"):
        return list(experts.down_proj)
    return [expert.w2.weight for expert in experts]


def _calibrate_ban(torch: Any, model: Any, banned: Any, spec: TinyModelSpec) -> None:
    """Raise the ban channel's constant through ``_BAN_CHANNEL_VALUES`` until the built model's gap
    holds; refuse the model when none gives it.

    The promise "never generates a banned token" rests on the ban channel dominating: it is
    verified on the built weights rather than trusted for every shape a caller may ask for.
    """
    # Drawn on the CPU generator explicitly: the GPU build runs under a CUDA default device, where
    # an implicit-device randint would refuse a CPU generator.
    generator = torch.Generator(device="cpu").manual_seed(spec.seed)
    ids = torch.randint(0, model.config.vocab_size, (1, 64), generator=generator, device="cpu").to(model.device)
    is_banned = torch.zeros(model.config.vocab_size, dtype=torch.bool, device=model.device)
    is_banned[banned] = True
    gaps = []
    for value in _BAN_CHANNEL_VALUES:
        with torch.no_grad():
            model.model.embed_tokens.weight[:, _BAN_CHANNEL] = value
            logits = model(ids).logits.float()[0]
        gaps.append(float((logits[:, ~is_banned].min(dim=-1).values - logits[:, is_banned].max(dim=-1).values).min()))
        # A NaN gap fails ">=" and is no gap.
        if gaps[-1] >= _MIN_BAN_GAP:
            return
    tried = ", ".join(f"{gap:.1f} at {value:g}" for gap, value in zip(gaps, _BAN_CHANNEL_VALUES, strict=True))
    raise PerfgateError(
        f"tiny model: with {spec} banned tokens are only {max(gaps):.1f} logits below allowed ones "
        f"(need {_MIN_BAN_GAP:g}; ban channel constant tried: {tried}): the model could stop early or emit "
        "empty chunks; use fewer layers or a narrower model"
    )


def build_tiny_model(out_dir: Path, *, size: str = "tiny", **params: Any) -> Path:
    """Build the model and tokenizer into ``out_dir`` (created; must be empty) and return it.

    ``size`` picks a preset ("tiny": hidden 128, 2 layers, float32; "gpu": hidden 2048,
    16 layers, bfloat16; "gpu-8b": hidden 4096, 32 layers, FFN 14336, bfloat16; "gpu-moe": 8
    experts of FFN 1408, top 2, per layer); ``params`` (the
    keyword arguments of :func:`resolve_spec`) override single fields of it.
    ``defect="perturbed"`` or ``"nan"`` builds a wrong model with the same shapes, tokenizer and
    config as the right one (see :data:`DEFECTS`). The same arguments on the same Python and
    library versions give byte-identical files.
    """
    spec = resolve_spec(size, **params)
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PerfgateError(
            f"tiny model: output directory {out} exists and is not empty; pass a new or empty directory"
        )
    tokenizers, torch, transformers = _import_deps()
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _build_tokenizer(tokenizers, transformers, spec)
    model = _build_model(torch, transformers, spec, tokenizer)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)
    return out


def ensure_tiny_model(cache_dir: Path, *, size: str = "tiny", **params: Any) -> Path:
    """The cached model for these parameters (as for build_tiny_model), built on first use.

    Built into a temporary directory beside the entry and renamed into place under a file lock,
    so concurrent callers build it once and never see a half-written model.
    """
    spec = resolve_spec(size, **params)
    cache = Path(cache_dir)
    defect = "" if spec.defect == "none" else f"-{spec.defect}"
    experts = f"-e{spec.num_experts}k{spec.experts_per_token}" if spec.num_experts else ""
    name = f"{spec.family}-h{spec.hidden_size}-l{spec.num_layers}{experts}-{spec.dtype}{defect}-{cache_key(spec)}"
    final = cache / name
    if final.is_dir():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(cache / f".{name}.lock")):
        if final.is_dir():
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=cache))
        try:
            build_tiny_model(
                tmp,
                size=size,
                hidden_size=spec.hidden_size,
                num_layers=spec.num_layers,
                num_heads=spec.num_heads,
                intermediate_size=spec.intermediate_size,
                seed=spec.seed,
                dtype=spec.dtype,
                defect=spec.defect,
                num_experts=spec.num_experts,
                experts_per_token=spec.experts_per_token,
            )
            # mkdtemp makes it private; a shared cache must be readable by a server run as another user.
            os.chmod(tmp, 0o755)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final
