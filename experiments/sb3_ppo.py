"""Stable-Baselines3 PPO and sb3-contrib MaskablePPO, unmodified, on PlacementEnv with
rlplace's GCN features extractor (``rlplace.learn.env.sb3.GraphExtractor``), against random and the
heuristics.

The problems: layered DAGs (``rlplace.zoo.layered(n, seed=0)``, one colocation unit per op) of
200 and 1,000 ops on ``baechi_2080`` (4 GPUs), sequential mode (one unit per step, topological
order) with the partial schedule's shaping and features (``shaping="schedule",
schedule_features=True``, ``rlplace.learn.env.partial``: each step pays the change in -sqrt of the
estimated step time of the units placed so far, so an episode's rewards add up to -sqrt of its
step time), over m-ETF's (``RelativeReward``: m-ETF's placement scores -1). Both algorithms
run with SB3's defaults except ``PPO_OPTIONS``; one torch thread; seed ``--seed``.

The 1,000-op runs start from the policies trained on 200 ops (``--no-transfer``: from scratch):
GraphExtractor's weights do not depend on the number of units, and each step's decision (which
device, given when the unit could start and how much the estimate would grow there) does not
depend on the graph's size; the greedy policy is also measured on 1,000 ops before any training
there.

Reported: each training episode's step time (the curve), the greedy (deterministic) policy's
step time after every rollout, the best step time any episode reached, and the baselines: the
heuristics, random placements (mean and best of as many as the training saw episodes, at
least ``MIN_RANDOM``), and
``shaped_greedy``: each unit on the device whose ``device_schedule`` growth is least, the
policy that maximises each step's shaped reward on its own (what the features give without
learning).

    python experiments/sb3_ppo.py [out_dir] [--ops 200 1000] [--steps 12000 4000] [--seed S] [--no-transfer]

Writes ``sb3_ppo.json``, ``sb3_ppo.md`` and ``sb3_ppo.png`` to out_dir (default
experiments/results).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
from sb3_contrib import MaskablePPO
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import DummyVecEnv

from rlplace.bounds import communication_bound
from rlplace.errors import ArgumentParser, run_script
from rlplace.cluster import load_preset
from rlplace.learn.env import PlacementEnv, RelativeReward
from rlplace.learn.env.partial import DEVICE_VALUES
from rlplace.learn.env.sb3 import GraphExtractor
from rlplace.placers import make_placer
from rlplace.sim import lower_bound, simulate
from rlplace.zoo import layered

HEURISTICS = ("round_robin", "m_topo", "m_etf", "m_sct", "celeritas")
ALGORITHMS = {"PPO": PPO, "MaskablePPO": MaskablePPO}
NUM_ENVS = 4
MIN_RANDOM = 60  # random placements at least, however few episodes the training saw
ENV_OPTIONS = dict(mode="sequential", shaping="schedule", schedule_features=True)
PPO_OPTIONS = dict(n_steps=200, batch_size=100, n_epochs=10, gamma=0.9, gae_lambda=0.9,
                   learning_rate=LinearSchedule(1e-3, 0.0, 1.0), ent_coef=0.0,
                   policy_kwargs={"features_extractor_class": GraphExtractor,
                                  "features_extractor_kwargs": {"hidden": 32}})
NOTES = """Tried before (one seed each). Without the partial schedule (shaping=True: the change in
-sqrt of the simulated graph induced by the units placed so far; no schedule features;
n_epochs=2, gamma=1, lr=3e-4), 12,000 steps on 200 ops left both greedy policies at 193.1 ms
(every unit on one device) and the episodes at random's mean: the observation said nothing
about when devices and inputs are ready. With shaping="schedule" and the schedule features,
PPO on 200 ops, greedy policy at the end of each rollout: gamma=1, n_epochs=2, batch 200,
lr=3e-4: 108-193 ms over 7,200 steps; gamma=0.9, gae_lambda=0.9 (credit to the next few
placements, which the shaped reward makes informative): 193 -> 63.5 ms at 6,400 steps, back to
119.8 ms at 12,000; 10 epochs of batch 100 per rollout too (lr=3e-4, ent_coef=0.01): 62.0 ms at
4,000 steps. These options with a constant lr=1e-3 instead of the linear decay (this script, the
same seed): greedy policy after training 200 ops PPO 60.99 ms, MaskablePPO 60.29 ms (best
evaluated 52.59 / 53.65 ms); 1,000 ops PPO 382.00 ms, MaskablePPO 287.78 ms (278.23 / 289.79 ms
before training there). On 1,000 ops from scratch (constant lr=1e-3), PPO's greedy policy went
906 -> 491 -> 847 -> 619 -> 458 -> 433 -> 390 -> 418 ms over its first 6,400 steps (8 rollouts,
8.7 min; random's mean 321 ms): hence the start from the 200-op policies."""


class Curve(BaseCallback):
    """Step time of every finished training episode, and of the greedy policy before each rollout
    (after the updates so far)."""

    def __init__(self, eval_env: PlacementEnv):
        super().__init__()
        self.eval_env = eval_env
        self.episodes: list[tuple[int, float]] = []
        self.greedy: list[tuple[int, float]] = []

    def _on_step(self) -> bool:
        for done, info in zip(self.locals["dones"], self.locals["infos"]):
            if done:
                self.episodes.append((self.num_timesteps, float(info["step_time"])))
        return True

    def _on_rollout_start(self) -> None:
        self.greedy.append((self.num_timesteps, greedy_step_time(self.model, self.eval_env)))


def greedy_step_time(model, env: PlacementEnv) -> float:
    obs, _ = env.reset()
    done, info = False, {}
    while not done:
        kwargs = {"action_masks": env.action_masks()} if isinstance(model, MaskablePPO) else {}
        action, _ = model.predict(obs, deterministic=True, **kwargs)
        obs, _, done, _, info = env.step(int(action))
    return float(info["step_time"])


def shaped_greedy(graph, cluster) -> float:
    """Each unit on the device where the estimate grows least (ties: the lowest index)."""
    env = PlacementEnv(graph, cluster, **ENV_OPTIONS)
    obs, _ = env.reset()
    done, info = False, {}
    while not done:
        growth = obs["device_schedule"].reshape(-1, DEVICE_VALUES)[:, 2]
        obs, _, done, _, info = env.step(int(np.argmin(growth)))
    return float(info["step_time"])


def train(algo, graph, cluster, reference: float, steps: int, seed: int, start_from: dict | None = None) -> dict:
    """Train from scratch, or from the weights ``start_from`` of a policy trained on another graph
    (GraphExtractor's weights do not depend on the number of units)."""
    def make_env():
        return RelativeReward(PlacementEnv(graph, cluster, **ENV_OPTIONS), reference)

    env = DummyVecEnv([make_env] * NUM_ENVS)
    model = algo("MultiInputPolicy", env, seed=seed, **PPO_OPTIONS)
    curve = Curve(PlacementEnv(graph, cluster, **ENV_OPTIONS))
    if start_from is not None:
        model.policy.load_state_dict(start_from)
    start = time.perf_counter()
    model.learn(steps, callback=curve)
    seconds = time.perf_counter() - start
    curve.greedy.append((model.num_timesteps, greedy_step_time(model, curve.eval_env)))
    episodes = np.array([t for _, t in curve.episodes])
    window = min(NUM_ENVS * 5, len(episodes) // 2)
    return {"policy": model.policy.state_dict(),
            "transferred_greedy": curve.greedy[0][1] if start_from is not None else None,
            "seconds": seconds, "timesteps": model.num_timesteps, "episodes": curve.episodes,
            "greedy": curve.greedy, "final_greedy": curve.greedy[-1][1],
            "best_greedy": min(t for _, t in curve.greedy), "best_episode": float(episodes.min()),
            "window": window, "first_episodes_mean": float(episodes[:window].mean()),
            "last_episodes_mean": float(episodes[-window:].mean())}


def baselines(graph, cluster, num_random: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    random = [simulate(graph, cluster, make_placer("random", seed=int(s)).place(graph, cluster)).step_time
              for s in rng.integers(0, 2**31, num_random)]
    out = {"random_mean": float(np.mean(random)), "random_best": float(np.min(random)),
           "lower_bound": lower_bound(graph, cluster), "communication_bound": communication_bound(graph, cluster),
           "shaped_greedy": shaped_greedy(graph, cluster)}
    for name in HEURISTICS:
        out[name] = float(simulate(graph, cluster, make_placer(name).place(graph, cluster)).step_time)
    return out


def run_problem(num_ops: int, steps: int, seed: int, previous: dict | None = None) -> dict:
    """Both algorithms on one graph; with ``previous`` (the last graph's results) each starts
    from the policy it trained there."""
    graph, cluster = layered(num_ops, seed=0), load_preset("baechi_2080")
    reference = simulate(graph, cluster, make_placer("m_etf").place(graph, cluster)).step_time
    runs = {}
    for name, algo in ALGORITHMS.items():
        start_from = previous["runs"][name]["policy"] if previous else None
        runs[name] = train(algo, graph, cluster, reference, steps, seed, start_from)
        print(f"{graph.name}: {name}: greedy {runs[name]['final_greedy'] * 1e3:.2f} ms, best episode "
              f"{runs[name]['best_episode'] * 1e3:.2f} ms, {runs[name]['seconds']:.0f} s", flush=True)
    num_random = max(MIN_RANDOM, *(len(run["episodes"]) for run in runs.values()))
    # no mask can hide a device if all the persistent bytes and the largest op fit on any one
    masks_never_bind = bool(graph.persistent_bytes.sum() + (graph.temporary_bytes + graph.output_total).max()
                            <= cluster.memory.min())
    return {"problem": f"{graph.name} ({graph.num_ops} ops) on {cluster.name}", "graph": graph.name,
            "num_ops": graph.num_ops, "steps": steps, "num_random": num_random,
            "start": f"from the {previous['num_ops']}-op policies" if previous else "from scratch",
            "masks_never_bind": masks_never_bind,
            "baselines": baselines(graph, cluster, num_random, seed), "runs": runs}


def verdict(name: str, run: dict, base: dict) -> str:
    """One line from the numbers: the greedy policy after training, and the best one evaluated
    (what SB3's EvalCallback would keep), against random's mean and m-ETF."""
    ms = 1e3

    def against(greedy: float) -> str:
        vs_random = "beats" if greedy < base["random_mean"] else "does not beat"
        vs_etf = (greedy - base["m_etf"]) / base["m_etf"] * 100
        return (f"{greedy * ms:.2f} ms: {vs_random} random's mean, {abs(vs_etf):.1f}% "
                f"{'slower' if vs_etf > 0 else 'faster'} than m-ETF")

    return (f"{name}: the greedy policy after training {against(run['final_greedy'])}; the best evaluated "
            f"{against(run['best_greedy'])} (random's mean {base['random_mean'] * ms:.2f} ms, m-ETF "
            f"{base['m_etf'] * ms:.2f} ms). Sampled episodes: mean of the first {run['window']} "
            f"{run['first_episodes_mean'] * ms:.2f} ms, of the last {run['window']} {run['last_episodes_mean'] * ms:.2f} ms.")


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    problems = results["problems"]
    fig, axes = plt.subplots(1, len(problems), figsize=(7 * len(problems), 4.5), squeeze=False)
    for ax, problem in zip(axes[0], problems):
        for (name, run), colour in zip(problem["runs"].items(), ("tab:blue", "tab:orange")):
            steps, times = np.array(run["episodes"]).T
            window = max(1, min(4 * NUM_ENVS, len(times) // 2))
            smooth = np.convolve(times, np.ones(window) / window, mode="valid")
            ax.plot(steps[window - 1:], smooth * 1e3, color=colour, label=f"{name}: episodes (mean of {window})")
            gs, gt = np.array(run["greedy"]).T
            start = run["transferred_greedy"] is not None
            ax.plot(gs, gt * 1e3, color=colour, linestyle=":", marker=".",
                    label=f"{name}: greedy policy" + (f" (at 0: {problem['start']})" if start else ""))
        base = problem["baselines"]
        for key, style in (("random_mean", "k--"), ("round_robin", "g--"), ("m_etf", "r--"),
                           ("shaped_greedy", "m-."), ("communication_bound", "k:")):
            ax.axhline(base[key] * 1e3, linestyle=style[1:], color=style[0], label=f"{key} {base[key] * 1e3:.1f} ms")
        top = max(base["random_mean"], base["round_robin"]) * 1.3e3
        ax.set_ylim(base["communication_bound"] * 0.95e3, top)
        ax.set_xlabel("environment steps (units placed)")
        ax.set_ylabel("step time (ms)")
        ax.set_title(problem["problem"])
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def markdown(results: dict) -> str:
    ms = 1e3
    options = {k: v for k, v in PPO_OPTIONS.items() if k != "policy_kwargs"}
    lines = ["# SB3 PPO and MaskablePPO on PlacementEnv", "",
             "Made by `experiments/sb3_ppo.py` "
             f"(`--ops {' '.join(str(p['num_ops']) for p in results['problems'])} "
             f"--steps {' '.join(str(p['steps']) for p in results['problems'])} --seed {results['seed']}"
             f"{'' if results['transfer'] else ' --no-transfer'}`, "
             "1 torch thread, this machine's CPU, `nice -n 10`). Unmodified Stable-Baselines3 / sb3-contrib, "
             "`MultiInputPolicy` with `rlplace.learn.env.sb3.GraphExtractor` (2-layer GCN, 32 units); "
             f"{NUM_ENVS} environments `PlacementEnv(**{ENV_OPTIONS})`, reward relative to m-ETF; "
             f"options `{options}`. One seed per run: the numbers are one sample each.", ""]
    for problem in results["problems"]:
        base = problem["baselines"]
        lines += [f"## {problem['problem']}", "", f"Training starts {problem['start']}.", "",
                  "| placer | step time (ms) |", "|---|---|",
                  f"| random (mean of {problem['num_random']}) | {base['random_mean'] * ms:.2f} |",
                  f"| random (best of {problem['num_random']}) | {base['random_best'] * ms:.2f} |"]
        lines += [f"| {name} | {base[name] * ms:.2f} |" for name in HEURISTICS]
        lines += [f"| shaped_greedy (least growth of the estimate, no learning) | {base['shaped_greedy'] * ms:.2f} |",
                  "| lower bound (`rlplace.bounds.communication_bound`: counts the transfers forks and joins force) | "
                  f"{base['communication_bound'] * ms:.2f} |",
                  "| lower bound, compute only (`rlplace.sim.lower_bound`: max(longest compute-only path, total "
                  f"compute / number of devices) with device speeds) | {base['lower_bound'] * ms:.2f} |"]
        for name, run in problem["runs"].items():
            if run["transferred_greedy"] is not None:
                lines.append(f"| {name}: greedy policy {problem['start']}, before training here | "
                             f"{run['transferred_greedy'] * ms:.2f} |")
            lines.append(f"| {name}: greedy policy after training | {run['final_greedy'] * ms:.2f} |")
            lines.append(f"| {name}: best greedy policy (before a rollout or after training) | "
                         f"{run['best_greedy'] * ms:.2f} |")
            lines.append(f"| {name}: best training episode | {run['best_episode'] * ms:.2f} |")
        lines += ["", "| run | timesteps | episodes | seconds | greedy policy before each rollout, then after training (ms) |",
                  "|---|---|---|---|---|"]
        for name, run in problem["runs"].items():
            greedy = ", ".join(f"{t * ms:.1f}" for _, t in run["greedy"])
            lines.append(f"| {name} | {run['timesteps']} | {len(run['episodes'])} | {run['seconds']:.0f} | {greedy} |")
        lines.append("")
        lines += [verdict(name, run, base) for name, run in problem["runs"].items()]
        ppo, maskable = problem["runs"]["PPO"], problem["runs"]["MaskablePPO"]
        if problem["masks_never_bind"] and ppo["episodes"] == maskable["episodes"]:
            lines.append("PPO and MaskablePPO ran identically: all the persistent bytes and the largest op fit on "
                         "any one device, so no mask ever hides a device and, with one seed, MaskablePPO samples "
                         "as PPO does.")
        lines.append("")
    lines += ["![curves](sb3_ppo.png)", "", NOTES, ""]
    return "\n".join(lines)


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--ops", type=int, nargs="+", default=[200, 1000], help="sizes of the layered graphs")
    parser.add_argument("--steps", type=int, nargs="+", default=[12_000, 4_000],
                        help="environment steps per algorithm, one per graph")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-transfer", dest="transfer", action="store_false",
                        help="train on every graph from scratch (default: each graph after the first starts "
                             "from the policies trained on the one before)")
    args = parser.parse_args()
    if len(args.steps) != len(args.ops):
        parser.error("--steps needs one number per --ops")
    torch.set_num_threads(1)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    problems: list[dict] = []
    for num_ops, steps in zip(args.ops, args.steps):
        problems.append(run_problem(num_ops, steps, args.seed, problems[-1] if problems and args.transfer else None))
    for problem in problems:
        for run in problem["runs"].values():
            del run["policy"]
    results = {"seed": args.seed, "transfer": args.transfer, "problems": problems}
    (out / "sb3_ppo.json").write_text(json.dumps(results, indent=1))
    (out / "sb3_ppo.md").write_text(markdown(results))
    plot(results, out / "sb3_ppo.png")
    print(markdown(results))


if __name__ == "__main__":
    run_script(main)
