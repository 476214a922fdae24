"""The execution model shared by the simulator and the list-scheduling placers.

Readable oracles, in plain Python from docs/design.md and Baechi §2.3: ``literal_simulate`` (the
simulator's event loop, under either memory model) and ``literal_m_etf`` (the list scheduler).
The compiled versions must give the same schedules; m-ETF's own schedule must be what the
simulator says of its placement.
"""

import heapq

import numpy as np
from hypothesis import given, strategies as st

from conftest import op, random_dags, typed_dags
from rlplace.cluster import Cluster, CommModel, Device
from rlplace.placers.baechi.optimizer import deferred_sets
from rlplace.graph import OpGraph
from rlplace.placers import make_placer
from rlplace.schedule import memory_peaks
from rlplace.sim import lower_bound, simulate, simulate_many


def cluster(n, mode, memory=10**9, latency=0.5, seconds_per_byte=0.05, memory_model="default"):
    return Cluster(tuple(Device(f"d{i}", memory) for i in range(n)), CommModel(latency, seconds_per_byte, mode),
                   memory_model=memory_model)


@st.composite
def timed_dags(draw, max_ops=14):
    """Random DAGs whose ops all take time, some in colocation groups."""
    n = draw(st.integers(1, max_ops))
    ops = [op(f"n{i}", compute_time=draw(st.sampled_from([0.5, 1.0, 2.5, 7.0])),
              out=[draw(st.integers(0, 50))], temporary=draw(st.integers(0, 20)),
              persistent=draw(st.integers(0, 20))) for i in range(n)]
    for i in range(n):
        group = draw(st.integers(-3, 2))
        if group >= 0:
            ops[i]["colocation_group"] = f"g{group}"
    pairs = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = [(f"n{i}", f"n{j}", ops[i]["output_bytes"][0]) for i, j in sorted(pairs) if i < j]
    return OpGraph.from_records(ops, edges, name="timed")


# ------------------------------------------------------------------------------ the oracles
def inputs(g: OpGraph, i: int) -> list[tuple[int, int]]:
    """(producer, tensor) of every input edge of op i, in input order."""
    return [(int(g.edge_src[e]), int(g.edge_tensor[e])) for e in g.in_edges[g.in_ptr[i]:g.in_ptr[i + 1]]]


def literal_peaks(g: OpGraph, ndev: int, buffers: list[tuple[int, int, float, float]]) -> list[int]:
    """Peak bytes per device: a buffer (device, bytes, from, to) is live at instant t if
    from <= t < to, or from == to == t; persistent bytes all step."""
    peaks = []
    for d in range(ndev):
        mine = [(b, a, f) for dd, b, a, f in buffers if dd == d]
        live = [sum(b for b, a, f in mine if a <= t < f or a == f == t) for _, t, _ in mine]
        peaks.append(max(live, default=0))
    return peaks


