"""The Hierarchical Planner (Mirhoseini et al., ICLR 2018, §2–3), ``agent=hierarchical``.

A feed-forward *Grouper* assigns every unit of the environment (a colocation unit: ops that
must share a device) to one of ``num_groups`` groups; a seq2seq *Placer* (bi-LSTM encoder,
LSTM decoder with content-based attention) reads one embedding per group and gives each group a
device; every unit goes to its group's device. Both are trained jointly: the log probability of
a placement is the grouping's plus the placer's (Eqs. 2–6), so one REINFORCE loss trains both.

Inputs (§2). Unit embedding = op-type embedding (size 20, over the 200 most common types of the
graph; rarer types share one extra id) ‖ output-shape vector (up to 6 outputs × 4 dims, padded
with -1) ‖ adjacency vector (BFS indices of up to 6 predecessor and 6 successor units, padded
with -1). Group embedding = count of each op type in the group ‖ the summed output-shape vectors
of its units ‖ group adjacency (1 where the group has an edge to group i), each row divided by
its largest entry + 1 as in the authors' code.

Ablations (§3, Table 2): ``grouping="random"`` feeds a fixed random grouping to a learned
Placer; ``grouping="none"`` is the Simple Planner, one feed-forward network that predicts a
device for every unit directly ("a feed forward Grouper which predicts placements rather than
groups").
"""

from __future__ import annotations

from collections import Counter, deque

import numpy as np
import torch
from torch import nn

from rlplace.learn.base import Sample
from rlplace.learn.configs import HierarchicalConfig
from rlplace.learn.device import multinomial
from rlplace.learn.policies.seq2seq import AttentionDecoder, BiLSTMEncoder, bounded_noise, categorical_entropy
from rlplace.coarsen import CoarseGraph
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.options import checked

