"""Why Baechi's graph optimizer makes m-ETF and m-SCT slower, and where m-ETF loses to a
hill-climb (issue 15, items 5 and 6).

    PYTHONPATH=. .venv/bin/python experiments/coplacement.py            # ~5 min on 2 busy cores
    PYTHONPATH=. .venv/bin/python experiments/coplacement.py --quick    # layered 200 ops, 2 seeds

1. **Optimizer on vs off.** m-ETF and m-SCT with the graph optimizer off, on with its defaults
   (the ``"cost"`` co-placement rule, ``rlplace.coarsen.coplacement_labels``; without the
   fallback to the plain graph, ``optimizer_fallback=False``, so the optimizer's own placement) and on with §3.2's
   co-placement rule as written (``coplacement_rule="paper"``), on the layered DAGs of
   ``placer_quality.py`` (5 seeds), the GNMT profile and every TF zoo model of ``placer_quality.py``.
   Every variant defers a set's sources (``rlplace.coarsen.fuse``,
   ``rlplace.placers.baechi._list_schedule``) and, in forward-only placement, leaves the
   optimizer's updates and what only feeds them to follow (``rlplace.coarsen.backward_ops``).
   Per graph also what the optimizer does to the graph the placer schedules: groups, longest
   compute-only path and total compute of the quotient against the op graph's.
2. **m-ETF's own schedule vs the simulator's** (optimizer off). The placer's own schedule of its
   placement, and the same placement replayed by a plain event loop with work-conserving
   channels (a transfer starts whenever both its channels are idle, oldest request first) and
   with the placer's own op and transfer orders, to separate the simulator's channel rule
   (docs/design.md: a transfer reserves both channels first come first served when its producer
   ends) from m-ETF's decisions.

3. **The hill-climb target** (issue 15 item 6): a 2,000-simulation hill-climb
   (``placer_quality.hill_climb``, seed 0) from each variant's placement on the seed-0 layered
   DAGs, as in ``placer_quality.py``.
4. **How much one graph says.** m-ETF (optimizer off) with every op's compute time scaled by
   1 + U(-1%, +1%) (profiling noise), 4 draws per layered graph: the spread of the step time
   against the unperturbed one, the scale below which one graph's on/off ratio is noise.

Every step time is ``rlplace.sim.simulate``'s unless a column says otherwise.
Writes experiments/results/coplacement.{json,md} (``--quick``: coplacement_quick.*).
"""

from __future__ import annotations

import heapq
import json
import time
from pathlib import Path

import numpy as np

from placer_quality import ZOO, gnmt_setting, hill_climb, layered_setting, zoo_setting
from rlplace.errors import ArgumentParser, run_script
from rlplace.apps.tables.common import json_default
from rlplace.cluster import Cluster
from rlplace.coarsen import GraphOptimizer
from rlplace.graph import OpGraph
from rlplace.placers import make_placer
from rlplace.sim import lower_bound, simulate
from rlplace.zoo import default_profile_path

RESULTS = Path(__file__).parent / "results"
# the optimizer's own placements: its fallback to the plain graph (rlplace.placers.baechi) would hide what it does
VARIANTS = {"off": {"coplacement": False, "fusion": False, "single_fallback": False},
            "on": {"optimizer_fallback": False, "single_fallback": False},
            "paper": {"coplacement_rule": "paper", "optimizer_fallback": False, "single_fallback": False}}
PLACERS = ("m_etf", "m_sct")


def longest_path(g: OpGraph) -> float:
    finish = np.zeros(g.num_ops)
    for i in range(g.num_ops):  # op indices are topological
        pred = g.edge_src[g.in_edges[g.in_ptr[i]:g.in_ptr[i + 1]]]
        finish[i] = finish[pred].max(initial=0.0) + g.compute_time[i]
    return float(finish.max(initial=0.0))


def quotient_stats(g: OpGraph, cluster: Cluster, rule: str) -> dict:
    cg = GraphOptimizer(coplacement_rule=rule).optimize(g, cluster.comm)
    q = cg.quotient()
    sets = np.bincount(np.unique(cg.coplace, return_inverse=True)[1].reshape(-1))
    return {"groups": q.num_ops, "coplacement_sets": len(sets), "largest_set": int(sets.max()),
            "critical_path_ratio": longest_path(q) / longest_path(g),
            "total_compute_ratio": q.total_compute / g.total_compute}


