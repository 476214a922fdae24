"""Throughput of the learned placers at the papers' network sizes on a 2,000-op graph (layered,
baechi_2080), on this machine's CPU or, with ``--device cuda``, its GPU (the simulator runs on
the CPU either way):

- sampling: policy samples + simulations per second (k placements drawn without autograd, each
  evaluated by the environment's simulator backend through the vector environment), no learning;
- training: evaluated placements per second of ``train`` (sampling, evaluation and the
  algorithm's update: REINFORCE for the Hierarchical Planner, PPO's 3 epochs over 20 samples
  for Mars);
- the pretraining of the ``learned`` placer (``rlplace.learn.listsched``, evolution strategies on
  its training family; ``agent=learned`` above is its PPO fine-tuning): seconds per generation
  and the simulated placements per second it spends them on;
- where Mars' time goes: seconds per update of k = 10 placements by phase (sampling,
  simulation, PPO's scoring forward passes, of which the graph and segment encoders, backward
  passes and Adam steps), and DGI pre-training, which runs once per graph before training.

    python experiments/bench_agents.py [out_dir] [--threads N] [--device cpu|cuda|cuda:N] [--results DIR]
        [--agents hierarchical,mars,mars_128,learned] [--ops 2000]

Writes ``bench_agents.json`` and ``bench_agents.md`` to out_dir (``--results`` names it too); on a
GPU ``bench_agents_cuda.{json,md}``, naming the GPU and the torch and CUDA versions.
"""

from __future__ import annotations

import json
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch

from rlplace.errors import ArgumentParser, run_script
from rlplace.learn.algos import make_algorithm
from rlplace.learn.base import Batch
from rlplace.learn import listsched
from rlplace.learn.configs import DGIConfig
from rlplace.learn.device import device_name, resolve_device
from rlplace.learn.policies import make_policy
from rlplace.learn.pretrain import pretrain_encoder
from rlplace.learn.train import Evaluator, TrainConfig, flushed_subnormals, train
from rlplace.backends import SimBackend
from rlplace.cluster import load_preset
from rlplace.learn.env import PlacementEnv
from rlplace.learn.family import training_family
from rlplace.zoo import layered

AGENTS = {  # agent: (algorithm, k samples per update, policy options beyond the paper defaults)
    "hierarchical": ("reinforce", 4, {}),
    "mars": ("ppo", 10, {"pretrain": False}),  # DGI runs once per graph, before training; not timed
    "mars (placer_hidden=128)": ("ppo", 10, {"pretrain": False, "placer_hidden": 128}),
    "learned": ("ppo", 10, {}),
}
SHORT = {"hierarchical": "hierarchical", "mars": "mars", "mars_128": "mars (placer_hidden=128)",  # --agents
         "learned": "learned"}


def sampling_rate(graph, cluster, agent: str, k: int, options: dict, rounds: int, device: torch.device) -> float:
    env_options = {"graph": graph, "cluster": cluster, "backend": SimBackend(), "mode": "one_shot"}
    policy = make_policy(agent, PlacementEnv(**env_options), device=device, **options)
    evaluator = Evaluator(env_options, k, seed=0)
    generator = torch.Generator(device).manual_seed(0)
    with torch.no_grad():
        evaluator.evaluate(policy.sample(k, generator).actions.cpu().numpy())  # warm-up (numba, allocations)
        start = time.perf_counter()
        for _ in range(rounds):
            evaluator.evaluate(policy.sample(k, generator).actions.cpu().numpy())
    return rounds * k / (time.perf_counter() - start)


@contextmanager
def timed(times: dict[str, list[float]], phase: str, repeat: int = 1, device: torch.device = torch.device("cpu")):
    """Seconds of the block (x ``repeat``); on a GPU, until its queued kernels are done."""
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    synchronize()
    start = time.perf_counter()
    yield
    synchronize()
    times[phase].append(repeat * (time.perf_counter() - start))