class HierarchicalPlanner(nn.Module):
    """One policy for one problem: ``units`` (the environment's CoarseGraph) on
    ``num_devices`` devices. Implements ``rlplace.learn.base.Policy``."""

    def __init__(self, units: CoarseGraph, num_devices: int, config: HierarchicalConfig | None = None):
        super().__init__()
        self.config = c = config or HierarchicalConfig()
        self.num_units, self.num_devices = units.num_groups, num_devices
        features = unit_features(units, c)
        self.register_buffer("unit_type", torch.as_tensor(features["type"]))
        self.register_buffer("unit_static", torch.as_tensor(features["static"]))
        self.register_buffer("unit_type_counts", torch.as_tensor(features["type_counts"]))
        self.register_buffer("unit_shapes", torch.as_tensor(features["shapes"]).clamp_min(0.0))
        self.register_buffer("unit_edges", torch.as_tensor(features["edges"]))
        self.register_buffer("samples_drawn", torch.zeros((), dtype=torch.long))  # policy steps, for the noise

        self.type_embedding = nn.Embedding(c.num_types + 1, c.type_embedding)
        self.unit_embedding = nn.Embedding(self.num_units, c.unit_embedding) if c.unit_embedding else None
        unit_size = c.type_embedding + self.unit_static.shape[1] + c.unit_embedding
        outputs = num_devices if c.grouping == "none" else c.num_groups
        self.grouper = None
        if c.grouping != "random":
            self.grouper = nn.Sequential(nn.Linear(unit_size, c.grouper_hidden), nn.ReLU(),
                                         nn.Linear(c.grouper_hidden, outputs))
        if c.grouping == "random":
            rng = np.random.default_rng(c.grouping_seed)
            self.register_buffer("fixed_grouping", torch.as_tensor(rng.integers(0, c.num_groups, self.num_units)))
        if c.grouping != "none":
            group_size = self.unit_type_counts.shape[1] + self.unit_shapes.shape[1] + c.num_groups
            self.encoder = BiLSTMEncoder(group_size, c.placer_hidden)
            self.decoder = AttentionDecoder(num_devices, c.placer_hidden, c.placer_hidden,
                                            temperature=c.temperature, tanh_constant=c.tanh_constant)

    # ------------------------------------------------------------------------ Policy protocol
    def sample(self, k: int, generator: torch.Generator | None = None) -> Sample:
        """m = 1 grouping and k placements of its groups (HP §3, Eqs. 4 and 6)."""
        noise = self.config.noise_amplitude if int(self.samples_drawn) < self.config.noise_steps else 0.0
        self.samples_drawn += 1
        group_log_p = group_entropy = torch.zeros((), device=self.unit_type.device)
        if self.config.grouping == "none":
            logits = self._unit_logits(noise, generator)
            log_p = torch.log_softmax(logits, dim=1)  # [U, D]
            actions = multinomial(log_p.exp(), k, generator, replacement=True).T  # [k, U]
            return Sample(actions, log_p.gather(1, actions.T).sum(0), categorical_entropy(log_p).sum().expand(k))
        if self.config.grouping == "learned":
            log_p = torch.log_softmax(self._unit_logits(noise, generator), dim=1)  # [U, G]
            grouping = multinomial(log_p.exp(), 1, generator).squeeze(1)
            group_log_p = log_p.gather(1, grouping.unsqueeze(1)).sum()
            group_entropy = categorical_entropy(log_p).sum()
        else:
            grouping = self.fixed_grouping
        memory, state = self.encoder(self.group_embeddings(grouping.unsqueeze(0)))
        decoded = self.decoder(memory.expand(k, -1, -1), _repeat(state, k), noise=noise, generator=generator)
        group_devices = decoded.actions  # [k, G]
        return Sample(actions=group_devices[:, grouping],
                      log_probs=group_log_p + decoded.log_probs.sum(1),
                      entropy=group_entropy + decoded.entropy.sum(1),
                      extras={"grouping": grouping.expand(k, -1), "group_devices": group_devices})

    def log_prob(self, actions: torch.Tensor, extras: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Log probability and entropy of given placements, without noise. ``extras`` must hold
        the grouping and group devices they were sampled with; placements from elsewhere (a
        heuristic) get them from ``extras_for``."""
        if self.config.grouping == "none":
            log_p = torch.log_softmax(self._unit_logits(0.0, None), dim=1)
            return log_p.gather(1, actions.T).sum(0), categorical_entropy(log_p).sum().expand(actions.shape[0])
        if "grouping" not in extras:
            extras = self.extras_for(actions)
        grouping, group_devices = extras["grouping"], extras["group_devices"]
        group_log_p = group_entropy = torch.zeros(grouping.shape[0], device=grouping.device)
        if self.config.grouping == "learned":
            log_p = torch.log_softmax(self._unit_logits(0.0, None), dim=1)
            group_log_p = log_p.T.gather(0, grouping).sum(1)
            group_entropy = categorical_entropy(log_p).sum().expand(grouping.shape[0])
        memory, state = self.encoder(self.group_embeddings(grouping))
        decoded = self.decoder(memory, state, actions=group_devices)
        return group_log_p + decoded.log_probs.sum(1), group_entropy + decoded.entropy.sum(1)

    @torch.no_grad()
    def greedy(self) -> torch.Tensor:
        if self.config.grouping == "none":
            return self._unit_logits(0.0, None).argmax(1)
        if self.config.grouping == "learned":
            grouping = self._unit_logits(0.0, None).argmax(1)
        else:
            grouping = self.fixed_grouping
        memory, state = self.encoder(self.group_embeddings(grouping.unsqueeze(0)))
        return self.decoder(memory, state, greedy=True).actions[0, grouping]

    @torch.no_grad()
    def extras_for(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        """A grouping and group devices that produce the unit placements ``actions`` [k, U],
        for scoring placements the policy did not sample (behaviour cloning). Learned grouping:
        group g belongs to device g mod D, and unit u goes to the group of its device a_u that
        the current Grouper likes best, so the placement is reproduced exactly with the least
        change to the Grouper. Random grouping: each group goes to the device most of its units
        are on."""
        if self.config.grouping == "none":
            return {}
        G, D = self.config.num_groups, self.num_devices
        if self.config.grouping == "learned" and G < D:
            raise ConfigError(f"cannot reproduce a placement on {D} devices with {G} groups")
        if self.config.grouping == "learned":
            owner = torch.arange(G, device=actions.device) % D
            return {"grouping": self._favourite_group(owner.expand(actions.shape[0], -1), actions),
                    "group_devices": owner.expand(actions.shape[0], -1).contiguous()}
        grouping = self.fixed_grouping.expand(actions.shape[0], -1)
        votes = torch.zeros(actions.shape[0], G * D, device=actions.device)
        votes.scatter_add_(1, grouping * D + actions, torch.ones_like(actions, dtype=votes.dtype))
        return {"grouping": grouping.contiguous(), "group_devices": votes.view(-1, G, D).argmax(2).contiguous()}

    def _favourite_group(self, group_devices: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """[k, U]: for each unit, the group on its device a_u (``group_devices`` [k, G]) that the
        Grouper's logits favour."""
        logits = self._unit_logits(0.0, None)  # [U, G]
        return logits.unsqueeze(0).masked_fill(group_devices.unsqueeze(1) != actions.unsqueeze(2),
                                               float("-inf")).argmax(2)

    # ------------------------------------------------------------------------ the networks
    def unit_embeddings(self) -> torch.Tensor:
        """[U, 20 + static]: op-type embedding ‖ output shapes ‖ adjacency (§2) [‖ unit embedding]."""
        parts = [self.type_embedding(self.unit_type), self.unit_static]
        if self.unit_embedding is not None:
            parts.append(self.unit_embedding.weight)
        return torch.cat(parts, dim=1)

    def _unit_logits(self, noise: float, generator: torch.Generator | None) -> torch.Tensor:
        """C·tanh(l/T) (Eq. 1) plus the exploration noise."""
        logits = self.config.tanh_constant * torch.tanh(self.grouper(self.unit_embeddings()) / self.config.temperature)
        if noise > 0:
            logits = logits + bounded_noise(logits.shape, noise, generator, logits.device)
        return logits

    def group_embeddings(self, grouping: torch.Tensor) -> torch.Tensor:
        """[B, G, types + shapes + G] for groupings [B, U] (§2, "To generate input for the
        Placer"); each row over its largest entry + 1."""
        B, G, device = grouping.shape[0], self.config.num_groups, grouping.device
        rows = (grouping + G * torch.arange(B, device=device).unsqueeze(1)).reshape(-1)  # group index in the batch
        counts = torch.zeros(B * G, self.unit_type_counts.shape[1], device=device).index_add_(
            0, rows, self.unit_type_counts.repeat(B, 1))
        shapes = torch.zeros(B * G, self.unit_shapes.shape[1], device=device).index_add_(
            0, rows, self.unit_shapes.repeat(B, 1))
        src, dst = grouping[:, self.unit_edges[0]], grouping[:, self.unit_edges[1]]  # [B, E]
        adjacency = torch.zeros(B, G, G, device=device)
        batch = torch.arange(B, device=device).unsqueeze(1).expand_as(src)
        adjacency[batch[src != dst], src[src != dst], dst[src != dst]] = 1.0
        embedding = torch.cat([counts.view(B, G, -1), shapes.view(B, G, -1), adjacency], dim=2)
        return embedding / (embedding.amax(dim=2, keepdim=True) + 1.0)


def _repeat(state, k: int):
    return tuple(s.expand(k, -1).contiguous() for s in state)


# ---------------------------------------------------------------------------- unit features
def unit_features(units: CoarseGraph, config: HierarchicalConfig) -> dict[str, np.ndarray]:
    """Per unit (represented by its first op, as the environment does): type id, the static
    part of its embedding (output shapes ‖ adjacency), op-type counts of all its ops, output
    shapes (for group embeddings), and the unit edges [2, E]."""
    graph, group_of, U = units.graph, units.group_of, units.num_groups
    first = units.first_ops()

    common = [t for t, _ in sorted(Counter(t or "" for t in graph.op_type).items(), key=lambda kv: (-kv[1], kv[0]))]
    type_id = {t: k for k, t in enumerate(common[:config.num_types])}
    op_type = np.array([type_id.get(t or "", config.num_types) for t in graph.op_type], dtype=np.int64)
    type_counts = np.zeros((U, config.num_types + 1), dtype=np.float32)
    np.add.at(type_counts, (group_of, op_type), 1.0)

    scale = (max(_largest_dim(graph), 1.0), max(float(graph.output_total.max(initial=0)), 1.0))
    shapes = np.stack([_output_vector(graph, int(i), config, *scale) for i in first]) if U else np.zeros((0, 0))
    src, dst = group_of[graph.edge_src], group_of[graph.edge_dst]
    edges = np.unique(np.stack([src[src != dst], dst[src != dst]]), axis=1).astype(np.int64)
    adjacency = _adjacency_vectors(edges, U, config.max_neighbours)
    return {"type": op_type[first], "static": np.concatenate([shapes, adjacency], axis=1).astype(np.float32),
            "type_counts": type_counts, "shapes": shapes.astype(np.float32), "edges": edges}


def _output_vector(graph: OpGraph, op: int, config: HierarchicalConfig, largest_dim: float,
                   largest_output: float) -> np.ndarray:
    """Output shapes of one op, ``max_outputs`` × ``shape_dims``, -1 where absent (§2). Dims
    are scaled by the graph's largest dim; a graph without shapes gets each output's bytes
    over the graph's largest output as its first dim."""
    vector = np.full((config.max_outputs, config.shape_dims), -1.0)
    shapes = graph.output_shapes[op] or []
    for p, size in enumerate(graph.output_bytes[op][:config.max_outputs]):
        shape = shapes[p] if p < len(shapes) else None
        if shape:
            dims = np.asarray(shape[:config.shape_dims], dtype=float)
            vector[p, :len(dims)] = dims / largest_dim
        else:
            vector[p, 0] = size / largest_output
    return vector.reshape(-1)


def _largest_dim(graph: OpGraph) -> float:
    return float(max((d for shapes in graph.output_shapes for s in (shapes or []) for d in (s or [])), default=1))


def _adjacency_vectors(edges: np.ndarray, U: int, k: int) -> np.ndarray:
    """Per unit: BFS indices (over U) of up to k predecessors then k successors, -1 padded (§2)."""
    succ: list[list[int]] = [[] for _ in range(U)]
    pred: list[list[int]] = [[] for _ in range(U)]
    for s, d in edges.T:
        succ[s].append(int(d))
        pred[d].append(int(s))
    order = np.full(U, -1, dtype=np.int64)
    queue, n = deque(u for u in range(U) if not pred[u]), 0
    for u in queue:
        order[u] = -2
    while queue:
        u = queue.popleft()
        order[u], n = n, n + 1
        for v in succ[u]:
            if order[v] == -1:
                order[v] = -2
                queue.append(v)
    vectors = np.full((U, 2 * k), -1.0)
    for u in range(U):
        for j, v in enumerate(pred[u][:k]):
            vectors[u, j] = order[v] / max(U, 1)
        for j, v in enumerate(succ[u][:k]):
            vectors[u, k + j] = order[v] / max(U, 1)
    return vectors


def build(env, device: torch.device, **options) -> HierarchicalPlanner:
    """The policy for a PlacementEnv (``env.unwrapped`` is used) on ``device``, options from the config."""
    config = HierarchicalConfig(**checked(HierarchicalConfig, options, "agent.policy"))
    problem = env.unwrapped
    return HierarchicalPlanner(problem.units, problem.num_devices, config).to(device)
