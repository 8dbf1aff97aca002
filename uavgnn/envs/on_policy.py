"""The on-policy workload of the shared loop (``algorithm=coma``, ``mappo``): episode batches from parallel
environments (their returns are the algorithms' to compute: ``uavgnn.algorithms.rl_math``).

When the loop collects (the algorithm's cadence: every ``minibatches x passes``
updates) the current policy plays one full episode (``env.horizon`` steps, from
a reset) in each of ``hardware.batch_size x minibatches`` environments (per rank
under ``torchrun``; actions sampled from the environments' own generator,
infeasible headings masked); each pass over them then splits the episodes into
``minibatches`` of ``hardware.batch_size`` (the items of an update) in an order
drawn from (seed, collection, pass). The environments and the current episodes
are saved in ``last.pt``, so a resumed run repeats the same steps. Validation:
the greedy policy against the scripted planner (``PlannerValidation``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import nn

from uavgnn.envs.rl_workload import EnvRun, RLWorkload
from uavgnn.envs.uav_env import UAVEnv, make_env
from uavgnn.infrastructure import distributed
from uavgnn.infrastructure.device import unwrap
from uavgnn.infrastructure.errors import ConfigError
from uavgnn.infrastructure.randomness import stream, stream_seed


@dataclass
class Episodes:
    """B episodes of T steps from E parallel environments (steps after an episode's end are masked)."""

    obs: torch.Tensor  # (B, T, N, obs_dim)
    state: torch.Tensor  # (B, T, state_dim)
    avail: torch.Tensor  # (B, T, N, A) bool: feasible actions
    action: torch.Tensor  # (B, T, N) long
    reward: torch.Tensor  # (B, T, N) training reward
    done: torch.Tensor  # (B, T) 1.0 where the episode ended at this step
    mask: torch.Tensor  # (B, T) 1.0 where the step belongs to the episode

    def __len__(self) -> int:
        return self.obs.shape[0]

    def index(self, ids: torch.Tensor) -> Episodes:
        return type(self)(*(getattr(self, f.name)[ids] for f in fields(self)))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class EpisodeWorkload(RLWorkload):
    """On-policy episodes: collected every round, sliced into minibatches for several passes."""

    unit = "episodes"
    episodes_type: type[Episodes] = Episodes  # what ``finish`` makes of a collection (and ``last.pt`` restores)

    def __init__(self, run: EnvRun, model: nn.Module, device: torch.device, batch_size: int, minibatches: int) -> None:
        """``batch_size``: episodes per minibatch (``hardware.batch_size``); ``minibatches``: updates per pass over
        a collection."""
        super().__init__(run, model, device)
        ctx = distributed.context()
        self.rank, self.world_size, self.minibatches = ctx.rank, ctx.world_size, minibatches
        self.batch_size = batch_size
        self.envs: dict[int, UAVEnv] = {}  # one per swarm size flown (``run.train_sizes``), made when first drawn
        self.env = self._env_of(self.settings.n_uav)
        self.episodes: Episodes | None = None
        self.collected_at = 0  # the step of the current collection

    def _n_envs(self, batch_size: int, n_uav: int) -> int:
        """This rank's share of the episodes of one collection: every minibatch of the global ``batch_size``, fewer
        episodes of a larger swarm (as many UAVs as ``env.n_uav``'s)."""
        per_minibatch = max(1, batch_size // self.world_size) * self.settings.n_uav
        return max(1, per_minibatch // n_uav) * self.minibatches

    def _env_of(self, n_uav: int) -> UAVEnv:
        """The environments of swarm size ``n_uav`` (each size its own seeded stream; ``env.n_uav``'s as before)."""
        if n_uav not in self.envs:
            self.envs[n_uav] = make_env(
                dataclasses.replace(self.settings, n_uav=n_uav),
                self.dist,
                self._n_envs(self.batch_size, n_uav),
                self.device,
                seed=stream_seed(self.seed, "environment", 0 if n_uav == self.settings.n_uav else n_uav, self.rank),
                count_key="hardware.batch_size x algorithm.minibatches",
            )
        return self.envs[n_uav]

    def swarm_size(self, step: int) -> int:
        """The swarm size of the collection at ``step``: drawn from (seed, step) among ``run.train_sizes``."""
        sizes = self.run.train_sizes
        if not sizes:
            return self.settings.n_uav
        return sizes[int(torch.randint(len(sizes), (), generator=stream(self.seed, "swarm_size", step)))]

    # -- the loop's interface -----------------------------------------------------------------------------------

    def probe_store(self):
        """Never reached: validation refuses ``hardware.batch_size=auto`` here (a minibatch is episodes)."""
        raise ConfigError("on-policy episodes take a fixed hardware.batch_size (episodes per minibatch)")

    def restart(self, step: int, batch_size: int) -> None:
        """A new batch size (out-of-memory halving) needs environments to match; episodes are recollected."""
        same = self._n_envs(batch_size, self.settings.n_uav) == self.envs[self.settings.n_uav].n_envs
        self.batch_size = batch_size  # every size's count follows the training size's: all change or none
        if not same:
            self.envs, self.episodes = {}, None
            self.env = self._env_of(self.settings.n_uav)

    def batch(self, step: int, stage: int, batch_size: int) -> Episodes:
        """Minibatch ``step - collected_at`` of the current collection: pass ``// minibatches`` over it, in an
        order drawn from (seed, collection, pass)."""
        ids = self.minibatch_ids(step)  # first: it collects when there is no collection yet
        return self.episodes.index(ids)

    def minibatch_ids(self, step: int) -> torch.Tensor:
        """The episodes of ``batch(step)`` in the current collection (collected now if there is none)."""
        if self.episodes is None:  # after a new batch size (out-of-memory halving): recollect now
            self.collect(step)
        data_pass, minibatch = divmod(step - self.collected_at, self.minibatches)
        generator = stream(self.seed, "minibatch_order", self.collected_at + data_pass * self.minibatches)
        order = torch.randperm(len(self.episodes), generator=generator).to(self.device)
        size = len(self.episodes) // self.minibatches
        return order[minibatch * size : (minibatch + 1) * size]

    def items(self, batch: Episodes) -> int:
        return len(batch)

    def feedback(self, batch: Episodes, values: torch.Tensor | None) -> None:
        """On-policy: nothing to feed back."""

    def act(
        self, obs: torch.Tensor, state: torch.Tensor, avail: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The environments' actions for one step of the current (sampling) policy, and the columns stored with
        the step besides its observation, state, feasible actions, reward and ends: here the action taken."""
        action = unwrap(self.model).act(obs, avail, self.env.generator)
        return action, {"action": action}

    def finish(self, columns: dict[str, torch.Tensor]) -> Episodes:
        """A collection's stacked columns (B, T, ...) as the batch the updates slice."""
        return self.episodes_type(**columns)

    @torch.no_grad()
    def collect(self, step: int) -> None:
        """One episode in every environment of the step's swarm size with the current (sampling) policy."""
        env = self.env = self._env_of(self.swarm_size(step))
        obs, state = env.reset()
        alive = torch.ones(env.n_envs, dtype=torch.bool, device=self.device)
        rows: dict[str, list[torch.Tensor]] = {}
        for _ in range(env.cfg.horizon):
            avail = env.available_actions()
            action, columns = self.act(obs, state, avail)
            outcome = env.step(action)
            ended = outcome.done & alive
            for name, value in (
                ("obs", obs),
                ("state", state),
                ("avail", avail),
                *columns.items(),
                ("reward", outcome.reward),
                ("done", ended.float()),
                ("mask", alive.float()),
            ):
                rows.setdefault(name, []).append(value)
            self.record(outcome, ended, alive)
            alive = alive & ~outcome.done
            obs, state = outcome.obs, outcome.state
        self.episodes = self.finish({name: torch.stack(values, 1) for name, values in rows.items()})
        self.collected_at = step
        self.collected()

    def state_dict(self) -> dict[str, Any]:
        return {
            "env": self.envs[self.settings.n_uav].state_dict(),
            "swarm_envs": {n: env.state_dict() for n, env in self.envs.items() if n != self.settings.n_uav},
            "env_steps": self.env_steps,
            "window": self.window_state(),
            "collected_at": self.collected_at,
            "episodes": None if self.episodes is None else self.episodes.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "collected_at" not in state:
            raise ValueError("saved before a collection recorded the step it started at")
        self.envs[self.settings.n_uav].load_state_dict(state["env"])
        for n_uav, saved in state.get("swarm_envs", {}).items():
            self._env_of(int(n_uav)).load_state_dict(saved)
        self.load_window(state.get("window"))
        self.env_steps, self.collected_at = state["env_steps"], state["collected_at"]
        self.env = self._env_of(self.swarm_size(self.collected_at))
        if state["episodes"] is not None:
            self.episodes = self.episodes_type(**{k: v.to(self.device) for k, v in state["episodes"].items()})
