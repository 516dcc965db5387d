"""PERFGATE_SIM_BOOT_EFFECT: each boot's speed drawn in [1 - x, 1 + x], afresh at every boot."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from perfgate.sim._options import boot_speed_from_env, parse_options


def test_unset_is_full_speed() -> None:
    assert boot_speed_from_env({}) == 1.0


def test_each_boot_draws_afresh_within_the_effect() -> None:
    speeds = {boot_speed_from_env({"PERFGATE_SIM_BOOT_EFFECT": "0.10"}) for _ in range(20)}
    assert len(speeds) == 20 and all(0.9 <= s <= 1.1 for s in speeds)


def test_the_seed_file_makes_the_sequence_repeatable(tmp_path: Path) -> None:
    seed = tmp_path / "seed"
    env = {"PERFGATE_SIM_BOOT_EFFECT": "0.10", "PERFGATE_SIM_BOOT_SEED_FILE": str(seed)}
    speeds = [boot_speed_from_env(env) for _ in range(3)]
    assert speeds == [random.Random(n).uniform(0.9, 1.1) for n in range(3)]
    assert seed.read_text() == "3\n"
    # A slower boot is a longer step: the engine's slowdown divides by the boot's speed.
    seed.write_text("1\n")
    assert parse_options(["--port", "1"], env).slowdown == pytest.approx(1 / speeds[1])


@pytest.mark.parametrize("value", ["-0.1", "1", "fast", "nan"])
def test_bad_effect_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(
        ValueError, match=rf"PERFGATE_SIM_BOOT_EFFECT='{value}' is not a valid boot effect.*>= 0 and < 1"
    ):
        boot_speed_from_env({"PERFGATE_SIM_BOOT_EFFECT": value})


@pytest.mark.parametrize("content", ["soon", "-1"])
def test_bad_seed_file_is_refused_naming_the_variable(tmp_path: Path, content: str) -> None:
    seed = tmp_path / "seed"
    seed.write_text(content)
    env = {"PERFGATE_SIM_BOOT_EFFECT": "0.1", "PERFGATE_SIM_BOOT_SEED_FILE": str(seed)}
    with pytest.raises(ValueError, match=r"PERFGATE_SIM_BOOT_SEED_FILE=.*cannot read and advance its seed"):
        boot_speed_from_env(env)


def test_bad_effect_stops_the_simulator(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_options(["--port", "1"], {"PERFGATE_SIM_BOOT_EFFECT": "2"})
    assert exc.value.code == 2 and "PERFGATE_SIM_BOOT_EFFECT='2'" in capsys.readouterr().err
