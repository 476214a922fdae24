"""Training the ``learned`` placer (``rlplace.placers.learned``) on a family of graphs.

The policy is a list scheduler whose device choice is a small network over per-device feature
rows, so one set of weights places any graph on any number of devices. Training has two parts:

1. **Behaviour cloning of earliest finish** (``clone_rounds``, DAgger: Ross et al., AISTATS
   2011): the policy places every training graph, and each decision it met is labelled with the
   devices where the op would finish first (HEFT's rule without insertion, Topcuoglu et al. 2002
   §4.1; m-ETF's choice for a given op, Baechi §2.3); the network is fitted to all labels so far.
2. **Rollout policy improvement** (``rounds``; Bertsekas' rollout algorithm, approximate policy
   iteration): the greedy policy places each training graph; for ``decisions_per_graph``
   decisions drawn at random, every other device it could take is tried and the rest of the
   graph placed by the policy; the simulator runs each completed placement (a placement over
   memory counts as slower than any that fits). The target of a decision is a softmax of the
   step times (``temperature``: relative step time, 0.01 = 1%), and the network is fitted to all
   targets so far, so it learns what the simulator rewards: where waiting for a device beats a
   transfer, where spreading costs more than it gains, where memory will run out.

Each round measures the greedy policy on every training graph (the geometric mean of its step
time over the best heuristic's is the curve, ``curves.json``) and keeps the weights of the best
round so far in ``learned.npz``: model selection on the training family, since rounds of rollout
targets do not improve the policy monotonically. Each round saves ``checkpoint.pt`` (read back with
``weights_only=True``); a run started again in the same directory continues from it, also with
more ``rounds``.

    python -m rlplace.learn.listsched OUT_DIR [--seed 0] [--rounds 30] [--quick]
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from rlplace.errors import ArgumentParser, CheckpointError, ConfigError, run_script
from rlplace.learn.family import Instance, training_family
from rlplace.placers.fit import fitting_budget
from rlplace.placers.learned import LAYERS, NUM_FEATURES, ListSchedule, LearnedPlacer, check_weights
from rlplace.placers.search import HEURISTICS, best_of, evaluate_rows

MAX_DEVICES = 8  # of the training family; a decision's rows are padded to it
MEMORY_ROUNDS = LearnedPlacer.memory_rounds


@dataclass
class TrainConfig:
    seed: int = 0
    family_size: int = 48        # random training graphs (rlplace.learn.family), plus the zoo models
    hidden: int = 32
    clone_rounds: int = 3
    rounds: int = 8
    decisions_per_graph: int = 16
    temperature: float = 0.01
    epochs: int = 8              # passes over the data so far, per round
    batch_size: int = 256
    lr: float = 3e-3

    def check(self) -> None:
        for key in ("family_size", "hidden", "epochs", "batch_size", "decisions_per_graph"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise ConfigError(f"learned training: {key} must be an integer >= 1, got {getattr(self, key)!r}")
        for key in ("clone_rounds", "rounds"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 0:
                raise ConfigError(f"learned training: {key} must be an integer >= 0, got {getattr(self, key)!r}")
        for key in ("temperature", "lr"):
            if not (math.isfinite(getattr(self, key)) and getattr(self, key) > 0):
                raise ConfigError(f"learned training: {key} must be a number > 0, got {getattr(self, key)!r}")


class Network(torch.nn.Module):
    """The device scorer: NUM_FEATURES -> hidden -> hidden -> 1, tanh (``placers.learned.score``)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(NUM_FEATURES, hidden), torch.nn.Linear(hidden, hidden),
                                           torch.nn.Linear(hidden, 1)])

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.layers[0](rows))
        h = torch.tanh(self.layers[1](h))
        return self.layers[2](h).squeeze(-1)

    def arrays(self) -> dict[str, np.ndarray]:
        """The weights as ``placers.learned`` reads them (``LAYERS``: w1 b1 w2 b2 w3 b3)."""
        out = {}
        for i, layer in enumerate(self.layers, start=1):
            w = layer.weight.detach().double().numpy().T
            out[f"w{i}"] = w[:, 0] if i == 3 else w
            out[f"b{i}"] = layer.bias.detach().double().numpy()
        return out

    def network(self) -> tuple[np.ndarray, ...]:
        return check_weights(self.arrays(), "training")


