"""A whole split as concatenated tensors, and vectorised batch gathering.

``GraphStore`` holds every graph of a split (local node indices), the scenes
(for metrics) and the MILP labels. ``gather(ids)`` assembles a batch with a
handful of tensor ops (no per-graph Python objects), which is how the
in-memory loader keeps data wait near zero; ``get(i)`` returns one PyG
``Data`` for PyG's own ``DataLoader``. Both give the same batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from uavgnn.problem.scenes import Scene
from uavgnn.solvers import SolveResult
from uavgnn.solvers.min_cost_flow import relax_candidates

NODE_KEYS = ("x", "node_type", "need", "busy")
CAND_KEYS = ("cand_attr", "cand_rank", "cand_target", "cand_label", "cand_relaxed")
UU_KEYS = ("uu_attr",)


def _ptr(counts: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])


PARTS = ("n_nodes", "n_cand", "n_uu")  # a graph's nodes, candidate edges and UAV edges: what a batch gathers


@dataclass
class GraphStore:
    """Tensors of one split. ``tensors`` keys: NODE/CAND/UU keys, ``cand_index`` and
    ``uu_index`` (2, E) with node indices local to their graph, ``n_nodes``,
    ``n_uav``, ``n_cand``, ``n_uu`` (S,) and the scene arrays (float64)."""

    tensors: dict[str, torch.Tensor]
    objective: torch.Tensor  # (S,) float64, the label MILP's J
    status: list[str]  # label MILP status per scene
    solve_time: torch.Tensor  # (S,) float64, label MILP wall time in seconds

    def __post_init__(self) -> None:
        t = self.tensors
        self.node_ptr = _ptr(t["n_nodes"])
        self.cand_ptr = _ptr(t["n_cand"])
        self.uu_ptr = _ptr(t["n_uu"])
        self.uav_ptr = _ptr(t["n_uav"])
        self.target_ptr = _ptr(t["n_nodes"] - t["n_uav"])
        # (3, S) each graph's sizes and first rows, one row per part: one index gathers a batch's of all three
        self.part_counts = torch.stack([t[key] for key in PARTS])
        self.part_starts = torch.stack([self.node_ptr[:-1], self.cand_ptr[:-1], self.uu_ptr[:-1]])
        # each graph's sizes on the host: a batch's totals without reading the (possibly on-device) counts back,
        # and its candidates of rank < r for every r (``message_edges`` keeps those of rank < k)
        self.sizes = {key: t[key].cpu().numpy() for key in PARTS}
        rank = t["cand_rank"].cpu().numpy()
        below = np.zeros((len(self), int(rank.max(initial=-1)) + 2), dtype=np.int64)
        np.add.at(below, (np.repeat(np.arange(len(self)), self.sizes["n_cand"]), rank + 1), 1)
        self.rank_counts = below.cumsum(1)  # (S, R + 1): [g, r] = candidates of graph g with rank < r

    def __len__(self) -> int:
        return len(self.tensors["n_nodes"])

    @staticmethod
    def from_graphs(graphs: list[Data], scenes: list[Scene], labels: list[SolveResult]) -> GraphStore:
        """The store of labelled graphs, each with the linear relaxation's pairs (``relax_candidates``, made here
        for a graph without them): a split serves models that read the relaxation and models that do not."""
        for graph in graphs:
            if "cand_relaxed" not in graph:
                graph.cand_relaxed = relax_candidates(graph)
        t: dict[str, torch.Tensor] = {}
        for key in NODE_KEYS + CAND_KEYS + UU_KEYS + ("cand_index", "uu_index"):
            t[key] = torch.cat([g[key] for g in graphs], dim=-1 if key.endswith("_index") else 0)
        t["n_nodes"] = torch.tensor([g.num_nodes for g in graphs])
        t["n_uav"] = torch.tensor([s.n_uav for s in scenes])
        t["n_cand"] = torch.tensor([g.cand_rank.numel() for g in graphs])
        t["n_uu"] = torch.tensor([g.uu_index.shape[1] for g in graphs])
        t["uav_pos"] = torch.from_numpy(np.concatenate([s.uav_pos for s in scenes]))
        t["uav_range"] = torch.from_numpy(np.concatenate([s.uav_range for s in scenes]))
        t["target_pos"] = torch.from_numpy(np.concatenate([s.target_pos for s in scenes]))
        t["target_need"] = torch.from_numpy(np.concatenate([s.need for s in scenes]))
        t["target_value"] = torch.from_numpy(np.concatenate([s.value for s in scenes]))
        t["lam"] = torch.tensor([s.lam for s in scenes], dtype=torch.float64)
        t["label_assignment"] = torch.from_numpy(np.concatenate([r.assignment for r in labels]))
        return GraphStore(
            t,
            torch.tensor([r.objective for r in labels], dtype=torch.float64),
            [r.status for r in labels],
            torch.tensor([r.wall_time for r in labels], dtype=torch.float64),
        )

    @staticmethod
    def concat(stores: list[GraphStore]) -> GraphStore:
        """One store of all graphs of ``stores``, in order (node indices are local to a graph, so no offsets)."""
        tensors = {
            key: torch.cat([s.tensors[key] for s in stores], dim=-1 if key.endswith("_index") else 0)
            for key in stores[0].tensors
        }
        return GraphStore(
            tensors,
            torch.cat([s.objective for s in stores]),
            [x for s in stores for x in s.status],
            torch.cat([s.solve_time for s in stores]),
        )

    def scene(self, i: int) -> Scene:
        t = self.tensors
        u = slice(int(self.uav_ptr[i]), int(self.uav_ptr[i + 1]))
        m = slice(int(self.target_ptr[i]), int(self.target_ptr[i + 1]))
        return Scene(
            t["uav_pos"][u].numpy(),
            t["uav_range"][u].numpy(),
            t["target_pos"][m].numpy(),
            t["target_need"][m].numpy(),
            t["target_value"][m].numpy(),
            float(t["lam"][i]),
        )

    def scenes(self) -> list[Scene]:
        return [self.scene(i) for i in range(len(self))]

    def label_assignments(self) -> list[np.ndarray]:
        """The label MILP's assignment of every scene."""
        a = self.tensors["label_assignment"].numpy()
        return [a[int(self.uav_ptr[i]) : int(self.uav_ptr[i + 1])] for i in range(len(self))]

    def get(self, i: int) -> Data:
        """Graph i as a PyG ``Data`` (PyG's collate offsets the ``*_index`` attributes)."""
        t = self.tensors
        n, c, u = (slice(int(p[i]), int(p[i + 1])) for p in (self.node_ptr, self.cand_ptr, self.uu_ptr))
        data = Data(
            num_nodes=int(t["n_nodes"][i]),
            cand_index=t["cand_index"][:, c],
            uu_index=t["uu_index"][:, u],
            n_uav=t["n_uav"][i : i + 1],
            scene_id=torch.tensor([i]),
        )
        self._copy_attributes(data, n, c, u)
        return data

    def _copy_attributes(self, data: Data, nodes, cands, uu_edges) -> None:
        """Node, candidate-edge and UAV-edge attributes selected by the three indexers."""
        for keys, selection in ((NODE_KEYS, nodes), (CAND_KEYS, cands), (UU_KEYS, uu_edges)):
            for key in keys:
                data[key] = self.tensors[key][selection]

    def gather(self, ids: torch.Tensor) -> Batch:
        """The batch of graphs ``ids``, identical to ``Batch.from_data_list([get(i) for i in ids])``."""
        t = self.tensors
        host_ids = np.asarray(ids)
        total = [int(self.sizes[key][host_ids].sum()) for key in PARTS]
        rows_in_all = sum(total)
        ids = torch.as_tensor(ids, dtype=torch.long)
        b = len(ids)
        counts, starts = self.part_counts[:, ids].view(-1), self.part_starts[:, ids].view(-1)  # part-major, (3B,)
        # every part of every graph at once: segment s is part s // b of graph s % b, its rows start at starts[s]
        segment = torch.repeat_interleave(torch.arange(3 * b), counts, output_size=rows_in_all)
        first = torch.cumsum(counts, 0) - counts  # where each segment starts in the concatenation
        rows = torch.arange(rows_in_all) + (starts - first)[segment]
        graph = segment.remainder(b)
        ptr = first[: b + 1]  # the node segments come first: their starts are the batch's node offsets
        node_idx, cand_idx, uu_idx = rows.split(total)
        _, cand_offset, uu_offset = first[:b][graph].split(total)  # each row's graph's first node in the batch
        batch = Batch(
            cand_index=t["cand_index"][:, cand_idx] + cand_offset,
            uu_index=t["uu_index"][:, uu_idx] + uu_offset,
            batch=graph[: total[0]],
            ptr=ptr,
            n_uav=t["n_uav"][ids],
            scene_id=ids.clone(),
            num_nodes=total[0],
        )
        self._copy_attributes(batch, node_idx, cand_idx, uu_idx)
        batch.kept_counts = self.rank_counts[host_ids].sum(0).tolist()
        batch.max_nodes = int(self.sizes["n_nodes"][host_ids].max(initial=0))  # the dense attention path's size
        batch._num_graphs = len(ids)
        return batch
