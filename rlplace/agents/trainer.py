"""The trainer: sample placements from a policy, have the environment evaluate them through the
Gymnasium API, and let the algorithm update the policy, until a budget of evaluated placements
or wall time is spent.

    policy = make_policy("hierarchical", problem)           # one graph, one cluster
    algorithm = make_algorithm("reinforce", policy)
    result = train(graph, cluster, backend, TrainConfig(), out_dir)

Evaluation goes through the Gymnasium API: the k samples of a step through the vector
environment (``rlplace.envs.PlacementVectorEnv``, same-step autoreset), which hands their
placements to the backend as one batch, so that a parallel backend (``rlplace.distributed``)
evaluates them concurrently; or through the single environment when k = 1. Every
``checkpoint_every`` updates, ``checkpoint.pt`` in ``out_dir`` (``rlplace.agents.checkpoint``)
holds all that the run depends on (policy, optimizer and algorithm state, the sampling
generator, torch's and numpy's global RNG states, the counters, the best placement and the
curve): ``resume=True`` continues from it exactly as if the run had not stopped. At the end: ``best_placement.json``
(evaluated once more by the backend), ``first_placement.json`` (the first placement evaluated:
the warm-start heuristic's with ``first_sample``, else the policy's first sample; a search
beside the run starts there), ``results.json`` and ``training_curve.png`` (with plots on, the
algorithmic placers' simulated step times as lines and a local search's and an annealing's
curves, computed once at the start and kept in the checkpoint, and the lower bound). With a
warm start, results.json names the heuristic (``warm_start_placer``) with its simulated step
time and OOM.

The policy and its algorithm live on ``config.torch_device`` (``rlplace.agents.device``: ``auto`` is a
GPU when torch sees one), and so does the sampling generator; placements come back to the CPU
once per sample, for the environment. results.json names the device (``torch_device``).
"""

from __future__ import annotations

import json
import math
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch
from tqdm import tqdm

import rlplace.envs  # noqa: F401  (registers rlplace/Placement-v0)
from rlplace.agents.algos import make_algorithm
from rlplace.agents.base import Batch
from rlplace.agents.checkpoint import (Checkpoint, check_fits, first_line, numpy_rng_state, problem_identity,
                                       read_checkpoint, set_generator_state, set_numpy_rng_state, write_checkpoint)
from rlplace.agents.device import device_name, resolve_device
from rlplace.agents.loggers import Logger
from rlplace.agents.policies import make_policy
from rlplace.agents.policies.mars import TrustRegion
from rlplace.agents.configs import TrainConfig, WarmStartConfig
from rlplace.agents.warmstart import HeuristicStart, behaviour_clone, heuristic_start, seed_with_first_sample
from rlplace.backends import Backend
from rlplace.cluster import Cluster
from rlplace.envs import PlacementEnv
from rlplace.errors import CheckpointError, ConfigError
from rlplace.graph import OpGraph
from rlplace.placers.search import algorithmic_references
from rlplace.report import plot_training_curve
from rlplace.placement import Placement
from rlplace.sim import lower_bound
from rlplace.verify import VerifyingBackend

CHECKPOINT = "checkpoint.pt"
FIRST_PLACEMENT = "first_placement.json"  # the run's first evaluated placement (search beside starts there)
ENV_ID = "rlplace/Placement-v0"


@dataclass
class Progress:
    """What the loop has done; saved in every checkpoint."""

    updates: int = 0
    evaluated: int = 0                  # placements evaluated (samples, warm-start placement included)
    elapsed: float = 0.0                # seconds of training, summed over resumed runs
    best_step_time: float = math.inf
    best_actions: list[int] | None = None
    first_actions: list[int] | None = None  # the first placement evaluated: where a search beside starts
    step_times: list[float] = field(default_factory=list)   # every evaluated placement, in order
    valid: list[bool] = field(default_factory=list)
    warm_start: dict[str, Any] = field(default_factory=dict)
    references: list[dict] = field(default_factory=list)    # the training curve's lines (plots on)
    imitated_step_time: float = math.inf  # of the placement self-imitation last cloned
    temperature: float | None = None      # the policy's sampling temperature, when the trainer steers it
    trust_scale: float = 1.0              # the trust region's correction of its rate, steered
    generator_reseeded_at: list[int] = field(default_factory=list)  # placements evaluated, at each
    #                                     resume on another kind of device (resume_across_devices)

    def record(self, actions: np.ndarray, step_time: float, valid: bool) -> None:
        self.evaluated += 1
        self.step_times.append(float(step_time))
        self.valid.append(bool(valid))
        if self.first_actions is None:
            self.first_actions = [int(a) for a in actions]
        if valid and step_time < self.best_step_time:
            self.best_step_time, self.best_actions = float(step_time), [int(a) for a in actions]


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