def literal_simulate(g: OpGraph, c: Cluster, device: list[int]):
    """docs/design.md's simulator, step by step: returns op starts, op ends, peak memory (under the
    cluster's memory model)."""
    n, ndev, seq = g.num_ops, c.num_devices, c.comm.mode == "sequential"
    xtime = [float(c.comm.transfer_time(b)) for b in g.tensor_bytes]
    missing = {i: len(inputs(g, i)) for i in range(n)}
    ready = {d: [] for d in range(ndev)}  # (time it became ready, op)
    for i in range(n):
        if missing[i] == 0:
            heapq.heappush(ready[device[i]], (0.0, i))
    events, sent = [], {}  # (time, kind, id); (tensor, device) -> transfer id
    transfers = []  # [tensor, device, start, end]
    busy, free_at = [False] * ndev, {"send": [0.0] * ndev, "recv": [0.0] * ndev}
    start, end = [0.0] * n, [0.0] * n
    t = 0.0
    while True:
        for d in range(ndev):
            if not busy[d] and ready[d]:
                _, i = heapq.heappop(ready[d])
                busy[d], start[i], end[i] = True, t, t + g.compute_time[i] / c.speeds[d]
                heapq.heappush(events, (end[i], 0, i))
        if not events:
            break
        t = events[0][0]
        while events and events[0][0] == t:
            _, kind, ident = heapq.heappop(events)
            if kind == 0:  # an op ends: its outputs go to their readers
                busy[device[ident]] = False
                for tensor in range(g.op_tensor_ptr[ident], g.op_tensor_ptr[ident + 1]):
                    for e in range(g.tensor_ptr[tensor], g.tensor_ptr[tensor + 1]):
                        reader = int(g.edge_dst[e])
                        d = device[reader]
                        if d == device[ident]:
                            missing[reader] -= 1
                            if missing[reader] == 0:
                                heapq.heappush(ready[d], (t, reader))
                        elif (tensor, d) not in sent:
                            begin = t
                            if seq:
                                begin = max(t, free_at["send"][device[ident]], free_at["recv"][d])
                                free_at["send"][device[ident]] = free_at["recv"][d] = begin + xtime[tensor]
                            sent[tensor, d] = len(transfers)
                            transfers.append([tensor, d, begin, begin + xtime[tensor]])
                            heapq.heappush(events, (begin + xtime[tensor], 1, sent[tensor, d]))
            else:  # a transfer ends: its readers there may be ready
                tensor, d = transfers[ident][:2]
                for e in range(g.tensor_ptr[tensor], g.tensor_ptr[tensor + 1]):
                    reader = int(g.edge_dst[e])
                    if device[reader] == d:
                        missing[reader] -= 1
                        if missing[reader] == 0:
                            heapq.heappush(ready[d], (t, reader))
    shared = literal_shared(g) if c.memory_model == "tf_reuse" else {}
    return start, end, literal_peaks(g, ndev, literal_buffers(g, device, start, end, transfers, shared))


def literal_shared(g: OpGraph) -> dict[int, int]:
    """rlplace.schedule.aliases' rules for TensorFlow's buffers: tensor -> the input tensor whose
    buffer it shares. An output of a view op, an output the graph gives no bytes, or an output of
    an in-place kernel whose input has no other reader and shares nothing, takes the buffer of
    the first input of the same size (not 0) that is a step's allocation (bytes of its own, or a
    share of one), inputs it alone reads first."""
    from rlplace.schedule.aliases import IN_PLACE_OPS, VIEW_OPS

    shared, allocated = {}, {}
    for t in range(len(g.tensor_src)):
        i, port = int(g.tensor_src[t]), int(g.tensor_port[t])
        allocated[t] = port >= 0 and g.output_bytes[i][port] > 0
        if port < 0 or g.tensor_bytes[t] == 0:
            continue
        kind = g.op_type[i]
        alone_first = sorted(inputs(g, i), key=lambda input: g.tensor_ptr[input[1] + 1] - g.tensor_ptr[input[1]] != 1)
        for _, a in alone_first:
            if g.tensor_port[a] < 0 or g.tensor_bytes[a] != g.tensor_bytes[t] or not allocated[a]:
                continue
            alone = g.tensor_ptr[a + 1] - g.tensor_ptr[a] == 1 and a not in shared
            if kind in VIEW_OPS or g.output_bytes[i][port] == 0 or (kind in IN_PLACE_OPS and alone):
                shared[t], allocated[t] = a, True
                break
    return shared


