"""A cached split as padded tensors on the training device: batches of fixed shape gathered there by index.

Every scene of a stage's split has the same N UAVs and M targets, so its graphs differ only in how many
feasible candidates each UAV has. ``PaddedSplit`` gives every UAV ``K = min(k_max, M)`` candidate slots, as
fresh scenes have (``build_graph_batch``): a real candidate sits at its rank, the other slots hold targets that
are not among the UAV's candidates (``cand_valid`` False, probability 0 under the policy). A batch is then one
index per tensor, on the device the split was moved to once (``hardware.data_on_device``), and its shapes are
set by (B, N, M, K): with the dense attention path a step on it has no host sync and one shape per stage.
Used for training when the dense path covers the scenes of every stage (``optim.dense_max_nodes``): under a
curriculum a batch is one padded part per stage (``concat_batches``), so a stage's batches keep one shape;
validation and the test phase keep the ``GraphStore``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch
from torch_geometric.data import Batch

from uavgnn.data.store import CAND_KEYS, NODE_KEYS, UU_KEYS, GraphStore


@dataclass
class PaddedSplit:
    """Tensors of one split, one row per scene: node keys (S, N + M, ...), candidate keys with ``cand_index``
    (local node indices) and ``cand_valid`` (S, N * K, ...), UAV-edge keys with ``uu_index`` (S, U, ...)."""

    tensors: dict[str, torch.Tensor]
    n_uav: int
    n_target: int
    slots: int  # K: candidate slots per UAV

    def __len__(self) -> int:
        return self.tensors["x"].shape[0]

    @staticmethod
    def of(store: GraphStore, k_max: int) -> PaddedSplit | None:
        """``store`` padded (on its device); None when its scenes are not all of one size."""
        t = store.tensors
        n_uav, n_nodes, n_uu = t["n_uav"], t["n_nodes"], t["n_uu"]
        if len(store) == 0 or any(int(v.min()) != int(v.max()) for v in (n_uav, n_nodes, n_uu)):
            return None
        s, n, nodes, u = len(store), int(n_uav[0]), int(n_nodes[0]), int(n_uu[0])
        m = nodes - n
        k = min(k_max, m)
        if t["cand_rank"].numel() and int(t["cand_rank"].max()) >= k:
            return None  # built with a larger k_max than this run's
        graph = torch.repeat_interleave(torch.arange(s), t["n_cand"])
        uav, target = t["cand_index"]
        slot = (graph * n + uav) * k + t["cand_rank"]  # a real candidate's slot: its rank in its UAV's list
        used = torch.zeros(s * n, m, dtype=torch.bool)
        used[graph * n + uav, target - n] = True
        free = torch.argsort(used.to(torch.int8), dim=1, stable=True)  # each UAV's other targets first
        n_real = used.sum(1, keepdim=True)
        rank = torch.arange(k).expand(s * n, k)
        pad_target = free.gather(1, (rank - n_real).clamp(min=0)) + n  # slot r >= n_real: the (r - n_real)-th free
        cand_index = torch.stack(
            [torch.arange(n).repeat_interleave(k).expand(s, -1).reshape(-1), pad_target.reshape(-1)]
        )
        cand_index[:, slot] = t["cand_index"]
        padded = {
            "cand_index": cand_index.T.reshape(s, n * k, 2),
            "cand_valid": torch.zeros(s * n * k, dtype=torch.bool).index_fill(0, slot, True).view(s, n * k),
        }
        for key in set(CAND_KEYS) - {"cand_rank", "cand_target"}:  # those two follow from the slots, below
            value = torch.zeros((s * n * k, *t[key].shape[1:]), dtype=t[key].dtype).index_copy(0, slot, t[key])
            padded[key] = value.view(s, n * k, *t[key].shape[1:])
        padded["cand_rank"] = rank.reshape(s, n * k)
        padded["cand_target"] = padded["cand_index"][..., 1] - n
        for key in NODE_KEYS:
            padded[key] = t[key].view(s, nodes, *t[key].shape[1:])
        for key in UU_KEYS:
            padded[key] = t[key].view(s, u, *t[key].shape[1:])
        padded["uu_index"] = t["uu_index"].T.reshape(s, u, 2)
        return PaddedSplit(padded, n, m, k)

    def to(self, device: torch.device) -> PaddedSplit:
        return PaddedSplit(
            {key: value.to(device) for key, value in self.tensors.items()}, self.n_uav, self.n_target, self.slots
        )

    @property
    def nodes(self) -> int:
        return self.n_uav + self.n_target

    def nbytes(self) -> int:
        return sum(v.numel() * v.element_size() for v in self.tensors.values())

    def gather(self, ids: torch.Tensor) -> Batch:
        """The padded batch of scenes ``ids`` on the split's device (what ``build_graph_batch`` gives fresh
        scenes, with labels)."""
        t = self.tensors
        dev = t["x"].device
        ids = torch.as_tensor(ids, dtype=torch.long).to(dev, non_blocking=True)
        b, n, nodes = len(ids), self.n_uav, self.n_uav + self.n_target
        shift = (torch.arange(b, device=dev) * nodes).view(b, 1, 1)
        flat = lambda key: t[key][ids].flatten(0, 1)  # noqa: E731
        graph = torch.arange(b, device=dev)
        batch = Batch(
            **{key: flat(key) for key in (*NODE_KEYS, *CAND_KEYS, *UU_KEYS, "cand_valid")},
            cand_index=(t["cand_index"][ids] + shift).flatten(0, 1).T,
            uu_index=(t["uu_index"][ids] + shift).flatten(0, 1).T,
            batch=graph.view(b, 1).expand(b, nodes).reshape(-1),
            ptr=torch.arange(b + 1, device=dev) * nodes,
            n_uav=torch.full((b,), n, device=dev),
            scene_id=ids,
            num_nodes=b * nodes,
        )
        batch._num_graphs = b
        batch.kept_counts = [b * n * min(r, self.slots) for r in range(self.slots + 1)]
        batch.max_nodes = nodes
        return batch


def concat_batches(parts: list[Batch]) -> Batch:
    """One padded batch of the padded batches ``parts`` in order (node indices shifted, graph ids renumbered): a
    curriculum stage's scenes and its replay of earlier stages' sizes."""
    if len(parts) == 1:
        return parts[0]
    node_shift = list(accumulate((p.num_nodes for p in parts[:-1]), initial=0))  # host ints: nothing to launch
    graph_shift = list(accumulate((p.num_graphs for p in parts[:-1]), initial=0))
    rebuilt = {"cand_index", "uu_index", "batch", "ptr", "scene_id"}
    keys = [key for key in parts[0].keys() if key not in rebuilt and torch.is_tensor(parts[0][key])]
    out = Batch(
        **{key: torch.cat([p[key] for p in parts]) for key in keys},
        cand_index=torch.cat([p.cand_index + s for p, s in zip(parts, node_shift)], 1),
        uu_index=torch.cat([p.uu_index + s for p, s in zip(parts, node_shift)], 1),
        batch=torch.cat([p.batch + g for p, g in zip(parts, graph_shift)]),
        ptr=torch.cat([parts[0].ptr[:1]] + [p.ptr[1:] + s for p, s in zip(parts, node_shift)]),
        num_nodes=sum(p.num_nodes for p in parts),
    )
    out.scene_id = torch.arange(out.ptr.numel() - 1, device=out.x.device)
    out._num_graphs = out.scene_id.numel()
    longest = max(len(p.kept_counts) for p in parts)  # a part's list ends where its slots do: its count stays
    out.kept_counts = [sum(p.kept_counts[min(r, len(p.kept_counts) - 1)] for p in parts) for r in range(longest)]
    out.max_nodes = max(p.max_nodes for p in parts)
    return out
