"""Where a warm-started Hierarchical Planner's samples move (issue 16 item 3): for a trained
``hp_sil`` run (``equal_evaluations.py``'s agent: Grouper cloned to runs of the warm start), draw
samples at several sampling temperatures τ and count, against the policy's greedy placement, the
units moved, the groups the Placer put elsewhere, the first such group and the share of the
groups after it that moved too. A share near 1 after the first deviation is a cascade: the
Placer's LSTM decoder (HP §2) feeds back its previous decision, and after cloning a fixed
device sequence it predicts from it, so one sampled deviation re-places most later groups.

    python experiments/hp_cascade.py --run outputs/equal_evaluations/gnmt_profile/hp_sil_warm/seed0

Writes ``results/hp_cascade.md``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.equal_evaluations import compose_train  # noqa: E402
from rlplace.errors import ArgumentParser, run_script  # noqa: E402
from rlplace.agents.checkpoint import read_checkpoint  # noqa: E402
from rlplace.agents.policies import make_policy  # noqa: E402
from rlplace.backends import SimBackend  # noqa: E402
from rlplace.envs import PlacementEnv  # noqa: E402
from rlplace.presets import instantiate_node  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TEMPERATURES = (0.6, 1.0, 1.5)
SAMPLES = 8


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="an hp_sil run directory of equal_evaluations.py")
    args = parser.parse_args()
    torch.set_num_threads(1)
    run = Path(args.run)
    cfg = compose_train(json.loads((run / "overrides.json").read_text()))
    env = PlacementEnv(instantiate_node(cfg, "graph"), instantiate_node(cfg, "cluster"), SimBackend(),
                       **{"mode": "one_shot", **OmegaConf.to_container(cfg.env), "oom_penalty": cfg.agent.oom_penalty})
    policy = make_policy("hierarchical", env, **{"seed": cfg.seed, **OmegaConf.to_container(cfg.agent.policy)})
    saved = read_checkpoint(run / "checkpoint.pt")
    policy.load_state_dict(saved.policy)
    policy.samples_drawn.fill_(policy.config.noise_steps)   # past the exploration noise, as at the end
    lines = [f"`experiments/hp_cascade.py --run {args.run}`: {saved.progress['evaluated']} placements trained; "
             f"per τ, {SAMPLES} samples (seeds 0..{SAMPLES - 1}) against the greedy placement: units moved, groups "
             "the Placer put elsewhere, the first of them, the share of later groups that moved too.", "",
             "| τ | units moved | groups moved | first group moved | share of later groups moved |", "|---|---|---|---|---|"]
    with torch.no_grad():
        grouping = policy._unit_logits(0.0, None).argmax(1)
        memory, state = policy.encoder(policy.group_embeddings(grouping.unsqueeze(0)))
        greedy = policy.decoder(memory, state, greedy=True).actions[0]
        for tau in TEMPERATURES:
            policy.temperature = tau
            rows = []
            for seed in range(SAMPLES):
                sample = policy.sample(1, torch.Generator().manual_seed(seed))
                moved = torch.nonzero(sample.extras["group_devices"][0] != greedy)[:, 0]
                first = int(moved[0]) if len(moved) else None
                later = len(greedy) - 1 - first if first is not None else 0
                rows.append((int((sample.actions[0] != greedy[grouping]).sum()), len(moved),
                             "—" if first is None else str(first),
                             "—" if not later else f"{(len(moved) - 1) / later:.2f}"))
            lines.append(f"| {tau} | " + " | ".join(", ".join(str(r[i]) for r in rows) for i in range(4)) + " |")
    out = ROOT / "experiments" / "results" / "hp_cascade.md"
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    run_script(main)
