from __future__ import annotations

import json

from baseline_factories import WL, fingerprint
from hypothesis import given
from hypothesis import strategies as st

from perfgate.baseline import Fingerprint
from perfgate.profile import Workload

# The founding deployment (8x RTX PRO 6000 at 600 W) over the factory's defaults.
RTX_PRO = {
    "gpu_model": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "power_limit_w": 600.0,
    "server_args": ["--tp", "8", "--max-running-requests", "1024"],
}


def make(**overrides: object) -> Fingerprint:
    return fingerprint(**{**RTX_PRO, **overrides})


def test_fields_are_normalized() -> None:
    fp = make(
        power_limit_w=599.6,
        driver_version="580.105.08",
        gpu_model="NVIDIA  RTX PRO 6000 Blackwell Server Edition",
        model="/models/GLM-5-NVFP4/",
    )
    assert fp.power_limit_w == 600
    assert fp.driver_major == "580"
    assert fp.gpu_model == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert fp.model == "/models/GLM-5-NVFP4"
    assert fp.server_args == ("--max-running-requests=1024", "--tp-size=8")
    assert fp.workload == WL.spec()
    assert fp == make()


def test_digest_is_stable_and_short() -> None:
    # A literal workload spec, so that new Workload fields do not move the pinned digest.
    spec = {"num_prompts": 1024, "concurrency": 1024, "input_len": 256, "output_len": 128, "request_rate": "inf"}
    fp = make(workload=spec)
    assert len(fp.digest) == 12 and int(fp.digest, 16) >= 0
    # Pinned: a change here renames every stored baseline file, so it must be deliberate.
    assert fp.digest == make(workload=dict(spec)).digest == "82507d35dbb7"
    assert hash(fp) == hash(make(workload=dict(spec)))


def test_digest_ignores_flag_spelling_but_not_hardware() -> None:
    assert make(server_args=["--max-running-requests=1024", "--tp-size=8", "--port", "1"]).digest == make().digest
    assert make(gpu_count=4).digest != make().digest
    assert make(power_limit_w=300).digest != make().digest
    assert make(driver_version="575.1").digest != make().digest


def test_slug_is_readable() -> None:
    assert make().slug == "8xrtx-pro-6000-blackwell-server-edition-600W"
    assert make(gpu_model="", gpu_count=0, power_limit_w=None).slug == "0xnogpu"


def test_describe_difference() -> None:
    old, new = make(), make(gpu_count=4, power_limit_w=300, server_args=["--tp", "4", "--max-running-requests", "1024"])
    text = old.describe_difference(new)
    assert text == "gpu_count 8 -> 4, power_limit_w 600 -> 300, server_args --tp-size=8 -> --tp-size=4"
    assert make().describe_difference(
        make(server_args=["--tp", "8", "--max-running-requests", "1024", "--disable-cuda-graph"])
    ) == ("server_args (none) -> --disable-cuda-graph=true")
    assert old.describe_difference(old) == "nothing"
    w = make(workload=Workload(name="x", num_prompts=1024, concurrency=512, input_len=256, output_len=128))
    assert old.describe_difference(w) == "workload concurrency 1024 -> 512"


@given(
    st.text(max_size=30),
    st.integers(0, 16),
    st.none() | st.floats(50, 1500),
    st.from_regex(r"[0-9]{3}(\.[0-9]{1,3}){0,2}", fullmatch=True),
    st.lists(
        st.sampled_from(["--tp", "8", "--disable-cuda-graph", "--mem-fraction-static=0.8", "--port", "1"]), max_size=6
    ),
)
def test_dict_round_trip(gpu: str, count: int, limit: float | None, driver: str, args: list[str]) -> None:
    fp = make(gpu_model=gpu, gpu_count=count, power_limit_w=limit, driver_version=driver, server_args=args)
    data = json.loads(json.dumps(fp.to_dict()))
    back = Fingerprint.from_dict(data)
    assert back == fp and back.digest == fp.digest


def test_a_pinned_server_is_another_fingerprint_and_unpinned_ones_keep_their_digest() -> None:
    pinned = make(cpu_affinity="3,0-2")
    assert pinned.cpu_affinity == "0-3" and pinned == make(cpu_affinity="0-3")
    assert pinned.digest != make().digest != make(cpu_affinity="0-7").digest
    # Not set: left out of the stored form, so every baseline recorded before the key still matches.
    assert "cpu_affinity" not in make().to_dict() and make(cpu_affinity="").digest == make().digest
    assert pinned.to_dict()["cpu_affinity"] == "0-3"
    assert Fingerprint.from_dict(json.loads(json.dumps(pinned.to_dict()))) == pinned
    # Either side may lack it: the difference is still named, whichever way it runs.
    assert make().describe_difference(pinned) == "cpu_affinity '' -> '0-3'"
    assert pinned.describe_difference(make()) == "cpu_affinity '0-3' -> ''"
    assert pinned.describe_difference(make(cpu_affinity="0-7")) == "cpu_affinity '0-3' -> '0-7'"
