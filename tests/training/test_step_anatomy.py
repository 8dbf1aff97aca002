"""A training step the host does not wait on - no sync op between two log points, a fused optimiser that skips a
non-finite step on the device, statistics read once per log line - checked by counting the aten ops the steps
dispatch (``uavgnn.infrastructure.perf.OpCounter``), against hand-worked counts and torch's own references."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import SMALLEST, compose_small
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from uavgnn.algorithms.base import Network
from uavgnn.infrastructure.perf import OpCounter
from uavgnn.loggers import MetricLogger
from uavgnn.models.choices import choice_log_probs, imitation_loss, policy_entropy
from uavgnn.problem.graphs import message_edges
from uavgnn.training.anatomy import step_anatomy
from uavgnn.training.ema import update_moving_average
from uavgnn.training.optimisers import Optimisers
from uavgnn.training.trainer import Trainer
from uavgnn.training.update import Updater


def test_the_counter_counts_what_makes_the_host_wait() -> None:
    x, mask = torch.arange(6.0), torch.arange(6) % 2 == 0
    with OpCounter() as count:
        x.sum().item()  # a read: 1
        torch.nonzero(mask)  # a data-dependent size: 1
        x[mask]  # boolean-mask indexing: 1
        torch.repeat_interleave(torch.tensor([1, 2]))  # output size read back: 1
    assert count.syncs == 4, count.counts
    with OpCounter() as count:  # the same questions with sizes known on the host: 0
        torch.nonzero_static(mask, size=3)
        x[torch.tensor([0, 2, 4])]
        torch.repeat_interleave(torch.tensor([1, 2]), output_size=3)
        torch.where(mask, x, 0.0).sum()
    assert count.syncs == 0, count.counts
    assert count.ops == 8, count.counts  # lift_fresh x2, nonzero_static, index, repeat_interleave, scalar_tensor,
    # where, sum
    y = torch.ones(2, 3)
    with OpCounter() as count:  # four aliases of y and one new tensor: only the add launches a kernel
        y.t(), y.view(3, 2), y[:, 1:], y.detach(), y + 1
    assert (count.ops, count.views, count.syncs) == (5, 4, 0), count.counts


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", list(SMALLEST))
def test_steps_between_log_points_make_no_host_sync(tmp_path, algorithm) -> None:
    anatomy = step_anatomy(compose_small(tmp_path, algorithm), tmp_path / "run", warmup=2, steps=3, trace=True)
    assert anatomy.ops_per_step > 50  # the steps did run under the counter
    assert anatomy.syncs_per_step == 0, anatomy.sync_sites


def test_the_fused_optimiser_matches_adamw_and_a_skipped_step_moves_nothing() -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 1))
    reference = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 1))
    reference.load_state_dict(net.state_dict())
    fused = Optimisers([Network("model", list(net.parameters()))], lr=1e-2, weight_decay=0.01, grad_clip=0.5)
    plain = torch.optim.AdamW(reference.parameters(), lr=1e-2, weight_decay=0.01, foreach=False)
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    for step in range(4):
        x = torch.randn(16, 5)
        for model in (net, reference):
            model.zero_grad(set_to_none=True)
            model(x).pow(2).mean().backward()
        healthy = torch.tensor(step != 2)  # step 2: as after a non-finite loss
        before = [p.detach().clone() for p in net.parameters()]
        applied = fused.step(scaler, healthy)
        assert bool(applied) == (step != 2)
        if step == 2:
            assert all(torch.equal(a, p) for a, p in zip(before, net.parameters()))
            continue
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5, foreach=False)
        plain.step()
        for p, q in zip(net.parameters(), reference.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert [int(s["step"]) for s in fused.adamw[0].state.values()] == [3] * 4  # the skipped step not counted


def test_each_network_is_clipped_to_its_own_norm_as_clip_grad_norm_does() -> None:
    """Three networks (clips 0.5, the default 1.0 and 100: two clipped, one not), their norms from one foreach
    kernel: every gradient is the one ``clip_grad_norm_`` gives network by network, to the bit, and the total is
    the sum of their norms (inf when one gradient is)."""
    torch.manual_seed(0)
    nets = [torch.nn.Linear(6, 4), torch.nn.Linear(4, 3), torch.nn.Linear(3, 1)]
    optimisers = Optimisers(
        [
            Network("a", list(nets[0].parameters()), grad_clip=0.5),
            Network("b", list(nets[1].parameters())),
            Network("c", list(nets[2].parameters()), grad_clip=100.0),
        ],
        lr=1e-2,
        weight_decay=0.0,
        grad_clip=1.0,
    )
    x = torch.randn(32, 6)
    nets[2](nets[1](nets[0](x))).pow(2).sum().backward()
    want, norms = [], []
    for net, clip in zip(nets, (0.5, 1.0, 100.0)):
        grads = [p.grad.clone().requires_grad_(False) for p in net.parameters()]
        holders = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        for holder, g in zip(holders, grads):
            holder.grad = g
        norms.append(torch.nn.utils.clip_grad_norm_(holders, clip, foreach=True))
        want += [h.grad for h in holders]
    assert norms[0] > 0.5 and norms[1] > 1.0 and norms[2] < 100.0  # clipped, clipped, left as it is
    total = optimisers.clip()
    assert all(torch.equal(p.grad, w) for p, w in zip([p for n in nets for p in n.parameters()], want))
    assert torch.equal(total, torch.stack(norms).sum())
    nets[1].bias.grad[0] = math.inf
    assert optimisers.clip() == math.inf
    for p in nets[1].parameters():  # a network without gradients this step, then none at all: nothing to clip
        p.grad = None
    assert torch.isfinite(optimisers.clip())
    optimisers.zero_grad()
    assert optimisers.clip() == 0


def test_the_gradients_are_those_of_backward_without_its_detach_per_parameter() -> None:
    """``Optimisers.backward``: every gradient ``loss.backward()`` gives, to the bit and in its parameter's
    layout (a weight used transposed gets a transposed gradient, copied as AccumulateGrad copies it), None for a
    parameter the loss does not reach and for a frozen one; one op fewer than ``backward`` per gradient already in
    its parameter's layout."""
    torch.manual_seed(0)
    used, transposed, unused = torch.nn.Linear(5, 4), torch.nn.Parameter(torch.randn(2, 3, 4)), torch.nn.Linear(2, 2)
    frozen = torch.nn.Parameter(torch.randn(3), requires_grad=False)
    params = [*used.parameters(), transposed, *unused.parameters(), frozen]
    optimisers = Optimisers(
        [Network("a", list(used.parameters())), Network("b", [transposed, *unused.parameters(), frozen])],
        lr=1e-2,
        weight_decay=0.0,
        grad_clip=1.0,
    )
    x = torch.randn(8, 5)

    def loss() -> torch.Tensor:
        return (torch.bmm(used(x).view(2, 4, 4), transposed.transpose(1, 2)) + frozen).relu().pow(2).sum()

    theirs_of, ours_of = loss(), loss()
    with OpCounter() as theirs:
        theirs_of.backward()
    want = [None if p.grad is None else p.grad.clone() for p in params]
    optimisers.zero_grad()
    with OpCounter(trace_ops=True) as ours:
        optimisers.backward(ours_of)
    assert want[3:] == [None, None, None] and [p.grad for p in params[3:]] == [None, None, None]
    for p, w in zip(params[:3], want[:3]):
        assert torch.equal(p.grad, w) and p.grad.stride() == p.stride() and p.grad.grad_fn is None
    assert ours.functions == {"training/optimisers.py:backward": ours.ops}  # --by-function's attribution
    assert theirs.ops - ours.ops == 2  # the detach of Linear's weight and bias (the transposed weight's gradient
    # is copied into its layout by both: new_empty_strided + copy_ there, empty_like + copy_ here)