def on_vs_off(key: str, g: OpGraph, cluster: Cluster) -> dict:
    bound = lower_bound(g, cluster)
    row = {"graph": key, "ops": g.num_ops, "lower_bound": bound,
           "quotient": {r: quotient_stats(g, cluster, r) for r in ("paper", "cost")}}
    for name in PLACERS:
        for variant, options in VARIANTS.items():
            r = simulate(g, cluster, make_placer(name, **options).place(g, cluster))
            row[f"{name}:{variant}"] = {"step_time": r.step_time, "ratio_lb": r.step_time / bound, "oom": bool(r.oom)}
    return row


# ------------------------------------------------------------------------------ replay
def replay(g: OpGraph, cluster: Cluster, device: np.ndarray, op_key=None, transfer_key=None) -> float:
    """Step time of ``device`` (a numpy array) by a plain event loop with work-conserving sequential channels: a
    pending transfer starts as soon as its sender's send channel and its receiver's receive
    channel are both idle, smallest key first (``transfer_key[(tensor, device)]``, else its
    request time); each device runs its ready op of smallest key (``op_key[op]``, else the time
    it became ready). Ties by index, as in the simulator."""
    n, ndev = g.num_ops, cluster.num_devices
    xtime = np.asarray(cluster.comm.transfer_time(g.tensor_bytes), dtype=np.float64).reshape(-1)
    missing = np.diff(g.in_ptr).astype(np.int64)
    ready: list[list] = [[] for _ in range(ndev)]
    pending: list = []
    events: list = []
    running, sending, receiving = [False] * ndev, [False] * ndev, [False] * ndev
    sent: set = set()
    end = np.zeros(n)

    def arrive(op: int, t: float) -> None:
        missing[op] -= 1
        if missing[op] == 0:
            heapq.heappush(ready[device[op]], (t if op_key is None else op_key[op], op))

    for i in np.flatnonzero(missing == 0):
        heapq.heappush(ready[device[i]], (0.0 if op_key is None else op_key[i], int(i)))
    t = 0.0
    while True:
        pending.sort()
        for item in list(pending):
            _, _, tensor, dst, src = item
            if not sending[src] and not receiving[dst]:
                sending[src] = receiving[dst] = True
                heapq.heappush(events, (t + xtime[tensor], 1, (tensor, dst, src)))
                pending.remove(item)
        for d in range(ndev):
            if not running[d] and ready[d]:
                _, i = heapq.heappop(ready[d])
                running[d], end[i] = True, t + g.compute_time[i] / cluster.speeds[d]
                heapq.heappush(events, (end[i], 0, i))
        if not events:
            return float(end.max(initial=0.0))
        t = events[0][0]
        while events and events[0][0] == t:
            _, kind, ident = heapq.heappop(events)
            if kind == 0:
                running[device[ident]] = False
                for tensor in range(g.op_tensor_ptr[ident], g.op_tensor_ptr[ident + 1]):
                    for e in range(g.tensor_ptr[tensor], g.tensor_ptr[tensor + 1]):
                        reader, d = int(g.edge_dst[e]), int(device[g.edge_dst[e]])
                        if d == device[ident]:
                            arrive(reader, t)
                        elif (tensor, d) not in sent:
                            sent.add((tensor, d))
                            key = t if transfer_key is None else transfer_key[tensor, d]
                            pending.append((key, len(sent), tensor, d, int(device[ident])))
            else:
                tensor, d, src = ident
                sending[src] = receiving[d] = False
                for e in range(g.tensor_ptr[tensor], g.tensor_ptr[tensor + 1]):
                    if device[g.edge_dst[e]] == d:
                        arrive(int(g.edge_dst[e]), t)


def own_vs_simulator(key: str, g: OpGraph, cluster: Cluster) -> dict:
    bound = lower_bound(g, cluster)
    row = {"graph": key}
    for name in PLACERS:
        placed = make_placer(name, **VARIANTS["off"]).place(g, cluster)
        device = placed.device_of
        s = placed.schedule
        if not np.array_equal(s.op_device, device):  # fit_to_memory placed again after an OOM
            continue
        op_key = s.op_start
        transfer_key = {(int(s.transfer_tensor[x]), int(s.transfer_dst_device[x])): float(s.transfer_start[x])
                        for x in range(len(s.transfer_start))}
        row[name] = {"simulator": simulate(g, cluster, device).step_time / bound, "own": s.step_time / bound,
                     "work_conserving": replay(g, cluster, device) / bound,
                     "placer_op_order": replay(g, cluster, device, op_key=op_key) / bound,
                     "placer_orders": replay(g, cluster, device, op_key, transfer_key) / bound}
    return row


