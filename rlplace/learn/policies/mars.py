"""Mars (Lan et al., ICPP'21): a graph encoder pre-trained with Deep Graph Infomax and a
segment-level sequence-to-sequence placer, trained jointly (§3), plus the ablations of its
Tables 1–2.

Encoder (§3.1, §4.2): 3 ``GCNConv`` layers of 256 units with PReLU over the unit features of the
environment (one-hot op type, then compute, memory, output bytes, op count and the input/output
shapes over the largest dimension: ``rlplace.learn.env.observation_to_data``), along the directed
data-flow edges (Eq. 1). ``encoder="sage"`` swaps in GraphSAGE (``SAGEConv``), the encoder of the
encoder-placer baseline (GDP, Zhou et al. 2019; Mars §4.1).

Segment-level seq2seq placer (§3.3, Fig. 6): units, in topological order, are cut into segments
of 128. A bi-LSTM encodes one segment, starting from the encoder state left by the previous
segment ("the encoded hidden state of previous segment is used as the initial state of encoding
new segment", Fig. 6). A uni-LSTM decoder, starting from the segment's final encoder state,
gives the segment's devices one by one; its input at unit i is the unit's encoder output, the
attention context over the segment's encoder outputs (content-based, queried by the previous
decoder state) and a trainable embedding of the previous decision. Hidden size 512 (§4.2; the
bi-LSTM has 256 per direction, so that its concatenated state is the decoder's 512). Given the
encoder states, segments decode independently, so they are decoded side by side as a batch and
the number of sequential steps is the segment size, whatever the graph size; the last segment is
padded and masked.

``placer="seq2seq"`` is the plain seq2seq placer of Table 1 (one segment holding every unit).
``placer="transformer"`` is the encoder-placer baseline's placer: a Transformer encoder over the
units in which each unit attends to its own segment and the previous one (the segment memory of
Transformer-XL, which GDP uses), and one softmax per unit, all units decided in parallel.

Sampling uses the Gumbel-max trick on noise drawn from a ``torch.Generator``, so a seed fixes
every placement. ``log_probs`` and ``entropy`` of a placement are sums over its units; the
per-unit terms are kept too (``Sample.unit_log_probs``, ``log_prob(..., per_unit=True)``) for
PPO's per-decision ratios.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import torch
from torch import nn
from torch_geometric.nn import GCNConv, SAGEConv

from rlplace.learn.base import Sample
from rlplace.learn.policies.input_feeding import TeacherForced, step
from rlplace.learn.configs import DGIConfig, MarsConfig
from rlplace.learn.device import uniform
from rlplace.learn.pretrain import PretrainResult, pretrain_encoder
from rlplace.options import checked

ENCODERS = {"gcn": GCNConv, "sage": SAGEConv}  # by the names rlplace.learn.configs.ENCODERS allows


class GraphEncoder(nn.Module):
    """``layers`` graph convolutions of ``hidden`` units, each followed by PReLU (Mars Eq. 1)."""

    def __init__(self, in_dim: int, hidden: int, layers: int, kind: str = "gcn"):
        super().__init__()
        # GCN's normalisation is computed once: a policy's graph is fixed (DGI permutes features only)
        options = {"cached": True} if kind == "gcn" else {}
        self.convs = nn.ModuleList(ENCODERS[kind](in_dim if i == 0 else hidden, hidden, **options)
                                   for i in range(layers))
        self.acts = nn.ModuleList(nn.PReLU() for _ in range(layers))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for conv, act in zip(self.convs, self.acts):
            x = act(conv(x, edge_index))
        return x


class SegmentSeq2SeqPlacer(nn.Module):
    """Mars' segment-level seq2seq placer (§3.3, Fig. 6); one segment is the plain seq2seq.

    The decoder is an LSTM written out (``i, f, g, o`` gates, ``input_feeding``) so that the
    parts of its input shared by all k samples — the unit's encoder output — are projected once
    per unit, and the previous device enters through a trainable embedding straight into gate
    space. Sampling chooses devices step by step without autograd; scoring known devices (PPO's
    re-scoring, and sampling with gradients on) runs ``input_feeding.TeacherForced``."""

    def __init__(self, in_dim: int, hidden: int, num_devices: int, segment_size: int):
        super().__init__()
        self.segment_size, self.num_devices = segment_size, num_devices
        self.encoder = nn.LSTM(in_dim, hidden // 2, batch_first=True, bidirectional=True)
        self.query = nn.Linear(hidden, hidden, bias=False)
        self.unit_gates = nn.Linear(hidden, 4 * hidden)                      # encoder output of the unit
        self.recurrent_gates = nn.Linear(2 * hidden, 4 * hidden, bias=False)  # [decoder state; context]
        self.device_gates = nn.Embedding(num_devices + 1, 4 * hidden)        # previous device; last: start
        self.out = nn.Linear(hidden, num_devices)

    def encode(self, h: torch.Tensor) -> tuple[list[torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]]]:
        """Per segment: encoder outputs [length, hidden] and final (h, c), each [hidden] (both
        directions concatenated); each segment starts from the previous one's final state."""
        memories, finals, state = [], [], None
        for start in range(0, h.shape[0], self.segment_size):
            out, state = self.encoder(h[None, start:start + self.segment_size], state)
            memories.append(out[0])
            finals.append(tuple(s[:, 0].reshape(-1) for s in state))
        return memories, finals

    def decode(self, memory: torch.Tensor, valid: torch.Tensor, init: tuple[torch.Tensor, torch.Tensor],
               k: int, actions: torch.Tensor | None, noise: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Decode S padded segments side by side, k samples each: ``memory`` [S, L, hidden],
        ``valid`` [S, L], ``init`` ([S, hidden], [S, hidden]). Teacher-forced on ``actions``
        [S, k, L] if given, else ``argmax(logits + noise)`` with ``noise`` [S, k, L, D]: chosen
        step by step without autograd, then, if gradients are on, scored teacher-forced.
        Returns (actions [S, k, L], logits [S, k, L, D]); padding is never attended to."""
        S, L, H = memory.shape
        init = tuple(part[:, None, :].expand(S, k, H) for part in init)
        keys = (memory @ self.query.weight).transpose(1, 2)      # query(h)·m = h·(W_q m): [S, H, L]
        state_weight, context_weight = self.recurrent_gates.weight.split(H, dim=1)
        # context·W_c = attention·(memory W_c): the context enters the gates through this [S, L, 4H]
        weights = (state_weight, keys, memory @ context_weight.T, ~valid[:, None, :])
        unit_gates = self.unit_gates(memory).transpose(0, 1)[:, :, None]   # [L, S, 1, 4H], shared by the k samples
        start = torch.full((S, k, 1), self.num_devices, dtype=torch.long, device=memory.device)
        if actions is None:
            with torch.no_grad():
                actions, logits = self._roll_out(unit_gates, init, weights, start[..., 0], noise)
            if not torch.is_grad_enabled():
                return actions, logits
        previous = torch.cat([start, actions[:, :, :-1]], dim=2).permute(2, 0, 1)       # [L, S, k]
        hs = TeacherForced.apply(unit_gates + self.device_gates(previous), *init, *weights)
        return actions, self.out(hs).permute(1, 2, 0, 3)

    def _roll_out(self, unit_gates: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor], weights: tuple,
                  previous: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The step loop that chooses the devices, from the start token ``previous`` [S, k]."""
        (h, c), chosen, logits = state, [], []
        for t in range(unit_gates.shape[0]):
            h, c, *_ = step(h, c, unit_gates[t] + self.device_gates.weight[previous], *weights)
            logits.append(self.out(h))
            previous = torch.argmax(logits[-1] + noise[:, :, t], dim=-1)
            chosen.append(previous)
        return torch.stack(chosen, dim=2), torch.stack(logits, dim=2)

    def forward(self, h: torch.Tensor, k: int, actions: torch.Tensor | None = None,
                noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(actions [k, U], logits [k, U, D]) for unit embeddings ``h`` [U, F]."""
        U, L = h.shape[0], min(self.segment_size, h.shape[0])
        memories, finals = self.encode(h)
        S = len(memories)
        memory = nn.utils.rnn.pad_sequence(memories, batch_first=True)
        valid = (torch.arange(L, device=h.device)[None, :]
                 < torch.tensor([len(m) for m in memories], device=h.device)[:, None])
        init = tuple(torch.stack(parts) for parts in zip(*finals))

        def to_segments(x: torch.Tensor) -> torch.Tensor:   # [k, U, ...] -> [S, k, L, ...]
            padded = nn.functional.pad(x, [0, 0] * (x.dim() - 2) + [0, S * L - U])
            return padded.reshape(k, S, L, *x.shape[2:]).transpose(0, 1)

        def from_segments(x: torch.Tensor) -> torch.Tensor:  # [S, k, L, ...] -> [k, U, ...]
            return x.transpose(0, 1).reshape(k, S * L, *x.shape[3:])[:, :U]

        chosen, logits = self.decode(memory, valid, init, k, None if actions is None else to_segments(actions),
                                     None if noise is None else to_segments(noise))
        return from_segments(chosen), from_segments(logits)


class TransformerPlacer(nn.Module):
    """The encoder-placer baseline's placer (GDP): a Transformer over the units with a
    one-segment memory, and an independent softmax per unit."""

    def __init__(self, in_dim: int, hidden: int, num_devices: int, segment_size: int, layers: int, heads: int):
        super().__init__()
        self.segment_size = segment_size
        self.project = nn.Linear(in_dim, hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, dim_feedforward=2 * hidden, dropout=0.0, batch_first=True)
        self.transformer = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Linear(hidden, num_devices)

    def attention_mask(self, num_units: int) -> torch.Tensor:
        """[U, U], True where attention is forbidden: outside a unit's own and previous segment."""
        segment = torch.arange(num_units, device=self.out.weight.device) // self.segment_size
        gap = segment[:, None] - segment[None, :]
        return (gap < 0) | (gap > 1)

    def forward(self, h: torch.Tensor, k: int, actions: torch.Tensor | None = None,
                noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        U = h.shape[0]
        x = self.project(h) + _sinusoid(U, self.project.out_features).to(h.device)
        logits = self.out(self.transformer(x[None], mask=self.attention_mask(U))[0]).expand(k, U, -1)
        chosen = actions if actions is not None else torch.argmax(logits.detach() + noise, dim=-1)
        return chosen, logits


class MarsPolicy(nn.Module):
    """Encoder + placer for one environment, implementing ``rlplace.learn.base.Policy``."""

    def __init__(self, x: torch.Tensor, edge_index: torch.Tensor, num_devices: int, config: MarsConfig = MarsConfig()):
        super().__init__()
        self.config, self.num_devices = config, num_devices
        self.register_buffer("x", x)
        self.register_buffer("edge_index", edge_index)
        with torch.random.fork_rng():
            torch.manual_seed(config.seed)
            self.encoder = GraphEncoder(x.shape[1], config.encoder_hidden, config.encoder_layers, config.encoder)
            if config.placer == "transformer":
                self.placer = TransformerPlacer(config.encoder_hidden, config.placer_hidden, num_devices,
                                                config.segment_size, config.transformer_layers,
                                                config.transformer_heads)
            else:
                segment = config.segment_size if config.placer == "segment_seq2seq" else max(x.shape[0], 1)
                self.placer = SegmentSeq2SeqPlacer(config.encoder_hidden, config.placer_hidden, num_devices, segment)
        self.pretraining: PretrainResult | None = None

    @classmethod
    def from_env(cls, env, config: MarsConfig = MarsConfig(), device: torch.device = torch.device("cpu")) -> MarsPolicy:
        """The policy for a PlacementEnv (or a wrapper of one) on ``device`` (initialised on the
        CPU, then moved with the graph's features), its encoder pre-trained with DGI on the env's
        graph when ``config.pretrain``."""
        from rlplace.learn.env import observation_to_data

        base = env.unwrapped
        observation, _ = base.reset()
        if config.type_buckets:
            hashed = hashed_op_types(base.graph, base.units.first_ops(), config.type_buckets)
            observation = {**observation, "op_type": hashed}
        num_types = config.type_buckets or int(np.max(observation["op_type"], initial=0)) + 1
        data = observation_to_data(observation, num_types)
        policy = cls(data.x, data.edge_index, base.num_devices, config).to(device)
        if config.pretrain:
            policy.pretraining = pretrain_encoder(policy.encoder, policy.x, policy.edge_index,
                                                  config.encoder_hidden, config.dgi)
        return policy

    @property
    def num_units(self) -> int:
        return self.x.shape[0]

    def _decide(self, k: int, actions: torch.Tensor | None = None,
                noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(actions, log_probs, entropy) of k placements, the last two per unit [k, U]:
        teacher-forced or chosen by noise."""
        embeddings = self.encoder(self.x, self.edge_index)
        chosen, logits = self.placer(embeddings, k, actions, noise)
        log_p = torch.log_softmax(logits, dim=-1)
        return chosen, log_p.gather(-1, chosen[..., None])[..., 0], -(log_p.exp() * log_p).sum(dim=-1)

    def sample(self, k: int, generator: torch.Generator | None = None) -> Sample:
        u = uniform((k, self.num_units, self.num_devices), generator, self.x.device).clamp_min(1e-20)
        noise = -torch.log(-torch.log(u))   # argmax(logits + Gumbel): a sample of softmax(logits)
        actions, log_probs, entropy = self._decide(k, noise=noise)
        return Sample(actions, log_probs.sum(dim=1), entropy.sum(dim=1), unit_log_probs=log_probs)

    def log_prob(self, actions: torch.Tensor, extras: dict[str, torch.Tensor] | None = None,
                 per_unit: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        _, log_probs, entropy = self._decide(actions.shape[0], actions=actions.long())
        return (log_probs, entropy) if per_unit else (log_probs.sum(dim=1), entropy.sum(dim=1))

    @torch.no_grad()
    def greedy(self) -> torch.Tensor:
        return self._decide(1, noise=torch.zeros(1, self.num_units, self.num_devices, device=self.x.device))[0][0]

    def extras_for(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        return {}  # no latent choice: log_prob scores any placement


def hashed_op_types(graph, ops: np.ndarray, buckets: int) -> np.ndarray:
    """The op type of each of ``ops`` as CRC-32 of its name modulo ``buckets``: the same id for
    the same type in every graph (distinct types may share a bucket)."""
    return np.array([zlib.crc32((graph.op_type[i] or "").encode()) % buckets for i in ops], dtype=np.int64)


def _sinusoid(length: int, dim: int) -> torch.Tensor:
    """The sinusoidal position encoding of Vaswani et al. (2017), [length, dim]."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate[:dim // 2])
    return table


def build(env, device: torch.device, **options) -> MarsPolicy:
    """The policy for a PlacementEnv on ``device``, from the ``agent.policy`` config (``dgi`` a
    nested dict). Weights are initialised from the seed ``make_policy`` gave torch (the run's seed)."""
    options = checked(MarsConfig, {"seed": torch.initial_seed(), **options}, "agent.policy")
    config = MarsConfig(**{**options, "dgi": DGIConfig(**options.get("dgi", {}))})
    return MarsPolicy.from_env(env, config, device)
