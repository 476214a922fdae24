"""Short Hierarchical Planner runs (200 evaluated placements), cold vs warm start (heft:
behaviour cloning + first sample), against the single-device and heft placements; and the
throughput (policy samples + simulations per second) on a 2,000-op graph.

    python experiments/hp_short_runs.py [out_dir]   # writes hp_short_runs.json there
"""

import json
import sys
from pathlib import Path

import torch

from rlplace.agents.trainer import TrainConfig, train
from rlplace.agents.warmstart import WarmStartConfig
from rlplace.backends import SimBackend
from rlplace.cluster import load_preset
from rlplace.placers import make_placer
from rlplace.sim import simulate
from rlplace.zoo import layered, load_baechi_profile

torch.set_num_threads(1)
out = Path(sys.argv[1] if len(sys.argv) > 1 else "outputs/hp_short_runs")
cluster = load_preset("baechi_2080")
policy = {"unit_embedding": 16}  # the same net cold and warm (behaviour cloning needs it)
warm = WarmStartConfig(placer="heft", behaviour_cloning=True, first_sample=True, bc_lr=0.05, bc_steps=100)
records = []
for graph in (layered(300, seed=0), load_baechi_profile()):
    base = {name: simulate(graph, cluster, make_placer(name).place(graph, cluster)) for name in ("single", "heft")}
    for start, ws in (("cold", WarmStartConfig()), ("warm", warm)):
        r = train(graph, cluster, SimBackend(), TrainConfig(policy=policy, budget_placements=200, progress=False,
                                                            warm_start=ws), out / f"{graph.name}_{start}")
        records.append({"graph": graph.name, "start": start, "best_ms": r["best_step_time"] * 1e3,
                        "single_ms": base["single"].step_time * 1e3, "single_oom": base["single"].oom,
                        "heft_ms": base["heft"].step_time * 1e3, "heft_oom": base["heft"].oom,
                        "seconds": r["seconds"], "placements_per_second": r["placements_per_second"],
                        "bc_accuracy": r.get("bc_accuracy"), "bc_steps": r.get("bc_steps")})
        print(records[-1], flush=True)
graph = layered(2000, seed=0)
r = train(graph, cluster, SimBackend(), TrainConfig(budget_placements=40, progress=False, plots=False), out / "throughput")
records.append({"graph": graph.name, "start": "throughput", "placements_per_second": r["placements_per_second"],
                "seconds": r["seconds"]})
print(records[-1], flush=True)
(out / "hp_short_runs.json").write_text(json.dumps(records, indent=1))