def train(graph: OpGraph, cluster: Cluster, backend: Backend, config: TrainConfig, out_dir: str | Path,
          open_logger: Callable[[int], Logger] | None = None) -> dict[str, Any]:
    """Train ``config.agent`` on (graph, cluster); returns the summary written to results.json
    (or, when ``stop_after_updates`` stopped the run, the summary so far with ``stopped``).
    ``open_logger(start_step)`` opens the metrics logger (and closes it at the end) once a
    resumed checkpoint has been checked: a checkpoint that does not fit leaves every file of
    the run as it was."""
    with flushed_subnormals():
        return _train(graph, cluster, backend, config, Path(out_dir), open_logger)


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


def _train(graph: OpGraph, cluster: Cluster, backend: Backend, config: TrainConfig, out_dir: Path,
           open_logger: Callable[[int], Logger] | None) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = out_dir / CHECKPOINT
    saved = _resumable(checkpoint, config, graph, cluster) if config.resume else None
    env_options = {"mode": "one_shot", **config.env}
    problem = PlacementEnv(graph, cluster, backend, **env_options)  # builds the policy, scores single placements
    device = resolve_device(config.torch_device)
    # a policy's own seed (Mars: agent.policy.seed, the run's seed unless set) seeds its weights
    policy = make_policy(config.agent, problem, device=device, **{"seed": config.seed, **config.policy})
    algorithm = make_algorithm(config.algorithm, policy, **config.algorithm_options)
    generator = torch.Generator(device).manual_seed(config.seed)
    progress = Progress()

    if saved is not None:
        progress = _restore(checkpoint, saved, policy, algorithm, generator, config)
        if progress.temperature is not None:
            policy.temperature = progress.temperature
    else:
        torch.manual_seed(config.seed)
        np.random.seed(config.seed)
        if config.init_checkpoint:
            progress.warm_start.update(load_matching_weights(policy, config.init_checkpoint))
        warm_start_policy(problem, policy, algorithm, config, progress)
        if config.plots:
            progress.references = algorithmic_references(graph, cluster, config.budget_placements or 2000, config.seed)

    with _opened(open_logger, progress.evaluated if config.resume else 0) as logger:
        evaluator = Evaluator({"graph": graph, "cluster": cluster, "backend": backend, **env_options},
                              config.samples, config.seed)
        bar = tqdm(total=config.budget_placements, initial=progress.evaluated, unit="placement",
                   disable=not config.progress, desc=f"{config.agent} on {graph.name}")
        updates_this_run, stopped = 0, False
        start = time.perf_counter() - progress.elapsed
        while not budget_spent(config, progress):
            with trust_region(policy, progress, config.warm_start) as region:
                batch, stats = learn_step(policy, algorithm, evaluator, config.samples, generator, progress)
            stats.update(region)
            stats.update(self_imitate(policy, progress, config.warm_start))
            stats.update(steer_exploration(policy, batch, progress, config.warm_start))
            updates_this_run += 1
            progress.elapsed = time.perf_counter() - start
            if logger is not None:
                logger.log(_metrics(batch, stats, progress), step=progress.evaluated)
            bar.update(config.samples)
            bar.set_postfix(best_ms=f"{progress.best_step_time * 1e3:.3f}")
            if progress.updates % config.checkpoint_every == 0:
                _save_checkpoint(checkpoint, policy, algorithm, generator, progress, config, env_options, problem)
            if config.stop_after_updates is not None and updates_this_run >= config.stop_after_updates:
                stopped = True
                break
        bar.close()
        evaluator.close()
        if stopped:
            return {"stopped": True, **_summary(progress)}
        _save_checkpoint(checkpoint, policy, algorithm, generator, progress, config, env_options, problem)
        return _finish(problem, policy, progress, out_dir, config, device)


@contextmanager
def _opened(open_logger: Callable[[int], Logger] | None, start_step: int):
    logger = open_logger(start_step) if open_logger is not None else None
    try:
        yield logger
    finally:
        if logger is not None:
            logger.close()


