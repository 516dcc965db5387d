"""A model_path that is neither on this host nor a Hugging Face repo id is named before SGLang starts."""

from __future__ import annotations

import sys
from contextlib import ExitStack

import pytest

from perfgate.errors import ServerError
from perfgate.profile import ServerSpec
from perfgate.server import start_server
from perfgate.server._sglang_launch import check_model_path


@pytest.mark.parametrize("repo_id", ["gpt2", "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-0.5B", "zai-org/GLM-5"])
def test_a_repo_id_goes_to_sglang_as_written(repo_id):
    check_model_path(repo_id)


def test_a_path_that_exists_is_taken(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    check_model_path(str(tmp_path))
    check_model_path(str(tmp_path / "config.json"))


@pytest.mark.parametrize(
    "model_path, also",
    [
        ("/models/GLM-5-NVFP4", "no such file or directory on this host. SGLang would take it"),
        ("models/glm/5", "(relative to "),
        ("./glm5", "(relative to "),
        ("~/models/glm5", "'~' is not expanded"),
        ("a--b/c", "no such file or directory"),
        ("org/x/y", "no such file or directory"),
    ],
)
def test_a_missing_path_is_named_before_it_reaches_sglang_as_a_repo_id(model_path, also):
    with pytest.raises(ServerError) as exc:
        check_model_path(model_path)
    msg = str(exc.value)
    assert msg.startswith(f"[server] model_path {model_path!r}: no such file or directory on this host")
    assert also in msg and "a repo id such as 'meta-llama/Llama-3.1-8B-Instruct'" in msg


def test_the_boot_stops_there_before_anything_starts(tmp_path):
    spec = ServerSpec(kind="sglang", model_path=str(tmp_path / "no-model"), python=sys.executable)
    with pytest.raises(ServerError, match=r"model_path '.*no-model': no such file or directory"), ExitStack() as stack:
        start_server(spec, log_dir=tmp_path / "logs", stack=stack)
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())
