"""``learned``: a list scheduler whose device choice is a small trained network (issue 41).

The loop runs the step as the simulator runs it (``rlplace.sim``): an op is decided when its last
input has started, so its inputs' ends are known (ops ready together in decreasing upward rank,
HEFT Eq. 8), and queued on the device chosen; each device serves its queue first come (inputs
there first), first served, and the op that can start first starts next, booking its transfers
(sequential or parallel channels, a tensor sent once per destination) and its memory (as m-ETF
tracks it, Baechi §4.2) on the execution model of ``rlplace.schedule``. So with parallel links
the placer's own schedule is the simulator's schedule of its placement (tested); with sequential
links a transfer is booked when its reader starts (as m-ETF books it, §3.4), where the simulator
books it when its producer ends, so a channel may serve transfers in another order.

The policy is hinted: before the loop, every placer of ``HEURISTICS`` places the graph and the
placement the simulator runs fastest is the hint (``best_heuristic``). For the op being decided
each device d gets a row of ``FEATURES``: whether the hint put the op on d, when the op would
start and finish on d (behind the work already queued there), when its inputs would arrive, how
much it would grow the step's estimate (its finish plus the compute-only path below it), how
much of its input would move, d's memory headroom and load; times are over the graph's mean op
duration and squashed by ``asinh``, so one set of weights applies to any graph, size and number
of devices. A multilayer perceptron scores each row, and the op goes to the best-scoring device
that has the memory (a colocation group's device once the group has one; the hint's device,
which the simulator has run, always; the device it overfills least when none has room).

Why a hint: the loop's own greedy rules place badly on their own (the earliest finish per op:
1.35x m-ETF on layered DAGs of 1,000 ops, 4.5x ``single`` on BERT-4), and a policy trained
without a hint (cloning earliest finish, then evolution strategies) placed the held-out family at
2.3-2.4x the best heuristic (experiments/studies.md). Hinted, the trained network copies the
hint where it knows no better (the hint is weighed beside its greedy pass, so the placement is
the best heuristic's or faster), and its scores rank the moves of a search: ``evaluations``
(default 1: one greedy pass) above 1 spend them through ``policy_search``, a hill-climb from the
better of the greedy pass and the hint whose candidates go where the current placement's step is
decided: its critical path in the policy's loop (a transfer on it removed, a path op moved to a
device the network prefers for it, a run of path ops moved together), and at least a quarter
``local_search``'s moves (experiments/results/learned_listsched.md at 50 evaluations,
learned_equal_evaluations.md at 500 and 2,000; experiments/studies.md, "The learned placer's
search along the critical path"). Earlier searches took the decisions the network was least sure
of the other way and re-placed the rest by the policy (it stalled at 500-2,000 evaluations), or
moved any op the network preferred elsewhere (1% slower at 50 evaluations on graphs drawn like the
training family).
Placing a 10,000-op graph takes about 1.5 s, most of it the heuristics.

The shipped weights (``learned.npz`` beside this file: numpy arrays read with
``allow_pickle=False``, so no code in a weights file runs, and no torch needed to place) were
trained by ``rlplace.learn.listsched`` on the training family of ``rlplace.learn.family``.
``weights=PATH`` loads others. The hint is weighed beside the policy's placement, and
``memory_rounds`` works as for m-ETF (``rlplace.placers.fit``): a placement the simulator finds
over memory is placed again under a smaller budget.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from rlplace.cluster import Cluster
from rlplace.coarsen import CoarseGraph
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.options import SEED
from rlplace.placement import Placement
from rlplace.placers import register
from rlplace.placers.baselines import rank_order
from rlplace.placers.fit import fastest_fit
from rlplace.placers.search import HEURISTICS, LocalSearch, Moves, best_of, evaluate_rows
from rlplace.schedule import Model, critical_path, new_model, schedule_of
from rlplace.schedule.heap import pop, push
from rlplace.schedule.list_scheduling import newly_ready_sources
from rlplace.schedule.ops import (arrival, book_inputs, duration, fits, hold_op_memory, hold_persistent,
                                  least_overfilled, newly_ready, received_bytes, release_until, start)
from rlplace.sim import simulate

WEIGHTS = Path(__file__).with_name("learned.npz")
FEATURES = (
    "finish", "start", "arrival", "free", "growth", "moved_bytes", "memory_fill", "persistent_fill",
    "load_share", "speed", "largest_input_here", "previous_here", "duration", "tail", "progress",
    "inverse_devices", "output_transfer", "slack", "hinted")
NUM_FEATURES = len(FEATURES)
LAYERS = ("w1", "b1", "w2", "b2", "w3", "b3")
_NO_NETWORK = (np.zeros((NUM_FEATURES, 1)), np.zeros(1), np.zeros((1, 1)), np.zeros(1), np.zeros(1), np.zeros(1))


@dataclass(frozen=True)
class Decisions:
    """What one pass of the policy saw and chose: per op (in the loop's ``order``) the feature
    rows of every device, which devices it could choose, and the device it took."""

    order: np.ndarray      # (n,) ops in the order decided
    features: np.ndarray   # (n, D, NUM_FEATURES) row of op order[k] on device d
    allowed: np.ndarray    # (n, D) bool
    chosen: np.ndarray     # (n,) device of op order[k]


@functools.lru_cache(maxsize=4)
def load_weights(path: str | Path = WEIGHTS) -> tuple[np.ndarray, ...]:
    """The network's arrays from an ``.npz`` file (``allow_pickle=False``), checked for shape
    and finiteness: a bad file is one ConfigError naming it and the array."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k], dtype=np.float64) for k in data.files}
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not a weights file of the learned placer ({type(e).__name__}: {e})") from e
    return check_weights(arrays, str(path))


def check_weights(arrays: dict[str, np.ndarray], where: str) -> tuple[np.ndarray, ...]:
    """``arrays`` as the tuple ``LAYERS`` of an MLP NUM_FEATURES -> h1 -> h2 -> 1."""
    missing = [k for k in LAYERS if k not in arrays]
    if missing:
        raise ConfigError(f"{where}: weights lack {', '.join(missing)}")
    w1, b1, w2, b2, w3, b3 = (np.ascontiguousarray(arrays[k], dtype=np.float64) for k in LAYERS)
    shapes_ok = (w1.ndim == 2 and w1.shape[0] == NUM_FEATURES and b1.shape == (w1.shape[1],)
                 and w2.ndim == 2 and w2.shape[0] == w1.shape[1] and b2.shape == (w2.shape[1],)
                 and w3.shape == (w2.shape[1],) and b3.shape == (1,))
    if not shapes_ok:
        raise ConfigError(f"{where}: weights of shapes {[a.shape for a in (w1, b1, w2, b2, w3, b3)]} are not "
                          f"an MLP {NUM_FEATURES} -> h1 -> h2 -> 1")
    for name, a in zip(LAYERS, (w1, b1, w2, b2, w3, b3)):
        if not np.all(np.isfinite(a)):
            raise ConfigError(f"{where}: weights {name} hold a NaN or infinity")
    return w1, b1, w2, b2, w3, b3


@register("learned")
@dataclass
class LearnedPlacer:
    """A list scheduler with a trained device choice, hinted by the best heuristic (module
    docstring). ``weights``: an ``.npz`` file of the network (default: the shipped one)."""

    weights: str = str(WEIGHTS)
    evaluations: int = 1
    memory_rounds: int = 4
    seed: int = 0   # of ``policy_search``'s draws: the same seed gives the same placement

    def __post_init__(self):
        for key in ("evaluations", "memory_rounds"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise ConfigError(f"learned: {key} must be an integer >= 1, got {getattr(self, key)!r}")
        if not SEED.admits(self.seed):
            raise SEED.error("learned: seed", self.seed)
        self.network = load_weights(self.weights)

    def place(self, graph: OpGraph, cluster: Cluster) -> Placement:
        hint = best_heuristic(graph, cluster)
        plan = ListSchedule(graph, cluster, hint)

        def place_within(budget):
            searched = policy_search(plan, self.network, budget, self.evaluations, seed=self.seed) \
                if self.evaluations > 1 else None
            m = plan.run(self.network, budget, forced=searched)  # None: the greedy pass
            return m.ops.device.copy(), m.memory.peak.copy()

        device, _ = fastest_fit([place_within], graph, cluster, cluster.memory.astype(np.int64),
                                self.memory_rounds, [(hint, simulate(graph, cluster, hint))])
        return Placement(device)


def best_heuristic(graph: OpGraph, cluster: Cluster) -> np.ndarray:
    """The policy's hint: the placement of ``HEURISTICS`` that the simulator runs fastest
    (among those within memory, where one is), one device per op."""
    return np.asarray(best_of(graph, cluster, HEURISTICS)[1].device_of, dtype=np.int64)


def scores(rows: np.ndarray, network) -> np.ndarray:
    """``score`` of every row of ``rows`` (..., NUM_FEATURES) at once."""
    w1, b1, w2, b2, w3, b3 = network
    return np.tanh(np.tanh(rows @ w1 + b1) @ w2 + b2) @ w3 + b3[0]


def policy_search(plan: "ListSchedule", network, budget: np.ndarray, evaluations: int, batch: int = 8,
                  seed: int = 0) -> np.ndarray:
    """The best of ``evaluations`` placements the simulator runs: a local search (hill-climbing,
    as ``local_search``) whose moves go where the current placement's step is decided and the
    network ranks. It starts from the better of the greedy pass and the hint (two evaluations;
    with ``evaluations`` <= 2 that is all). The policy's loop runs the current placement (every
    op forced where it is) and records its feature rows and its schedule, whose critical path
    (``rlplace.schedule.critical_path``) says which ops and transfers the step waited for; a
    device's preference for an op is its score minus that of the op's current device. Each
    round's ``batch`` candidates (``_Round``): up to a quarter remove a transfer of the path
    (its reader joins its producer's device, or the producer its reader's); the network's
    preferred moves of path ops fill the first half (Gumbel top-k: in proportion to
    exp(preference), without replacement); a quarter move a run of consecutive path ops onto
    one device; the rest are ``local_search``'s moves (one unit or a run of units, ``Moves``).
    A unit is never moved to the same device from the same device twice. The round's best is
    kept if it is not worse (memory overflow, then step time). Returns the best placement, one
    device per op."""
    graph, cluster = plan.graph, plan.cluster
    rng = np.random.default_rng(seed)
    moves = Moves(graph, cluster.num_devices, LocalSearch.run_fraction)
    starts = [plan.run(network, budget).ops.device.copy()] + ([plan.hint] if np.all(plan.hint >= 0) else [])
    over, step = evaluate_rows(graph, cluster, np.stack(starts))
    j = int(np.lexsort((step, over))[0])
    current, best, spent = starts[j].copy(), (float(over[j]), float(step[j])), len(starts)
    tried: set[tuple[int, int, int]] = set()  # (unit, to, from)
    around = None
    while spent < evaluations and cluster.num_devices > 1:
        if around is None:
            around = _Round(plan, network, budget, current, moves, tried)
        size = min(batch, evaluations - spent)
        candidates = around.draw(size, rng)
        units = moves.of_placement(Placement(current))
        candidates += [moves.expand(moves.propose(units, rng)) for _ in range(size - len(candidates))]
        over, step = evaluate_rows(graph, cluster, np.stack(candidates))
        spent += size
        j = int(np.lexsort((step, over))[0])
        if (float(over[j]), float(step[j])) <= best:
            current, best, around = candidates[j], (float(over[j]), float(step[j])), None
    return current


class _Round:
    """``policy_search``'s moves around one placement: its critical path in the policy's loop
    (ops in time order, and the transfers on it as joins: (unit, device) pairs) and the
    network's preference for moving each of the path's ops."""

    def __init__(self, plan: "ListSchedule", network, budget: np.ndarray, current: np.ndarray, moves: Moves,
                 tried: set[tuple[int, int, int]]):
        self.current, self.group_of, self.tried = current, moves.units.group_of, tried
        self.num_devices = plan.cluster.num_devices
        m = plan.run(network, budget, forced=current, record=True)
        schedule = schedule_of(m, plan.graph)
        path = critical_path(plan.graph, schedule)
        self.path = path.ops
        self.joins = []
        for (kind, k), (after, reader) in reversed(list(zip(path.steps, path.steps[1:]))):  # the latest first
            if kind == "transfer":  # followed by its reader, or by the next transfer on a sequential link
                producer = int(schedule.transfer_src_op[k])
                if after == "op":
                    self.joins.append((self.group_of[reader], current[producer]))
                self.joins.append((self.group_of[producer], int(schedule.transfer_dst_device[k])))
        s = scores(plan.decisions.features, network)
        preference = s - s[np.arange(len(s)), plan.decisions.chosen][:, None]
        on_path = np.zeros(plan.graph.num_ops, dtype=bool)
        on_path[self.path] = True
        self.preference = np.where(on_path[plan.decisions.order][:, None], preference, -np.inf)
        self.unit_of = self.group_of[plan.decisions.order]

    def draw(self, size: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Up to ``size`` - ``size // 4`` candidates: the joins, the network's moves, the runs."""
        candidates: list[np.ndarray] = []
        for unit, to in self.joins:
            if len(candidates) >= size // 4:
                break
            self._move(candidates, int(unit), int(to))
        keys = self.preference + rng.gumbel(size=self.preference.shape)
        for i in np.argsort(-keys, axis=None, kind="stable"):
            if len(candidates) >= (size + 1) // 2 or not np.isfinite(keys.flat[i]):
                break
            k, to = divmod(int(i), self.num_devices)
            self._move(candidates, int(self.unit_of[k]), to)
        for _ in range(size // 4 if len(self.path) >= 2 else 0):
            length = int(rng.integers(2, max(3, len(self.path) // 4 + 1)))
            first = int(rng.integers(0, max(1, len(self.path) - length + 1)))
            candidate = self.current.copy()
            candidate[np.isin(self.group_of, self.group_of[self.path[first:first + length]])] = int(
                rng.integers(self.num_devices))
            if np.any(candidate != self.current):
                candidates.append(candidate)
        return candidates

    def _move(self, candidates: list[np.ndarray], unit: int, to: int) -> None:
        """Add the current placement with ``unit`` on ``to``, unless it is there or was tried."""
        members = self.group_of == unit
        came = int(self.current[np.argmax(members)])
        if to != came and (unit, to, came) not in self.tried:
            self.tried.add((unit, to, came))
            candidate = self.current.copy()
            candidate[members] = to
            candidates.append(candidate)


class ListSchedule:
    """What the loop needs of one graph and cluster, computed once: the ops' rank order (ties
    between ops that can start at once), the colocation groups, each op's tail (the compute-only path below it on the fastest device) and the
    time scale of the features."""

    def __init__(self, graph: OpGraph, cluster: Cluster, hint: np.ndarray | None = None):
        self.graph, self.cluster = graph, cluster
        self.hint = np.full(graph.num_ops, -1, dtype=np.int64) if hint is None else np.asarray(hint, dtype=np.int64)
        self.rank_position = np.empty(graph.num_ops, dtype=np.int64)
        self.rank_position[rank_order(graph, cluster)] = np.arange(graph.num_ops)
        self.units = CoarseGraph.colocation(graph)
        fastest = float(cluster.speeds.max())
        self.tail = graph.bottom_levels(fastest) - graph.compute_time / fastest
        on_fastest = graph.compute_time / fastest
        self.scale = float(on_fastest.mean()) if graph.num_ops and on_fastest.mean() > 0 else 1e-6
        self.critical = float(max(graph.critical_path(fastest), self.scale))
        xfer = np.asarray(cluster.comm.transfer_time(graph.tensor_bytes), dtype=np.float64).reshape(-1)
        self.output_transfer = np.bincount(graph.tensor_src, weights=xfer, minlength=graph.num_ops)

    def run(self, network, budget: np.ndarray, noise: np.ndarray | None = None,
            forced: np.ndarray | None = None, record: bool = False) -> Model:
        """Place every op: ``network`` (``load_weights``) scores devices, or with ``network=None``
        each op goes where it starts earliest (ties: finishes earliest, then the lower device;
        ``critical_path``); ``noise`` (n, D) is added to the scores (sampling), ``forced[op] >= 0``
        takes that device for ``op``. Returns the finished model (``m.ops.device``,
        ``m.memory.peak``: the planned peak per device); with ``record``, ``self.decisions``
        holds what the policy saw."""
        n, D = self.graph.num_ops, self.cluster.num_devices
        earliest_start = network is None
        if earliest_start:
            network = _NO_NETWORK
        m = new_model(self.graph, self.cluster, placer=True)
        noise = np.zeros((n, D)) if noise is None else np.asarray(noise, dtype=np.float64)
        forced = np.full(n, -1, dtype=np.int64) if forced is None else np.asarray(forced, dtype=np.int64)
        features = np.zeros((n if record else 0, D, NUM_FEATURES))
        allowed = np.zeros((n if record else 0, D), dtype=np.bool_)
        chosen = np.zeros(n, dtype=np.int64)
        order = np.zeros(n, dtype=np.int64)
        _decide(m, self.rank_position, self.units.group_of, self.units.num_groups, np.asarray(budget, dtype=np.int64),
                self.tail, self.output_transfer, self.scale, self.critical, self.hint, *network, earliest_start, noise, forced,
                record, order, features, allowed, chosen)
        if record:
            self.decisions = Decisions(order, features, allowed, chosen)
        return m


@numba.njit(cache=True)
def feature_rows(m, op, now, decided, last_device, est, queued, reserved, cap, tail, output_transfer, scale,
                 critical, hint, rows, ok, arrive, scratch):  # pragma: no cover - compiled
    """Fill ``rows[d]`` (FEATURES), ``ok[d]`` (device d has the memory now) and ``arrive[d]``
    (when ``op``'s inputs would be on d) for ``op``, decided at time ``now`` as the
    ``decided``-th op, after one on ``last_device``, with the step estimated at ``est``;
    ``queued[d]``: the compute time of ops decided for d and not started; returns the estimated
    finish per device."""
    graph, ops, devices, channels, transfers, sent, memory = (
        m.graph, m.ops, m.devices, m.channels, m.transfers, m.sent, m.memory)
    ndev = len(devices.avail)
    n = len(graph.compute)
    fastest = devices.speed.max()
    free = np.empty(ndev)
    begin = np.empty(ndev)
    finish = np.empty(ndev)
    moved = np.zeros(ndev)
    total_in = 0.0
    largest, largest_bytes = -1, -1.0
    for k in range(graph.in_ptr[op], graph.in_ptr[op + 1]):
        e = graph.in_edges[k]
        b = float(graph.recv_bytes[graph.edge_tensor[e]])
        total_in += b
        if b > largest_bytes:
            largest, largest_bytes = ops.device[graph.edge_src[e]], b
        for d in range(ndev):
            if ops.device[graph.edge_src[e]] != d:
                moved[d] += b
    load_total = devices.busy.sum() + queued.sum()
    persistent = graph.persistent[op]
    for d in range(ndev):
        arrive[d] = arrival(graph, ops, transfers, sent, channels, op, d, scratch)
        free[d] = max(devices.avail[d], now) + queued[d]
        begin[d] = max(free[d], arrive[d])
        finish[d] = begin[d] + duration(graph.compute, devices.speed, op, d)
        need = persistent + graph.alloc_at_start[op] + received_bytes(graph, ops, sent, op, d)
        ok[d] = fits(memory, reserved, cap, d, need, persistent)
        rows[d, 6] = min(4.0, (memory.live[d] + reserved[d] + need) / max(cap[d], 1))
        rows[d, 7] = min(4.0, (memory.peak[d] + persistent) / max(cap[d], 1))
    fmin, smin, amin, vmin = finish.min(), begin.min(), arrive.min(), free.min()
    for d in range(ndev):
        rows[d, 0] = np.arcsinh((finish[d] - fmin) / scale)
        rows[d, 1] = np.arcsinh((begin[d] - smin) / scale)
        rows[d, 2] = np.arcsinh((arrive[d] - amin) / scale)
        rows[d, 3] = np.arcsinh((free[d] - vmin) / scale)
        rows[d, 4] = np.arcsinh(max(0.0, finish[d] + tail[op] - est) / scale)
        rows[d, 5] = moved[d] / total_in if total_in > 0 else 0.0
        rows[d, 8] = (devices.busy[d] + queued[d]) / load_total - 1.0 / ndev if load_total > 0 else 0.0
        rows[d, 9] = devices.speed[d] / fastest
        rows[d, 10] = 1.0 if d == largest else 0.0
        rows[d, 11] = 1.0 if d == last_device else 0.0
        rows[d, 12] = np.arcsinh(graph.compute[op] / fastest / scale)
        rows[d, 13] = tail[op] / critical
        rows[d, 14] = decided / n
        rows[d, 15] = 1.0 / ndev
        rows[d, 16] = np.arcsinh(output_transfer[op] / scale)
        rows[d, 17] = np.arcsinh((est - free[d]) / scale)
        rows[d, 18] = 1.0 if hint[op] == d else 0.0
    return finish


@numba.njit(cache=True)
def score(row, w1, b1, w2, b2, w3, b3):  # pragma: no cover - compiled
    """The network's score of one feature row: tanh(tanh(row W1 + b1) W2 + b2) w3 + b3."""
    h1 = np.tanh(row @ w1 + b1)
    h2 = np.tanh(h1 @ w2 + b2)
    return h2 @ w3 + b3[0]


@numba.njit(cache=True)
def _decide(m, rank_position, unit_of, num_units, cap, tail, output_transfer, scale, critical, hint, w1, b1, w2, b2,
            w3, b3, earliest_start, noise, forced, record, order, features, allowed, chosen):  # pragma: no cover - compiled
    """Run the step as the simulator does, deciding each op's device when its last input has
    started (so its inputs' ends are known): ops that become ready together are decided in rank
    order (``rank_position``), each on the best score (plus ``noise``) among the devices
    allowed (``earliest_start``: the earliest start, then finish), or ``forced``, and queued
    there. Each device serves its queue first come (inputs there first, ties to the lower index)
    first served, as the simulator does; the next op to start is the head that can start first;
    starting it books its transfers and memory. One compiled loop (112 lines) on purpose: the
    device choice as a helper called per op made ``critical_path`` 1.35x and the policy's pass
    1.25x slower at 10,000 ops (numba's reference counting around each call; 2026-11-29)."""
    graph, ops, devices, channels, transfers, sent, memory, releases = (
        m.graph, m.ops, m.devices, m.channels, m.transfers, m.sent, m.memory, m.releases)
    n, ndev = len(graph.compute), len(devices.avail)
    pinned = np.full(num_units, -1, dtype=np.int64)
    reserved = np.zeros(ndev, dtype=np.int64)  # bytes of ops queued on a device and not started
    queued = np.zeros(ndev)                    # their compute time there
    rows, ok = np.zeros((ndev, w1.shape[0])), np.zeros(ndev, dtype=np.bool_)  # per device: features, allowed
    arrive, scratch = np.zeros(ndev), np.zeros(ndev)
    missing, fresh = graph.in_ptr[1:] - graph.in_ptr[:-1], np.empty(n + 1, dtype=np.int64)
    nfresh = newly_ready_sources(missing, fresh)
    # Per device a heap of the ops queued there, keyed by when their inputs are there. With
    # sequential links that estimate grows as the channels fill (a key is raised when it comes
    # up) and falls only when another reader brings one of the op's inputs (it is queued again
    # then); an op leaves by its first entry that comes up. Room: one entry per op decided
    # there, one per (edge, transfer) that brings its input.
    room = n + len(graph.edge_src)
    queue_key, queue_op = np.empty(ndev * room), np.empty(ndev * room, dtype=np.int64)
    size, waiting = np.zeros(ndev, dtype=np.int64), np.zeros(n, dtype=np.bool_)
    est, now, last, decided, started = 0.0, 0.0, -1, 0, 0
    while started < n:
        if nfresh > 0:  # decide the ops just become ready, in rank order
            batch = fresh[:nfresh][np.argsort(rank_position[fresh[:nfresh]])].copy()
            nfresh = 0
            release_until(releases, memory, now)
            for op in batch:
                finish = feature_rows(m, op, now, decided, last, est, queued, reserved, cap, tail, output_transfer,
                                      scale, critical, hint, rows, ok, arrive, scratch)
                pin = pinned[unit_of[op]]
                if pin >= 0:
                    ok[:] = False
                    ok[pin] = True
                elif hint[op] >= 0:  # a placement the simulator has run: its device may always be taken
                    ok[hint[op]] = True
                elif not ok.any():
                    need = graph.persistent[op] + graph.alloc_at_start[op]
                    ok[least_overfilled(memory, reserved, cap, need, graph.persistent[op])] = True
                d = forced[op]
                if d < 0 and earliest_start:
                    for c in range(ndev):  # rows[c, 1] and rows[c, 0] grow with the start and finish
                        if ok[c] and (d < 0 or (rows[c, 1], rows[c, 0]) < (rows[d, 1], rows[d, 0])):
                            d = c
                elif d < 0:
                    best = -np.inf
                    for c in range(ndev):
                        if ok[c]:
                            s = score(rows[c], w1, b1, w2, b2, w3, b3) + noise[decided, c]
                            if s > best:
                                d, best = c, s
                order[decided] = op
                if record:
                    features[decided] = rows
                    allowed[decided] = ok
                chosen[decided] = d
                decided += 1
                ops.device[op] = d  # decided; it starts below
                pinned[unit_of[op]] = d
                queued[d] += duration(graph.compute, devices.speed, op, d)
                reserved[d] += graph.persistent[op] + graph.alloc_at_start[op]
                size[d] = push(queue_key, queue_op, d * room, size[d], arrive[d], op)
                waiting[op] = True
                est = max(est, finish[d] + tail[op])
                last = d
            continue
        best_d, best_s, best_op = -1, np.inf, n  # the queued op that can start first
        for d in range(ndev):
            while size[d] > 0:  # first come (inputs there first), first served
                head_op = queue_op[d * room]
                if not waiting[head_op]:  # started by an earlier entry
                    _, _, size[d] = pop(queue_key, queue_op, d * room, size[d])
                    continue
                ready = arrival(graph, ops, transfers, sent, channels, head_op, d, scratch)
                if ready != queue_key[d * room]:
                    _, _, size[d] = pop(queue_key, queue_op, d * room, size[d])
                    size[d] = push(queue_key, queue_op, d * room, size[d], ready, head_op)
                    continue
                s = max(devices.avail[d], ready)
                if s < best_s or (s == best_s and head_op < best_op):
                    best_d, best_s, best_op = d, s, head_op
                break
        d, op = best_d, best_op
        _, _, size[d] = pop(queue_key, queue_op, d * room, size[d])
        waiting[op] = False
        now = max(now, best_s)
        length = duration(graph.compute, devices.speed, op, d)
        queued[d] -= length
        reserved[d] -= graph.persistent[op] + graph.alloc_at_start[op]
        release_until(releases, memory, now)
        booked = sent.count[0]
        received = book_inputs(graph, ops, transfers, sent, channels, op, d)
        for x in range(booked, sent.count[0]):  # inputs now on their way to d: readers queued again
            tensor = transfers.tensor[x]
            for e in range(graph.tensor_ptr[tensor], graph.tensor_ptr[tensor + 1]):
                c = graph.edge_dst[e]
                if waiting[c] and ops.device[c] == d:
                    size[d] = push(queue_key, queue_op, d * room, size[d],
                                   arrival(graph, ops, transfers, sent, channels, c, d, scratch), c)
        start(ops, devices, op, d, best_s, length)
        hold_persistent(memory, d, graph.persistent[op])
        hold_op_memory(graph, ops, transfers, sent, memory, releases, op, received)
        started += 1
        nfresh = newly_ready(graph, missing, op, fresh, nfresh)
