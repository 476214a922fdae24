"""The training loop of every learned placer: sample placements from a policy, have the
environment evaluate them through the Gymnasium API, and let the algorithm update the policy,
until a budget of evaluated placements or wall time is spent; on one graph or on a family of
graphs that share one set of weights (one graph is a family of one).

    summary = train(graph, cluster, backend, TrainConfig(agent="hierarchical"), out_dir)
    summary = train([gnmt2, bert2, layered], cluster, backend, TrainConfig(agent="mars", ...), out_dir)
    PolicyPlacer("mars", out_dir / "checkpoint.pt").place(unseen, cluster)     # zero-shot
    train(unseen, cluster, backend, TrainConfig(init_checkpoint=..., ...), d)  # fine-tuning

Evaluation goes through the Gymnasium API: the k samples of an update through the vector
environment (``rlplace.learn.env.PlacementVectorEnv``, same-step autoreset), which hands their
placements to the backend as one batch, so that a parallel backend (``rlplace.distributed``)
evaluates them concurrently; or through the single environment when k = 1.

**A family** (GDP, Zhou et al. 2019, §3.3 "batch training" over graphs; Placeto, Addanki et al.
2019, §4; Mars Table 3, §4.3): a policy is built per graph (its buffers hold that graph's
features) and every graph's policy shares the first one's parameters, so the weights must not
depend on the graph (Mars: ``policy.type_buckets > 0``); a weight that does is a ConfigError
naming it. Each graph has its own environment, evaluator and algorithm state (PPO's reward
baseline and sample buffer: step times differ by orders of magnitude between graphs); the
algorithms share one optimizer. Updates go round the graphs (``order="cycle"``) or draw one
uniformly per update (``"sample"``). Behaviour cloning clones every graph's heuristic placement
jointly (``behaviour_clone_jointly``: cloning one graph after another would undo the first). A
policy that pre-trains its encoder (Mars' DGI) pre-trains it on the first graph. The budget is
the family's total.

**Files.** Every ``checkpoint_every`` updates, ``checkpoint.pt`` in ``out_dir``
(``rlplace.learn.checkpoint``) holds all that the run depends on (the policy, every graph's
algorithm state and the shared optimizer, the sampling generator, torch's and numpy's global RNG
states, the progress of every graph, the reference lines); ``resume=True`` continues from it
exactly as if the run had not stopped. Its ``problem`` names the graph or the family, so
``agent:checkpoint`` places any graph as a policy trained elsewhere and ``init_checkpoint``
fine-tunes from it. At the end, for each graph (in ``out_dir``, or for a family in
``out_dir/graphs/<name>/``): ``best_placement.json`` (evaluated once more by the backend),
``first_placement.json`` (the first placement evaluated: the warm-start heuristic's with
``first_sample``, else the policy's first sample; a search beside the run starts there) and,
with plots on, ``training_curve.png`` (on one graph with the algorithmic placers' simulated
step times, a local search's and an annealing's curves, computed once at the start, and the
lower bound). ``results.json`` holds the summary: the graph's, or per graph under ``graphs``.

The policy and its algorithm live on ``config.torch_device`` (``rlplace.learn.device``: ``auto``
is a GPU when torch sees one), and so does the sampling generator; placements come back to the
CPU once per sample, for the environment. results.json names the device (``torch_device``).
"""

from __future__ import annotations

import json
import math
import re
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
import torch
import rlplace.learn.env  # noqa: F401  (registers rlplace/Placement-v0)
from rlplace.backends import Backend
from rlplace.distributed import RayBackend
from rlplace.cluster import Cluster
from rlplace.errors import CheckpointError, ConfigError, first_line
from rlplace.graph import OpGraph
from rlplace.learn.algos import make_algorithm
from rlplace.learn.base import Batch
from rlplace.learn.checkpoint import (Checkpoint, check_fits, check_moments, numpy_rng_state, problem_identity,
                                      read_checkpoint, set_generator_state, set_numpy_rng_state, write_checkpoint)
from rlplace.learn.configs import AGENTS, TrainConfig
from rlplace.learn.device import device_name, resolve_device
from rlplace.learn.env import PlacementEnv
from rlplace.learn.loggers import Logger, RunResults, finite_numbers
from rlplace.learn.policies import make_policy
from rlplace.learn.warmstart import behaviour_clone_jointly, heuristic_start, seed_with_first_sample
from rlplace.placement import Placement
from rlplace.placers.search import algorithmic_references
from rlplace.progress import progress_bar
from rlplace.report import plot_training_curve
from rlplace.sim import lower_bound
from rlplace.verify import VerifyingBackend