# ---------------------------------------------------------------------------------- pieces
def warm_start_policy(problem: PlacementEnv, policy, algorithm, config: TrainConfig, progress: Progress,
                      clone: bool = True) -> HeuristicStart | None:
    """The warm start of ``config.warm_start`` (``rlplace.agents.warmstart``); ``clone=False``
    leaves behaviour cloning to the caller (a family clones its graphs jointly). Returns the
    heuristic's start, None for a cold start."""
    ws = config.warm_start
    if ws.placer is None:
        if ws.behaviour_cloning or ws.first_sample:
            raise ConfigError("warm_start.behaviour_cloning/first_sample need warm_start.placer (e.g. heft)")
        return None
    start = heuristic_start(problem, ws.placer, seed=config.seed, **ws.placer_options)
    progress.warm_start.update(start.as_dict())
    if ws.behaviour_cloning and clone:
        progress.warm_start.update(behaviour_clone(policy, start.actions, ws))
    if ws.first_sample:
        result, _ = seed_with_first_sample(problem, algorithm, start.placement)
        progress.record(start.actions.numpy(), result.step_time, problem.is_valid(result))
        progress.warm_start["heuristic_step_time"] = result.step_time
    return start


def self_imitate(policy, progress: Progress, ws: WarmStartConfig) -> dict[str, float]:
    """Self-imitation (Oh et al., ICML 2018, "Self-Imitation Learning", §3): learn to repeat
    past decisions that paid off better than expected. With one-step episodes and the best
    placement as the only one kept, SIL's replay buffer weighted by (R - V)+ becomes: every
    ``ws.self_imitation_every`` updates, if the best placement so far is better than the one
    cloned last, behaviour-clone it (``behaviour_clone`` with the warm start's ``bc_*`` options but
    at most ``ws.self_imitation_steps`` steps at rate ``ws.self_imitation_lr``).
    Sampling then explores around the best placement found instead of where the policy drifted.
    With ``ws.self_imitation_anchor`` it clones whenever due, not only after an improvement:
    PPO's updates move the policy's mode off the best placement even when nothing better was
    found (``behaviour_clone`` takes no step while the greedy placement is still the best).
    Returns the cloning steps taken (0 when none was due), for the metrics."""
    every = ws.self_imitation_every
    improved = progress.best_step_time < progress.imitated_step_time
    if (not every or progress.updates % every or progress.best_actions is None
            or not (improved or ws.self_imitation_anchor)):
        return {"self_imitation_steps": 0.0} if every else {}
    progress.imitated_step_time = progress.best_step_time
    clone = replace(ws, bc_steps=ws.self_imitation_steps, bc_lr=ws.self_imitation_lr)
    steps = behaviour_clone(policy, torch.as_tensor(progress.best_actions), clone)["bc_steps"]
    return {"self_imitation_steps": float(steps)}


@contextmanager
def trust_region(policy, progress: Progress, ws: WarmStartConfig):
    """Inside, Mars samples and scores around the best placement so far
    (``ws.self_imitation_trust_region``; ``rlplace.agents.policies.mars.TrustRegion``); outside
    (behaviour cloning, the greedy placement) the policy is its own. The rate is set so that a
    sample moves about ``ws.self_imitation_changed_units`` units: the target over the units the
    policy itself would move, sum over u of 1 - p(best_u | the best placement's earlier units),
    times ``progress.trust_scale`` (``steer_exploration``: a unit drawn elsewhere changes the
    decoder's next inputs, so more units move than that sum says), at most 1. Where the rate
    would exceed 1 (a sharp policy) and ``ws.self_imitation_trust_temperature``, it is 1 and the
    sampling temperature is raised inside instead, until the policy moves that many
    (``trust_temperature``). With ``ws.self_imitation_trust_factorised`` every unit is drawn
    given the best placement's earlier units, so the sum is what a sample moves at rate 1.
    Yields the stats to log."""
    if not ws.self_imitation_trust_region or progress.best_actions is None:
        yield {}
        return
    actions = torch.as_tensor(progress.best_actions, device=policy.x.device)
    logits, base = policy.teacher_forced_logits(actions), policy.temperature
    wanted = progress.trust_scale * ws.self_imitation_changed_units
    moves = expected_moves(logits, actions, base)
    rate = min(1.0, wanted / max(moves, 1e-9))
    if ws.self_imitation_trust_temperature and moves < wanted:
        policy.temperature = trust_temperature(logits, actions, wanted, base)
    policy.trust_region = TrustRegion(actions, rate, ws.self_imitation_trust_factorised)
    try:
        yield {"trust_rate": rate, "policy_moves": moves, "trust_temperature": policy.temperature}
    finally:
        policy.trust_region, policy.temperature = None, base