def test_the_moving_average_is_torchs_ema_and_skips_a_skipped_step() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    ours, torchs = AveragedModel(model), AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
    for step in range(5):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        applied = torch.tensor(step != 3)
        before = [p.clone() for p in ours.module.parameters()]
        update_moving_average(ours, model, 0.9, applied)
        if step == 3:
            assert all(torch.equal(a, p) for a, p in zip(before, ours.module.parameters()))
            with torch.no_grad():  # torch's EMA has no skip: take the same step back out of the model
                torchs.module.load_state_dict(ours.module.state_dict())
            continue
        torchs.update_parameters(model)
        for p, q in zip(ours.module.parameters(), torchs.module.parameters()):
            torch.testing.assert_close(p, q, rtol=0, atol=1e-7)
    assert int(ours.n_averaged) == 4


def test_masked_losses_equal_the_per_uav_definitions(labelled_store) -> None:
    """Fixed-shape (masked) imitation loss, accuracy and entropy against a loop over UAVs."""
    batch = labelled_store.gather(torch.arange(6))
    edge_index, _, kept, _ = message_edges(batch, 4)
    assert torch.equal(kept, (batch.cand_rank < 4).nonzero().squeeze(1))  # sizes from the host, same indices
    del batch.kept_counts
    assert torch.equal(message_edges(batch, 4)[2], kept)
    torch.manual_seed(1)
    cand_uav, label = batch.cand_index[0, kept], batch.cand_label[kept]
    cand_logp, idle_logp = choice_log_probs(torch.randn(kept.numel()), torch.randn(batch.num_nodes), cand_uav)
    is_uav = batch.node_type == 0
    loss, acc, n = imitation_loss(cand_logp, idle_logp, cand_uav, label, batch.busy, is_uav)
    nll, right, covered, entropy = [], [], 0, []
    for u in is_uav.nonzero().squeeze(1).tolist():
        mine = (cand_uav == u).nonzero().squeeze(1).tolist()
        logps = [float(cand_logp[e]) for e in mine] + [float(idle_logp[u])]
        entropy.append(-sum(math.exp(v) * v for v in logps))
        labelled = [e for e in mine if label[e]]
        if batch.busy[u] and not labelled:
            continue  # its labelled target is outside its k candidates: not covered
        covered += 1
        nll.append(-float(cand_logp[labelled[0]]) if batch.busy[u] else -float(idle_logp[u]))
        best = max(mine, key=lambda e: (float(cand_logp[e]), e)) if mine else None  # ties: the later edge
        goes = best is not None and float(cand_logp[best]) > float(idle_logp[u])
        right.append(goes and bool(label[best]) if batch.busy[u] else not goes)
    assert int(n) == covered
    assert float(loss) == pytest.approx(sum(nll) / covered, rel=1e-6)
    assert float(acc) == pytest.approx(sum(right) / covered, rel=1e-6)
    assert float(policy_entropy(cand_logp, idle_logp, cand_uav, is_uav)) == pytest.approx(
        sum(entropy) / len(entropy), rel=1e-5
    )
    assert edge_index.shape[1] == 2 * kept.numel() + batch.uu_index.shape[1]


