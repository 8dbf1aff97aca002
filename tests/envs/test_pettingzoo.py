"""The UAV environment through PettingZoo's parallel API: PettingZoo's own API test, and the same episodes,
rewards and endings as ``UAVEnv`` itself."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from pettingzoo.test import parallel_api_test

from uavgnn.envs.pettingzoo_env import ActionError, UAVParallelEnv
from uavgnn.envs.settings import EnvSettings
from uavgnn.envs.uav_env import UAVEnv
from uavgnn.problem.scenes import SceneDistribution


@pytest.mark.parametrize("action", ["continuous", "discrete", "goto"])
def test_pettingzoos_own_parallel_api_test_passes(action) -> None:
    env = UAVParallelEnv(EnvSettings(n_uav=3, horizon=12, action=action), SceneDistribution())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the API test reports a misbehaving environment by warnings too
        parallel_api_test(env, num_cycles=40)


def test_the_parallel_view_plays_the_episodes_of_uav_env_itself() -> None:
    """Same seed and actions: the observations, rewards and the end of the episode are UAVEnv's; every agent
    leaves together when it ends, truncated at the horizon."""
    settings, dist = EnvSettings(n_uav=3, horizon=6), SceneDistribution()
    view = UAVParallelEnv(settings, dist)
    direct = UAVEnv(settings, dist, 1, torch.device("cpu"), seed=7, auto_reset=False)  # ends on the final obs
    obs, _ = view.reset(seed=7)
    first, state = direct.reset()
    np.testing.assert_array_equal(obs["uav_1"], first[0, 1].numpy())
    np.testing.assert_array_equal(view.state(), state[0].numpy())
    actions = torch.tensor([[[1.0, 0.0], [0.0, -1.0], [-0.5, 0.5]]])
    for t in range(settings.horizon):
        assert view.agents == ["uav_0", "uav_1", "uav_2"]
        obs, rewards, terminated, truncated, infos = view.step({f"uav_{i}": actions[0, i].numpy() for i in range(3)})
        step = direct.step(actions)
        assert rewards == {f"uav_{i}": float(step.reward[0, i]) for i in range(3)}
        assert infos["uav_2"]["task_reward"] == float(step.task_reward[0, 2])
        np.testing.assert_array_equal(obs["uav_0"], step.obs[0, 0].numpy())
        assert set(truncated.values()) == {t == settings.horizon - 1 and bool(step.episode_completion[0] < 1)}
    assert view.agents == [] and not any(terminated.values())
    with pytest.raises(RuntimeError, match="call reset"):
        view.step({})


def _twins(action: str) -> tuple[UAVParallelEnv, UAVParallelEnv]:
    """Two environments with the same seed, one step into the episode (so the state has moved off the reset)."""
    settings, dist = EnvSettings(n_uav=3, horizon=12, action=action), SceneDistribution()
    envs = UAVParallelEnv(settings, dist), UAVParallelEnv(settings, dist)
    for env in envs:
        env.reset(seed=5)
        env.step(_valid_actions(action, 0))
    return envs


def _valid_actions(action: str, t: int) -> dict:
    """A fixed, in-range action for every UAV at step ``t`` (different per UAV and step)."""
    if action == "continuous":
        return {f"uav_{i}": np.array([0.5 - 0.25 * i, 0.25 * t - 0.5], np.float32) for i in range(3)}
    n = 9 if action == "discrete" else 5  # N_DISCRETE; goto: stay + obs_targets (4)
    return {f"uav_{i}": (1 + i + t) % n for i in range(3)}


def _assert_refused_and_untouched(refused: UAVParallelEnv, twin: UAVParallelEnv, actions: dict, *expected: str) -> None:
    """``actions`` raises one ActionError (a ValueError) whose one line names every ``expected`` piece; then
    the refused env is bit for bit the twin that never saw them, for the next valid steps too."""
    sim = refused.env
    before = {name: getattr(sim, name).clone() for name in ("pos", "vel", "energy", "open", "t", "ret")}
    state = refused.state().copy()
    with pytest.raises(ActionError) as caught:
        refused.step(actions)
    message = str(caught.value)
    assert isinstance(caught.value, ValueError) and "\n" not in message
    for piece in expected:
        assert piece in message, (piece, message)
    for name, value in before.items():
        assert torch.equal(getattr(sim, name), value), name
    np.testing.assert_array_equal(refused.state(), state)
    assert refused.agents == twin.agents == ["uav_0", "uav_1", "uav_2"]
    action = refused.settings.action
    for t in (1, 2):
        got, want = refused.step(_valid_actions(action, t)), twin.step(_valid_actions(action, t))
        for agent in want[0]:
            np.testing.assert_array_equal(got[0][agent], want[0][agent])
            assert not np.isnan(got[0][agent]).any()
        assert got[1:] == want[1:]  # rewards, terminations, truncations, infos: equal floats and flags
        np.testing.assert_array_equal(refused.state(), twin.state())
        assert np.isfinite(refused.state()).all()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_continuous_action_is_refused_and_the_state_is_untouched(bad: float) -> None:
    """Before the check a NaN went into the simulator and stayed in positions, rewards and state for good."""
    refused, twin = _twins("continuous")
    actions = _valid_actions("continuous", 1)
    actions["uav_1"] = np.array([0.5, bad], np.float32)
    _assert_refused_and_untouched(refused, twin, actions, "'uav_1'", repr(float(bad)), "finite", "[-1.0, 1.0]")


@pytest.mark.parametrize("bad", [[1.5, 0.0], [0.0, -1.01], [0.0, 0.0, 0.0], "left"])
def test_a_continuous_action_outside_the_box_or_of_the_wrong_shape_is_refused(bad) -> None:
    refused, twin = _twins("continuous")
    actions = _valid_actions("continuous", 1)
    actions["uav_2"] = bad
    _assert_refused_and_untouched(refused, twin, actions, "'uav_2'", repr(bad), "shape (2,)")


def test_an_action_for_an_unknown_agent_is_refused() -> None:
    """Before the check ``uav_7`` (or a typo like ``uav0``) was silently dropped and the UAVs hovered."""
    refused, twin = _twins("continuous")
    actions = _valid_actions("continuous", 1)
    actions["uav_7"] = np.zeros(2, np.float32)
    _assert_refused_and_untouched(refused, twin, actions, "'uav_7'", "[0.0, 0.0]", "['uav_0', 'uav_1', 'uav_2']")


@pytest.mark.parametrize(
    "bad, shown",
    [(-1, "-1"), (9, "9"), (99, "99"), (np.nan, "nan"), (2.0, "2.0"), (np.array([1, 2]), "[1, 2]"), (True, "True")],
)
def test_a_discrete_action_outside_its_nine_choices_is_refused_in_one_line(bad, shown: str) -> None:
    """-1 used to fly heading 8 (negative indexing); 9, 99 and NaN raised IndexError from inside the simulator."""
    refused, twin = _twins("discrete")
    actions = _valid_actions("discrete", 1)
    actions["uav_0"] = bad
    _assert_refused_and_untouched(refused, twin, actions, "'uav_0'", shown, "an integer in [0, 9)")


@pytest.mark.parametrize("bad", [-1, 5, 99])
def test_a_goto_target_outside_stay_and_the_observed_targets_is_refused(bad: int) -> None:
    """goto 99 and -1 used to be taken as "stay"; the choices are 0 (stay) and the 4 observed targets."""
    refused, twin = _twins("goto")
    actions = _valid_actions("goto", 1)
    actions["uav_2"] = np.int64(bad)
    _assert_refused_and_untouched(refused, twin, actions, "'uav_2'", str(bad), "an integer in [0, 5)")


def test_valid_actions_of_every_form_still_step() -> None:
    """Python ints, numpy integers, 0-d arrays and tensors are accepted; a missing agent hovers (stay)."""
    env = UAVParallelEnv(EnvSettings(n_uav=3, horizon=12, action="discrete"), SceneDistribution())
    env.reset(seed=5)
    _, rewards, *_ = env.step({"uav_0": 8, "uav_1": np.int32(0), "uav_2": torch.tensor(4)})
    assert set(rewards) == {"uav_0", "uav_1", "uav_2"} and all(np.isfinite(list(rewards.values())))
    _, rewards, *_ = env.step({"uav_1": np.array(3)})
    assert all(np.isfinite(list(rewards.values())))


def test_rgb_array_renders_the_episode_and_no_render_mode_warns() -> None:
    """``render_mode="rgb_array"`` draws the episode so far (the run directories' pictures) as an
    (H, W, 3) uint8 frame, through PettingZoo's own render test; without a render mode ``render()`` warns and
    returns None, as PettingZoo's environments do; another mode is refused."""
    from pettingzoo.test import render_test
    from pettingzoo.utils.conversions import parallel_to_aec

    settings, dist = EnvSettings(n_uav=3, horizon=12), SceneDistribution()

    def make(render_mode: str | None = None):  # render_test asks for "human" to read the metadata first
        return parallel_to_aec(
            UAVParallelEnv(settings, dist, render_mode=None if render_mode == "human" else render_mode)
        )

    assert UAVParallelEnv.metadata["render_modes"] == ["rgb_array"]
    render_test(make)
    env = UAVParallelEnv(settings, dist, render_mode="rgb_array")
    env.reset(seed=2)
    first = env.render()
    env.step({agent: np.array([1.0, 0.0], np.float32) for agent in env.agents})
    moved = env.render()
    assert first.shape == moved.shape and first.shape[2] == 3 and first.dtype == np.uint8
    assert (first != moved).any() and (moved < 255).any()  # the paths are drawn; a step moves them
    plain = UAVParallelEnv(settings, dist)
    plain.reset(seed=2)
    with pytest.warns(UserWarning, match="render_mode='rgb_array'"):
        assert plain.render() is None
    with pytest.raises(ValueError, match="render_mode='human'"):
        UAVParallelEnv(settings, dist, render_mode="human")
