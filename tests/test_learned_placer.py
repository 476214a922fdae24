"""The ``learned`` placer (rlplace.placers.learned): its compiled loop against a literal one,
its network three ways, safe weights files, the search along the policy, and training."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import training_graph
from rlplace.cluster import Cluster, CommModel
from rlplace.errors import CheckpointError, ConfigError
from rlplace.graph import OpGraph
from rlplace.learn.listsched import Network, TrainConfig, train
from rlplace.learn.family import Instance
from rlplace.placers import make_placer
from rlplace.placers.learned import (FEATURES, NUM_FEATURES, WEIGHTS, ListSchedule, LearnedPlacer, _Round,
                                     best_heuristic, load_weights, policy_search, score, scores)
from rlplace.placers.search import HEURISTICS, LocalSearch, Moves
from rlplace.sim import simulate
from rlplace.zoo.synthetic import chain, layered

LINKS = [CommModel(134e-6, 1.754e-10, "sequential"), CommModel(2e-5, 1e-9, "parallel")]


def random_network(seed: int, hidden: int = 8, blind: tuple[int, ...] = ()):
    rng = np.random.default_rng(seed)
    w1 = rng.normal(size=(NUM_FEATURES, hidden))
    w1[list(blind)] = 0.0
    return (w1, rng.normal(size=hidden), rng.normal(size=(hidden, hidden)), rng.normal(size=hidden),
            rng.normal(size=hidden), rng.normal(size=1))


def literal_list_schedule(graph, cluster, network, hint):
    """The loop of rlplace.placers.learned written out plainly, with memory that never binds.
    The step runs as the simulator runs it: an op is decided when its last input has started,
    ops ready together in rank order, on the device the network scores best (no network: where
    it starts first, as ``critical_path`` places) reading whether ``hint`` put the op there, and
    queued there
    by when its inputs arrive; the queued op that can start first starts next (ties to the lower
    index). A tensor is sent once to each device that reads it, over parallel links at once or
    over sequential links one at a time per sender and receiver, booked when its reader starts.
    Returns the op order, the devices, the start and end of every op, and the feature rows that
    do not concern memory."""
    plan = ListSchedule(graph, cluster, hint)
    D, speed, comm, n = cluster.num_devices, cluster.speeds, cluster.comm, graph.num_ops
    device, begin, end = {}, {}, {}
    avail, send_free, recv_free = [0.0] * D, [0.0] * D, [0.0] * D
    sent = {}  # (tensor, device) -> when it is there
    busy, queued = [0.0] * D, [0.0] * D
    queue = {d: [] for d in range(D)}  # (ready, op)
    inputs = {op: [int(e) for e in graph.in_edges[graph.in_ptr[op]:graph.in_ptr[op + 1]]] for op in range(n)}
    xfer = lambda t: float(np.asarray(comm.transfer_time(graph.tensor_bytes[t])))  # noqa: E731
    sequential = comm.mode == "sequential"

    def arrival(op, d, book=False):
        t, send = 0.0, list(send_free)
        recv = recv_free[d]
        for e in inputs[op]:
            src, tensor = int(graph.edge_src[e]), int(graph.edge_tensor[e])
            if device[src] == d:
                a = end[src]
            elif (tensor, d) in sent:
                a = sent[(tensor, d)]
            elif sequential:
                a = max(end[src], send[device[src]], recv) + xfer(tensor)
                send[device[src]] = recv = a
                if book:
                    sent[(tensor, d)] = a
            else:
                a = end[src] + xfer(tensor)
                if book:
                    sent[(tensor, d)] = a
            t = max(t, a)
        if book and sequential:
            send_free[:] = send
            recv_free[d] = recv
        return t

    unit, pinned = plan.units.group_of, {}
    order, rows_seen, est, last, now = [], [], 0.0, -1, 0.0
    fresh = [op for op in range(n) if not inputs[op]]
    while len(begin) < n:
        for op in sorted(fresh, key=lambda op: plan.rank_position[op]):
            arr = [arrival(op, d) for d in range(D)]
            free = [max(avail[d], now) + queued[d] for d in range(D)]
            starts = [max(free[d], arr[d]) for d in range(D)]
            finish = [starts[d] + graph.compute_time[op] / speed[d] for d in range(D)]
            in_bytes = [(float(graph.tensor_bytes[graph.edge_tensor[e]]), device[int(graph.edge_src[e])])
                        for e in inputs[op]]
            total_in = sum(b for b, _ in in_bytes)
            largest = max(in_bytes, key=lambda x: x[0])[1] if in_bytes else -1
            load = sum(busy) + sum(queued)
            s = plan.scale
            rows = np.zeros((D, NUM_FEATURES))
            for d in range(D):
                rows[d, 0] = np.arcsinh((finish[d] - min(finish)) / s)
                rows[d, 1] = np.arcsinh((starts[d] - min(starts)) / s)
                rows[d, 2] = np.arcsinh((arr[d] - min(arr)) / s)
                rows[d, 3] = np.arcsinh((free[d] - min(free)) / s)
                rows[d, 4] = np.arcsinh(max(0.0, finish[d] + plan.tail[op] - est) / s)
                rows[d, 5] = sum(b for b, where in in_bytes if where != d) / total_in if total_in else 0.0
                rows[d, 8] = (busy[d] + queued[d]) / load - 1 / D if load else 0.0
                rows[d, 9] = speed[d] / speed.max()
                rows[d, 10] = float(d == largest)
                rows[d, 11] = float(d == last)
                rows[d, 12] = np.arcsinh(graph.compute_time[op] / speed.max() / s)
                rows[d, 13] = plan.tail[op] / plan.critical
                rows[d, 14] = len(order) / n
                rows[d, 15] = 1 / D
                rows[d, 16] = np.arcsinh(plan.output_transfer[op] / s)
                rows[d, 17] = np.arcsinh((est - free[d]) / s)
                rows[d, 18] = float(hint is not None and hint[op] == d)
            options = [pinned[unit[op]]] if unit[op] in pinned else list(range(D))
            if network is None:  # critical_path: the earliest start, then finish
                d = min(options, key=lambda d: (starts[d], finish[d], d))
            else:
                d = max(options, key=lambda d: (score(rows[d], *network), -d))
            device[op] = d
            pinned.setdefault(unit[op], d)
            queued[d] += graph.compute_time[op] / speed[d]
            queue[d].append((arr[d], op))
            est = max(est, finish[d] + plan.tail[op])
            last = d
            order.append(op)
            rows_seen.append(rows)
        fresh = []
        if len(begin) == n:
            break
        first = None
        for d in range(D):
            if queue[d]:
                ready, op = min((arrival(op, d), op) for _, op in queue[d])
                if first is None or (max(avail[d], ready), op) < first[:2]:
                    first = (max(avail[d], ready), op, d)
        t, op, d = first
        queue[d] = [(r, o) for r, o in queue[d] if o != op]
        now = max(now, t)
        arrival(op, d, book=True)
        begin[op], end[op] = t, t + graph.compute_time[op] / speed[d]
        avail[d] = max(avail[d], end[op])
        busy[d] += end[op] - t
        queued[d] -= end[op] - t
        fresh = [c for c in range(n) if c not in device and inputs[c]
                 and all(int(graph.edge_src[e]) in begin for e in inputs[c])]
    return (np.array(order), np.array([device[i] for i in range(n)]), np.array([begin[i] for i in range(n)]),
            np.array([end[i] for i in range(n)]), np.array(rows_seen))


@pytest.mark.parametrize("rule", ["network", "earliest_start"])
@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_loop_is_the_literal_one(seed, rule):
    graph = training_graph(seed, continuous=True) if seed % 2 else layered(60, width=5, seed=seed)
    cluster = Cluster.homogeneous(2 + seed % 3, 2**50, LINKS[seed % 2])
    network = random_network(seed, blind=(6, 7)) if rule == "network" else None  # blind: memory never binds here
    hint = np.random.default_rng(seed).integers(cluster.num_devices, size=graph.num_ops) if seed % 3 else None
    order, device, begin, end, rows = literal_list_schedule(graph, cluster, network, hint)
    plan = ListSchedule(graph, cluster, hint)
    m = plan.run(network, cluster.memory, record=True)
    np.testing.assert_array_equal(plan.decisions.order, order)
    np.testing.assert_array_equal(m.ops.device, device)
    np.testing.assert_allclose(m.ops.start, begin, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(m.ops.end, end, rtol=1e-12, atol=1e-15)
    memory = [6, 7]
    np.testing.assert_allclose(np.delete(plan.decisions.features, memory, axis=2), np.delete(rows, memory, axis=2),
                               rtol=1e-9, atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), devices=st.integers(2, 5), layered_graph=st.booleans(), rule=st.booleans())
def test_with_parallel_links_the_placers_schedule_is_the_simulators(seed, devices, layered_graph, rule):
    """For ``learned`` (a random network) and ``critical_path`` (no network) alike."""
    graph = layered(120, width=6, seed=seed) if layered_graph else training_graph(seed, continuous=True)
    cluster = Cluster.homogeneous(devices, 2**50, LINKS[1])
    m = ListSchedule(graph, cluster).run(random_network(seed) if rule else None, cluster.memory)
    schedule = simulate(graph, cluster, m.ops.device, trace=True).schedule
    np.testing.assert_allclose(m.ops.start, schedule.op_start, rtol=1e-12, atol=0)
    np.testing.assert_allclose(m.ops.end, schedule.op_end, rtol=1e-12, atol=0)


def test_the_network_scores_alike_in_torch_numpy_and_the_compiled_loop():
    torch.manual_seed(0)
    net = Network(16)
    rows = np.random.default_rng(0).normal(size=(5, 3, NUM_FEATURES))
    with torch.no_grad():
        expected = net(torch.as_tensor(rows, dtype=torch.float32)).double().numpy()
    network = net.network()
    np.testing.assert_allclose(scores(rows, network), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose([[score(r, *network) for r in op] for op in rows], expected, rtol=1e-5, atol=1e-5)


def copy_the_hint(hidden: int = 2):
    """A network whose score is whether the hint put the op on the device."""
    w1 = np.zeros((NUM_FEATURES, hidden))
    w1[FEATURES.index("hinted"), 0] = 1.0
    w2 = np.zeros((hidden, hidden))
    w2[0, 0] = 1.0
    return w1, np.zeros(hidden), w2, np.zeros(hidden), np.eye(hidden)[0], np.zeros(1)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), devices=st.integers(2, 4), tight=st.booleans())
def test_a_network_that_copies_the_hint_places_the_hint(seed, devices, tight):
    """Also where the loop's memory plan would refuse the hint's device: the simulator has run it."""
    graph = training_graph(seed, continuous=True)
    memory = 2**50 if not tight else int(simulate(graph, Cluster.homogeneous(1, 2**50), np.zeros(graph.num_ops,
                                                                                             dtype=np.int64)).peak_memory[0] * 0.6)
    cluster = Cluster.homogeneous(devices, memory, LINKS[seed % 2])
    hint = best_heuristic(graph, cluster)
    plan = ListSchedule(graph, cluster, hint)
    np.testing.assert_array_equal(plan.run(copy_the_hint(), cluster.memory).ops.device, hint)


@pytest.mark.parametrize("seed", range(3))
def test_the_learned_placer_is_never_slower_than_the_best_heuristic(seed):
    graph = layered(200, width=8, seed=seed) if seed else training_graph(seed, continuous=True)
    cluster = Cluster.homogeneous(3, 2**50, LINKS[seed % 2])
    best = min(simulate(graph, cluster, make_placer(name, seed=0).place(graph, cluster)).step_time
               for name in HEURISTICS)
    for evaluations in (1, 20):
        placement = LearnedPlacer(evaluations=evaluations).place(graph, cluster)
        assert simulate(graph, cluster, placement).step_time <= best * (1 + 1e-12)


def test_the_shipped_weights_place_a_graph_within_memory():
    graph = training_graph(3, continuous=True, layers=20)
    cluster = Cluster.homogeneous(4, 2**40, LINKS[0])
    placement = make_placer("learned").place(graph, cluster)
    placement.validate(graph, cluster)
    assert not simulate(graph, cluster, placement).oom
    assert load_weights(WEIGHTS)[0].shape[0] == NUM_FEATURES


def bad_weights(tmp_path, kind):
    path = tmp_path / f"{kind}.npz"
    arrays = dict(zip(("w1", "b1", "w2", "b2", "w3", "b3"), random_network(0)))
    if kind == "pickle":
        arrays["w1"] = np.array([{"a": 1}], dtype=object)
    elif kind == "nan":
        arrays["b2"] = arrays["b2"] * np.nan
    elif kind == "shape":
        arrays["w1"] = arrays["w1"][:3]
    elif kind == "missing":
        del arrays["b3"]
    if kind == "text":
        path.write_text("w1: [1, 2]\n")
    else:
        np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("kind", ["pickle", "nan", "shape", "missing", "text"])
def test_a_bad_weights_file_is_one_config_error_naming_it(tmp_path, kind):
    path = bad_weights(tmp_path, kind)
    with pytest.raises(ConfigError, match=str(path.name)):
        LearnedPlacer(weights=str(path))


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10**6), devices=st.integers(2, 4))
def test_the_search_keeps_colocation_and_never_returns_worse_than_the_pass_or_the_hint(seed, devices):
    graph = training_graph(seed, continuous=True, layers=4)
    cluster = Cluster.homogeneous(devices, 2**40, LINKS[seed % 2])
    hint = best_heuristic(graph, cluster)
    plan, network = ListSchedule(graph, cluster, hint), load_weights(WEIGHTS)
    greedy = plan.run(network, cluster.memory).ops.device.copy()
    device = policy_search(plan, network, cluster.memory, evaluations=30, seed=seed)
    found = simulate(graph, cluster, device).step_time
    assert found <= min(simulate(graph, cluster, greedy).step_time, simulate(graph, cluster, hint).step_time)
    for ops in graph.colocation_groups.values():
        assert len(set(device[ops].tolist())) == 1
    with pytest.raises(ConfigError, match="evaluations"):
        LearnedPlacer(evaluations=0)
    with pytest.raises(ConfigError, match="seed"):
        LearnedPlacer(seed=True)


def test_training_writes_weights_the_placer_loads_and_resumes(tmp_path):
    graphs = [training_graph(s, continuous=True, layers=6) for s in range(2)]
    family = [Instance(g, Cluster.homogeneous(2, 2**40, LINKS[s]), "test") for s, g in enumerate(graphs)]
    config = TrainConfig(hidden=8, clone_rounds=1, epochs=2, generations=2, population=2, graphs_per_generation=2,
                         eval_every=1)
    first = train(config, tmp_path, family, progress=False)
    assert [c["phase"] for c in first["curves"]] == ["clone", "es", "es"]
    LearnedPlacer(weights=str(tmp_path / "learned.npz")).place(graphs[0], family[0].cluster)
    resumed = train(config, tmp_path, family, progress=False)  # nothing left to do: read back
    assert resumed["curves"] == first["curves"]
    longer = train(TrainConfig(**{**first["config"], "generations": 3}), tmp_path, family, progress=False)
    assert longer["curves"][:3] == first["curves"] and len(longer["curves"]) == 4
    with pytest.raises(CheckpointError, match="another training config"):
        train(TrainConfig(**{**first["config"], "hidden": 4}), tmp_path, family, progress=False)
    with pytest.raises(ConfigError, match="population"):
        train(TrainConfig(population=3), tmp_path, family, progress=False)


def test_the_search_moves_around_the_critical_path_of_the_current_placement():
    """A chain split over two devices waits for its one transfer: the round's first moves join
    the transfer's reader to its producer's device and the producer to its reader's, and every
    network-ranked move is of a path op."""
    graph = chain(6, compute_time=1e-3, output_bytes=10**8)
    cluster = Cluster.homogeneous(2, 2**40, LINKS[0])
    current = np.array([0, 0, 0, 1, 1, 1])
    plan = ListSchedule(graph, cluster, current)
    network = load_weights(WEIGHTS)
    tried = set()
    moves = Moves(graph, 2, LocalSearch.run_fraction)
    around = _Round(plan, network, cluster.memory, current, moves, tried)
    assert around.path.tolist() == [0, 1, 2, 3, 4, 5]
    assert [(int(u), int(d)) for u, d in around.joins] == [(3, 0), (2, 1)]
    candidates = around.draw(8, np.random.default_rng(0))
    assert [c.tolist() for c in candidates[:2]] == [[0, 0, 0, 0, 1, 1], [0, 0, 1, 1, 1, 1]]
    assert all(np.any(c != current) for c in candidates) and len(candidates) <= 6
    joined = [c.tolist() for c in candidates[:2]]
    again = around.draw(8, np.random.default_rng(0))
    single_moves = again[:len(again) - 8 // 4]  # the last quarter: runs of path ops
    assert single_moves and not any(c.tolist() in joined for c in single_moves)  # tried: never twice


def test_a_transfer_queued_behind_another_on_a_sequential_link_joins_by_its_own_ends():
    """Two tensors from device 0 to one reader on device 1 share a sequential link: the path
    runs p, p's transfer, q's transfer (it waited for the link) and r. Only q's transfer is
    followed by its reader; p's transfer joins p to where it was sent, never its queue
    successor taken for an op."""
    ops = [{"name": n, "compute_time": 1e-3, "persistent_bytes": 0, "temporary_bytes": 0,
            "output_bytes": [10**8]} for n in "pqr"]
    graph = OpGraph.from_records(ops, [("p", "r", 10**8), ("q", "r", 10**8)], name="two_to_one")
    cluster = Cluster.homogeneous(2, 2**40, LINKS[0])
    current = np.array([0, 0, 1])
    around = _Round(ListSchedule(graph, cluster, current), load_weights(WEIGHTS), cluster.memory, current,
                    Moves(graph, 2, LocalSearch.run_fraction), set())
    assert around.path.tolist() == [0, 2]
    assert [(int(u), int(d)) for u, d in around.joins] == [(2, 0), (1, 1), (0, 1)]
