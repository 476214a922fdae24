"""Reusable sequence-to-sequence pieces for placers: a bidirectional LSTM encoder and an LSTM
decoder with content-based attention that emits one action (device) per step.

The Hierarchical Planner (§2–3) and Mars' segment-level placer (§3.3) both read a sequence of
embeddings (groups, or ops of a segment) and decode one device per element, feeding back a
trainable embedding of the previous device. Nothing here knows about graphs or devices: the
encoder maps ``[B, M, input]`` to a memory ``[B, M, hidden]`` and a state; the decoder maps a
memory and a state to actions, their log probabilities and entropies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from rlplace.learn.device import normal, uniform

State = tuple[torch.Tensor, torch.Tensor]  # (h, c), each [B, hidden]


class BiLSTMEncoder(nn.Module):
    """A forward and a backward LSTM of ``hidden_size // 2`` units each, their outputs
    concatenated (HP §3: "two layers of LSTM form a bi-LSTM", after Wu et al. 2016).

    ``mask`` ([B, M] bool, True = real element) lets sequences of different lengths share a
    batch: padded steps are skipped, their memory is zero, and the final state of each
    direction is the one after its last real element."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        if hidden_size % 2:
            raise ValueError(f"hidden_size must be even (two directions), got {hidden_size}")
        self.hidden_size = hidden_size
        self.lstm = nn.LSTM(input_size, hidden_size // 2, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, State]:
        if mask is None:
            memory, (h, c) = self.lstm(x)
        else:
            lengths = mask.sum(1).cpu()
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            memory, (h, c) = self.lstm(packed)
            memory, _ = pad_packed_sequence(memory, batch_first=True, total_length=x.shape[1])
        # h, c: [2 directions, B, hidden/2] -> [B, hidden]
        return memory, (torch.cat([h[0], h[1]], dim=1), torch.cat([c[0], c[1]], dim=1))


@dataclass
class Decoded:
    actions: torch.Tensor    # [B, S] long
    log_probs: torch.Tensor  # [B, S] log probability of each action
    entropy: torch.Tensor    # [B, S] entropy of each step's distribution
    state: State             # decoder state after the last step (Mars carries it across segments)


class AttentionDecoder(nn.Module):
    """LSTM decoder with content-based attention over an encoder memory (Vinyals et al. 2015,
    as HP §2 uses it): at step t the cell reads the embedding of the action taken at t-1 (a
    trainable "go" vector at t = 0), scores every memory slot with ``v·tanh(W₁m + W₂h_t)``,
    and computes logits from ``[h_t, context]``.

    Logits are shaped as ``C·tanh(l/T)`` (HP Eq. 1, after Bello et al. 2016) when
    ``tanh_constant`` C is set, else ``l/T``. ``noise`` > 0 adds Gaussian noise scaled to that
    maximum amplitude to the (shaped) logits of sampled steps (HP §3's exploration noise).

    The attention feeds only the logits, never the next cell input, so once the actions are
    known every step can be computed at once: sampling runs the step loop without autograd to
    choose the actions, then one teacher-forced pass (one fused LSTM call, attention for all
    steps as batched tensor ops) gives their log probabilities with gradients."""

    def __init__(self, num_actions: int, hidden_size: int, memory_size: int, *,
                 temperature: float = 1.0, tanh_constant: float | None = None):
        super().__init__()
        self.num_actions, self.hidden_size = num_actions, hidden_size
        self.temperature, self.tanh_constant = temperature, tanh_constant
        self.go = nn.Parameter(torch.zeros(hidden_size))
        self.action_embedding = nn.Embedding(num_actions, hidden_size)
        self.lstm = nn.LSTM(hidden_size, hidden_size, batch_first=True)
        self.w_memory = nn.Linear(memory_size, hidden_size, bias=False)
        self.w_query = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v = nn.Linear(hidden_size, 1, bias=False)
        self.out = nn.Linear(2 * hidden_size, num_actions)

    def forward(self, memory: torch.Tensor, state: State, *, steps: int | None = None,
                actions: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
                action_mask: torch.Tensor | None = None, greedy: bool = False, noise: float = 0.0,
                generator: torch.Generator | None = None) -> Decoded:
        """Decode ``steps`` actions (default: one per memory slot). With ``actions`` ([B, S])
        the decoder is teacher-forced and scores them; otherwise it samples (or takes the
        argmax with ``greedy``). ``memory_mask`` [B, M] hides padded memory slots;
        ``action_mask`` ([S, A] or [B, S, A], True = allowed) forbids actions per step."""
        B, M, _ = memory.shape
        keys = self.w_memory(memory)  # [B, M, H], computed once for all steps
        logit_noise = None
        if actions is None:
            S = steps if steps is not None else M
            if noise > 0 and not greedy:
                logit_noise = bounded_noise((B, S, self.num_actions), noise, generator, memory.device)
            actions = self._roll_out(keys, state, S, memory_mask, action_mask, logit_noise, greedy, generator)
        log_p, final = self.teacher_forced(keys, state, actions, memory_mask, action_mask, logit_noise)
        return Decoded(actions, log_p.gather(2, actions.unsqueeze(2)).squeeze(2), categorical_entropy(log_p), final)

    def teacher_forced(self, keys: torch.Tensor, state: State, actions: torch.Tensor, memory_mask=None,
                       action_mask=None, logit_noise=None) -> tuple[torch.Tensor, State]:
        """Log probabilities [B, S, A] of every action at every step when the decoder is fed
        ``actions`` [B, S]; ``keys`` is ``w_memory(memory)``. Also the final state."""
        B = keys.shape[0]
        inputs = torch.cat([self.go.expand(B, 1, -1), self.action_embedding(actions)], dim=1)[:, :actions.shape[1]]
        hidden, (h, c) = self.lstm(inputs, _layer(state))
        return self._log_probs(hidden, keys, memory_mask, action_mask, logit_noise), (h[0], c[0])

    @torch.no_grad()
    def _roll_out(self, keys, state: State, steps: int, memory_mask, action_mask, logit_noise,
                  greedy: bool, generator) -> torch.Tensor:
        """The step loop that chooses the actions [B, steps] (no gradients needed). It computes
        what ``_log_probs`` computes, in fewer and fused operations (the loop runs once per
        decision): the input gates of every action are projected once, and sampling is the
        Gumbel-max trick on noise drawn for all steps at once."""
        B, A, H = keys.shape[0], self.num_actions, self.hidden_size
        lstm = self.lstm
        bias = lstm.bias_ih_l0 + lstm.bias_hh_l0
        action_gates = torch.addmm(bias, self.action_embedding.weight, lstm.weight_ih_l0.T)  # [A, 4H]
        gates_in = torch.addmv(bias, lstm.weight_ih_l0, self.go).expand(B, -1)
        w_out_h, w_out_c = self.out.weight[:, :H].T, self.out.weight[:, H:].T
        gumbel = None if greedy else -torch.log(-torch.log(
            uniform((B, steps, A), generator, keys.device).clamp_min(1e-20)))
        (h, c), chosen, buffer = state, [], torch.empty_like(keys)
        for t in range(steps):
            gates = torch.addmm(gates_in, h, lstm.weight_hh_l0.T)
            s = torch.sigmoid(gates)
            c = torch.addcmul(s[:, H:2 * H] * c, s[:, :H], torch.tanh(gates[:, 2 * H:3 * H]))
            h = s[:, 3 * H:] * torch.tanh(c)
            scores = additive_scores(keys, (h @ self.w_query.weight.T).unsqueeze(1), self.v.weight[0], buffer)
            if memory_mask is not None:
                scores = scores.masked_fill(~memory_mask, float("-inf"))
            context = torch.bmm(torch.softmax(scores, dim=1).unsqueeze(1), keys).squeeze(1)
            logits = torch.addmm(torch.addmm(self.out.bias, h, w_out_h), context, w_out_c) / self.temperature
            if self.tanh_constant is not None:
                logits = self.tanh_constant * torch.tanh(logits)
            if logit_noise is not None:
                logits = logits + logit_noise[:, t]
            if action_mask is not None:
                logits = logits.masked_fill(~(action_mask[t] if action_mask.dim() == 2 else action_mask[:, t]),
                                            float("-inf"))
            a = (logits if gumbel is None else logits + gumbel[:, t]).argmax(dim=1)
            chosen.append(a)
            gates_in = action_gates[a]
        return torch.stack(chosen, 1)

    def _log_probs(self, hidden, keys, memory_mask, action_mask, logit_noise) -> torch.Tensor:
        """Log probabilities [B, S, A] of the actions at decoder outputs ``hidden`` [B, S, H]."""
        scores = AdditiveScores.apply(keys, self.w_query(hidden), self.v.weight[0])  # [B, S, M]
        if memory_mask is not None:
            scores = scores.masked_fill(~memory_mask.unsqueeze(1), float("-inf"))
        context = torch.softmax(scores, dim=2) @ keys  # [B, S, H]
        logits = self.out(torch.cat([hidden, context], dim=2)) / self.temperature
        if self.tanh_constant is not None:
            logits = self.tanh_constant * torch.tanh(logits)
        if logit_noise is not None:
            logits = logits + logit_noise
        if action_mask is not None:
            logits = logits.masked_fill(~action_mask, float("-inf"))
        return torch.log_softmax(logits, dim=2)


def additive_scores(keys: torch.Tensor, queries: torch.Tensor, v: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    """``scores[b, m] = v · tanh(keys[b, m] + queries[b, 0])`` for one query per batch row,
    without autograd (the sampling loop), in ``buffer`` (shaped like ``keys``): a fresh
    megabyte-size tensor per step costs more than the arithmetic."""
    return torch.add(keys, queries, out=buffer).tanh_() @ v


class AdditiveScores(torch.autograd.Function):
    """``scores[b, s, m] = v · tanh(keys[b, m] + queries[b, s])``, computed a few steps at a time
    and recomputed in the backward pass, so the [B, S, M, H] activations never exist whole:
    for a 256-step decoder over 256 groups they would be hundreds of MB, and moving them
    through memory, not arithmetic, would bound the time. Each chunk reuses the same buffers.
    With u = 1 - tanh², the gradients are dv = Σ g·tanh, dq[b,s] = v ⊙ Σ_m g·u and
    dk[b,m] = v ⊙ Σ_s g·u; the sums over m and over (b, s, m) are matrix products."""

    CHUNK = 2 ** 20  # elements of one [B, s, M, H] block

    @staticmethod
    def forward(ctx, keys, queries, v):
        ctx.save_for_backward(keys, queries, v)
        blocks = _Blocks(keys, queries)
        return torch.cat([blocks.tanh(q) @ v for q in blocks.chunks], dim=1)

    @staticmethod
    def backward(ctx, grad):
        keys, queries, v = ctx.saved_tensors
        H = keys.shape[2]
        grad_keys, grad_v, grad_queries, start = torch.zeros_like(keys), torch.zeros_like(v), [], 0
        blocks, one = _Blocks(keys, queries), torch.ones((), dtype=keys.dtype, device=keys.device)
        for q in blocks.chunks:
            t = blocks.tanh(q)                           # [B, s, M, H]
            g = grad[:, start:start + q.shape[1]]        # [B, s, M]
            start += q.shape[1]
            grad_v += g.reshape(1, -1).mm(t.view(-1, H))[0]
            u = torch.addcmul(one, t, t, value=-1, out=blocks.view(q, second=True))  # 1 - tanh²
            grad_queries.append(torch.matmul(g.unsqueeze(2), u).squeeze(2))  # [B, s, H]
            for j in range(q.shape[1]):
                grad_keys.addcmul_(u[:, j], g[:, j].unsqueeze(2))
        return grad_keys * v, torch.cat(grad_queries, dim=1) * v, grad_v


class _Blocks:
    """The queries [B, S, H] in chunks of a few steps, and two reusable [B, s, M, H] buffers."""

    def __init__(self, keys: torch.Tensor, queries: torch.Tensor):
        B, M, H = keys.shape
        self.keys = keys
        self.chunks = queries.split(max(1, AdditiveScores.CHUNK // (B * M * H)), dim=1)
        size = B * self.chunks[0].shape[1] * M * H
        self.storage = tuple(torch.empty(size, dtype=keys.dtype, device=keys.device) for _ in range(2))

    def view(self, q: torch.Tensor, second: bool = False) -> torch.Tensor:
        B, M, H = self.keys.shape
        shape = (B, q.shape[1], M, H)
        return self.storage[second][:B * q.shape[1] * M * H].view(shape)

    def tanh(self, q: torch.Tensor) -> torch.Tensor:
        return torch.add(self.keys.unsqueeze(1), q.unsqueeze(2), out=self.view(q)).tanh_()


def _layer(state: State) -> State:
    """(h, c) [B, H] as the [1, B, H] state of a one-layer nn.LSTM."""
    return state[0].unsqueeze(0).contiguous(), state[1].unsqueeze(0).contiguous()


def categorical_entropy(log_p: torch.Tensor) -> torch.Tensor:
    """Entropy of categorical distributions given as log probabilities over the last axis
    (masked actions, log p = -inf, contribute 0)."""
    p = log_p.exp()
    return -(p * log_p.masked_fill(p == 0, 0.0)).sum(-1)


def bounded_noise(shape, amplitude: float, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """Normal noise on ``device`` rescaled so that its largest magnitude is ``amplitude`` (HP §3:
    "sampled from the normal distribution and modulated to have a max amplitude of 0.1")."""
    noise = normal(shape, generator, device)
    return amplitude * noise / noise.abs().max().clamp_min(1e-12)