def expected_moves(logits: torch.Tensor, actions: torch.Tensor, temperature: float) -> float:
    """Sum over units of 1 - p(actions_u) under softmax(``logits`` [U, D] / ``temperature``)."""
    kept = torch.log_softmax(logits / temperature, dim=-1).gather(-1, actions[:, None].long())
    return float((1.0 - kept.exp()).sum())


def trust_temperature(logits: torch.Tensor, actions: torch.Tensor, wanted: float, low: float,
                      high: float = 20.0, steps: int = 30) -> float:
    """The temperature in [``low``, ``high``] at which ``expected_moves`` is ``wanted``, by
    bisection of its logarithm (the moves grow with the temperature where ``actions`` are the
    policy's likeliest devices; ``high`` when even it moves fewer)."""
    if expected_moves(logits, actions, high) <= wanted:
        return high
    for _ in range(steps):
        middle = math.sqrt(low * high)
        if expected_moves(logits, actions, middle) < wanted:
            low = middle
        else:
            high = middle
    return high


def steer_exploration(policy, batch: Batch, progress: Progress, ws: WarmStartConfig, gain: float = 0.3,
                      bounds: tuple[float, float] = (0.05, 20.0)) -> dict[str, float]:
    """Keep self-imitation exploring (``ws.self_imitation_changed_units`` = target > 0): cloning
    the best placement sharpens the policy until its samples repeat it (Mars' entropy falls from
    ~50 to ~4 nats within 100 placements on the GNMT profile). After each update the sampling
    temperature (with a trust region, ``ws.self_imitation_trust_region``: the scale of its rate,
    within 1/100-100) is multiplied by ``(target / changed) ** gain``, ``changed`` the mean
    number of units the batch placed elsewhere than the best placement so far, within
    ``bounds``. Returns the value steered and ``changed``."""
    target = ws.self_imitation_changed_units
    if not target:
        return {}
    if progress.best_actions is None:   # nothing valid yet to stay near
        return {"temperature": policy.temperature}
    changed = changed_units(batch.sample.actions, progress.best_actions)
    factor = (target / max(changed, 0.5)) ** gain
    if ws.self_imitation_trust_region:
        progress.trust_scale = min(100.0, max(0.01, progress.trust_scale * factor))
        return {"trust_scale": progress.trust_scale, "changed_off_best": changed}
    low, high = bounds
    policy.temperature = min(high, max(low, policy.temperature * factor))
    progress.temperature = policy.temperature
    return {"temperature": policy.temperature, "changed_off_best": changed}


def budget_spent(config: TrainConfig, progress: Progress) -> bool:
    return ((config.budget_placements is not None and progress.evaluated >= config.budget_placements)
            or (config.budget_seconds is not None and progress.elapsed >= config.budget_seconds))


def _metrics(batch: Batch, stats: dict[str, float], progress: Progress) -> dict[str, float]:
    valid = batch.valid
    return {"reward": float(batch.rewards.mean()),
            "step_time": float(batch.step_times[valid].mean()) if valid.any() else float("nan"),
            "best_step_time": progress.best_step_time, "oom_rate": 1.0 - float(valid.float().mean()),
            "entropy": float(batch.sample.entropy.detach().mean()), "updates": progress.updates,
            "changed_units": changed_units(batch.sample.actions, progress.first_actions),
            "seconds": progress.elapsed, **stats}


def changed_units(actions: torch.Tensor, reference: list[int] | None) -> float:
    """Mean number of units the samples ``actions`` [k, U] place elsewhere than ``reference``
    (the metric: the run's first evaluated placement, with a warm start the heuristic's)."""
    if reference is None:
        return float("nan")
    return float((actions.cpu() != torch.as_tensor(reference)).sum(dim=1).float().mean())