def climbs(key: str, g: OpGraph, cluster: Cluster, budget: int = 2000) -> dict:
    """Improvement (%) of a ``budget``-simulation hill-climb from each variant's placement."""
    bound = lower_bound(g, cluster)
    row = {"graph": key}
    for name in PLACERS:
        for variant, options in VARIANTS.items():
            device = make_placer(name, **options).place(g, cluster).device_of
            r = simulate(g, cluster, device)
            hc = hill_climb(g, cluster, device, budget, seed=0)
            row[f"{name}:{variant}"] = {"ratio_lb": r.step_time / bound, "oom": bool(r.oom),
                                        "hill_climb_ratio_lb": hc["step_time"] / bound,
                                        "improvement_pct": 100 * (r.step_time - hc["step_time"]) / r.step_time}
    return row


def noise(g: OpGraph, cluster: Cluster, seed: int, draws: int = 4) -> list[float]:
    """m-ETF (optimizer off) step time with compute times scaled by 1 + U(-1%, 1%), over the
    unperturbed one, ``draws`` times."""
    place = make_placer("m_etf", **VARIANTS["off"]).place
    base = simulate(g, cluster, place(g, cluster)).step_time
    rng = np.random.default_rng(seed)
    edges = list(g.edge_records())
    out = []
    for _ in range(draws):
        scale = 1 + 0.01 * rng.uniform(-1, 1, g.num_ops)
        ops = [{**g.op_record(i), "compute_time": float(g.compute_time[i] * scale[i])} for i in range(g.num_ops)]
        h = OpGraph.from_records(ops, edges, name=g.name)
        out.append(simulate(h, cluster, place(h, cluster)).step_time / base)
    return out


# ------------------------------------------------------------------------------ report
def _geomean(x) -> float:
    return float(np.exp(np.mean(np.log(x))))


