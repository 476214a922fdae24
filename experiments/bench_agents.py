"""Throughput of the learned placers at the papers' network sizes on a 2,000-op graph (layered,
baechi_2080), this machine's CPU:

- sampling: policy samples + simulations per second (k placements drawn, each evaluated by the
  environment's simulator backend through the vector environment), no learning;
- training: evaluated placements per second of ``train`` (sampling, evaluation and the
  algorithm's update: REINFORCE for the Hierarchical Planner, PPO's 3 epochs over 20 samples
  for Mars).

    python experiments/bench_agents.py [out_dir] [--threads N]

Writes ``bench_agents.json`` and ``bench_agents.md`` to out_dir.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from rlplace.agents.policies import make_policy
from rlplace.agents.trainer import Evaluator, TrainConfig, train
from rlplace.backends import SimBackend
from rlplace.cluster import load_preset
from rlplace.envs import PlacementEnv
from rlplace.zoo import layered

AGENTS = {  # agent: (algorithm, k samples per update, policy options beyond the paper defaults)
    "hierarchical": ("reinforce", 4, {}),
    "mars": ("ppo", 10, {"pretrain": False}),  # DGI runs once per graph, before training; not timed
    "mars (placer_hidden=128)": ("ppo", 10, {"pretrain": False, "placer_hidden": 128}),
}


def sampling_rate(graph, cluster, agent: str, k: int, options: dict, rounds: int) -> float:
    env_options = {"graph": graph, "cluster": cluster, "backend": SimBackend(), "mode": "one_shot"}
    policy = make_policy(agent, PlacementEnv(**env_options), **options)
    evaluator = Evaluator(env_options, k, seed=0)
    generator = torch.Generator().manual_seed(0)
    evaluator.evaluate(policy.sample(k, generator).actions.numpy())  # warm-up (numba, allocations)
    start = time.perf_counter()
    for _ in range(rounds):
        evaluator.evaluate(policy.sample(k, generator).actions.numpy())
    return rounds * k / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default="outputs/bench_agents")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    graph, cluster = layered(2000, seed=0), load_preset("baechi_2080")

    records = []
    for label, (algorithm, k, options) in AGENTS.items():
        agent = label.split()[0]
        sampling = sampling_rate(graph, cluster, agent, k, options, rounds=5)
        budget = 10 * k if agent == "hierarchical" else 4 * k
        summary = train(graph, cluster, SimBackend(),
                        TrainConfig(agent=agent, algorithm=algorithm, samples=k, policy=options,
                                    budget_placements=budget, progress=False, plots=False),
                        out_dir / agent.replace(" ", "_"))
        records.append({"agent": label, "samples_per_update": k, "sampling_per_second": sampling,
                        "training_per_second": summary["placements_per_second"], "threads": args.threads})
        print(records[-1], flush=True)

    (out_dir / "bench_agents.json").write_text(json.dumps(records, indent=1))
    lines = [f"Graph layered(2000), cluster baechi_2080, {args.threads} torch thread(s).", "",
             "| agent | k per update | samples + simulations / s | training placements / s |", "|---|---|---|---|"]
    lines += [f"| {r['agent']} | {r['samples_per_update']} | {r['sampling_per_second']:.1f} | "
              f"{r['training_per_second']:.2f} |" for r in records]
    (out_dir / "bench_agents.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