def _summary(progress: Progress) -> dict[str, Any]:
    return {"updates": progress.updates, "evaluated": progress.evaluated, "seconds": progress.elapsed,
            "best_step_time": progress.best_step_time,
            "placements_per_second": progress.evaluated / progress.elapsed if progress.elapsed > 0 else None,
            **progress.warm_start,
            **({"generator_reseeded_at": progress.generator_reseeded_at} if progress.generator_reseeded_at else {})}


def _finish(problem: PlacementEnv, policy, progress: Progress, out_dir: Path, config: TrainConfig,
            device: torch.device) -> dict[str, Any]:
    """The policy's most likely (greedy) placement is evaluated and competes with the best
    sample; the winner is saved and evaluated once more, outside any cache."""
    greedy_actions = policy.greedy().cpu().numpy()
    greedy = problem.backend.evaluate(problem.graph, problem.cluster, problem.units.expand(greedy_actions))
    best_is_greedy = problem.is_valid(greedy) and greedy.step_time < progress.best_step_time
    if best_is_greedy:
        progress.best_step_time, progress.best_actions = float(greedy.step_time), [int(a) for a in greedy_actions]
    summary = {**_summary(progress), "greedy_evaluation": greedy.as_dict(), "best_is_greedy": best_is_greedy,
               "torch_device": device_name(device)}
    if hasattr(problem.backend, "retries"):  # a parallel backend: placements re-run after a worker failed
        summary["evaluation_retries"] = problem.backend.retries
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
    (out_dir / "results.json").write_text(json.dumps(summary, indent=1, default=float))
    if config.plots:
        plot_training_curve(progress.step_times, progress.valid, out_dir / "training_curve.png",
                            title=f"{config.agent} on {problem.graph.name}", references=progress.references,
                            lower_bound=lower_bound(problem.graph, problem.cluster))
    return summary


def _save_checkpoint(path: Path, policy, algorithm, generator: torch.Generator, progress: Progress,
                     config: TrainConfig, env_options: dict[str, Any], problem: PlacementEnv) -> None:
    env = {k: v for k, v in env_options.items() if k not in ("graph", "cluster", "backend")}
    write_checkpoint(path, Checkpoint(
        agent=config.agent, policy=policy.state_dict(), algorithm=algorithm.state_dict(),
        generator=generator.get_state(), torch_rng=torch.get_rng_state(), numpy_rng=numpy_rng_state(),
        progress=asdict(progress), policy_options=config.policy, env=env,
        problem=problem_identity(problem.graph, problem.cluster)))


def _resumable(path: Path, config: TrainConfig, graph: OpGraph, cluster: Cluster) -> Checkpoint:
    """The checkpoint a resumed run continues from, when it is this run's: a checkpoint of
    another agent or problem is a CheckpointError before anything is built or written."""
    if not path.is_file():
        raise ConfigError(f"resume=true but there is no {path} (run in the same hydra.run.dir)")
    saved = read_checkpoint(path)
    if saved.agent != config.agent:
        raise CheckpointError(f"{path}: holds a {saved.agent!r} policy, not {config.agent!r}")
    here = problem_identity(graph, cluster)
    if saved.problem != here:
        raise CheckpointError(f"{path}: saved for {_problem_words(saved.problem)}, not for {_problem_words(here)}")
    return saved


def _restore(path: Path, saved: Checkpoint, policy, algorithm, generator: torch.Generator,
             config: TrainConfig) -> Progress:
    """Continue the run saved in ``saved``; a checkpoint that does not fit the freshly built
    policy and algorithm (other options) is a CheckpointError."""
    check_fits(path, saved.policy, policy.state_dict(), f"a {config.agent} policy with other options?")
    try:
        progress = Progress(**saved.progress)
        policy.load_state_dict(saved.policy)
        algorithm.load_state_dict(saved.algorithm)
        if set_generator_state(path, generator, saved.generator, resume_seed(config, progress.evaluated)):
            progress.generator_reseeded_at.append(progress.evaluated)
        torch.set_rng_state(saved.torch_rng)
        set_numpy_rng_state(saved.numpy_rng)
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as exc:
        raise CheckpointError(f"{path}: does not fit this run ({type(exc).__name__}: {first_line(exc)})") from None
    return progress


def resume_seed(config: TrainConfig, evaluated: int) -> int | None:
    """The seed of a run's sampling generator resumed on another kind of device, when allowed."""
    return config.seed + evaluated if config.resume_across_devices else None


def _problem_words(problem: dict[str, Any]) -> str:
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
