"""Mars' training throughput before and after a change, in one process on one machine state
(this machine's speed drifts by tens of percent between runs): ``train`` on a 2,000-op layered
graph (baechi_2080) at the paper's sizes, alternating the Mars policy module of an older commit
(loaded with ``git show``; sampling with autograd, as the trainer then did) and today's.

    python experiments/bench_mars_before_after.py [out_dir] [--before COMMIT] [--threads N] [--rounds R]

Writes ``bench_mars_before_after.{json,md}`` to out_dir: training placements per second of each
run, and the median ratio after / before.
"""

from __future__ import annotations

import inspect
import json
import statistics
import sys
from pathlib import Path

import torch

import rlplace.learn.policies.mars as mars_today
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlplace.errors import ArgumentParser, run_script  # noqa: E402
from rlplace.learn.algos.ppo import PPO  # noqa: E402
from rlplace.learn.train import TrainConfig, train  # noqa: E402
from rlplace.backends import SimBackend  # noqa: E402
from rlplace.cluster import load_preset  # noqa: E402
from rlplace.zoo import layered  # noqa: E402

from experiments.before import load_module_at  # noqa: E402

BEFORE = "fa7e62f"  # main before the fused teacher-forced decoder


def load_policy_module(commit: str, work: Path):
    """rlplace/learn/policies/mars.py as it was at ``commit``, as a module."""
    module = load_module_at(commit, "rlplace/learn/policies/mars.py", work)
    if "device" not in inspect.signature(module.build).parameters:
        built = module.build  # older than make_policy's device argument: a CPU policy
        module.build = lambda env, device, **options: built(env, **options).to(device)
    return module


def rate(module, graph, cluster, placements: int, out_dir: Path) -> float:
    """Training placements per second with ``module`` as the Mars policy module."""
    sys.modules["rlplace.learn.policies.mars"] = module
    PPO.differentiates_samples = module is not mars_today   # the older trainer sampled with autograd
    try:
        summary = train(graph, cluster, SimBackend(),
                        TrainConfig(agent="mars", algorithm="ppo", samples=10, policy={"pretrain": False},
                                    torch_device="cpu", budget_placements=placements, progress=False, plots=False), out_dir)
    finally:
        sys.modules["rlplace.learn.policies.mars"] = mars_today
        PPO.differentiates_samples = False
    return summary["placements_per_second"]


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default="outputs/bench_mars_before_after")
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--placements", type=int, default=20, help="per run: 2 PPO updates of 10")
    args = parser.parse_args()
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    graph, cluster = layered(2000, seed=0), load_preset("baechi_2080")
    before = load_policy_module(args.before, out_dir)
    runs: dict[str, list[float]] = {"before": [], "after": []}
    for r in range(args.rounds):
        for label, module in (("before", before), ("after", mars_today)):
            runs[label].append(rate(module, graph, cluster, args.placements, out_dir / f"{label}_{r}"))
            print(label, runs[label][-1], flush=True)
    ratio = statistics.median(a / b for a, b in zip(runs["after"], runs["before"]))
    record = {"before_commit": args.before, "threads": args.threads, "placements_per_run": args.placements,
              "training_per_second": runs, "median_ratio_after_before": ratio}
    (out_dir / "bench_mars_before_after.json").write_text(json.dumps(record, indent=1))
    lines = [f"Mars (hidden 512, segment 128) on layered(2000), baechi_2080, {args.threads} torch thread(s), "
             f"{args.placements} placements per run, runs alternating:", "",
             "| code | training placements / s, each run |", "|---|---|",
             f"| before ({args.before}) | {', '.join(f'{x:.3f}' for x in runs['before'])} |",
             f"| after | {', '.join(f'{x:.3f}' for x in runs['after'])} |", "",
             f"Median ratio after / before (pairs run back to back): **{ratio:.2f}x**."]
    (out_dir / "bench_mars_before_after.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    run_script(main)