@dataclass
class Batch:
    """Decisions padded to MAX_DEVICES: rows (N, MAX_DEVICES, F), allowed (N, MAX_DEVICES),
    target (N, MAX_DEVICES): a distribution over the allowed devices."""

    rows: torch.Tensor
    allowed: torch.Tensor
    target: torch.Tensor

    @staticmethod
    def empty() -> "Batch":
        return Batch(torch.zeros(0, MAX_DEVICES, NUM_FEATURES), torch.zeros(0, MAX_DEVICES, dtype=torch.bool),
                     torch.zeros(0, MAX_DEVICES))

    def join(self, rows: np.ndarray, allowed: np.ndarray, target: np.ndarray) -> "Batch":
        pad = MAX_DEVICES - rows.shape[1]
        if pad < 0:
            raise ConfigError(f"learned training: graphs of at most {MAX_DEVICES} devices, got {rows.shape[1]}")
        rows = np.pad(rows, ((0, 0), (0, pad), (0, 0)))
        allowed = np.pad(allowed, ((0, 0), (0, pad)))
        target = np.pad(target, ((0, 0), (0, pad)))
        return Batch(torch.cat([self.rows, torch.as_tensor(rows, dtype=torch.float32)]),
                     torch.cat([self.allowed, torch.as_tensor(allowed)]),
                     torch.cat([self.target, torch.as_tensor(target, dtype=torch.float32)]))


