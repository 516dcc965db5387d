"""The correctness guard: a PASS means as fast AND still the same model.

A small fixed, seeded prompt set is sent greedily (temperature 0) at a low concurrency and again
at the workloads' highest, once per session after boot. Each prompt's greedy output ids and the
logprob of every token are the record (stored beside the workload baselines). A later run is held
to the record by teacher forcing: the candidate server scores the record's tokens given the
prompt, and the logprobs are compared (mean and max |difference|, share of positions whose
recorded token is no longer the argmax); greedy exact match and first divergence are reported
beside them. Degenerate answers (NaN/inf logprobs, one token repeated, all logprobs 0, two
identical requests of one batch that answer differently) fail with or without a record.

Public API:
- :func:`probe_spec` (profile -> :class:`ProbeSpec` or None when off), :func:`off_reason`;
- :func:`open_client` (an API's :class:`ProbeClient`: ``"sglang"``, ``"openai-completions"``,
  ``"openai-chat"``), :func:`probe` (async) and :func:`run_probe` (blocking) -> :class:`ProbeOutcome`;
- :class:`ProbeRecord` (the reference; ``to_dict``/``from_dict``), :func:`judge_probe` (outcome ->
  verdict), :class:`CorrectnessResult` (what the gate reports);
- :func:`gate` (one session's step: reference, probe, judge, record), :func:`load_record`,
  :func:`save_record`, :func:`check_records` (the stored reference, a baseline named :data:`NAME`);
- :func:`check_load_answers` / :func:`score_answers` (async): the load's own sampled answers
  (:class:`LoadAnswer`) scored teacher-forced against the server itself -> :class:`AnswerCheck`.
"""

from perfgate.correctness._adapters import Position, ProbeClient, open_client
from perfgate.correctness._answers import AnswerCheck, LoadAnswer, check_load_answers, score_answers
from perfgate.correctness._compare import Finding, PassResult, PromptAgreement
from perfgate.correctness._gate import DEGENERATE, gate, run_probe
from perfgate.correctness._probe import ProbeOutcome, probe
from perfgate.correctness._record import ProbeRecord, PromptRecord
from perfgate.correctness._spec import Api, ProbeSpec, Prompt, off_reason, probe_spec
from perfgate.correctness._store import check_records, load_record, save_record
from perfgate.correctness._verdict import NAME, CorrectnessResult, judge_probe, rules

__all__ = [
    "DEGENERATE",
    "NAME",
    "AnswerCheck",
    "Api",
    "CorrectnessResult",
    "Finding",
    "LoadAnswer",
    "PassResult",
    "Position",
    "ProbeClient",
    "ProbeOutcome",
    "ProbeRecord",
    "ProbeSpec",
    "Prompt",
    "PromptAgreement",
    "PromptRecord",
    "check_load_answers",
    "check_records",
    "gate",
    "judge_probe",
    "load_record",
    "off_reason",
    "open_client",
    "probe",
    "probe_spec",
    "rules",
    "run_probe",
    "save_record",
    "score_answers",
]
