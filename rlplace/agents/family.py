"""Training one policy on a family of graphs, to place graphs it has not seen (issue 16,
amortisation): GDP (Zhou et al. 2019, §3.3 "batch training" over graphs), Placeto (Addanki et
al. 2019, §4 "generalizability") and Mars Table 3 (§4.3, from one source graph).

    summary = train_family([gnmt2, bert2, layered], cluster, SimBackend(), TrainConfig(agent="mars", ...), out_dir)
    PolicyPlacer("mars", out_dir / "checkpoint.pt").place(unseen, cluster)     # zero-shot
    train(unseen, cluster, backend, TrainConfig(init_checkpoint=..., ...), d)  # fine-tuning

One set of weights: a policy is built per graph (its buffers hold that graph's features) and
every graph's policy shares the first one's parameters, so the policy's weights must not
depend on the graph (Mars: ``policy.type_buckets > 0``); a weight that does is a ConfigError
naming it. Each graph has its own environment and evaluator, its own algorithm state (PPO's
reward baseline and sample buffer: step times differ by orders of magnitude between graphs)
and its own warm start (``warm_start.first_sample`` per graph); ``warm_start.behaviour_cloning``
clones every graph's heuristic placement jointly (``behaviour_clone_jointly``: each step on the
sum of the graphs' losses, as GDP §3.3 batches graphs, since cloning one graph's placement after
another's would undo it). ``reclone_every`` > 0 keeps the policy near those placements during RL:
every that many updates the joint clone runs again for at most ``warm_start.self_imitation_steps``
steps at ``warm_start.self_imitation_lr`` (a supervised loss on demonstrations interleaved with RL
updates, as DQfD does: Hester et al., AAAI 2018, §3). Measured on layered DAGs
(experiments/README.md, "Amortisation"), both fit the family but place unseen graphs worse.
The algorithms share one optimizer. Updates go round the graphs (``order="cycle"``) or draw one
uniformly per update (``"sample"``). A policy with an encoder pre-training option (Mars' DGI) pre-trains it on the
first graph only.

The budget (``config.budget_placements`` / ``budget_seconds``) is the family's total. Every
``checkpoint_every`` updates and at the end, ``checkpoint.pt`` holds what the single-graph
trainer's does (``rlplace.agents.checkpoint``: the shared policy, every algorithm's state, the
RNG states and the progress of every graph) and ``resume=True`` continues from it. The
checkpoint's ``problem`` names the family, so ``agent:checkpoint`` places any graph as a
policy trained elsewhere and ``init_checkpoint`` fine-tunes from it. ``results.json`` holds per
graph its placements evaluated, best step time and the greedy placement's evaluation.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from tqdm import tqdm

from rlplace.agents.algos import make_algorithm
from rlplace.agents.checkpoint import (Checkpoint, check_fits, numpy_rng_state, problem_identity, read_checkpoint,
                                       set_generator_state, set_numpy_rng_state, write_checkpoint)
from rlplace.agents.device import device_name, resolve_device
from rlplace.agents.configs import AGENTS, TrainConfig, WarmStartConfig
from rlplace.agents.loggers import Logger
from rlplace.agents.policies import make_policy
from rlplace.agents.warmstart import agreement, behaviour_clone_jointly
from rlplace.agents.trainer import (CHECKPOINT, Evaluator, Progress, budget_spent, flushed_subnormals, learn_step,
                                   resume_seed, warm_start_policy)
from rlplace.backends import Backend
from rlplace.cluster import Cluster
from rlplace.envs import PlacementEnv
from rlplace.errors import CheckpointError, ConfigError
from rlplace.graph import OpGraph

ORDERS = ("cycle", "sample")


@dataclass
class FamilyProgress:
    """What the loop has done, over the family and per graph (by name); saved in every checkpoint."""

    updates: int = 0
    evaluated: int = 0
    elapsed: float = 0.0
    graphs: dict[str, Progress] = field(default_factory=dict)
    targets: list[list[int]] | None = None   # each graph's heuristic placement, when cloned
    generator_reseeded_at: list[int] = field(default_factory=list)  # as Progress's


def family_identity(graphs: Sequence[OpGraph], cluster: Cluster) -> dict[str, Any]:
    """The checkpoint's ``problem``: the family's graphs, so that it matches no single graph."""
    return {"family": [problem_identity(g, cluster) for g in graphs], "devices": cluster.num_devices}


def share_parameters(policy: torch.nn.Module, owner: torch.nn.Module) -> None:
    """Make every parameter of ``policy`` the same tensor as ``owner``'s of that name (set
    through the owning module, so an LSTM's flat weights follow); buffers stay the policy's."""
    shared = dict(owner.named_parameters())
    for name, parameter in list(policy.named_parameters()):
        if name not in shared or shared[name].shape != parameter.shape:
            found = "absent" if name not in shared else f"{tuple(shared[name].shape)}"
            raise ConfigError(f"family: parameter {name} depends on the graph ({tuple(parameter.shape)} here, "
                              f"{found} on the first graph); Mars needs agent.policy.type_buckets > 0")
        module_name, _, attribute = name.rpartition(".")
        setattr(policy.get_submodule(module_name), attribute, shared[name])


def train_family(graphs: Sequence[OpGraph], cluster: Cluster, backend: Backend, config: TrainConfig,
                 out_dir: str | Path, order: str = "cycle", reclone_every: int = 0,
                 open_logger: Callable[[int], Logger] | None = None) -> dict[str, Any]:
    """Train one ``config.agent`` policy on ``graphs`` (module docstring); returns the summary
    written to results.json (``stopped`` when ``stop_after_updates`` ended the run)."""
    if order not in ORDERS:
        raise ConfigError(f"family: order must be one of {ORDERS}, got {order!r}")
    if reclone_every and not config.warm_start.behaviour_cloning:
        raise ConfigError("family: reclone_every needs warm_start.behaviour_cloning=true")
    names = [g.name for g in graphs]
    if not graphs or len(set(names)) != len(names):
        raise ConfigError(f"family: give graphs with distinct names, got {names}")
    with flushed_subnormals():
        return _Family(graphs, cluster, backend, config, Path(out_dir), order, reclone_every).run(open_logger)


class _Family:
    """The policies, algorithms and evaluators of one family run, and its loop."""

    def __init__(self, graphs: Sequence[OpGraph], cluster: Cluster, backend: Backend, config: TrainConfig,
                 out_dir: Path, order: str, reclone_every: int):
        self.config, self.out_dir, self.order, self.cluster = config, out_dir, order, cluster
        self.reclone_every = reclone_every
        self.env_options = {"mode": "one_shot", **config.env}
        self.problems = [PlacementEnv(g, cluster, backend, **self.env_options) for g in graphs]
        self.device = resolve_device(config.torch_device)
        options = {"seed": config.seed, "device": self.device, **config.policy}
        later = {**options, "pretrain": False} if hasattr(AGENTS[config.agent]().policy, "pretrain") else options
        self.policies = [make_policy(config.agent, p, **(options if i == 0 else later))
                         for i, p in enumerate(self.problems)]
        for policy in self.policies[1:]:
            share_parameters(policy, self.policies[0])
        self.algorithms = [make_algorithm(config.algorithm, p, **config.algorithm_options) for p in self.policies]
        for algorithm in self.algorithms[1:]:
            algorithm.optimizer = self.algorithms[0].optimizer  # one optimizer for the shared weights
        self.generator = torch.Generator(self.device).manual_seed(config.seed)
        self.progress = FamilyProgress(graphs={g.name: Progress() for g in graphs})
        self.identity = family_identity(graphs, cluster)

    def run(self, open_logger: Callable[[int], Logger] | None) -> dict[str, Any]:
        config = self.config
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if config.resume:
            self._restore(self.out_dir / CHECKPOINT)
        else:
            torch.manual_seed(config.seed)
            np.random.seed(config.seed)
            starts = [warm_start_policy(problem, policy, algorithm, config, self._of(problem), clone=False)
                      for problem, policy, algorithm in zip(self.problems, self.policies, self.algorithms)]
            if config.warm_start.behaviour_cloning:
                self.progress.targets = [start.actions.tolist() for start in starts]
                stats = self._clone(config.warm_start)
                for problem, policy, target in zip(self.problems, self.policies, self.progress.targets):
                    accuracy = agreement(policy, torch.as_tensor(target))
                    self._of(problem).warm_start.update({**stats, "bc_accuracy": accuracy})
            self.progress.evaluated = sum(p.evaluated for p in self.progress.graphs.values())
        evaluators = [Evaluator({"graph": p.graph, "cluster": self.cluster, "backend": p.backend, **self.env_options},
                                config.samples, config.seed) for p in self.problems]
        logger = open_logger(self.progress.evaluated if config.resume else 0) if open_logger else None
        bar = tqdm(total=config.budget_placements, initial=self.progress.evaluated, unit="placement",
                   disable=not config.progress, desc=f"{config.agent} on a family of {len(self.problems)}")
        start, this_run = time.perf_counter() - self.progress.elapsed, 0
        try:
            while not budget_spent(config, self.progress):  # the family's totals
                i = self._next_graph()
                stats = self._update(i, evaluators[i])
                this_run += 1
                self.progress.elapsed = time.perf_counter() - start
                if logger is not None:
                    logger.log({f"{self.problems[i].graph.name}/{k}": v for k, v in stats.items()},
                               step=self.progress.evaluated)
                bar.update(config.samples)
                if self.progress.updates % config.checkpoint_every == 0:
                    self._save()
                if config.stop_after_updates is not None and this_run >= config.stop_after_updates:
                    return {"stopped": True, **self._summary()}
        finally:
            bar.close()
            for evaluator in evaluators:
                evaluator.close()
            if logger is not None:
                logger.close()
        self._save()
        return self._finish()

    def _clone(self, options: WarmStartConfig) -> dict[str, float]:
        """Clone every graph's heuristic placement (``progress.targets``) jointly."""
        pairs = [(policy, torch.as_tensor(t)) for policy, t in zip(self.policies, self.progress.targets)]
        return behaviour_clone_jointly(pairs, options)

    def _reclone(self) -> dict[str, float]:
        if not self.reclone_every or self.progress.updates % self.reclone_every:
            return {}
        ws = self.config.warm_start
        stats = self._clone(replace(ws, bc_steps=ws.self_imitation_steps, bc_lr=ws.self_imitation_lr))
        return {"reclone_steps": float(stats["bc_steps"])}

    def _of(self, problem: PlacementEnv) -> Progress:
        return self.progress.graphs[problem.graph.name]

    def _next_graph(self) -> int:
        n = len(self.problems)
        if self.order == "cycle":
            return self.progress.updates % n
        return int(torch.randint(n, (1,), generator=self.generator, device=self.device))

    def _update(self, i: int, evaluator: Evaluator) -> dict[str, float]:
        """One update on graph i: sample, evaluate, update the shared weights through its algorithm."""
        policy, progress = self.policies[i], self._of(self.problems[i])
        batch, stats = learn_step(policy, self.algorithms[i], evaluator, self.config.samples, self.generator,
                                  progress)
        self.progress.updates += 1
        self.progress.evaluated += len(batch.valid)
        return {**stats, **self._reclone(), "best_step_time": progress.best_step_time,
                "oom_rate": 1.0 - float(batch.valid.float().mean()), "evaluated": progress.evaluated}

    def _summary(self) -> dict[str, Any]:
        p = self.progress
        return {"updates": p.updates, "evaluated": p.evaluated, "seconds": p.elapsed, "order": self.order,
                "torch_device": device_name(self.device),
                "placements_per_second": p.evaluated / p.elapsed if p.elapsed > 0 else None,
                "graphs": {name: {"updates": g.updates, "evaluated": g.evaluated, "best_step_time": g.best_step_time,
                                  **g.warm_start} for name, g in p.graphs.items()},
                **({"generator_reseeded_at": p.generator_reseeded_at} if p.generator_reseeded_at else {})}

    def _finish(self) -> dict[str, Any]:
        """Each graph's greedy placement is evaluated once (outside the budget) and recorded."""
        summary = self._summary()
        for problem, policy in zip(self.problems, self.policies):
            greedy = problem.units.expand(policy.greedy().cpu().numpy())
            result = problem.backend.evaluate(problem.graph, problem.cluster, greedy)
            summary["graphs"][problem.graph.name]["greedy_evaluation"] = result.as_dict()
        (self.out_dir / "results.json").write_text(json.dumps(summary, indent=1, default=float))
        return summary

    def _save(self) -> None:
        config = self.config
        progress = {"updates": self.progress.updates, "evaluated": self.progress.evaluated,
                    "elapsed": self.progress.elapsed, "order": self.order,
                    "graphs": {name: asdict(g) for name, g in self.progress.graphs.items()},
                    "targets": self.progress.targets, "generator_reseeded_at": self.progress.generator_reseeded_at}
        env = {k: v for k, v in self.env_options.items() if k not in ("graph", "cluster", "backend")}
        write_checkpoint(self.out_dir / CHECKPOINT, Checkpoint(
            agent=config.agent, policy=self.policies[0].state_dict(),
            algorithm={"graphs": [a.state_dict() for a in self.algorithms]},
            generator=self.generator.get_state(), torch_rng=torch.get_rng_state(), numpy_rng=numpy_rng_state(),
            progress=progress, policy_options=config.policy, env=env, problem=self.identity))

    def _restore(self, path: Path) -> None:
        """Continue the run saved in ``path``; another agent, family or options is a CheckpointError."""
        if not path.is_file():
            raise ConfigError(f"resume=true but there is no {path}")
        saved = read_checkpoint(path)
        if saved.agent != self.config.agent or saved.problem != self.identity:
            raise CheckpointError(f"{path}: saved for another agent or family of graphs, not this one")
        check_fits(path, saved.policy, self.policies[0].state_dict(), f"a {saved.agent} policy with other options?")
        try:
            self.policies[0].load_state_dict(saved.policy)
            for algorithm, state in zip(self.algorithms, saved.algorithm["graphs"], strict=True):
                algorithm.load_state_dict(state)
            torch.set_rng_state(saved.torch_rng)
            set_numpy_rng_state(saved.numpy_rng)
            p = saved.progress
            self.progress = FamilyProgress(p["updates"], p["evaluated"], p["elapsed"],
                                           {name: Progress(**g) for name, g in p["graphs"].items()},
                                           p.get("targets"), p.get("generator_reseeded_at", []))
            if set_generator_state(path, self.generator, saved.generator, resume_seed(self.config, p["evaluated"])):
                self.progress.generator_reseeded_at.append(p["evaluated"])
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"{path}: does not fit this run ({type(exc).__name__})") from None