def earliest_finish_targets(plan: ListSchedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The decisions of the last recorded pass, each labelled with its earliest-finish devices."""
    d = plan.decisions
    keep = d.allowed.sum(axis=1) > 1
    rows, allowed = d.features[keep], d.allowed[keep]
    finish = np.where(allowed, rows[:, :, 0], np.inf)
    best = allowed & (finish <= finish.min(axis=1, keepdims=True) + 1e-12)
    return rows, allowed, best / best.sum(axis=1, keepdims=True)


def penalised_times(overflow: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Step times with a placement over memory slower than any that fits."""
    return np.where(overflow > 0, 2.0 * step.max(initial=0.0) + step, step)


def rollout_targets(plan: ListSchedule, network, rng: np.random.Generator, count: int, temperature: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Rollout targets of ``count`` decisions of the greedy policy on ``plan``'s graph (module
    docstring), under the memory budget the ``learned`` placer finds for it
    (``rlplace.placers.fit``); returns rows, allowed, targets and the greedy placement's step time."""
    graph, cluster = plan.graph, plan.cluster

    def place(budget):
        m = plan.run(network, budget)
        return m.ops.device.copy(), m.memory.peak.copy()

    _, _, budget = fitting_budget(place, graph, cluster, cluster.memory.astype(np.int64), MEMORY_ROUNDS)
    greedy = plan.run(network, budget, record=True)
    d = plan.decisions
    choices = np.flatnonzero(d.allowed.sum(axis=1) > 1)
    picked = np.sort(rng.choice(choices, size=min(count, len(choices)), replace=False)) if len(choices) else choices
    placements, owners = [greedy.ops.device.copy()], [(-1, -1)]
    for k in picked:
        for device in np.flatnonzero(d.allowed[k]):
            if device == d.chosen[k]:
                continue
            forced = np.full(graph.num_ops, -1, dtype=np.int64)
            forced[:k] = d.chosen[:k]
            forced[k] = device
            placements.append(plan.run(network, budget, forced=forced).ops.device.copy())
            owners.append((k, device))
    times = penalised_times(*evaluate_rows(graph, cluster, np.stack(placements)))
    table = np.full((len(picked), cluster.num_devices), np.inf)
    row_of = {k: i for i, k in enumerate(picked)}
    for i, k in enumerate(picked):
        table[i, d.chosen[k]] = times[0]
    for (k, device), t in zip(owners[1:], times[1:]):
        table[row_of[k], device] = t
    best = table.min(axis=1, keepdims=True)
    spread = np.where(np.isfinite(table), table, -np.inf).max(axis=1) - best[:, 0]
    informative = spread > 1e-9 * best[:, 0]
    logits = -(table - best) / (temperature * np.maximum(best, 1e-12))
    target = np.exp(logits - logits.max(axis=1, keepdims=True))
    target /= target.sum(axis=1, keepdims=True)
    keep = picked[informative]
    return d.features[keep], d.allowed[keep], target[informative], float(times[0])


def fit(net: Network, optimizer: torch.optim.Optimizer, data: Batch, epochs: int, batch_size: int,
        generator: torch.Generator) -> float:
    """Cross-entropy of the policy's softmax over the allowed devices against the targets;
    returns the last epoch's mean loss."""
    mean = 0.0
    for _ in range(epochs):
        order = torch.randperm(len(data.rows), generator=generator)
        total = 0.0
        for lo in range(0, len(order), batch_size):
            idx = order[lo:lo + batch_size]
            logits = net(data.rows[idx]).masked_fill(~data.allowed[idx], -1e9)
            loss = -(data.target[idx] * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(idx)
        mean = total / max(len(order), 1)
    return mean


def geometric_mean(x) -> float:
    return float(np.exp(np.mean(np.log(x)))) if len(x) else float("nan")


def train(config: TrainConfig, out_dir: Path, family: list[Instance] | None = None, progress: bool = True) -> dict:
    """Train on ``family`` (default: ``training_family(config.seed, config.family_size)``);
    writes ``learned.npz``, ``curves.json`` and ``checkpoint.pt`` to ``out_dir`` and continues a
    run saved there. Returns the curves."""
    config.check()
    out_dir.mkdir(parents=True, exist_ok=True)
    family = training_family(config.seed, config.family_size) if family is None else family
    plans = [ListSchedule(x.graph, x.cluster) for x in family]
    torch.manual_seed(config.seed)
    net = Network(config.hidden)
    optimizer = torch.optim.Adam(net.parameters(), lr=config.lr)
    generator = torch.Generator().manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    state = {"round": 0, "curves": [], "best": None, "single": None}
    data = Batch.empty()
    path = out_dir / "checkpoint.pt"
    if path.is_file():
        saved = torch.load(path, weights_only=True)
        if {**saved.get("config", {}), "rounds": config.rounds} != asdict(config):  # more rounds may follow
            raise CheckpointError(f"{path}: saved with another training config ({saved.get('config')}), not this one")
        net.load_state_dict(saved["net"])
        optimizer.load_state_dict(saved["optimizer"])
        generator.set_state(saved["generator"])
        rng.bit_generator.state = saved["rng"]
        state = saved["state"]
        data = Batch(saved["rows"], saved["allowed"], saved["target"])
    if state["best"] is None:
        state["best"] = [best_of(x.graph, x.cluster, HEURISTICS, seed=config.seed)[3] for x in
                         tqdm(family, desc="best heuristic per training graph", disable=not progress or None)]
        state["single"] = [float(penalised_times(*evaluate_rows(x.graph, x.cluster, np.zeros((1, x.graph.num_ops),
                                                                                          dtype=np.int64)))[0])
                           for x in family]
    total = config.clone_rounds + config.rounds
    bar = tqdm(total=total, initial=state["round"], desc="training learned", disable=not progress or None)
    while state["round"] < total:
        started = time.perf_counter()
        network = net.network()
        cloning = state["round"] < config.clone_rounds
        if state["round"] == config.clone_rounds:
            data = Batch.empty()  # the rollout targets replace the cloned rule's labels
        steps = []
        for plan in plans:
            if cloning:
                m = plan.run(network, plan.cluster.memory.astype(np.int64), record=True)
                data = data.join(*earliest_finish_targets(plan))
                steps.append(float(penalised_times(*evaluate_rows(plan.graph, plan.cluster, m.ops.device[None]))[0]))
            else:
                rows, allowed, target, step = rollout_targets(plan, network, rng, config.decisions_per_graph,
                                                              config.temperature)
                data = data.join(rows, allowed, target)
                steps.append(step)
        loss = fit(net, optimizer, data, config.epochs, config.batch_size, generator)
        ratio = np.array(steps) / np.array(state["best"])
        fallback = np.minimum(steps, state["single"]) / np.array(state["best"])  # the placer's single_fallback
        state["curves"].append({"round": state["round"], "phase": "clone" if cloning else "rollout",
                                "ratio_geomean": geometric_mean(ratio), "ratio_max": float(ratio.max()),
                                "with_single_geomean": geometric_mean(fallback),
                                "share_at_most_best": float(np.mean(ratio <= 1 + 1e-9)), "loss": loss,
                                "decisions": len(data.rows), "seconds": time.perf_counter() - started})
        state["round"] += 1
        if state["curves"][-1]["ratio_geomean"] <= min(c["ratio_geomean"] for c in state["curves"]):
            np.savez(out_dir / "learned.npz", **dict(zip(LAYERS, network)))  # the placements just measured
        torch.save({"config": asdict(config), "net": net.state_dict(), "optimizer": optimizer.state_dict(),
                    "generator": generator.get_state(), "rng": rng.bit_generator.state, "state": state,
                    "rows": data.rows, "allowed": data.allowed, "target": data.target}, path)
        (out_dir / "curves.json").write_text(json.dumps({"config": asdict(config), "curves": state["curves"]}, indent=1))
        bar.set_postfix(ratio=f"{state['curves'][-1]['ratio_geomean']:.3f}")
        bar.update()
    bar.close()
    return {"config": asdict(config), "curves": state["curves"]}


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=TrainConfig.rounds)
    parser.add_argument("--quick", action="store_true", help="a small family and two rounds: a smoke run")
    args = parser.parse_args()
    config = TrainConfig(seed=args.seed, rounds=args.rounds)
    if args.quick:  # no TensorFlow zoo models
        config = TrainConfig(seed=args.seed, family_size=4, clone_rounds=1, rounds=1, decisions_per_graph=4)
    train(config, args.out_dir, training_family(config.seed, config.family_size, zoo_models=not args.quick))


if __name__ == "__main__":
    run_script(main)
