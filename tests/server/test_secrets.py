"""API keys: from the environment to the server and the requests, redacted from every record."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from perfgate._redact import SECRETS
from perfgate.errors import ServerError
from perfgate.profile import ServerSpec
from perfgate.server import build_command, start_server
from perfgate.server._secrets import REDACTED, Redactor, ServerKeys

KEY = "sk-live-0123456789"
ADMIN = "adm-9876543210"


def test_keys_come_from_the_named_variables_and_go_to_sglang_as_flags(monkeypatch):
    monkeypatch.setenv("PG_KEY", KEY)
    monkeypatch.setenv("PG_ADMIN", ADMIN)
    spec = ServerSpec(kind="sglang", model_path="/m", api_key_env="PG_KEY", admin_api_key_env="PG_ADMIN")
    keys = ServerKeys.from_spec(spec)
    argv, _ = build_command(spec, 30000, keys)
    assert argv[-4:] == ["--api-key", KEY, "--admin-api-key", ADMIN]
    assert keys.headers() == {"Authorization": f"Bearer {KEY}"}
    assert keys.headers(admin=True) == {"Authorization": f"Bearer {ADMIN}"}
    assert ServerKeys(api_key=KEY).headers(admin=True) == {"Authorization": f"Bearer {KEY}"}
    assert ServerKeys().headers() == {} and ServerKeys().server_flags() == []


def test_an_unset_key_variable_stops_before_launch(monkeypatch):
    monkeypatch.delenv("PG_MISSING", raising=False)
    spec = ServerSpec(kind="sglang", model_path="/m", admin_api_key_env="PG_MISSING")
    with pytest.raises(
        ServerError,
        match=r"\[server\] admin_api_key_env = 'PG_MISSING': the environment variable PG_MISSING is not set",
    ):
        ServerKeys.from_spec(spec)


@pytest.mark.parametrize("args", [("--api-key", KEY), (f"--admin-api-key={ADMIN}",)])
def test_a_key_written_into_the_profile_is_refused(args):
    with pytest.raises(
        ServerError, match="put it in an environment variable and name that in \\[server\\] api_key_env"
    ):
        build_command(ServerSpec(kind="sglang", model_path="/m", args=args), 30000, ServerKeys())


def test_a_command_template_takes_the_key_from_a_placeholder(monkeypatch):
    monkeypatch.setenv("PG_KEY", KEY)
    spec = ServerSpec(kind="command", command=("vllm", "serve", "--api-key", "{api_key}"), api_key_env="PG_KEY")
    argv, _ = build_command(spec, 8000)
    assert argv == ["vllm", "serve", "--api-key", KEY]
    with pytest.raises(ServerError, match="bad placeholder 'admin_api_key'"):
        build_command(ServerSpec(kind="command", command=("x", "{admin_api_key}")), 8000)


def test_redaction_of_argv_env_json_and_text(monkeypatch):
    # The keys are registered where they are read, once, when the server starts or is attached.
    monkeypatch.setenv("PG_KEY", KEY)
    monkeypatch.setenv("PG_ADMIN", ADMIN)
    ServerKeys.from_spec(ServerSpec(kind="sglang", model_path="/m", api_key_env="PG_KEY", admin_api_key_env="PG_ADMIN"))
    r = Redactor()
    argv = ["python", "--api-key", KEY, f"--admin-api-key={ADMIN}", "--x", f"prefix{KEY}", "--api-key", "other"]
    assert r.argv(argv) == [
        "python",
        "--api-key",
        REDACTED,
        f"--admin-api-key={REDACTED}",
        "--x",
        f"prefix{REDACTED}",
        "--api-key",
        REDACTED,
    ]
    assert r.env({"A": KEY, "HF_TOKEN": "hf_x", "MY_API_KEY": "y", "PATH": "/bin"}) == {
        "A": REDACTED,
        "HF_TOKEN": REDACTED,
        "MY_API_KEY": REDACTED,
        "PATH": "/bin",
    }
    info = {
        "api_key": "whatever",
        "admin_api_key": None,
        "launch_command": f"serve --api-key {KEY}",
        "nested": [{"k": ADMIN}],
        "max_total_tokens": 8,
        "tokenizer_path": "/t",
    }
    assert r.json(info) == {
        "api_key": REDACTED,
        "admin_api_key": None,
        "launch_command": f"serve --api-key {REDACTED}",
        "nested": [{"k": REDACTED}],
        "max_total_tokens": 8,
        "tokenizer_path": "/t",
    }


def test_a_secret_split_across_reads_is_still_redacted():
    stream = [b"line one\nserver_args={'api_key': 'sk-live-01", b"23456789'}\nlast line without newline ", KEY.encode()]
    SECRETS.add(KEY)
    out = b"".join(Redactor().lines(stream))
    assert out == b"line one\nserver_args={'api_key': '<redacted>'}\nlast line without newline <redacted>"


def test_the_server_log_and_recorded_command_never_hold_the_key(monkeypatch, tmp_path: Path):
    # A stand-in server that prints its argv, then fails: its log and the error are what perfgate shows.
    monkeypatch.setenv("PG_KEY", KEY)
    fake = tmp_path / "fake-python"
    fake.write_text('#!/bin/sh\necho "started with $*"\necho "key again: $4" >&2\nexit 3\n')
    fake.chmod(0o755)
    # Whatever form the key takes on a command line, its value is known and redacted.
    spec = ServerSpec(
        kind="command",
        command=(str(fake), "--port", "{port}", "--token", KEY),
        api_key_env="PG_KEY",
        startup_timeout_s=10,
    )
    with pytest.raises(ServerError) as exc, ExitStack() as stack:
        start_server(spec, log_dir=tmp_path / "logs", stack=stack)
    message = str(exc.value)
    assert "exited with code 3" in message and KEY not in message and REDACTED in message
    log = next((tmp_path / "logs").glob("*.log")).read_text()
    assert "started with --port" in log and "key again" in log and KEY not in log
