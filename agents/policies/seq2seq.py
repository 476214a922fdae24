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
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

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
                logit_noise = bounded_noise((B, S, self.num_actions), noise, generator)
            with torch.no_grad():
                actions = self._roll_out(keys, state, S, memory_mask, action_mask, logit_noise, greedy, generator)
        inputs = torch.cat([self.go.expand(B, 1, -1), self.action_embedding(actions)], dim=1)[:, :actions.shape[1]]
        hidden, (h, c) = self.lstm(inputs, _layer(state))
        log_p = self._log_probs(hidden, keys, memory_mask, action_mask, logit_noise)  # [B, S, A]
        return Decoded(actions, log_p.gather(2, actions.unsqueeze(2)).squeeze(2), categorical_entropy(log_p),
                       (h[0], c[0]))

    def _roll_out(self, keys, state: State, steps: int, memory_mask, action_mask, logit_noise,
                  greedy: bool, generator) -> torch.Tensor:
        """The step loop that chooses the actions [B, steps] (no gradients needed)."""
        B = keys.shape[0]
        (h, c), previous, chosen = state, self.go.expand(B, -1), []
        for t in range(steps):
            h, c = self._cell(previous, h, c)
            log_p = self._log_probs(h.unsqueeze(1), keys, memory_mask, _step(action_mask, t), _step(logit_noise, t))[:, 0]
            a = log_p.argmax(dim=1) if greedy else torch.multinomial(log_p.exp(), 1, generator=generator).squeeze(1)
            chosen.append(a)
            previous = self.action_embedding(a)
        return torch.stack(chosen, 1)

    def _cell(self, x, h, c) -> State:
        """One step of ``self.lstm`` (PyTorch's gate order i, f, g, o): calling the fused layer
        for a single step costs several times more."""
        lstm = self.lstm
        gates = F.linear(x, lstm.weight_ih_l0, lstm.bias_ih_l0) + F.linear(h, lstm.weight_hh_l0, lstm.bias_hh_l0)
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c

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


class AdditiveScores(torch.autograd.Function):
    """``scores[b, s, m] = v · tanh(keys[b, m] + queries[b, s])``, computed a few steps at a time
    and recomputed in the backward pass, so the [B, S, M, H] activations never exist whole:
    for a 256-step decoder over 256 groups they would be hundreds of MB, and moving them
    through memory, not arithmetic, would bound the time."""

    CHUNK = 2 ** 20  # elements of one [B, s, M, H] block

    @staticmethod
    def forward(ctx, keys, queries, v):
        ctx.save_for_backward(keys, queries, v)
        return torch.cat([torch.tanh(keys.unsqueeze(1) + q.unsqueeze(2)) @ v for q in _chunks(keys, queries)], dim=1)

    @staticmethod
    def backward(ctx, grad):
        keys, queries, v = ctx.saved_tensors
        grad_keys, grad_v, grad_queries, start = torch.zeros_like(keys), torch.zeros_like(v), [], 0
        for q in _chunks(keys, queries):
            t = torch.tanh(keys.unsqueeze(1) + q.unsqueeze(2))  # [B, s, M, H]
            g = grad[:, start:start + q.shape[1]].unsqueeze(3)  # [B, s, M, 1]
            start += q.shape[1]
            grad_v += (g * t).sum((0, 1, 2))
            d = g * v * (1 - t * t)
            grad_queries.append(d.sum(2))
            grad_keys += d.sum(1)
        return grad_keys, torch.cat(grad_queries, dim=1), grad_v


def _chunks(keys: torch.Tensor, queries: torch.Tensor):
    B, M, H = keys.shape
    return queries.split(max(1, AdditiveScores.CHUNK // (B * M * H)), dim=1)


def _layer(state: State) -> State:
    """(h, c) [B, H] as the [1, B, H] state of a one-layer nn.LSTM."""
    return state[0].unsqueeze(0).contiguous(), state[1].unsqueeze(0).contiguous()


def _step(per_step: torch.Tensor | None, t: int) -> torch.Tensor | None:
    """Step t of an [S, A] or [B, S, A] tensor, keeping a step axis of size 1."""
    if per_step is None:
        return None
    return per_step[t:t + 1] if per_step.dim() == 2 else per_step[:, t:t + 1]


def categorical_entropy(log_p: torch.Tensor) -> torch.Tensor:
    """Entropy of categorical distributions given as log probabilities over the last axis
    (masked actions, log p = -inf, contribute 0)."""
    p = log_p.exp()
    return -(p * log_p.masked_fill(p == 0, 0.0)).sum(-1)


def bounded_noise(shape, amplitude: float, generator: torch.Generator | None) -> torch.Tensor:
    """Normal noise rescaled so that its largest magnitude is ``amplitude`` (HP §3: "sampled
    from the normal distribution and modulated to have a max amplitude of 0.1")."""
    noise = torch.randn(shape, generator=generator)
    return amplitude * noise / noise.abs().max().clamp_min(1e-12)
