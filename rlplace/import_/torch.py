"""PyTorch: one training step of an ``nn.Module`` (forward, backward, SGD update) as an OpGraph.

The step is traced with ``make_fx`` (``torch.fx.experimental.proxy_tensor``) on fake tensors,
so nothing is computed: ``functional_call`` of the module on its parameters and buffers, the
loss, ``torch.autograd.grad`` of the loss for every parameter, and ``p - lr * grad``. The trace
is a graph of aten ops (the ops AOTAutograd's joint graph holds, before any partitioning);
``torch.export``'s joint export (``_export_forward_backward``) gives the same ops but drops the
link from a gradient op to its forward op, which this trace keeps (below). Per op:

* ``op_type``: ``aten.<name>`` of the overload packet (``aten.convolution_backward``);
* ``output_shapes`` and ``output_bytes`` from the fake tensors (an op with several outputs,
  such as ``native_batch_norm``, has one port each; ``getitem`` nodes become edges from
  that port). An op whose schema returns an alias of an input (views: ``view``, ``t``,
  ``expand``, ``detach``; in-place ops) allocates nothing: ``output_bytes`` 0;
* parameters and buffers are ops of type ``parameter`` / ``buffer`` whose bytes are
  ``persistent_bytes``; inputs and targets are ops of type ``input``;
* ``colocation_group``: a parameter with its SGD update, and a parameter or buffer with every op
  that writes it in place (batch norm's running statistics), named after the parameter;
* ``forward_op``: the autograd engine runs one backward node per forward op; a pre-hook on
  every node of the loss's autograd graph marks where in the trace that node's ops begin, and
  its sequence number names the forward op (``seq_nr`` in the forward ops' meta).

``granularity="module"`` (issue 43: placements a PyTorch model can use): every op is owned by
the innermost module running when it was traced (forward pre- and post-hooks on every module
mark where each module's ops begin and end), and a module's ops, its parameters and buffers,
their updates and the backward ops of its forward ops form one colocation group, so a placement
never splits a module's parameters; modules that share a tensor (tied weights) or whose ops read
another module's parameters (``nn.MultiheadAttention`` reads its ``out_proj``'s) share one group.
Each op is tagged with its group's rank in forward order (``layer``), so ``expert`` splits the
model into contiguous stages. ``rlplace.export.torch_device_map`` turns a placement of such a
graph into the ``device_map`` of Hugging Face ``accelerate`` (or of plain ``module.to``).

Costs: ``rlplace.costs`` (analytical, per aten op type, with PyTorch's own FLOP counts where
``torch.utils.flop_counter`` has a formula: ``counted_flops``; ``unknown_types`` lists the types
without either) or ``profile_step``: the traced step run on this machine's CPU under
``torch.profiler``, one ``record_function`` range per op.
"""

from __future__ import annotations

import math
import operator
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph
import torch
import torch.fx.traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import get_proxy_mode, make_fx
from torch.utils._pytree import tree_flatten

from rlplace.costs import with_analytical_costs, with_compute_time
from rlplace.errors import ConfigError, GraphError
from rlplace.graph import OpGraph

PERSISTENT = ("parameter", "buffer")
GRANULARITIES = ("op", "module")
_getitem = operator.getitem


@dataclass
class TorchStep:
    """The traced training step: ``module(params, buffers, inputs, targets)`` runs it on real
    tensors and returns ``(loss, updated params)``."""

    module: torch.fx.GraphModule
    params: list[torch.Tensor]
    buffers: list[torch.Tensor]
    inputs: list[torch.Tensor]
    targets: list[torch.Tensor]

    def run(self):
        return self.module(self.params, self.buffers, self.inputs, self.targets)


@dataclass
class TorchImport:
    graph: OpGraph
    step: TorchStep
    seconds: float  # wall time of tracing, conversion and costing
    holders: dict[str, list[str]]  # op of each parameter and buffer -> every module holding it