def markdown(res: dict) -> str:
    rows = res["on_vs_off"]
    out = ["# Graph optimizer on vs off, and m-ETF's own schedule vs the simulator's", "",
           f"mode: {'quick' if res['quick'] else 'full'}; run time {res['seconds'] / 60:.1f} min on this "
           "2-core machine (shared). Made by `experiments/coplacement.py`.", "",
           "*off*: `coplacement=false fusion=false`; *on*: the defaults without their fallback to the plain "
           "graph (`optimizer_fallback=false`: the optimizer's own placement; co-placement by cost, "
           "`rlplace.coarsen.coplacement_labels`: an op joins its only reader if its compute is at most 0.1× its "
           "output's transfer time, or if the reader's other inputs all come from such ops; lossless fusion); "
           "*paper*: `coplacement_rule=paper` (§3.2's single-successor rule as written). In every column a set's "
           "sources join a member in their set (`rlplace.coarsen.fuse`) or wait until a member with an outside "
           "input decides the set's device (`rlplace.placers.baechi._list_schedule`), and forward-only placement "
           "leaves the optimizer's updates, what runs after them and what only feeds them to follow "
           "(`rlplace.coarsen.backward_ops`). Cells: step time / lower bound (* OOM).", "",
           "## Step time / lower bound", "",
           "| graph | ops | " + " | ".join(f"{p} {v}" for p in PLACERS for v in VARIANTS) + " |",
           "|---|---:|" + "---:|" * (len(PLACERS) * len(VARIANTS))]
    for r in rows:
        cells = [f"{r[f'{p}:{v}']['ratio_lb']:.3f}{'*' if r[f'{p}:{v}']['oom'] else ''}"
                 for p in PLACERS for v in VARIANTS]
        out.append(f"| {r['graph']} | {r['ops']} | " + " | ".join(cells) + " |")
    out += ["", "## Optimizer on / off, geometric mean over graphs (max)", "",
            "| graphs | " + " | ".join(f"{p} {v}/off" for p in PLACERS for v in list(VARIANTS)[1:]) + " |",
            "|---|" + "---:|" * ((len(VARIANTS) - 1) * len(PLACERS))]
    families = {"layered DAGs": [r for r in rows if r["graph"].startswith("layered")],
                "GNMT profile and zoo": [r for r in rows if not r["graph"].startswith("layered")]}
    for family, rs in families.items():
        if not rs:
            continue
        cells = []
        for p in PLACERS:
            for v in list(VARIANTS)[1:]:
                x = [r[f"{p}:{v}"]["step_time"] / r[f"{p}:off"]["step_time"] for r in rs]
                cells.append(f"{_geomean(x):.3f} ({max(x):.2f})")
        out.append(f"| {family} ({len(rs)}) | " + " | ".join(cells) + " |")
    out += ["", "## What the optimizer does to the graph the placer schedules", "",
            "Groups placed, co-placement sets (largest), and the quotient's longest compute-only path and total "
            "compute as ratios to the op graph's (forward-only placement not applied here).", "",
            "| graph | ops | paper: groups | sets (largest) | path | compute | cost: groups | sets (largest) | path | compute |",
            "|---|---:|---:|---|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        cells = []
        for rule in ("paper", "cost"):
            q = r["quotient"][rule]
            cells += [str(q["groups"]), f"{q['coplacement_sets']} ({q['largest_set']})",
                      f"{q['critical_path_ratio']:.3f}", f"{q['total_compute_ratio']:.3f}"]
        out.append(f"| {r['graph']} | {r['ops']} | " + " | ".join(cells) + " |")
    out += ["", "## m-ETF / m-SCT (optimizer off): own schedule vs the simulator", "",
            "Step time / lower bound of one placement: as the simulator runs it; as the placer scheduled it "
            "(`Placed.schedule`); replayed with work-conserving channels (oldest request first); the same with "
            "each device running its ops in the placer's order; and with the placer's op and transfer orders.", "",
            "| graph | placer | simulator | own | work-conserving | + placer's op order | + placer's transfer order |",
            "|---|---|---:|---:|---:|---:|---:|"]
    for r in res["own_vs_simulator"]:
        for p in [p for p in PLACERS if p in r]:
            x = r[p]
            out.append(f"| {r['graph']} | {p} | {x['simulator']:.3f} | {x['own']:.3f} | {x['work_conserving']:.3f} "
                       f"| {x['placer_op_order']:.3f} | {x['placer_orders']:.3f} |")
    out += ["", "## Hill-climb improvement over each placement (target: at most 3%)", "",
            f"{res['budget']:,} simulations from the placement, seed 0; cell: improvement (placer/LB → hill-climb/LB); "
            "OOM: the placement does not fit (the climb first seeks one that does).", "",
            "| graph | " + " | ".join(f"{p} {v}" for p in PLACERS for v in VARIANTS) + " |",
            "|---|" + "---|" * (len(PLACERS) * len(VARIANTS))]
    for r in res["climbs"]:
        cells = [f"{x['improvement_pct']:.1f}%{' OOM' if x['oom'] else ''} ({x['ratio_lb']:.2f} → {x['hill_climb_ratio_lb']:.2f})"
                 for x in (r[f"{p}:{v}"] for p in PLACERS for v in VARIANTS)]
        out.append(f"| {r['graph']} | " + " | ".join(cells) + " |")
    x = np.array(res["noise"])
    if len(x):
        out += ["", "## m-ETF's sensitivity to 1% compute noise (optimizer off)", "",
                f"{len(x)} perturbed layered graphs (ample memory, 4 draws per graph): perturbed / unperturbed step "
                f"time from {x.min():.3f} to {x.max():.3f}, geometric mean {_geomean(x):.3f}; "
                f"{np.mean(np.abs(x - 1) > 0.05):.0%} of them move by more than 5%."]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="layered 200 ops, 2 seeds, no zoo")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    start = time.perf_counter()
    sizes, seeds = ([200], range(2)) if args.quick else ([200, 1000, 2000], range(5))
    settings = [(f"layered{n}_{'memlimit' if lim else 'ample'}_s{seed}", lambda n=n, lim=lim, seed=seed:
                 layered_setting(n, lim, seed)[:2]) for seed in seeds for n in sizes for lim in (False, True)]
    if not args.quick:
        if default_profile_path().is_file():
            settings += [(f"gnmt_profile_{c}", lambda c=c: gnmt_setting(c)[:2]) for c in ("baechi_2080", "mars_p100")]
        settings += [(f"{m}_{s}", lambda m=m, k=k: zoo_setting(m, k)[:2]) for m, s, k in ZOO]
    budget = 200 if args.quick else 2000
    rows, own, spread, climbed = [], [], [], []
    for key, build in settings:
        g, cluster = build()
        rows.append(on_vs_off(key, g, cluster))
        if key.startswith("layered") and key.endswith("_s0"):
            own.append(own_vs_simulator(key, g, cluster))
            climbed.append(climbs(key, g, cluster, budget))
        if key.startswith("layered") and "_ample_" in key and g.num_ops <= 1000:
            spread += noise(g, cluster, seed=len(spread))
        print(key, {k: round(v["ratio_lb"], 3) for k, v in rows[-1].items() if isinstance(v, dict) and "ratio_lb" in v},
              flush=True)
    res = {"quick": args.quick, "budget": budget, "seconds": time.perf_counter() - start, "on_vs_off": rows,
           "own_vs_simulator": own, "climbs": climbed, "noise": spread}
    stem = "coplacement_quick" if args.quick else "coplacement"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{stem}.json").write_text(json.dumps(res, indent=1, default=json_default))
    (args.out_dir / f"{stem}.md").write_text(markdown(res))


if __name__ == "__main__":
    run_script(main)
