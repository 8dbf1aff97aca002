"""A certified upper bound on the optimum J*: the linear relaxation solved over some pairs, priced against every
feasible pair.

The MILP's LP relaxation (x, y in [0, 1]) is a transportation problem (``y_j = sum_i x_ij / d_j``): target j offers
``d_j`` slots worth ``w_j / d_j`` each, and UAV i earns ``p_ij = w_j / d_j - lam d_ij`` in one of them (``mcf``'s
problem, before partial targets are dropped). Its dual is

    min sum_i u_i + sum_j d_j v_j   s.t.   u_i + v_j >= p_ij  for every feasible pair,   u, v >= 0,

and any target prices v >= 0 bound J* from above once each UAV takes ``u_i = max(0, max_j p_ij - v_j)`` over all
its feasible pairs (weak duality: J* <= the LP's value <= that dual objective).

The relaxation is solved over candidate pairs (each UAV's nearest) as a min-cost flow; its prices v come from the
flow's complementary slackness, a longest-path problem over the targets (Bellman-Ford's relaxations, vectorised).
Pricing then takes every feasible pair without an N x M pass: a pair earns above its target's price only if
``p_ij > v_j``, so each target asks a k-d tree of the UAVs for those within ``(w_j / d_j - v_j) / lam`` (and within
the longest range). A pair left out that pays a UAV more than its candidates do (a positive reduced cost) joins
the candidates and the flow is solved again, until none is left: the bound is then the full LP's value, certified
(the pricing of Lee and Orlin's million-node assignment problem). If the rounds run out first, the bound stands,
only looser (``certified`` False).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
from scipy.spatial import cKDTree

from uavgnn.problem.scenes import FeasiblePairs, Scene, feasible_pairs, rank_in_runs
from uavgnn.solvers.min_cost_flow import flow_choice

TOLERANCE = 1e-6  # reward units: a reduced cost above this violates the prices (the flow's costs are rounded to 5e-7)
MAX_ROUNDS = 20  # pricing rounds before the bound is given as it stands
MAX_HOPS = 10_000  # relaxations of the prices' longest paths (a path of the flow's rounding could cycle)


@dataclass(frozen=True)
class Bound:
    """An upper bound on J*, what it is (``kind``), how it was found and what it cost."""

    value: float
    kind: str  # "certified LP": the LP relaxation priced against every feasible pair
    certified: bool  # pricing found no pair left out with a positive reduced cost: ``value`` is the full LP's
    rounds: int  # flows solved
    pairs: int  # candidate pairs of the last flow
    added: int  # pairs pricing added to the first candidates
    seconds: float


def slot_profit(scene: Scene, target: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """``w_j / d_j - lam d_ij`` of each pair: what a UAV earns in one of its target's slots."""
    return scene.value[target] / scene.need[target] - scene.lam * dist


def target_prices(
    n_uav: int, n_target: int, uav: np.ndarray, target: np.ndarray, profit: np.ndarray, chosen: np.ndarray
) -> np.ndarray:
    """The least prices v >= 0 (per target) with which the flow's choice is optimal over these pairs: a UAV in
    target k keeps its pair only if no other pays more, ``v_j >= v_k + p_ij - p_ik``, and a UAV left idle takes no
    pair that pays, ``v_j >= p_ij``; longest paths from a zero-priced node over the targets, relaxed edge by edge
    from the targets whose price grew last (``MAX_HOPS`` at most: prices stopped early still bound, looser)."""
    assigned = np.full(n_uav, -1)
    earned = np.zeros(n_uav)
    assigned[uav[chosen]], earned[uav[chosen]] = target[chosen], profit[chosen]
    zero = n_target  # the node whose price is 0
    rest = ~chosen & (target != assigned[uav])
    tail = np.where(assigned[uav[rest]] >= 0, assigned[uav[rest]], zero)
    weight = profit[rest] - earned[uav[rest]] - TOLERANCE * (tail != zero)  # a margin over the flow's rounding
    head = target[rest]
    prices = np.zeros(n_target + 1)
    active = np.ones(len(tail), bool)
    for _ in range(MAX_HOPS):
        grown = prices.copy()
        np.maximum.at(grown, head[active], prices[tail[active]] + weight[active])
        grew = grown > prices
        if not grew.any():
            break
        prices, active = grown, grew[tail]
    return prices[:n_target]


