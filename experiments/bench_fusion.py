"""Operator fusion and the graph optimizer on vs off for Baechi's m-TOPO, m-ETF and m-SCT (the fusion issue's benchmark).

    .venv/bin/python experiments/bench_fusion.py [--quick]

Every TensorFlow zoo model at a small, CPU-friendly size (analytical roofline costs for the GTX
2080 of Baechi §5) and the Baechi authors' GNMT profile, on 3 and 6 GPUs with parallel transfers
and no latency (the baechi_2080 preset's bandwidth, 5.7 GB/s) and on the sequential baechi_2080
preset itself. For m_topo, m_etf and m_sct, co-placement off and on, forward-only placement at
its default: fusion off, fusion with Baechi §3.3's degree rule (``fusion_rule="degree"``, the
default before this benchmark) and with the lossless rule (the default now), each the
optimizer's own placement (``optimizer_fallback=False``); and the lossless rule with the default
fallback, which also places the graph with co-placement and fusion off and keeps the faster
placement. Every placement is judged by the simulator. Beside it, placer-independent: the longest compute-only path of the
graph the optimizer hands the placer, against the op graph's (fusion should not lengthen it).
Co-placement on is the default "cost" rule (``rlplace.placers.baechi.optimizer.coplacement_labels``); the lossless
rule is also run with §3.2's co-placement rule as written (``PAPER``: ``coplacement_rule="paper"``;
experiments/studies.md, "Graph optimizer on vs off"), fusion off and on.

Writes experiments/results/bench_fusion.md and bench_fusion.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from rlplace.errors import ArgumentParser, run_script
from rlplace.cluster import Cluster, CommModel
from rlplace.presets import load_preset

RESULTS = Path(__file__).parent / "results"
GIB = 2**30

# Small sizes: seconds to extract on a CPU, yet 40-60% of the single-device step to gain.
MODELS = {
    "bert-3": ("bert", dict(batch_size=8, seq_length=128, hidden=256, heads=4, intermediate_size=1024,
                            vocab_size=8000, num_layers=3)),
    "bert-6": ("bert", dict(batch_size=8, seq_length=128, hidden=256, heads=4, intermediate_size=1024,
                            vocab_size=8000, num_layers=6)),
    "transformer": ("transformer", dict(batch_size=16, seq_length=32, hidden=256, heads=4, filter_size=1024,
                                        vocab_size=8000, encoder_layers=2, decoder_layers=2)),
    "inception_v3": ("inception_v3", dict(batch_size=8, image_size=299, num_classes=100, depth_multiplier=0.5)),
    "gnmt": ("gnmt", dict(batch_size=32, seq_length=10, hidden=256, vocab_size=8000, num_layers=2)),
    "tensor_holography": ("tensor_holography", dict(batch_size=4, image_size=128, filters=24, num_layers=8)),
    "linear_regression": ("linear_regression", dict(batch_size=1024, features=4096)),
}
QUICK = ["bert-3", "linear_regression"]
PLACERS = ["m_topo", "m_etf", "m_sct"]
VARIANTS = ["off", "degree", "lossless"]  # fusion off / §3.3's rule (before) / lossless (after)
PAPER = {"coplacement_rule": "paper"}
ALONE = {"optimizer_fallback": False}  # the optimizer's own placement, which the fallback may replace


def clusters() -> dict[str, Cluster]:
    preset = load_preset("cluster", "baechi_2080")
    parallel = CommModel(0.0, preset.comm.seconds_per_byte, "parallel")
    return {"3 GPUs, parallel": Cluster.homogeneous(3, 8 * GIB, parallel, name="3par"),
            "6 GPUs, parallel": Cluster.homogeneous(6, 8 * GIB, parallel, name="6par"),
            "baechi_2080 (4, sequential)": preset}


def graphs(keys: list[str]):
    from rlplace.apps.tables.common import zoo_graph
    from rlplace.costs import with_analytical_costs
    from rlplace.zoo import load_baechi_profile

    for key in keys:
        if key == "gnmt_profile":
            yield key, load_baechi_profile(), "profiled (Baechi authors' GNMT, GTX 2080)"
        else:
            model, knobs = MODELS[key]
            yield key, with_analytical_costs(zoo_graph(model, knobs), "gtx2080"), "analytical (roofline, gtx2080)"


def place(name: str, graph, cluster: Cluster, variant: str, coplacement: bool, **options) -> dict:
    from rlplace.placers import make_placer
    from rlplace.sim import simulate

    placer = make_placer(name, coplacement=coplacement, fusion=variant != "off", single_fallback=False,
                         fusion_rule="lossless" if variant == "off" else variant, **options)
    start = time.perf_counter()
    placement = placer.place(graph, cluster)
    elapsed = time.perf_counter() - start
    placement.validate(graph, cluster)
    r = simulate(graph, cluster, placement)
    return {"step_time": r.step_time, "oom": r.oom, "nodes_placed": placement.nodes_placed, "placement_time": elapsed}


def longest_path(g) -> float:
    finish = np.zeros(g.num_ops)
    for i in range(g.num_ops):
        ins = g.in_edges[g.in_ptr[i]:g.in_ptr[i + 1]]
        finish[i] = finish[g.edge_src[ins]].max(initial=0.0) + g.compute_time[i]
    return float(finish.max(initial=0.0))


def critical_paths(graph) -> list[dict]:
    """The longest compute-only path of the graph the placers' optimizer sees (the forward ops
    when the graph has backward ops: the memory here always allows forward-only placement) and
    of its quotient under each rule, co-placement off and on."""
    from rlplace.placers.baechi.optimizer import GraphOptimizer, forward_part

    work = forward_part(graph)[0] if np.any(graph.forward_op >= 0) else graph
    base = longest_path(work)
    rows = []
    for coplacement in (False, True):
        row = {"coplacement": coplacement, "ops": work.num_ops, "op_graph": base}
        for rule in ("degree", "lossless"):
            q = GraphOptimizer(coplacement=coplacement, fusion_rule=rule).optimize(work).quotient()
            row[rule] = longest_path(q)
            row[f"{rule}_nodes"] = q.num_ops
        rows.append(row)
    return rows


def run(keys: list[str]) -> dict:
    from rlplace.placers.baechi.optimizer import forward_part
    from rlplace.sim import simulate

    cl = clusters()
    records, paths, meta = [], {}, {}
    for key, graph, source in graphs(keys):
        meta[key] = {"ops": graph.num_ops, "edges": graph.num_edges, "source": source,
                     "forward_ops": forward_part(graph)[0].num_ops if np.any(graph.forward_op >= 0) else None}
        paths[key] = critical_paths(graph)
        for cname, cluster in tqdm(cl.items(), desc=key):
            single = simulate(graph, cluster, np.zeros(graph.num_ops, dtype=np.int64))
            for name in PLACERS:
                for coplacement in (False, True):
                    rec = {"model": key, "cluster": cname, "placer": name, "coplacement": coplacement,
                           "ops": graph.num_ops, "single": single.step_time,
                           "single_oom": bool(single.oom)}
                    for variant in VARIANTS:
                        rec[variant] = place(name, graph, cluster, variant, coplacement, **ALONE)
                    for variant in ("off", "lossless"):
                        rec[f"paper_{variant}"] = place(name, graph, cluster, variant, coplacement, **PAPER, **ALONE)
                    rec["fallback"] = place(name, graph, cluster, "lossless", coplacement)
                    records.append(rec)
    return {"models": meta, "clusters": {k: {"devices": c.num_devices, "memory_bytes": int(c.memory.min()),
                                               "latency": c.comm.latency, "seconds_per_byte": c.comm.seconds_per_byte,
                                               "mode": c.comm.mode} for k, c in cl.items()},
            "records": records, "critical_paths": paths}


def _ms(t: float) -> str:
    return f"{t * 1e3:.2f}"


def markdown(out: dict) -> str:
    recs = out["records"]
    lines = ["# Operator fusion on vs off: m-ETF and m-SCT", "",
             "Step times from rlplace's simulator (ms). *off*: fusion off; *degree*: fusion with Baechi "
             "§3.3's rule as written (src out-degree ≤ 1 or dst in-degree ≤ 1: the default before this "
             "benchmark); *lossless*: the rule now the default (`rlplace.placers.baechi.optimizer.fuse`). Co-placement "
             "off (colocation only) and on; forward-only placement at its default (on: every graph here "
             "fits one device). These three are the optimizer's own placements (`optimizer_fallback=false`). "
             "*fallback*: lossless with the default `optimizer_fallback` (the placer also places the graph "
             "with co-placement and fusion off and keeps whichever placement the simulator runs faster). "
             "Ratios are fused / off, and *fallback/opt. off* against the optimizer off (co-placement and "
             "fusion off: the *off* column of the co-placement-off row); *nodes*: nodes placed (ops or "
             "groups). Memory 8 GiB per device: no placement ran out of it unless marked OOM.", ""]
    for key, m in out["models"].items():
        fwd = f", {m['forward_ops']:,} forward" if m["forward_ops"] is not None else ""
        lines.append(f"- `{key}`: {m['ops']:,} ops{fwd}, {m['edges']:,} edges; costs {m['source']}")
    for cname, c in out["clusters"].items():
        lines.append(f"- {cname}: {c['devices']} devices, {c['mode']} transfers, "
                     f"{c['latency'] * 1e6:.0f} µs + {c['seconds_per_byte'] * 1e9:.3g} ns/B")
    base = {(r["model"], r["cluster"], r["placer"]): r["off"]["step_time"] for r in recs if not r["coplacement"]}
    lines += ["", "## Step time", "",
              "| model | cluster | placer | co-placement | single | off | degree | lossless | degree/off | "
              "lossless/off | nodes off / degree / lossless | fallback | fallback/opt. off |",
              "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in recs:
        def cell(v):
            return _ms(r[v]["step_time"]) + (" OOM" if r[v]["oom"] else "")
        lines.append(f"| {r['model']} | {r['cluster']} | {r['placer']} | {'on' if r['coplacement'] else 'off'} | "
                     f"{_ms(r['single'])} | {cell('off')} | {cell('degree')} | {cell('lossless')} | "
                     f"{r['degree']['step_time'] / r['off']['step_time']:.2f}× | "
                     f"{r['lossless']['step_time'] / r['off']['step_time']:.2f}× | "
                     f"{r['off']['nodes_placed']} / {r['degree']['nodes_placed']} / {r['lossless']['nodes_placed']} | "
                     f"{cell('fallback')} | "
                     f"{r['fallback']['step_time'] / base[(r['model'], r['cluster'], r['placer'])]:.2f}× |")
    lines += ["", "## Step time with §3.2's co-placement rule as written", "",
              f"`{PAPER}`, fusion off and lossless (co-placement as in the row).", "",
              "| model | cluster | placer | co-placement | off | lossless | lossless/off |", "|---|---|---|---|---:|---:|---:|"]
    for r in recs:
        off, on = r["paper_off"], r["paper_lossless"]
        lines.append(f"| {r['model']} | {r['cluster']} | {r['placer']} | {'on' if r['coplacement'] else 'off'} | "
                     f"{_ms(off['step_time'])}{' OOM' if off['oom'] else ''} | {_ms(on['step_time'])}"
                     f"{' OOM' if on['oom'] else ''} | {on['step_time'] / off['step_time']:.2f}× |")
    lines += ["", "## Summary over the rows above", "",
              "| rule | rows | geometric mean fused/off | worst | rows > 5% slower | rows > 5% faster | "
              "nodes placed (geometric mean, share of off) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for rule, on, off in (("degree", "degree", "off"), ("lossless", "lossless", "off"),
                          ("lossless, paper co-placement rule", "paper_lossless", "paper_off")):
        ratio = np.array([r[on]["step_time"] / r[off]["step_time"] for r in recs])
        nodes = np.array([r[on]["nodes_placed"] / r[off]["nodes_placed"] for r in recs])
        lines.append(f"| {rule} | {len(ratio)} | {np.exp(np.log(ratio).mean()):.3f} | {ratio.max():.2f}× | "
                     f"{int(np.sum(ratio > 1.05))} | {int(np.sum(ratio < 1 / 1.05))} | "
                     f"{np.exp(np.log(nodes).mean()):.2f} |")
    cp = [r for r in recs if r["coplacement"]]
    lines += ["", "Optimizer on (co-placement and lossless fusion) / off (neither; colocation only, default options), "
              "per model, cluster and placer:", "",
              "| optimizer on | rows | geometric mean on/off | worst | rows > 5% slower |", "|---|---:|---:|---:|---:|"]
    for label, key in (("defaults", "fallback"), ("without the fallback", "lossless"),
                       ("without the fallback, paper co-placement rule", "paper_lossless")):
        ratio = np.array([r[key]["step_time"] / base[(r["model"], r["cluster"], r["placer"])] for r in cp])
        lines.append(f"| {label} | {len(ratio)} | {np.exp(np.log(ratio).mean()):.3f} | {ratio.max():.2f}× | "
                     f"{int(np.sum(ratio > 1.05))} |")
    worse = [r["off"]["step_time"] / r["single"] for r in cp]
    lines += ["", f"Co-placement on, fusion off: slower than one device in {sum(w > 1 for w in worse)} of "
              f"{len(cp)} rows (worst {max(worse):.2f}× the single-device step); co-placement off, fusion off: in "
              f"{sum(r['off']['step_time'] > r['single'] for r in recs if not r['coplacement'])}."]
    cost = np.array([r["fallback"]["placement_time"] / r["lossless"]["placement_time"] for r in cp])
    lines += ["", f"Placement time of the defaults (with the fallback) against the optimizer alone, co-placement "
              f"on: {np.median(cost):.2f}× (median over the {len(cp)} rows), "
              f"{sum(r['fallback']['placement_time'] for r in cp):.1f} s against "
              f"{sum(r['lossless']['placement_time'] for r in cp):.1f} s in all (one placement each, no warm-up, "
              f"on this shared 2-core machine: single rows are noise)."]
    lines += ["", "## Longest compute-only path of the graph the placer schedules (ms)", "",
              "The forward ops (what forward-only placement places) or, for the GNMT profile (no "
              "forward/backward pairs), the whole graph; its quotient under each rule. A fused node "
              "starts when all its inputs are in and releases its outputs when all its ops are done, "
              "so a longer path is parallelism the placer no longer sees.", "",
              "| model | co-placement | ops | op graph | degree (nodes) | lossless (nodes) |",
              "|---|---|---:|---:|---:|---:|"]
    for key, rows in out["critical_paths"].items():
        for p in rows:
            lines.append(f"| {key} | {'on' if p['coplacement'] else 'off'} | {p['ops']} | {_ms(p['op_graph'])} | "
                         f"{_ms(p['degree'])} ({p['degree_nodes']}, {p['degree'] / p['op_graph']:.2f}×) | "
                         f"{_ms(p['lossless'])} ({p['lossless_nodes']}, {p['lossless'] / p['op_graph']:.2f}×) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small models only (smoke run)")
    parser.add_argument("--models", nargs="+", choices=[*MODELS, "gnmt_profile"], help="these models only")
    args = parser.parse_args()
    keys = args.models or (QUICK if args.quick else [*MODELS, "gnmt_profile"])
    start = time.time()
    out = run(keys)
    out["seconds"] = time.time() - start
    text = markdown(out)
    if not args.quick and not args.models:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "bench_fusion.json").write_text(json.dumps(out, indent=1))
        (RESULTS / "bench_fusion.md").write_text(text)
    print(text)


if __name__ == "__main__":
    run_script(main)