def literal_buffers(g, device, start, end, transfers, shared=None):
    """Every buffer (device, bytes, from, to) of a schedule, by docs/design.md's memory rules; with
    ``shared`` (tensor -> input tensor, TensorFlow's rules), a tensor that shares an input's
    buffer has none of its own and keeps the shared one (its producer's or the copy received on
    its device) until its own readers and transfers are done."""
    shared = shared or {}
    buffers = [[device[i], int(g.persistent_bytes[i]), -1.0, np.inf] for i in range(g.num_ops)]
    buffers += [[device[i], int(g.temporary_bytes[i] + g.unread_output_bytes[i]), start[i], end[i]]
                for i in range(g.num_ops)]
    copy = {}  # (tensor, device) -> its buffer there
    for tensor, src in enumerate(g.tensor_src):
        readers = [int(g.edge_dst[e]) for e in range(g.tensor_ptr[tensor], g.tensor_ptr[tensor + 1])]
        held = [end[r] for r in readers if device[r] == device[src]]
        held += [x_end for tt, _, _, x_end in transfers if tt == tensor]
        if tensor in shared:
            mine = copy[shared[tensor], device[src]]
            mine[3] = max(mine[3], max(held))
        else:
            mine = [device[src], int(g.tensor_output_bytes[tensor]), start[src], max(held)]
            buffers.append(mine)
        copy[tensor, device[src]] = mine
        for tt, d, x_start, _ in transfers:
            if tt == tensor and g.tensor_port[tensor] >= 0:
                last = max(end[r] for r in readers if device[r] == d)
                copy[tensor, d] = [d, int(g.tensor_bytes[tensor]), x_start, last]
                buffers.append(copy[tensor, d])
    return [tuple(b) for b in buffers]


def literal_m_etf(g: OpGraph, c: Cluster):
    """m-ETF with ample memory and parallel transfers (Baechi §2.3, Eq. 1; §3.1 colocation):
    among ops whose predecessors are all placed, each device's candidate is the op whose inputs
    arrive there first (then the lower index), starting when the device is free and the inputs
    are there; the candidate that starts first is placed (the lower device on ties). The first
    op of a colocation group takes the group to its device. A group's sources wait until a member
    decides its device where some member with an input from outside the group does not wait for
    them (``rlplace.placers.baechi.optimizer.deferred_sets``); should only waiting sources be ready, they go as
    usual. Returns devices, starts, ends."""
    n, ndev = g.num_ops, c.num_devices
    xtime = [float(c.comm.transfer_time(b)) for b in g.tensor_bytes]
    group = {int(i): name for name, ops in g.colocation_groups.items() if len(ops) > 1 for i in ops}
    group_device, arrived = {}, {}
    device, start, end, avail = [-1] * n, [0.0] * n, [0.0] * n, [0.0] * ndev
    waiting = set()
    for name, ops in g.colocation_groups.items():
        members = set(int(i) for i in ops)
        sources = [i for i in members if not inputs(g, i)]
        reached, stack = set(sources), list(sources)
        while stack:
            for w in g.successors(stack.pop()).tolist():
                if w not in reached:
                    reached.add(w)
                    stack.append(w)
        entered = [i for i in members if any(s not in members for s, _ in inputs(g, i))]
        if len(members) > 1 and any(i not in reached for i in entered):
            waiting.update(sources)

    def arrival(i, d):
        return max([end[s] if device[s] == d else arrived.get((tt, d), end[s] + xtime[tt])
                    for s, tt in inputs(g, i)], default=0.0)

    for _ in range(n):
        ready = [i for i in range(n) if device[i] < 0 and all(device[s] >= 0 for s, _ in inputs(g, i))]
        if all(i in waiting and group[i] not in group_device for i in ready):
            waiting.clear()
        ready = [i for i in ready if i not in waiting or group[i] in group_device]
        best = None  # (start, device, op)
        for d in range(ndev):
            allowed = [i for i in ready if group_device.get(group.get(i), d) == d]
            if allowed:
                a, i = min((arrival(i, d), i) for i in allowed)
                if best is None or max(avail[d], a) < best[0]:
                    best = (max(avail[d], a), d, i)
        s, d, i = best
        for src, tt in inputs(g, i):
            if device[src] != d:
                arrived.setdefault((tt, d), end[src] + xtime[tt])
        device[i], start[i], end[i] = d, s, s + g.compute_time[i] / c.speeds[d]
        avail[d] = max(avail[d], end[i])
        if i in group:
            group_device.setdefault(group[i], d)
    return device, start, end


