"""Helpers for testing perfgate against real servers without downloading anything.

``ensure_tiny_model(cache_dir)`` gives a locally built Llama model and tokenizer that any
OpenAI-compatible engine can serve and that always generates exactly ``max_tokens``.
Building needs the optional extra ``perfgate[tinymodel]``; importing this package does not.
"""

from perfgate.testing._tinymodel import (
    BUILDER_VERSION,
    CHAT_TEMPLATE,
    DEFECTS,
    SIZES,
    SPECIAL_TOKENS,
    TinyModelSpec,
    banned_token_ids,
    build_tiny_model,
    ensure_tiny_model,
    resolve_spec,
)

__all__ = [
    "BUILDER_VERSION",
    "CHAT_TEMPLATE",
    "DEFECTS",
    "SIZES",
    "SPECIAL_TOKENS",
    "TinyModelSpec",
    "banned_token_ids",
    "build_tiny_model",
    "ensure_tiny_model",
    "resolve_spec",
]