CHECKPOINT = "checkpoint.pt"
FIRST_PLACEMENT = "first_placement.json"  # the run's first evaluated placement (search beside starts there)
ENV_ID = "rlplace/Placement-v0"


@dataclass
class Progress:
    """What the loop has done on one graph."""

    updates: int = 0
    evaluated: int = 0                  # placements evaluated (samples, warm-start placement included)
    best_step_time: float = math.inf
    best_actions: list[int] | None = None
    first_actions: list[int] | None = None  # the first placement evaluated: where a search beside starts
    step_times: list[float] = field(default_factory=list)   # every evaluated placement, in order
    valid: list[bool] = field(default_factory=list)
    warm_start: dict[str, Any] = field(default_factory=dict)
    references: list[dict] = field(default_factory=list)    # the training curve's lines (one graph, plots on)

    def record(self, actions: np.ndarray, step_time: float, valid: bool) -> None:
        self.evaluated += 1
        self.step_times.append(float(step_time))
        self.valid.append(bool(valid))
        if self.first_actions is None:
            self.first_actions = [int(a) for a in actions]
        if valid and step_time < self.best_step_time:
            self.best_step_time, self.best_actions = float(step_time), [int(a) for a in actions]


@dataclass
class RunProgress:
    """What the loop has done over all its graphs (by name); saved in every checkpoint."""

    updates: int = 0
    evaluated: int = 0
    elapsed: float = 0.0                # seconds of training, summed over resumed runs
    graphs: dict[str, Progress] = field(default_factory=dict)
    generator_reseeded_at: list[int] = field(default_factory=list)  # placements evaluated, at each
    #                                     resume on another kind of device (resume_across_devices)

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> RunProgress:
        return cls(**{**saved, "graphs": {name: Progress(**g) for name, g in saved["graphs"].items()}})


