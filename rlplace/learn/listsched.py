"""Training the ``learned`` placer (``rlplace.placers.learned``) on a family of graphs.

The policy is a list scheduler whose device choice is a small network over per-device feature
rows, hinted by the best heuristic's placement, so one set of weights places any graph on any
number of devices. Training has two parts:

1. **Behaviour cloning of the hint** (``clone_rounds``, DAgger: Ross et al., AISTATS 2011): the
   policy places every training graph, each decision it met is labelled with the device the best
   heuristic of that graph chose (``rlplace.placers.search.HEURISTICS``; where the op has no
   choice of it, the devices where it finishes first), and the network is fitted to all labels
   so far (cross-entropy, Adam). After it the greedy pass reproduces the hint.
2. **Evolution strategies on the greedy pass and what the policy's search finds** (``generations``; Salimans et al.
   2017, "Evolution Strategies as a Scalable Alternative to Reinforcement Learning"): each
   generation draws ``population`` / 2 Gaussian perturbations of the weights (scale ``sigma``),
   evaluates both signs of each on ``graphs_per_generation`` training graphs drawn at random (the
   same graphs for every member), and moves the weights along the rank-weighted perturbations
   (Adam, rate ``es_lr``). The objective is the mean over the graphs of log(step time / best
   heuristic's step time) of the greedy pass plus the same of the placement that
   ``policy_search`` finds in ``search_evaluations`` (step times the simulator's; over memory:
   3x): the network learns which moves are worth trying, ranked by its scores, and stays a
   placement policy, which ``agent=learned`` fine-tunes: on the search alone the greedy pass
   drifted (after 100 generations it placed held-out GNMT-2 at 5.1x the best heuristic and ran
   out of memory on a layered DAG; with the pass in the objective 2.7x and fits;
   experiments/studies.md).

Before the hint (``experiments/studies.md``), the same two parts cloned earliest finish and
optimised the greedy pass: the policy stayed at 1.18-1.29x the best heuristic on its own
training family and 2.3-2.4x on the held-out family; evolution strategies on the greedy pass of
a hinted policy do not move it (every perturbation copies the hint: a flat objective). Rollout
policy improvement (each of a decision's devices tried, the rest placed by the policy, the
fastest completion as the label) did not improve on the clone in 8 rounds on three seeds.

Every ``eval_every`` generations the greedy pass and the policy's search place the whole training
family; the geometric means of their step times over the best heuristic's are the curves
(``curves.json``), and the weights of the best evaluation of the search so far are
``learned.npz`` (model selection on the training family). Each evaluation saves ``checkpoint.pt`` (read back with ``weights_only=True``); a run
started again in the same directory continues from it, also with more ``generations``.

    python -m rlplace.learn.listsched OUT_DIR [--seed 0] [--generations 100] [--quick]
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from rlplace.atomic import write_whole
from rlplace.errors import ArgumentParser, CheckpointError, ConfigError, run_script
from rlplace.learn.family import Instance, training_family
from rlplace.placers.learned import FEATURES, LAYERS, NUM_FEATURES, ListSchedule, check_weights, policy_search
from rlplace.placers.search import HEURISTICS, best_of, evaluate_rows
from rlplace.progress import progress_bar

MAX_DEVICES = 8  # of the training family; a decision's rows are padded to it


@dataclass
class TrainConfig:
    seed: int = 0
    family_size: int = 48         # random training graphs (rlplace.learn.family), plus the zoo models
    hidden: int = 32
    clone_rounds: int = 2
    epochs: int = 8               # passes over the labels so far, per clone round
    batch_size: int = 256
    lr: float = 3e-3
    generations: int = 100
    population: int = 16
    sigma: float = 0.05
    es_lr: float = 0.02
    graphs_per_generation: int = 24
    search_evaluations: int = 16  # the objective: the placement policy_search finds in as many
    eval_every: int = 10

    def check(self) -> None:
        for key in ("family_size", "hidden", "epochs", "batch_size", "graphs_per_generation", "eval_every",
                    "search_evaluations"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise ConfigError(f"learned training: {key} must be an integer >= 1, got {getattr(self, key)!r}")
        for key in ("clone_rounds", "generations"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 0:
                raise ConfigError(f"learned training: {key} must be an integer >= 0, got {getattr(self, key)!r}")
        if not isinstance(self.population, int) or self.population < 2 or self.population % 2:
            raise ConfigError(f"learned training: population must be an even integer >= 2, got {self.population!r}")
        for key in ("lr", "sigma", "es_lr"):
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

    def network(self) -> tuple[np.ndarray, ...]:
        """The weights as ``placers.learned`` reads them (``LAYERS``: w1 b1 w2 b2 w3 b3)."""
        arrays = {}
        for i, layer in enumerate(self.layers, start=1):
            w = layer.weight.detach().double().numpy().T
            arrays[f"w{i}"] = w[:, 0] if i == 3 else w
            arrays[f"b{i}"] = layer.bias.detach().double().numpy()
        return check_weights(arrays, "training")


def flatten(network: tuple[np.ndarray, ...]) -> np.ndarray:
    return np.concatenate([a.ravel() for a in network])


def unflatten(theta: np.ndarray, like: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    out, i = [], 0
    for a in like:
        out.append(theta[i:i + a.size].reshape(a.shape))
        i += a.size
    return tuple(out)


def hint_labels(plan: ListSchedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The decisions of the last recorded pass with a choice, padded to MAX_DEVICES: rows,
    allowed devices, and a distribution over the devices the best heuristic chose (where it
    is allowed; else where the op finishes first)."""
    d = plan.decisions
    keep = d.allowed.sum(axis=1) > 1
    rows, allowed = d.features[keep], d.allowed[keep]
    pad = MAX_DEVICES - rows.shape[1]
    if pad < 0:
        raise ConfigError(f"learned training: graphs of at most {MAX_DEVICES} devices, got {rows.shape[1]}")
    hinted = allowed & (rows[:, :, FEATURES.index("hinted")] > 0)
    finish = np.where(allowed, rows[:, :, FEATURES.index("finish")], np.inf)
    best = np.where(hinted.any(axis=1, keepdims=True), hinted,
                    allowed & (finish <= finish.min(axis=1, keepdims=True) + 1e-12))
    return (np.pad(rows, ((0, 0), (0, pad), (0, 0))), np.pad(allowed, ((0, 0), (0, pad))),
            np.pad(best / best.sum(axis=1, keepdims=True), ((0, 0), (0, pad))))