def default_loss(output: torch.Tensor, *targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against integer class targets; the mean square of the output without
    targets."""
    if targets:
        return torch.nn.functional.cross_entropy(output.flatten(0, -2), targets[0].flatten())
    return output.float().square().mean()


def from_torch(model: torch.nn.Module, inputs: Sequence[torch.Tensor] | torch.Tensor,
               targets: Sequence[torch.Tensor] | torch.Tensor = (),
               loss: Callable[..., torch.Tensor] = default_loss, learning_rate: float = 0.01,
               name: str | None = None, costs: str = "analytical", device: Any = "v100",
               profile_steps: int = 3, granularity: str = "op") -> TorchImport:
    """The OpGraph of one training step of ``model`` on ``inputs`` (``loss(model(*inputs),
    *targets)``). ``costs``: ``"analytical"`` (roofline on ``device``, a ``rlplace.costs``
    preset or spec), ``"profile"`` (measured here, mean of ``profile_steps`` steps after one
    warm-up) or ``"none"`` (compute_time 0). ``granularity``: ``"op"`` (each op placed on its
    own) or ``"module"`` (module docstring)."""
    if costs not in ("analytical", "profile", "none"):
        raise ConfigError(f"from_torch: costs must be 'analytical', 'profile' or 'none', got {costs!r}")
    if granularity not in GRANULARITIES:
        raise ConfigError(f"from_torch: granularity must be one of {GRANULARITIES}, got {granularity!r}")
    start = time.perf_counter()
    inputs = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
    targets = [targets] if isinstance(targets, torch.Tensor) else list(targets)
    step = trace_step(model, inputs, targets, loss, learning_rate)
    holders = state_holders(model)
    graph = step_graph(step, name or type(model).__name__, [n for n, _ in model.named_parameters()],
                       [n for n, _ in model.named_buffers()], holders, granularity)
    if costs == "analytical":
        graph = with_analytical_costs(graph, device, counted_flops(step, graph))
    elif costs == "profile":
        measured = profile_step(step, profile_steps)
        graph = with_compute_time(graph, [measured.get(n, 0.0) for n in graph.names])
    return TorchImport(graph, step, time.perf_counter() - start, holders)


def state_holders(model: torch.nn.Module) -> dict[str, list[str]]:
    """For each parameter and buffer (by its op name, ``param:<name>`` / ``buffer:<name>``, the
    name ``named_parameters`` gives it), every module that holds that tensor: more than one
    where weights are tied."""
    holders: dict[str, list[str]] = {}
    for kind, named in (("param", model.named_parameters), ("buffer", model.named_buffers)):
        first = {id(t): f"{kind}:{n}" for n, t in named()}
        for n, t in named(remove_duplicate=False):
            holders.setdefault(first[id(t)], []).append(n.rpartition(".")[0])
    return holders


def trace_step(model: torch.nn.Module, inputs: list[torch.Tensor], targets: list[torch.Tensor],
               loss: Callable[..., torch.Tensor], learning_rate: float) -> TorchStep:
    """``make_fx`` of forward + ``autograd.grad`` + SGD on fake tensors; the graph's meta
    ``backward_marks`` holds ``(node count, forward seq_nr)`` for each backward node run."""
    param_names = [n for n, _ in model.named_parameters()]
    buffer_names = [n for n, _ in model.named_buffers()]
    marks: list[tuple[int, int]] = []
    owners: list[tuple[int, str]] = []   # (node count, the innermost module running from there on)
    running: list[str] = []

    def enter(module_name):
        def hook(module, args):
            running.append(module_name)
            owners.append((len(get_proxy_mode().tracer.graph.nodes), module_name))
        return hook

    def leave(module_name):
        def hook(module, args, output):
            running.pop()
            owners.append((len(get_proxy_mode().tracer.graph.nodes), running[-1] if running else ""))
        return hook

    def step(params, buffers, inputs, targets):
        state = {**dict(zip(param_names, params)), **dict(zip(buffer_names, buffers))}
        value = loss(torch.func.functional_call(model, state, tuple(inputs)), *targets)
        graph = get_proxy_mode().tracer.graph
        marks.append((len(graph.nodes), -1))  # the backward pass starts here
        for node in _autograd_nodes(value.grad_fn):
            node.register_prehook(lambda grads, nr=node._sequence_nr(): marks.append((len(graph.nodes), nr)))
        grads = torch.autograd.grad(value, params, allow_unused=True)
        marks.append((len(graph.nodes), -1))  # the optimizer update starts here
        return value, [p if g is None else p - learning_rate * g for p, g in zip(params, grads)]

    params = [p.detach().requires_grad_(p.requires_grad) for p in model.parameters()]
    buffers = [b.detach() for b in model.buffers()]
    hooks = [h for n, m in model.named_modules() if n
             for h in (m.register_forward_pre_hook(enter(n)), m.register_forward_hook(leave(n)))]
    try:
        with fx_traceback.preserve_node_meta():
            module = make_fx(step, tracing_mode="fake")(params, buffers, inputs, targets)
    finally:
        for h in hooks:
            h.remove()
    module.meta["backward_marks"] = marks
    module.meta["module_owners"] = owners
    return TorchStep(module, params, buffers, inputs, targets)


def _autograd_nodes(root) -> list:
    seen, stack, nodes = set(), [root], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        nodes.append(node)
        stack.extend(nxt for nxt, _ in node.next_functions)
    return nodes


def _values(val) -> list:
    """The tensors (or None) an fx node produces, one per output port."""
    return list(val) if isinstance(val, (tuple, list)) else [val]


def _nbytes(t) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def _is_view(target) -> bool:
    schema = getattr(target, "_schema", None)
    return bool(schema and schema.returns and all(r.alias_info is not None for r in schema.returns))


def _written_args(node) -> list:
    """The fx nodes an op writes in place (schema arguments marked ``(a!)``)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return []
    written = []
    for k, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = node.args[k] if k < len(node.args) else node.kwargs.get(arg.name)
            written.extend(v for v in tree_flatten(value)[0] if isinstance(v, torch.fx.Node))
    return written


def step_graph(step: TorchStep, name: str, param_names: list[str], buffer_names: list[str],
               holders: dict[str, list[str]], granularity: str = "op") -> OpGraph:
    """Op records and edges of the traced step (see the module docstring); ``holders``
    (``state_holders``) give each parameter's module: the layer tags, and with
    ``granularity="module"`` the groups."""
    nodes = list(step.module.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    roles = ([("parameter", f"param:{p}") for p in param_names] + [("buffer", f"buffer:{b}") for b in buffer_names]
             + [("input", f"input:{i}") for i in range(len(step.inputs) + len(step.targets))])
    if len(roles) != len(placeholders):
        raise GraphError(f"torch import of {name!r}: {len(placeholders)} traced inputs for {len(roles)} "
                         f"parameters, buffers, inputs and targets")
    op_name = {n: nm for n, (_, nm) in zip(placeholders, roles)}
    op_type = {n: kind for n, (kind, _) in zip(placeholders, roles)}
    position = {n: i for i, n in enumerate(nodes)}

    records: dict[Any, dict[str, Any]] = {}
    for n in nodes:
        if n.op == "placeholder":
            val = n.meta["val"]
            persistent = op_type[n] in PERSISTENT
            records[n] = {"name": op_name[n], "op_type": op_type[n], "compute_time": 0.0,
                          "persistent_bytes": _nbytes(val) if persistent else 0, "temporary_bytes": 0,
                          "output_bytes": [0 if persistent else _nbytes(val)],
                          "output_shapes": [list(val.shape)]}
        elif n.op == "call_function" and n.target is not _getitem:
            vals = _values(n.meta.get("val"))
            view = _is_view(n.target)
            records[n] = {"name": n.name, "op_type": _type_name(n.target), "compute_time": 0.0,
                          "persistent_bytes": 0, "temporary_bytes": 0,
                          "output_bytes": [0 if view else _nbytes(v) for v in vals],
                          "output_shapes": [list(v.shape) if isinstance(v, torch.Tensor) else None for v in vals]}

    def source(arg) -> tuple[Any, int]:
        if arg.op == "call_function" and arg.target is _getitem:
            return arg.args[0], arg.args[1]
        return arg, 0

    edges: dict[tuple[str, str, int], int] = {}
    for n in records:
        if n.op == "placeholder":
            continue
        for arg in n.all_input_nodes:
            src, port = source(arg)
            if src in records:
                edges.setdefault((records[src]["name"], n.name, port), _nbytes(arg.meta.get("val")))

    _colocate(records, nodes, placeholders[:len(param_names) + len(buffer_names)], source)
    _pair_backward(records, nodes, position, step.module.meta["backward_marks"])
    if granularity == "module":
        _group_by_module(records, nodes, step.module.meta, holders, source)
    else:
        _layer_by_top_module(records, nodes, step.module.meta, holders)
    return OpGraph.from_records(list(records.values()), [(s, d, b, p) for (s, d, p), b in edges.items()],
                                name=name)


def _type_name(target) -> str:
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return f"aten.{packet.__name__}" if target.namespace == "aten" else f"{target.namespace}.{packet.__name__}"
    return getattr(target, "__name__", str(target))


def _colocate(records, nodes, state_nodes, source) -> None:
    """A parameter and its update (the step's returned new value), and any state and the ops
    that write it in place, share a colocation group named after the state."""
    group = {p: records[p]["name"] for p in state_nodes}
    output = next(n for n in nodes if n.op == "output")
    updates = output.args[0][1:]  # flattened (loss, *updated params)
    for p, new in zip(state_nodes, updates):
        src, _ = source(new)
        if src in records and src is not p:
            records[src]["colocation_group"] = group[p]
            records[p]["colocation_group"] = group[p]
    for n in records:
        if n.op != "call_function":
            continue
        for w in _written_args(n):
            if w in group:
                records[n]["colocation_group"] = group[w]
                records[w]["colocation_group"] = group[w]


def _pair_backward(records, nodes, position, marks: list[tuple[int, int]]) -> None:
    """``forward_op`` of each backward op from the backward-node marks: the ops traced after a
    mark belong to that autograd node; its sequence number is the forward op's ``seq_nr``."""
    forward: dict[int, Any] = {}
    first_backward = marks[0][0] if marks else len(nodes)
    for n in nodes[:first_backward]:
        nr = n.meta.get("seq_nr")
        if n in records and n.op == "call_function" and nr is not None and int(nr) not in forward:
            forward[int(nr)] = n
    bounds = [m[0] for m in marks] + [math.inf]
    for k, (begin, nr) in enumerate(marks):
        fwd = forward.get(nr)
        if fwd is None:
            continue
        for n in nodes[begin:]:
            if position[n] >= bounds[k + 1]:
                break
            if n in records and n.op == "call_function":
                records[n]["forward_op"] = records[fwd]["name"]


def _owners(records, nodes, meta) -> dict[Any, str]:
    """The innermost module running when each forward op was traced (the hooks' events)."""
    events = meta["module_owners"]
    forward_end = meta["backward_marks"][0][0] if meta["backward_marks"] else len(nodes)
    owner: dict[Any, str] = {}
    k, current = 0, ""
    for i, n in enumerate(nodes[:forward_end]):
        while k < len(events) and events[k][0] <= i:
            current = events[k][1]
            k += 1
        if n in records and n.op == "call_function" and current:
            owner[n] = current
    return owner


def _layer_by_top_module(records, nodes, meta, holders: dict[str, list[str]]) -> None:
    """``granularity="op"``: each op's ``layer``, the forward rank of the top-level module (a
    child of the model) that owns it: its own for a forward op, its forward op's for a backward
    op, its tensor's for a parameter or buffer and the ops colocated with it. ``expert`` then
    splits the model into contiguous stages, as it does at module granularity."""
    top = {n: m.partition(".")[0] for n, m in _owners(records, nodes, meta).items()}
    rank: dict[str, int] = {}
    for n in nodes:
        if n in top:
            rank.setdefault(top[n], len(rank))
    by_name = {r["name"]: n for n, r in records.items()}
    state_top = {state: modules[0].partition(".")[0] for state, modules in holders.items()}
    for n, record in records.items():
        module = state_top.get(record["name"]) or state_top.get(record.get("colocation_group"))
        if module is None:
            module = top.get(n) or top.get(by_name.get(record.get("forward_op")))
        if module in rank:
            record["layer"] = rank[module]


def _group_by_module(records, nodes, meta, holders: dict[str, list[str]], source) -> None:
    """``granularity="module"`` (module docstring): each op's colocation group and ``layer``
    from the module that owns it (its forward op's, for a backward op; its state's, for the ops
    already colocated with a parameter or buffer)."""
    owner = _owners(records, nodes, meta)
    by_name = {r["name"]: n for n, r in records.items()}
    modules = sorted({m for ms in holders.values() for m in ms} | set(owner.values()))
    index = {m: i for i, m in enumerate(modules)}
    pairs = [(ms[0], m) for ms in holders.values() for m in ms[1:]]      # tied tensors
    for n, m in owner.items():                                          # ops reading another's state
        for arg in n.all_input_nodes:
            state = records.get(source(arg)[0], {}).get("name")
            if state in holders:
                pairs.append((m, holders[state][0]))
    links = scipy.sparse.coo_matrix((np.ones(len(pairs)), ([index[a] for a, _ in pairs], [index[b] for _, b in pairs])),
                                    shape=(len(modules), len(modules)))
    _, component = scipy.sparse.csgraph.connected_components(links, directed=False)
    first_in_forward = {}
    for n in nodes:
        if n in owner:
            first_in_forward.setdefault(component[index[owner[n]]], len(first_in_forward))
    names = {}
    for m in modules:   # a group is named after its outermost module
        c = component[index[m]]
        names[c] = min(names.get(c, m), m, key=lambda x: (x.count("."), x))
    group_of_module = {m: f"module:{names[component[index[m]]] or '<root>'}" for m in modules}
    layer_of_group = {group_of_module[m]: first_in_forward.get(component[index[m]]) for m in modules}
    state_group = {state: group_of_module[ms[0]] for state, ms in holders.items()}
    for n, record in records.items():
        group = None
        if record["name"] in state_group:
            group = state_group[record["name"]]
        elif record.get("colocation_group") in state_group:
            group = state_group[record["colocation_group"]]
        elif n in owner:
            group = group_of_module[owner[n]]
        elif record.get("forward_op") in by_name and by_name[record["forward_op"]] in owner:
            group = group_of_module[owner[by_name[record["forward_op"]]]]
        if group is not None:
            record["colocation_group"] = group
            if layer_of_group.get(group) is not None:
                record["layer"] = layer_of_group[group]


def counted_flops(step: TorchStep, graph: OpGraph) -> np.ndarray:
    """FLOPs of each op of ``graph`` that PyTorch's own flop counter has a formula for
    (``torch.utils.flop_counter.flop_registry``: matrix products, convolutions and their
    gradients, attention), from the traced shapes; NaN for the other ops. Not for the gradient
    of a grouped convolution: the counter's weight-gradient formula ignores ``groups`` (1.5x the
    textbook count for groups=2 in tests/test_import.py), so ``rlplace.costs``' rule counts it."""
    from torch.utils.flop_counter import flop_registry

    counted = np.full(graph.num_ops, np.nan)
    for node in step.module.graph.nodes:
        packet = getattr(node.target, "overloadpacket", None)
        grouped = packet is torch.ops.aten.convolution_backward and node.args[9] != 1
        if node.op == "call_function" and packet in flop_registry and node.name in graph.index and not grouped:
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda arg: arg.meta["val"])
            counted[graph.index[node.name]] = flop_registry[packet](*args, **kwargs, out_val=node.meta["val"])
    return counted


def profile_step(step: TorchStep, steps: int = 3) -> dict[str, float]:
    """Seconds per op (mean over ``steps`` runs after one warm-up) of the traced step on this
    machine's CPU, read from ``torch.profiler`` ranges named after the ops."""
    interpreter = _RangeInterpreter(step.module)
    args = tree_flatten((step.params, step.buffers, step.inputs, step.targets))[0]
    with torch.no_grad():
        interpreter.run(*args)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                interpreter.run(*args)
    totals: dict[str, float] = {}
    for event in prof.events():
        if event.name in interpreter.names:
            totals[event.name] = totals.get(event.name, 0.0) + event.cpu_time_total * 1e-6
    return {k: v / steps for k, v in totals.items()}


class _RangeInterpreter(torch.fx.Interpreter):
    def __init__(self, module: torch.fx.GraphModule):
        super().__init__(module)
        self.names = {n.name for n in module.graph.nodes if n.op == "call_function"}

    def run_node(self, n):
        if n.op != "call_function" or n.target is _getitem:
            return super().run_node(n)
        with torch.profiler.record_function(n.name):
            return super().run_node(n)


__all__ = ["TorchImport", "TorchStep", "default_loss", "from_torch", "profile_step", "state_holders",
           "step_graph", "trace_step"]