# ------------------------------------------------------------------------------ the tests
@given(random_dags(), st.integers(1, 3), st.sampled_from(["parallel", "sequential"]), st.data())
def test_simulator_is_the_literal_event_loop(g, ndev, mode, data):
    c = cluster(ndev, mode)
    device = data.draw(st.lists(st.integers(0, ndev - 1), min_size=g.num_ops, max_size=g.num_ops))
    r = simulate(g, c, np.array(device), trace=True)
    start, end, peaks = literal_simulate(g, c, device)
    np.testing.assert_array_equal(r.schedule.op_start, start)
    np.testing.assert_array_equal(r.schedule.op_end, end)
    assert r.peak_memory.tolist() == peaks
    # the same memory rules computed from the finished schedule, as placers predict theirs
    assert memory_peaks(g, ndev, r.schedule).tolist() == peaks


@given(typed_dags(), st.integers(1, 3), st.sampled_from(["parallel", "sequential"]), st.data())
def test_tf_reuse_simulation_is_the_literal_event_loop(g, ndev, mode, data):
    c = cluster(ndev, mode, memory_model="tf_reuse")
    device = data.draw(st.lists(st.integers(0, ndev - 1), min_size=g.num_ops, max_size=g.num_ops))
    r = simulate(g, c, np.array(device), trace=True)
    start, end, peaks = literal_simulate(g, c, device)
    np.testing.assert_array_equal(r.schedule.op_start, start)
    assert r.peak_memory.tolist() == peaks
    assert memory_peaks(g, ndev, r.schedule, "tf_reuse").tolist() == peaks
    batch = simulate_many(g, c, np.array([device]))
    assert batch.peak_memory[0].tolist() == peaks


@given(random_dags(), st.integers(1, 3), st.sampled_from(["parallel", "sequential"]), st.data())
def test_batched_simulation_equals_one_by_one(g, ndev, mode, data):
    c = cluster(ndev, mode)
    rows = np.array(data.draw(st.lists(st.lists(st.integers(0, ndev - 1), min_size=g.num_ops,
                                                max_size=g.num_ops), min_size=1, max_size=4)))
    batch = simulate_many(g, c, rows)
    for k, row in enumerate(rows):
        r = simulate(g, c, row)
        assert batch.step_time[k] == r.step_time
        assert batch.peak_memory[k].tolist() == r.peak_memory.tolist()
        assert batch.oom[k] == r.oom


@given(random_dags(), st.integers(1, 3), st.sampled_from(["parallel", "sequential"]), st.data())
def test_no_placement_beats_the_lower_bound(g, ndev, mode, data):
    c = Cluster(tuple(Device(f"d{i}", 10**9, s) for i, s in enumerate([1.0, 2.0, 0.5][:ndev])),
                CommModel(0.5, 0.05, mode))
    device = data.draw(st.lists(st.integers(0, ndev - 1), min_size=g.num_ops, max_size=g.num_ops))
    assert simulate(g, c, np.array(device)).step_time >= lower_bound(g, c) * (1 - 1e-12)


ETF_OFF = dict(coplacement=False, fusion=False, forward_only=False)


@given(timed_dags(), st.integers(1, 4))
def test_m_etf_is_the_literal_list_scheduler(g, ndev):
    """The paper's loop: without the single-device fallback, which returns the whole graph on one
    device where that simulates faster (not part of the literal version)."""
    c = cluster(ndev, "parallel")
    placer = make_placer("m_etf", **ETF_OFF, single_fallback=False)
    placement = placer.place(g, c)
    device, start, end = literal_m_etf(g, c)
    assert placement.device_of.tolist() == device
    np.testing.assert_array_equal(placement.schedule.op_start, start)
    np.testing.assert_array_equal(placement.schedule.op_end, end)