class Evaluator:
    """k environments behind the Gymnasium API: ``evaluate(actions [k, U])`` -> rewards,
    step times and validity of the k placements."""

    def __init__(self, env_options: dict[str, Any], k: int, seed: int):
        self.k = k
        if k == 1:
            self.env = gym.make(ENV_ID, disable_env_checker=True, **env_options)
        else:
            self.env = gym.make_vec(ENV_ID, num_envs=k, vectorization_mode="vector_entry_point", **env_options)
        self.env.reset(seed=seed)

    def evaluate(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.k == 1:
            _, reward, _, _, info = self.env.step(actions[0])
            self.env.reset()
            rewards = np.array([reward])
            info = {key: np.array([info[key]]) for key in ("step_time", "oom", "slow")}
        else:
            _, rewards, _, _, infos = self.env.step(actions)
            info = infos["final_info"]  # every episode ends in one step (one_shot mode)
        return rewards, info["step_time"], ~(info["oom"] | info["slow"])

    def close(self) -> None:
        self.env.close()


def train(graphs: OpGraph | Sequence[OpGraph], cluster: Cluster, backend: Backend, config: TrainConfig,
          out_dir: str | Path, open_logger: Callable[[int], Logger] | None = None) -> dict[str, Any]:
    """Train ``config.agent`` on one graph or a family (module docstring); returns the summary
    written to results.json (or, when ``stop_after_updates`` stopped the run, the summary so
    far with ``stopped``). ``open_logger(start_step)`` opens the metrics logger (and closes it
    at the end) once a resumed checkpoint has been checked: a checkpoint that does not fit
    leaves every file of the run as it was."""
    graphs = [graphs] if isinstance(graphs, OpGraph) else list(graphs)
    names = [g.name for g in graphs]
    if not graphs or len(set(names)) != len(names):
        raise ConfigError(f"train: give graphs with distinct names, got {names}")
    if len(graphs) > 1 and isinstance(backend, VerifyingBackend):
        raise ConfigError("train: verifying against a real backend is for one graph, not a family")
    with flushed_subnormals():
        return _Run(graphs, cluster, backend, config, Path(out_dir)).run(open_logger)


def learn_step(policy, algorithm, evaluator: Evaluator, k: int, generator: torch.Generator,
               progress: Progress) -> tuple[Batch, dict[str, float]]:
    """One update: ``k`` placements sampled (without autograd when the algorithm re-scores them),
    evaluated, learnt from, and recorded in ``progress``; the batch and the algorithm's stats."""
    with torch.set_grad_enabled(algorithm.differentiates_samples):
        sample = policy.sample(k, generator)
    actions = sample.actions.detach().cpu().numpy()
    rewards, step_times, valid = evaluator.evaluate(actions)
    batch = Batch(sample, torch.as_tensor(rewards, dtype=torch.float32),
                  torch.as_tensor(step_times, dtype=torch.float64), torch.as_tensor(valid))
    stats = algorithm.update(policy, batch)
    for j in range(k):
        progress.record(actions[j], step_times[j], valid[j])
    progress.updates += 1
    return batch, stats


@contextmanager
def flushed_subnormals():
    """Subnormal floats read as zero inside, as they were outside afterwards. A policy made
    sharp (by behaviour cloning, or late in training) carries them through its backward pass,
    and on a CPU each costs ~20x a normal float (a cloned Mars policy: 6x slower updates)."""
    was_flushing = float(torch.tensor([1e-38]) * 1e-3) == 0.0
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(was_flushing)


class _Run:
    """The policies, algorithms and evaluators of one run, and its loop."""

    def __init__(self, graphs: list[OpGraph], cluster: Cluster, backend: Backend, config: TrainConfig,
                 out_dir: Path):
        self.config, self.out_dir, self.cluster = config, out_dir, cluster
        self.identity = (problem_identity(graphs[0], cluster) if len(graphs) == 1
                         else {"family": [problem_identity(g, cluster) for g in graphs],
                               "devices": cluster.num_devices})
        self.saved = self._resumable() if config.resume else None
        self.env_options = {"mode": "one_shot", **config.env}
        self.problems = [PlacementEnv(g, cluster, backend, **self.env_options) for g in graphs]
        self.device = resolve_device(config.torch_device)
        # a policy's own seed (Mars: agent.policy.seed, the run's seed unless set) seeds its weights
        options = {"seed": config.seed, "device": self.device, **config.policy}
        policy_fields = {f.name for f in fields(AGENTS[config.agent]().policy)}
        later = {**options, "pretrain": False} if "pretrain" in policy_fields else options
        self.policies = [make_policy(config.agent, p, **(options if i == 0 else later))
                         for i, p in enumerate(self.problems)]
        for policy in self.policies[1:]:
            share_parameters(policy, self.policies[0])
        self.algorithms = [make_algorithm(config.algorithm, p, **config.algorithm_options) for p in self.policies]
        for algorithm in self.algorithms[1:]:
            algorithm.optimizer = self.algorithms[0].optimizer  # one optimizer for the shared weights
        self.generator = torch.Generator(self.device).manual_seed(config.seed)
        self.progress = RunProgress(graphs={g.name: Progress() for g in graphs})

    def run(self, open_logger: Callable[[int], Logger] | None) -> dict[str, Any]:
        config = self.config
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if self.saved is not None:
            self._restore()
        else:
            torch.manual_seed(config.seed)
            np.random.seed(config.seed)
            self._start()
        with _opened(open_logger, self.progress.evaluated if config.resume else 0) as logger:
            evaluators = [Evaluator({"graph": p.graph, "cluster": self.cluster, "backend": p.backend,
                                     **self.env_options}, config.samples, config.seed) for p in self.problems]
            many = len(self.problems) > 1
            what = f"a family of {len(self.problems)}" if many else self.problems[0].graph.name
            bar = progress_bar(total=config.budget_placements, initial=self.progress.evaluated, unit="placement",
                               show=config.progress, desc=f"{config.agent} on {what}")
            start, this_run = time.perf_counter() - self.progress.elapsed, 0
            try:
                while not budget_spent(config, self.progress):  # the family's totals
                    i = self._next_graph()
                    graph_progress = self._of(i)
                    batch, stats = learn_step(self.policies[i], self.algorithms[i], evaluators[i], config.samples,
                                              self.generator, graph_progress)
                    self.progress.updates += 1
                    self.progress.evaluated += config.samples
                    self.progress.elapsed = time.perf_counter() - start
                    this_run += 1
                    if logger is not None:
                        metrics = _metrics(batch, stats, graph_progress, self.progress.elapsed)
                        prefix = f"{self.problems[i].graph.name}/" if many else ""
                        logger.log({prefix + k: v for k, v in metrics.items()}, step=self.progress.evaluated)
                    bar.update(config.samples)
                    bar.set_postfix(best_ms=f"{graph_progress.best_step_time * 1e3:.3f}")
                    if self.progress.updates % config.checkpoint_every == 0:
                        self._save()
                    if config.stop_after_updates is not None and this_run >= config.stop_after_updates:
                        return {"stopped": True, **self._summary()}
            finally:
                bar.close()
                for evaluator in evaluators:
                    evaluator.close()
            self._save()
            summary = self._finish()
            if logger is not None:
                logger.finish(self._results(summary))
            return summary

    # ------------------------------------------------------------------------------ start
    def _start(self) -> None:
        """Fine-tuning weights, the warm start of every graph (``rlplace.learn.warmstart``), the
        joint behaviour clone, and on one graph the training curve's reference lines."""
        config, ws = self.config, self.config.warm_start
        if config.init_checkpoint:
            self._of(0).warm_start.update(load_matching_weights(self.policies[0], config.init_checkpoint))
        if ws.placer is None:
            if ws.behaviour_cloning or ws.first_sample:
                raise ConfigError("warm_start.behaviour_cloning/first_sample need warm_start.placer (e.g. heft)")
        else:
            targets = []
            for i, (problem, algorithm) in enumerate(zip(self.problems, self.algorithms)):
                start = heuristic_start(problem, ws.placer, seed=config.seed, **ws.placer_options)
                progress = self._of(i)
                progress.warm_start.update(start.as_dict())
                if ws.first_sample:
                    result, _ = seed_with_first_sample(problem, algorithm, start.placement)
                    progress.record(start.actions.numpy(), result.step_time, problem.is_valid(result))
                    progress.warm_start["heuristic_step_time"] = result.step_time
                targets.append(start.actions)
            if ws.behaviour_cloning:
                stats = behaviour_clone_jointly(list(zip(self.policies, targets)), ws)
                for i in range(len(self.problems)):
                    self._of(i).warm_start.update(stats)
        self.progress.evaluated = sum(p.evaluated for p in self.progress.graphs.values())
        if config.plots and len(self.problems) == 1:
            problem = self.problems[0]
            self._of(0).references = algorithmic_references(problem.graph, self.cluster,
                                                            config.budget_placements or 2000, config.seed)

    def _of(self, i: int) -> Progress:
        return self.progress.graphs[self.problems[i].graph.name]

    def _next_graph(self) -> int:
        n = len(self.problems)
        if self.config.order == "cycle" or n == 1:
            return self.progress.updates % n
        return int(torch.randint(n, (1,), generator=self.generator, device=self.device))

    # ------------------------------------------------------------------------------ end
    def _summary(self) -> dict[str, Any]:
        p = self.progress
        run = {"updates": p.updates, "evaluated": p.evaluated, "seconds": p.elapsed,
               "placements_per_second": p.evaluated / p.elapsed if p.elapsed > 0 else None,
               "torch_device": device_name(self.device),
               **({"generator_reseeded_at": p.generator_reseeded_at} if p.generator_reseeded_at else {})}
        per_graph = {name: {"updates": g.updates, "evaluated": g.evaluated, "best_step_time": g.best_step_time,
                            **g.warm_start} for name, g in p.graphs.items()}
        if len(self.problems) == 1:
            return {**next(iter(per_graph.values())), **run}
        return {**run, "order": self.config.order, "graphs": per_graph}

    def _finish(self) -> dict[str, Any]:
        summary = self._summary()
        if len(self.problems) == 1:
            summary.update(self._finish_graph(0, self.out_dir))
        else:
            for i, problem in enumerate(self.problems):
                name = problem.graph.name
                where = self.out_dir / "graphs" / re.sub(r"[^A-Za-z0-9_.+-]", "_", name)
                summary["graphs"][name].update(self._finish_graph(i, where))
        backend = self.problems[0].backend
        if isinstance(backend, RayBackend):  # placements re-run after a worker failed
            summary["evaluation_retries"] = backend.retries
        (self.out_dir / "results.json").write_text(json.dumps(summary, indent=1, default=float))
        return summary

    def _results(self, summary: dict[str, Any]) -> RunResults:
        """What the logger gets at the end: the summary's numbers and every graph's reference
        lines (``reference/<placer>``, ``lower_bound``), the figures and the files."""
        numbers = finite_numbers(summary)
        for i, problem in enumerate(self.problems):
            prefix = f"{problem.graph.name}/" if len(self.problems) > 1 else ""
            numbers[f"{prefix}lower_bound"] = lower_bound(problem.graph, problem.cluster)
            for line in self._of(i).references:
                if math.isfinite(line["step_time"]) and not line.get("oom"):
                    numbers[f"{prefix}reference/{line['placer']}"] = line["step_time"]
        files = {str(p.relative_to(self.out_dir)): p for pattern in (CHECKPOINT, "**/best_placement.json",
                                                                      f"**/{FIRST_PLACEMENT}")
                 for p in sorted(self.out_dir.glob(pattern))}
        return RunResults(numbers, summary, sorted(self.out_dir.glob("**/training_curve.png")), files)

    def _finish_graph(self, i: int, out_dir: Path) -> dict[str, Any]:
        """The policy's most likely (greedy) placement of graph i is evaluated and competes with
        its best sample; the winner is saved and evaluated once more, outside any cache."""
        problem, policy, progress = self.problems[i], self.policies[i], self._of(i)
        out_dir.mkdir(parents=True, exist_ok=True)
        greedy_actions = policy.greedy().cpu().numpy()
        greedy = problem.backend.evaluate(problem.graph, problem.cluster, problem.units.expand(greedy_actions))
        best_is_greedy = problem.is_valid(greedy) and greedy.step_time < progress.best_step_time
        if best_is_greedy:
            progress.best_step_time, progress.best_actions = float(greedy.step_time), [int(a) for a in greedy_actions]
        summary = {"best_step_time": progress.best_step_time, "greedy_evaluation": greedy.as_dict(),
                   "best_is_greedy": best_is_greedy}
        if progress.first_actions is not None:
            first = problem.units.expand(np.asarray(progress.first_actions))
            first.save(out_dir / FIRST_PLACEMENT, problem.graph, problem.cluster)
        if isinstance(problem.backend, VerifyingBackend):  # the best *measured* of the top-k simulated
            verified = problem.backend.finish(problem.graph, problem.cluster)
            summary["verified"] = problem.backend.record()
            if verified is not None:
                Placement(verified.placement).save(out_dir / "best_placement.json", problem.graph, problem.cluster)
                summary["final_evaluation"] = verified.as_dict()
        elif progress.best_actions is not None:
            best = problem.units.expand(np.asarray(progress.best_actions))
            best.save(out_dir / "best_placement.json", problem.graph, problem.cluster)
            final = greedy if best_is_greedy else problem.backend.evaluate(problem.graph, problem.cluster, best)
            summary["final_evaluation"] = final.as_dict()
        if self.config.plots:
            plot_training_curve(progress.step_times, progress.valid, out_dir / "training_curve.png",
                                title=f"{self.config.agent} on {problem.graph.name}",
                                references=progress.references,
                                lower_bound=lower_bound(problem.graph, problem.cluster))
        return summary

    # ------------------------------------------------------------------------------ checkpoints
    def _save(self) -> None:
        config = self.config
        env = {k: v for k, v in self.env_options.items() if k not in ("graph", "cluster", "backend")}
        write_checkpoint(self.out_dir / CHECKPOINT, Checkpoint(
            agent=config.agent, policy=self.policies[0].state_dict(),
            algorithm={"graphs": [a.state_dict() for a in self.algorithms]},
            generator=self.generator.get_state(), torch_rng=torch.get_rng_state(), numpy_rng=numpy_rng_state(),
            progress=asdict(self.progress), policy_options=config.policy, env=env, problem=self.identity))

    def _resumable(self) -> Checkpoint:
        """The checkpoint a resumed run continues from, when it is this run's: a checkpoint of
        another agent or problem is a CheckpointError before anything is built or written."""
        path = self.out_dir / CHECKPOINT
        if not path.is_file():
            raise ConfigError(f"resume=true but there is no {path} (run in the same hydra.run.dir)")
        saved = read_checkpoint(path)
        if saved.agent != self.config.agent:
            raise CheckpointError(f"{path}: holds a {saved.agent!r} policy, not {self.config.agent!r}")
        if saved.problem != self.identity:
            raise CheckpointError(f"{path}: saved for {_problem_words(saved.problem)}, "
                                  f"not for {_problem_words(self.identity)}")
        return saved

    def _restore(self) -> None:
        """Continue the run saved in ``self.saved``; a checkpoint that does not fit the freshly
        built policy and algorithms (other options) is a CheckpointError."""
        path, saved = self.out_dir / CHECKPOINT, self.saved
        check_fits(path, saved.policy, self.policies[0].state_dict(), f"a {saved.agent} policy with other options?")
        try:
            self.progress = RunProgress.from_dict(saved.progress)
            if list(self.progress.graphs) != [p.graph.name for p in self.problems]:
                raise KeyError("graphs")
            self.policies[0].load_state_dict(saved.policy)
            for algorithm, state in zip(self.algorithms, saved.algorithm["graphs"], strict=True):
                algorithm.load_state_dict(state)
            check_moments(path, self.algorithms[0].optimizer)   # the one optimizer all graphs share
            evaluated = self.progress.evaluated
            if set_generator_state(path, self.generator, saved.generator, resume_seed(self.config, evaluated)):
                self.progress.generator_reseeded_at.append(evaluated)
            torch.set_rng_state(saved.torch_rng)
            set_numpy_rng_state(saved.numpy_rng)
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as exc:
            raise CheckpointError(f"{path}: does not fit this run ({type(exc).__name__}: {first_line(exc)})") from None


@contextmanager
def _opened(open_logger: Callable[[int], Logger] | None, start_step: int):
    logger = open_logger(start_step) if open_logger is not None else None
    try:
        yield logger
    finally:
        if logger is not None:
            logger.close()


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


def budget_spent(config: TrainConfig, progress: RunProgress) -> bool:
    return ((config.budget_placements is not None and progress.evaluated >= config.budget_placements)
            or (config.budget_seconds is not None and progress.elapsed >= config.budget_seconds))


def _metrics(batch: Batch, stats: dict[str, float], progress: Progress, seconds: float) -> dict[str, float]:
    valid = batch.valid
    return {"reward": float(batch.rewards.mean()),
            "step_time": float(batch.step_times[valid].mean()) if valid.any() else float("nan"),
            "best_step_time": progress.best_step_time, "oom_rate": 1.0 - float(valid.float().mean()),
            "entropy": float(batch.sample.entropy.detach().mean()), "updates": progress.updates,
            "changed_units": changed_units(batch.sample.actions, progress.first_actions),
            "seconds": seconds, **stats}


def changed_units(actions: torch.Tensor, reference: list[int] | None) -> float:
    """Mean number of units the samples ``actions`` [k, U] place elsewhere than ``reference``
    (the metric: the run's first evaluated placement, with a warm start the heuristic's)."""
    if reference is None:
        return float("nan")
    return float((actions.cpu() != torch.as_tensor(reference)).sum(dim=1).float().mean())


def resume_seed(config: TrainConfig, evaluated: int) -> int | None:
    """The seed of a run's sampling generator resumed on another kind of device, when allowed."""
    return config.seed + evaluated if config.resume_across_devices else None


def _problem_words(problem: dict[str, Any]) -> str:
    if "family" in problem:
        return f"a family of {len(problem['family'])} graphs on {problem.get('devices')} devices"
    return (f"graph {problem.get('graph')!r} ({problem.get('ops')} ops, {problem.get('edges')} edges) on "
            f"{problem.get('devices')} devices")


def load_matching_weights(policy, path: str | Path) -> dict[str, float]:
    """Fine-tuning hook: copy the weights of another run's checkpoint (possibly trained on
    another graph) wherever name and shape match; graph-specific tensors keep their fresh
    values, and buffers (the graph's own features) are never copied. Returns how many
    parameters were copied and skipped."""
    skipped = copy_parameters(policy, read_checkpoint(path).policy)
    total = sum(1 for _ in policy.parameters())
    return {"init_tensors_copied": total - len(skipped), "init_tensors_skipped": len(skipped)}


def copy_parameters(policy, source: dict[str, torch.Tensor]) -> list[str]:
    """Copy ``source`` (a saved state dict) into the policy's parameters of the same name and
    shape, never into its buffers (the graph's own features); returns the names of the
    parameters left as they were."""
    skipped = []
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if name in source and source[name].shape == parameter.shape:
                parameter.copy_(source[name])
            else:
                skipped.append(name)
    return skipped
