"""A hardware preset typed on the command line against an experiment's (``uavgnn.program.presets``): the experiment's
values win and one line says what they replaced; a preset's ``override /hardware`` never replaces a typed
``hardware=``. Composed as Hydra composes the command line, with its runtime record (``return_hydra_config``),
which ``replaced_hardware`` reads."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "overrides, batch_size, said",
    [
        (["hardware=high_mem", "experiment=debug"], 16, True),  # the experiment is composed last, typed first or not
        (["experiment=debug", "hardware=high_mem"], 16, True),
        (["hardware=high_mem", "experiment=debug", "hardware.batch_size=512"], 512, False),  # a key typed: it wins
        (["experiment=debug"], 16, False),  # no hardware chosen: nothing replaced
        (["hardware=high_mem"], 512, False),  # experiment=dev sets no hardware key
        (["hardware=high_mem", "experiment=swarm_disrupted"], 16, True),  # set by experiment=swarm, which it includes
    ],
)
def test_an_experiment_over_an_explicit_hardware_preset_says_what_it_replaced(overrides, batch_size, said) -> None:
    """``hardware=high_mem experiment=debug`` must not run debug's batch of 16 without a word. The experiment's
    values stay (debug's 128 training scenes cannot fill high_mem's 512) and one line says so, with the preset's
    value and how to keep it; a preset's ``override /hardware`` never replaces a typed ``hardware=``."""
    from hydra import compose, initialize_config_module

    from uavgnn.config import register_configs
    from uavgnn.program.presets import replaced_hardware

    register_configs()
    with initialize_config_module("uavgnn.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
        note = replaced_hardware(cfg, cfg.hydra.runtime.choices, list(cfg.hydra.overrides.task))
    assert cfg.hardware.name == ("high_mem" if "hardware=high_mem" in overrides else "cpu")
    assert cfg.hardware.batch_size == batch_size
    experiment = cfg.hydra.runtime.choices.experiment
    expected = (
        f"experiment={experiment} sets hardware.batch_size=16 over hardware=high_mem's 512 (sized for the experiment); "
        "add hardware.batch_size=512 to keep the preset's"
    )
    assert note == (expected if said else None)


def test_a_presets_override_of_the_hardware_group_loses_to_the_command_line(tmp_path) -> None:
    from hydra import compose, initialize_config_module

    from uavgnn.config import register_configs
    from uavgnn.program.presets import replaced_hardware

    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "gpu_box.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /hardware: high_mem\nhardware:\n  batch_size: 8\n"
    )
    register_configs()
    for typed in (["hardware=low_mem", "experiment=gpu_box"], ["experiment=gpu_box", "hardware=low_mem"]):
        with initialize_config_module("uavgnn.conf", version_base="1.3"):
            cfg = compose(
                "config", overrides=[*typed, f"hydra.searchpath=[file://{tmp_path}]"], return_hydra_config=True
            )
            hydra = cfg.hydra
            note = replaced_hardware(cfg, hydra.runtime.choices, list(hydra.overrides.task), list(hydra.searchpath))
        assert (cfg.hardware.name, cfg.hardware.batch_size) == ("low_mem", 8)
        assert note.startswith("experiment=gpu_box sets hardware.batch_size=8 over hardware=low_mem's 32")