def best_earnings(scene: Scene, tree: cKDTree, prices: np.ndarray) -> FeasiblePairs:
    """Every feasible pair that earns above its target's price (``p_ij > v_j``), found target by target within the
    radius the price leaves: the pairs a UAV's dual ``u_i`` is the largest of."""
    slot = scene.value / scene.need
    room = slot - prices  # a pair of target j earns above its price only nearer than room_j / lam
    reach = float(scene.uav_range.max())
    radius = np.minimum(room / scene.lam, reach) if scene.lam > 0 else np.full(len(room), reach)
    asking = np.flatnonzero(room > 0)
    found = tree.query_ball_point(scene.target_pos[asking], radius[asking], return_sorted=False)
    counts = np.fromiter((len(f) for f in found), np.int64, len(found))
    target = np.repeat(asking, counts)
    uav = np.fromiter((i for f in found for i in f), np.int64, int(counts.sum()))
    dist = np.linalg.norm(scene.uav_pos[uav] - scene.target_pos[target], axis=1)
    keep = (dist <= scene.uav_range[uav]) & (slot_profit(scene, target, dist) > prices[target])
    return FeasiblePairs(uav[keep], target[keep], dist[keep])


def certified_bound(scene: Scene, candidates: FeasiblePairs, max_rounds: int = MAX_ROUNDS) -> Bound:
    """The LP relaxation over ``candidates`` (e.g. each UAV's nearest feasible targets), priced against every
    feasible pair until none left out pays more than the candidates (see the module's docstring)."""
    start = time.perf_counter()
    n, m = scene.n_uav, scene.n_target
    useful = slot_profit(scene, candidates.target, candidates.dist) > 0  # a pair that earns nothing never
    uav, target, dist = candidates.uav[useful], candidates.target[useful], candidates.dist[useful]  # enters an optimum
    tree = cKDTree(scene.uav_pos) if n and m else None
    first, rounds = len(uav), 0
    while True:
        profit = slot_profit(scene, target, dist)
        rounds += 1
        if tree is None:
            return Bound(0.0, "certified LP", True, rounds, 0, 0, time.perf_counter() - start)
        chosen = flow_choice(uav, target, profit, scene.need, n)
        prices = target_prices(n, m, uav, target, profit, chosen)
        earning = best_earnings(scene, tree, prices)
        dual = np.zeros(n)  # u_i over every feasible pair
        np.maximum.at(dual, earning.uav, slot_profit(scene, earning.target, earning.dist) - prices[earning.target])
        value = float(dual.sum() + (scene.need * prices).sum())
        own = np.zeros(n)  # u_i over the candidates alone
        np.maximum.at(own, uav, profit - prices[target])
        known = np.zeros(0, np.int64) if not len(uav) else uav * m + target
        outside = ~np.isin(earning.uav * m + earning.target, known)
        earns = slot_profit(scene, earning.target, earning.dist) - prices[earning.target]
        missing = outside & (earns > own[earning.uav] + TOLERANCE)
        if not missing.any() or rounds >= max_rounds:
            certified = not missing.any()
            return Bound(
                value, "certified LP", certified, rounds, len(uav), len(uav) - first, time.perf_counter() - start
            )
        uav = np.concatenate([uav, earning.uav[missing]])
        target = np.concatenate([target, earning.target[missing]])
        dist = np.concatenate([dist, earning.dist[missing]])


def scene_bound(scene: Scene, k: int = 16, milp_dual: float | None = None) -> Bound:
    """The bound a table or ``mode=solve`` reports for one scene: the certified LP over each UAV's ``k`` nearest
    feasible targets, or the MILP's dual bound (``milp_dual``, from a MILP that stopped early) where it is tighter."""
    pairs = feasible_pairs(scene)
    near = rank_in_runs(pairs.uav) < k
    bound = certified_bound(scene, FeasiblePairs(pairs.uav[near], pairs.target[near], pairs.dist[near]))
    if milp_dual is not None and milp_dual < bound.value:
        return replace(bound, value=milp_dual, kind="MILP dual")
    return bound