def holds_sources(g: OpGraph) -> bool:
    """Whether m-ETF holds a colocation group's sources until a member decides its device
    (``rlplace.placers.baechi.optimizer.deferred_sets``): the simulator runs such a source as soon as its device
    is free, so there the placer's own schedule differs from the simulator's (a documented rule;
    ``test_a_placers_own_schedule_is_a_schedule_of_its_placement`` checks it is still valid)."""
    set_of = np.arange(g.num_ops)
    for ops in g.colocation_groups.values():
        set_of[ops] = ops[0]
    set_of = np.unique(set_of, return_inverse=True)[1].reshape(-1)
    sources = np.diff(g.in_ptr) == 0
    grouped = np.bincount(set_of)[set_of] > 1
    return bool(np.any(sources & grouped & deferred_sets(g, set_of)[set_of]))


@given(timed_dags(), st.integers(1, 4))
def test_m_etf_predicts_what_the_simulator_says(g, ndev):
    """Parallel transfers, ops that take time, ample memory, no sources held: the placer's own
    schedule is the simulator's schedule of its placement, so its step time and peak memory are
    too."""
    if holds_sources(g):
        return
    c = cluster(ndev, "parallel")
    placed = make_placer("m_etf", **ETF_OFF).place(g, c)
    r = simulate(g, c, placed, trace=True)
    np.testing.assert_array_equal(placed.schedule.op_start, r.schedule.op_start)
    np.testing.assert_array_equal(placed.schedule.op_end, r.schedule.op_end)
    assert placed.schedule.step_time == r.step_time
    assert placed.peak_memory.tolist() == r.peak_memory.tolist()


@given(typed_dags(), st.integers(1, 4))
def test_m_etf_predicts_what_the_simulator_says_with_tf_reuse(g, ndev):
    if holds_sources(g):
        return
    c = cluster(ndev, "parallel", memory_model="tf_reuse")
    placed = make_placer("m_etf", **ETF_OFF).place(g, c)
    r = simulate(g, c, placed, trace=True)
    np.testing.assert_array_equal(placed.schedule.op_end, r.schedule.op_end)
    assert placed.peak_memory.tolist() == r.peak_memory.tolist()


@given(typed_dags(times=(0.5, 1.0, 2.5)), st.sampled_from(["default", "tf_reuse"]))
def test_m_etfs_memory_accounting_on_one_device_is_the_simulators(g, memory_model):
    """The memory m-ETF books while it decides (hold_op_memory, with the releases of shared
    buffers) peaks where the simulator's does when every op takes time on one device."""
    c = cluster(1, "parallel", memory_model=memory_model)
    placed = make_placer("m_etf", **ETF_OFF).place(g, c)
    r = simulate(g, c, placed)
    assert placed.planned_peak.tolist() == r.peak_memory.tolist()


OWN_SCHEDULE = [("m_etf", ETF_OFF), ("m_sct", ETF_OFF), ("heft", {}), ("celeritas", dict(fusion=False)),
                ("celeritas", dict(fusion=False, in_time=False)), ("order_place", dict(fusion=False))]


@given(timed_dags(), st.integers(1, 4), st.sampled_from(["parallel", "sequential"]),
       st.sampled_from(OWN_SCHEDULE))