def mars_breakdown(graph, cluster, k: int, options: dict, rounds: int, device: torch.device,
                   dgi_iterations: int = 20) -> dict[str, float]:
    """Median seconds per PPO update of Mars by phase over ``rounds`` updates (after one to warm
    up). The update is timed whole; its 3 epochs x 4 minibatches are split by timing one more
    minibatch's scoring forward pass, backward pass and Adam step, times 12. DGI: seconds per
    iteration x 1,000 iterations (§4.2), once per graph."""
    env_options = {"graph": graph, "cluster": cluster, "backend": SimBackend(), "mode": "one_shot"}
    policy = make_policy("mars", PlacementEnv(**env_options), seed=0, device=device, **options)
    ppo = make_algorithm("ppo", policy)
    evaluator, generator = Evaluator(env_options, k, seed=0), torch.Generator(device).manual_seed(0)
    passes = ppo.config.epochs * ppo.config.num_minibatches
    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(rounds + 1):
        with timed(times, "sampling (no autograd)", device=device), torch.no_grad():
            sample = policy.sample(k, generator)
        with timed(times, "simulation", device=device):
            rewards, step_times, valid = evaluator.evaluate(sample.actions.cpu().numpy())
        with timed(times, "PPO update, all of it", device=device), flushed_subnormals():
            ppo.update(policy, Batch(sample, torch.as_tensor(rewards, dtype=torch.float32),
                                     torch.as_tensor(step_times), torch.as_tensor(valid)))
        minibatch = ppo.buffer[:len(ppo.buffer) // ppo.config.num_minibatches]
        with flushed_subnormals():
            with timed(times, "- scoring forward passes", passes, device):
                loss, _ = ppo.loss(policy, minibatch)
            with timed(times, "  - of which graph + segment encoders (GCN, bi-LSTM)", passes, device), \
                    torch.no_grad():
                policy.placer.encode(policy.encoder(policy.x, policy.edge_index))
            with timed(times, "- backward passes", passes, device):
                loss.backward()
            with timed(times, "- Adam steps (with gradient clipping)", passes, device):
                torch.nn.utils.clip_grad_norm_(policy.parameters(), ppo.config.max_grad_norm)
                ppo.optimizer.step()
            ppo.optimizer.zero_grad()
    evaluator.close()
    breakdown = {phase: statistics.median(seconds[1:]) for phase, seconds in times.items()}
    dgi: dict[str, list[float]] = defaultdict(list)
    with timed(dgi, "dgi", device=device):
        pretrain_encoder(policy.encoder, policy.x, policy.edge_index, policy.config.encoder_hidden,
                         DGIConfig(iterations=dgi_iterations, cache_dir=None))
    breakdown["DGI pre-training, 1,000 iterations (once per graph)"] = \
        dgi["dgi"][0] / dgi_iterations * DGIConfig().iterations
    return breakdown


def pretraining_rate(generations: int = 2) -> dict[str, float]:
    """Seconds per generation of the ``learned`` placer's evolution strategies with its defaults
    (``listsched.TrainConfig``: the whole training family, cloned first), and the simulated
    placements a generation evaluates (each member's greedy pass and ``policy_search`` on each
    of its graphs), per second."""
    config = listsched.TrainConfig(generations=0)
    with tempfile.TemporaryDirectory() as work:
        trainer = listsched.Trainer(config, Path(work), training_family(config.seed, config.family_size), progress=False)
        trainer.run()  # the best heuristics and the clone
        start = time.perf_counter()
        for _ in range(generations):
            trainer.generation()
        seconds = (time.perf_counter() - start) / generations
    simulated = config.population * config.graphs_per_generation * (1 + config.search_evaluations)
    return {"seconds_per_generation": seconds, "placements_per_generation": simulated,
            "placements_per_second": simulated / seconds}


def machine(device: torch.device, threads: int) -> str:
    """The hardware and software a row was measured on."""
    where = f"{platform.processor() or platform.machine()} CPU, {threads} torch thread(s)"
    if device.type == "cuda":
        where = f"GPU {device_name(device)}, CUDA {torch.version.cuda}; simulation on the {where}"
    return f"{where}; torch {torch.__version__}"


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default="outputs/bench_agents")
    parser.add_argument("--results", help="the output directory (instead of out_dir)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (rlplace-train's device)")
    parser.add_argument("--agents", default=",".join(SHORT), help=f"rows, of {','.join(SHORT)}")
    parser.add_argument("--ops", type=int, default=2000, help="size of the layered graph (a smaller one: a smoke test)")
    parser.add_argument("--breakdown-rounds", type=int, default=2, help="Mars updates timed by phase")
    args = parser.parse_args()
    out_dir = Path(args.results or args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    stem = "bench_agents" if device.type == "cpu" else f"bench_agents_{device.type}"
    graph, cluster = layered(args.ops, seed=0), load_preset("baechi_2080")

    records = []
    for label in (SHORT[a] for a in args.agents.split(",")):
        algorithm, k, options = AGENTS[label]
        agent = label.split()[0]
        sampling = sampling_rate(graph, cluster, agent, k, options, rounds=5, device=device)
        budget = 10 * k if agent == "hierarchical" else 4 * k
        summary = train(graph, cluster, SimBackend(),
                        TrainConfig(agent=agent, algorithm=algorithm, samples=k, policy=options, torch_device=str(device),
                                    budget_placements=budget, progress=False, plots=False),
                        out_dir / f"{stem}_{label.replace(' ', '_')}")
        records.append({"agent": label, "samples_per_update": k, "sampling_per_second": sampling,
                        "training_per_second": summary["placements_per_second"], "threads": args.threads,
                        "device": summary["torch_device"]})
        print(records[-1], flush=True)

    k, options = AGENTS["mars"][1:]
    breakdown = mars_breakdown(graph, cluster, k, options, rounds=args.breakdown_rounds, device=device)
    print(breakdown, flush=True)
    pretraining = pretraining_rate()
    print(pretraining, flush=True)
    where = machine(device, args.threads)
    (out_dir / f"{stem}.json").write_text(json.dumps(
        {"machine": where, "torch": torch.__version__, "throughput": records, "mars_breakdown_seconds": breakdown,
         "learned_pretraining": pretraining},
        indent=1))
    lines = [f"Graph layered({args.ops}), cluster baechi_2080; {where}.", "",
             "| agent | k per update | samples + simulations / s | training placements / s |", "|---|---|---|---|"]
    lines += [f"| {r['agent']} | {r['samples_per_update']} | {r['sampling_per_second']:.1f} | "
              f"{r['training_per_second']:.2f} |" for r in records]
    lines += ["", f"Mars (hidden 512, segment 128), seconds per update of k = {k} placements, median of "
              f"{args.breakdown_rounds} update(s) after one to warm up:", "",
              "| phase | seconds |", "|---|---|"]
    lines += [f"| {phase} | {seconds:.2f} |" for phase, seconds in breakdown.items()]
    lines += ["", f"The `learned` placer's pretraining (`python -m rlplace.learn.listsched`, its defaults: evolution "
              f"strategies over its training family): {pretraining['seconds_per_generation']:.1f} s per generation, "
              f"{pretraining['placements_per_generation']:,} simulated placements "
              f"({pretraining['placements_per_second']:.0f} / s; the policy's loop runs beside each); "
              f"a training run is the clone and 100 generations."]
    (out_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    run_script(main)