def fit(net: Network, optimizer: torch.optim.Optimizer, rows: np.ndarray, allowed: np.ndarray, target: np.ndarray,
        epochs: int, batch_size: int, generator: torch.Generator) -> float:
    """Cross-entropy of the policy's softmax over the allowed devices against the targets;
    returns the last epoch's mean loss."""
    rows, allowed = torch.as_tensor(rows, dtype=torch.float32), torch.as_tensor(allowed)
    target = torch.as_tensor(target, dtype=torch.float32)
    mean = 0.0
    for _ in range(epochs):
        order = torch.randperm(len(rows), generator=generator)
        total = 0.0
        for lo in range(0, len(order), batch_size):
            idx = order[lo:lo + batch_size]
            logits = net(rows[idx]).masked_fill(~allowed[idx], -1e9)
            loss = -(target[idx] * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(idx)
        mean = total / max(len(order), 1)
    return mean


def step_times(plans: list[ListSchedule], network, which, evaluations: int = 0) -> np.ndarray:
    """The simulator's step time of each of ``plans[which]``'s greedy pass (``evaluations`` 0)
    or of the placement ``policy_search`` finds in ``evaluations``; 3x where it runs over memory."""
    out = []
    for i in which:
        plan = plans[i]
        budget = plan.cluster.memory.astype(np.int64)
        device = plan.run(network, budget).ops.device if evaluations == 0 else \
            policy_search(plan, network, budget, evaluations)
        over, step = evaluate_rows(plan.graph, plan.cluster, device[None])
        out.append(float(step[0]) * (3.0 if over[0] > 0 else 1.0))
    return np.array(out)


def geometric_mean(x) -> float:
    return float(np.exp(np.mean(np.log(x)))) if len(x) else float("nan")


class Trainer:
    """One training run in ``out_dir`` (module docstring): its state, saved and restored."""

    def __init__(self, config: TrainConfig, out_dir: Path, family: list[Instance], progress: bool):
        config.check()
        self.config, self.out_dir, self.progress = config, out_dir, progress
        self.family = family
        self.plans = [ListSchedule(x.graph, x.cluster) for x in family]
        torch.manual_seed(config.seed)
        self.net = Network(config.hidden)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=config.lr)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.rng = np.random.default_rng(config.seed)
        self.state = {"clone_round": 0, "generation": 0, "curves": [], "best": None, "hints": None}
        self.labels: list[np.ndarray] = []
        self.theta = self.adam_m = self.adam_v = None
        self.path = out_dir / "checkpoint.pt"

    def run(self) -> dict:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if self.path.is_file():
            self._restore()
        c, state = self.config, self.state
        if state["best"] is None:
            best = [best_of(x.graph, x.cluster, HEURISTICS, seed=c.seed) for x in
                    progress_bar(self.family, desc="best heuristic per training graph", show=self.progress)]
            state["best"] = [b[3] for b in best]
            state["hints"] = [torch.as_tensor(np.array(b[1].device_of, dtype=np.int64)) for b in best]
        for plan, hint in zip(self.plans, state["hints"]):
            plan.hint = hint.numpy()
        bar = progress_bar(total=c.clone_rounds + c.generations, initial=state["clone_round"] + state["generation"],
                           desc="training learned", show=self.progress)
        while state["clone_round"] < c.clone_rounds:
            self._clone_round()
            self._record("clone")
            bar.update()
        if self.theta is None:
            self.theta = flatten(self.net.network())
            self.adam_m, self.adam_v = np.zeros_like(self.theta), np.zeros_like(self.theta)
        while state["generation"] < c.generations:
            self.generation()
            if state["generation"] % c.eval_every == 0 or state["generation"] == c.generations:
                self._record("es")
                bar.set_postfix(ratio=f"{state['curves'][-1]['ratio_geomean']:.3f}")
            bar.update()
        bar.close()
        return {"config": asdict(c), "curves": state["curves"]}

    def network(self) -> tuple[np.ndarray, ...]:
        like = self.net.network()
        return like if self.theta is None else unflatten(self.theta, like)

    def _clone_round(self) -> None:
        network = self.net.network()
        for plan in self.plans:
            plan.run(network, plan.cluster.memory.astype(np.int64), record=True)
            self.labels.append(np.concatenate([a.reshape(len(a), -1) for a in hint_labels(plan)], axis=1,
                                              dtype=np.float32))
        data = np.concatenate(self.labels)
        D, F = MAX_DEVICES, NUM_FEATURES
        rows, allowed, target = data[:, :D * F].reshape(-1, D, F), data[:, D * F:D * F + D] > 0, data[:, D * F + D:]
        self.state["loss"] = fit(self.net, self.optimizer, rows, allowed, target, self.config.epochs,
                                 self.config.batch_size, self.generator)
        self.state["clone_round"] += 1

    def generation(self) -> None:
        """One generation of evolution strategies (module docstring, part 2); after ``run``."""
        c, like = self.config, self.net.network()
        which = self.rng.choice(len(self.plans), size=min(c.graphs_per_generation, len(self.plans)), replace=False)
        best = np.log(np.array(self.state["best"])[which])
        eps = self.rng.normal(size=(c.population // 2, len(self.theta)))
        loss = np.array([[self._objective(unflatten(self.theta + sign * c.sigma * e, like), which, best)
                          for sign in (1, -1)] for e in eps])
        ranks = np.empty(loss.size)
        ranks[np.argsort(loss, axis=None)] = np.arange(loss.size)
        ranks = ranks.reshape(loss.shape) / (loss.size - 1) - 0.5  # centred ranks: higher is worse
        grad = ((ranks[:, 0] - ranks[:, 1])[:, None] * eps).sum(axis=0) / (c.population * c.sigma)
        g = self.state["generation"] + 1
        self.adam_m = 0.9 * self.adam_m + 0.1 * grad
        self.adam_v = 0.999 * self.adam_v + 0.001 * grad * grad
        self.theta = self.theta - c.es_lr * (self.adam_m / (1 - 0.9 ** g)) / (np.sqrt(self.adam_v / (1 - 0.999 ** g)) + 1e-8)
        self.state["generation"] = g

    def _objective(self, network, which, log_best: np.ndarray) -> float:
        """Mean log ratio to the best heuristic of the greedy pass plus that of the search."""
        return float(np.mean(np.log(step_times(self.plans, network, which)) - log_best)
                     + np.mean(np.log(step_times(self.plans, network, which, self.config.search_evaluations)) - log_best))

    def _record(self, phase: str) -> None:
        started = time.perf_counter()
        network, state = self.network(), self.state
        best = np.array(state["best"])
        ratio = step_times(self.plans, network, range(len(self.plans))) / best
        searched = step_times(self.plans, network, range(len(self.plans)), self.config.search_evaluations) / best
        state["curves"].append({"clone_round": state["clone_round"], "generation": state["generation"], "phase": phase,
                                "ratio_geomean": geometric_mean(ratio), "ratio_max": float(ratio.max()),
                                "search_ratio_geomean": geometric_mean(searched),
                                "share_below_best": float(np.mean(ratio < 1 - 1e-9)),
                                "loss": state.get("loss"), "evaluation_seconds": time.perf_counter() - started})
        if state["curves"][-1]["search_ratio_geomean"] <= min(
                x["search_ratio_geomean"] for x in state["curves"]):
            write_whole(self.out_dir / "learned.npz", lambda f: np.savez(f, **dict(zip(LAYERS, network))))
        self._save()
        (self.out_dir / "curves.json").write_text(json.dumps({"config": asdict(self.config),
                                                              "curves": state["curves"]}, indent=1))

    def _save(self) -> None:
        arrays = {} if self.theta is None else {k: torch.as_tensor(getattr(self, k)) for k in ("theta", "adam_m", "adam_v")}
        saved = {"config": asdict(self.config), "net": self.net.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "generator": self.generator.get_state(), "rng": self.rng.bit_generator.state, "state": self.state,
                 "labels": [torch.as_tensor(x) for x in self.labels], **arrays}
        write_whole(self.path, lambda f: torch.save(saved, f))

    def _restore(self) -> None:
        saved = torch.load(self.path, weights_only=True)
        if {**saved.get("config", {}), "generations": self.config.generations} != asdict(self.config):
            raise CheckpointError(f"{self.path}: saved with another training config ({saved.get('config')}), "
                                  "not this one (only generations may change)")
        self.net.load_state_dict(saved["net"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.generator.set_state(saved["generator"])
        self.rng.bit_generator.state = saved["rng"]
        self.state = saved["state"]
        self.labels = [x.numpy() for x in saved["labels"]]
        if "theta" in saved:
            self.theta, self.adam_m, self.adam_v = (saved[k].numpy() for k in ("theta", "adam_m", "adam_v"))


def train(config: TrainConfig, out_dir: Path, family: list[Instance] | None = None, progress: bool = True) -> dict:
    """Train on ``family`` (default: ``training_family(config.seed, config.family_size)``);
    writes ``learned.npz``, ``curves.json`` and ``checkpoint.pt`` to ``out_dir`` and continues a
    run saved there. Returns the curves."""
    family = training_family(config.seed, config.family_size) if family is None else family
    return Trainer(config, out_dir, family, progress).run()


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generations", type=int, default=TrainConfig.generations)
    parser.add_argument("--quick", action="store_true", help="a small family, one clone round, a few generations")
    args = parser.parse_args()
    config = TrainConfig(seed=args.seed, generations=args.generations)
    if args.quick:  # no TensorFlow zoo models
        config = TrainConfig(seed=args.seed, family_size=4, clone_rounds=1, generations=4, population=4,
                             graphs_per_generation=2, eval_every=2)
    train(config, args.out_dir, training_family(config.seed, config.family_size, zoo_models=not args.quick))


if __name__ == "__main__":
    run_script(main)