def test_a_placers_own_schedule_is_a_schedule_of_its_placement(g, ndev, mode, placer):
    """Where a placer's own schedule may differ from the simulator's (documented on each: m-ETF
    and m-SCT book a sequential transfer when they place its reader, the simulator when its
    producer ends; m-SCT keeps a device for a favorite child, Celeritas a node for its CPD-TOPO
    predecessor's device (Eq. 9); HEFT, Order-Place and the paper's Adjusting Placement insert ops
    and transfers into idle slots), it is still a schedule of the same placement: every op after its
    inputs arrive, one op per device and one transfer per channel at a time (HEFT: no channel
    contention, as in the original)."""
    c = cluster(ndev, mode)
    name, options = placer
    placement = make_placer(name, **options).place(g, c)
    s = placement.schedule
    np.testing.assert_array_equal(s.op_device, placement.device_of)
    np.testing.assert_allclose(s.op_end - s.op_start, g.compute_time / c.speeds[s.op_device])
    eps = 1e-9
    for e in range(g.num_edges):
        src, dst, tt = g.edge_src[e], g.edge_dst[e], g.edge_tensor[e]
        if s.op_device[src] == s.op_device[dst]:
            assert s.op_start[dst] >= s.op_end[src] - eps
        else:
            x = np.flatnonzero((s.transfer_tensor == tt) & (s.transfer_dst_device == s.op_device[dst]))
            assert len(x) == 1
            assert s.transfer_start[x[0]] >= s.op_end[src] - eps
            assert s.op_start[dst] >= s.transfer_end[x[0]] - eps
    busy = [(s.op_start[s.op_device == d], s.op_end[s.op_device == d]) for d in range(ndev)]
    if mode == "sequential" and name != "heft":
        busy += [(s.transfer_start[s.transfer_src_device == d], s.transfer_end[s.transfer_src_device == d])
                 for d in range(ndev)]
        busy += [(s.transfer_start[s.transfer_dst_device == d], s.transfer_end[s.transfer_dst_device == d])
                 for d in range(ndev)]
    for lo, hi in busy:
        order = np.lexsort((hi, lo))
        assert np.all(lo[order][1:] >= hi[order][:-1] - eps)


def test_fit_to_memory_places_again_with_the_placers_estimate_corrected():
    """A placer that believes every op needs 1 byte puts both 60-byte ops on device 0 while its
    budget there allows two; the simulator finds 120 bytes on a 100-byte device, so the budget
    becomes 100 * 2 / 120 = 1 op's worth, and the second placement fits."""
    from rlplace.placers.fit import fit_to_memory

    g = OpGraph.from_records([op("a", 1.0, out=[], persistent=60), op("b", 1.0, out=[], persistent=60)], [])
    c = cluster(2, "parallel", memory=100)
    budgets = []

    def place(budget):
        budgets.append(budget.tolist())
        on_first = min(2, int(budget[0]))
        device = np.array([0] * on_first + [1] * (2 - on_first))
        return device, np.bincount(device, minlength=2)

    device, result = fit_to_memory(place, g, c, np.array([100, 100]), rounds=3)
    assert device.tolist() == [0, 1] and not simulate(g, c, device).oom
    assert result.step_time == simulate(g, c, device).step_time and not result.oom
    assert budgets == [[100, 100], [1, 100]]
    device, result = fit_to_memory(place, g, c, np.array([100, 100]), rounds=1)
    assert device.tolist() == [0, 0] and result.oom  # placed once, not placed again


def test_fit_to_memory_corrects_gigabyte_budgets():
    """On 16 GiB devices memory x planned bytes overflows int64: the corrected budget is still
    memory x planned / simulated peak (12 GiB planned, 20 GiB found: 9.6 GiB), not 0."""
    from rlplace.placers.fit import fit_to_memory

    gib = 2**30
    g = OpGraph.from_records([op("a", 1.0, out=[], persistent=10 * gib), op("b", 1.0, out=[], persistent=10 * gib)], [])
    c = cluster(2, "parallel", memory=16 * gib)
    budgets = []

    def place(budget):
        budgets.append(budget.tolist())
        device = np.array([0, 0]) if budget[0] >= 16 * gib else np.array([0, 1])
        return device, np.array([12 * gib, 0])

    device, _ = fit_to_memory(place, g, c, np.array([16 * gib, 16 * gib]), rounds=2)
    assert device.tolist() == [0, 1]
    assert budgets[1] == [int(16 * gib * 12 / 20), 16 * gib]
