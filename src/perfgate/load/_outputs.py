"""Whether the load's answers are clearly not a model's: checked after the measured phase from
what each record kept of its answer (:class:`OutputSample`), never per chunk.

A real model may repeat one token for a whole answer, or spell a few tokens as no text (special
tokens under ignore_eos), on some prompts. So a rule trips only when every completed answer of
the run that can show it does so, and at least :data:`MIN_ANSWERS` can: a server whose answers
to different prompts are all one and the same id repeated, or all without text, is not running a
model.
"""

from __future__ import annotations

from collections.abc import Sequence

from perfgate.load._records import OutputSample, RequestRecord

# One answer that repeats a token is a model's right; different prompts all answered that way are not.
MIN_ANSWERS = 2


def degenerate_output(workload: str, records: Sequence[RequestRecord]) -> str:
    """Why the answers of ``records`` cannot be a model's, naming the workload, the first request
    and its positions; "" when they can. The rules (docs/correctness.md, "The load's answers"):

    - one id: every completed answer with at least 2 ids carries one and the same id at every
      position (a proxy that rewrites each token to "X");
    - no text: every completed answer that carried tokens (ids on SGLang, the server's count on
      OpenAI APIs) and a text field came with that text empty.
    """
    answers = [(r.index, r.output) for r in records if r.ok and r.output is not None]
    with_ids = [(i, o) for i, o in answers if o.ids >= 2]
    ids = {o.one_id for _, o in with_ids}
    if len(with_ids) >= MIN_ANSWERS and len(ids) == 1 and None not in ids:
        index, first = with_ids[0]
        return (
            f"workload {workload}: the load's answers are not a model's: every output token of all "
            f"{len(with_ids)} completed answers is token id {first.one_id}; first: request {index}, positions "
            f"0-{first.ids - 1}"
        )
    spelled = [(i, o) for i, o in answers if o.tokens >= 1 and o.text is not None]
    if len(spelled) >= MIN_ANSWERS and not any(o.text for _, o in spelled):
        index, first = spelled[0]
        return (
            f"workload {workload}: the load's answers are not a model's: none of the {len(spelled)} completed "
            f"answers that carried tokens had any text; first: request {index}, {_what(first)} from position 0 "
            "and no text"
        )
    return ""


def _what(sample: OutputSample) -> str:
    return f"{sample.ids} output ids" if sample.ids else f"{sample.tokens} tokens counted by the server"