@pytest.mark.slow
def test_a_non_finite_step_changes_no_weight_and_halves_the_lr_at_the_read(tmp_path, monkeypatch) -> None:
    cfg = compose_small(
        tmp_path,
        "imitation",
        "train.steps=6",
        "train.log_every=3",
        "train.eval_every=100",
        "train.ckpt_every=100",
        "train.warmup_steps=0",
        "train.schedule=plateau",
    )
    real, seen = Updater.algorithm_step, []

    def step(self, batch, draws, capturing=False):
        out = real(self, batch, draws, capturing)
        seen.append([p.detach().clone() for p in self.model.parameters()])
        if len(seen) == 2:  # the second step's loss is NaN
            out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(Updater, "algorithm_step", step)
    (tmp_path / "run").mkdir()
    trainer = Trainer(cfg, tmp_path / "run")
    logger = MetricLogger(tmp_path / "run", cfg.logger, config={})
    trainer.fit(logger)
    logger.finish()
    assert all(torch.equal(a, b) for a, b in zip(seen[1], seen[2]))  # step 2 applied nothing
    assert not all(torch.equal(a, b) for a, b in zip(seen[2], seen[3]))  # step 3 did
    assert trainer.state.step == 6 and trainer.state.lr_scale == 0.5 and trainer.state.bad_steps == 0
