"""The recurrence of Mars' segment decoder (§3.3, Fig. 6): an LSTM whose input at step t holds
the attention context over the segment's encoder outputs, queried by the state at t - 1 (input
feeding, Luong et al. 2015). ``step`` is one step without autograd (the sampling loop);
``TeacherForced`` runs the steps over known inputs as one autograd Function (scoring).

S segments are decoded side by side, k samples each: states are [S, k, H]. The context enters
the gates through the encoder outputs projected to gate space once per pass ("memory gates",
[S, L, 4H]): ``attention @ (memory @ W_c.T)`` equals ``(attention @ memory) @ W_c.T``, at L/H
of the cost per step when a segment (L = 128) is shorter than the hidden size (H = 512).

Autograd over the step loop would compute, at every step, a gradient of each tensor the step
reads whole — the recurrent weight [4H, H], the keys [S, H, L], the memory gates [S, L, 4H] —
and add them up step by step. The backward pass here runs the loop in reverse for the state's
gradients only, keeps each step's gate and attention-score gradients, and then computes those
three gradients once, each as one matrix product over all steps and samples.
"""

from __future__ import annotations

import math

import torch

State = tuple[torch.Tensor, torch.Tensor]  # (h, c), each [S, k, H]


def step(h: torch.Tensor, c: torch.Tensor, input_gates: torch.Tensor, weight: torch.Tensor, keys: torch.Tensor,
         memory_gates: torch.Tensor, padding: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One decoder step from state (h, c) [S, k, H] and ``input_gates`` [S, k, 4H] (the parts of
    the gates that do not depend on the state). ``weight`` [4H, H] is the recurrent weight,
    ``keys`` [S, H, L] the query-projected encoder outputs (score = h · keys), ``padding``
    [S, 1, L] the padded memory slots. Returns (h, c, attention [S, k, L], the activated gates
    ``i, f, g, o`` [S, k, 4H], tanh(c))."""
    H = h.shape[-1]
    attention = torch.softmax(torch.bmm(h, keys).masked_fill_(padding, -math.inf), dim=-1)
    gates = torch.baddbmm(input_gates, attention, memory_gates).add_(h @ weight.T)
    gates[..., :2 * H].sigmoid_()
    gates[..., 2 * H:3 * H].tanh_()
    gates[..., 3 * H:].sigmoid_()
    i, f, g, o = gates.chunk(4, dim=-1)
    c = torch.addcmul(f * c, i, g)
    tanh_c = torch.tanh(c)
    return o * tanh_c, c, attention, gates, tanh_c


class TeacherForced(torch.autograd.Function):
    """States h_1..h_T [T, S, k, H] of the decoder fed ``input_gates`` [T, S, k, 4H] from
    (h0, c0), with gradients for every input but ``padding``."""

    @staticmethod
    def forward(ctx, input_gates, h0, c0, weight, keys, memory_gates, padding):
        h, c = h0, c0
        hs, cs, attentions, activations, tanhs = [h0], [c0], [], [], []
        for x in input_gates:
            h, c, attention, gates, tanh_c = step(h, c, x, weight, keys, memory_gates, padding)
            hs.append(h)
            cs.append(c)
            attentions.append(attention)
            activations.append(gates)
            tanhs.append(tanh_c)
        hs = torch.stack(hs)
        ctx.save_for_backward(hs, torch.stack(cs[:-1]), torch.stack(attentions), torch.stack(activations),
                              torch.stack(tanhs), weight, keys, memory_gates)
        return hs[1:]

    @staticmethod
    def backward(ctx, grad_hs):
        hs, c_prev, attentions, activations, tanhs, weight, keys, memory_gates = ctx.saved_tensors
        T, S, k, H = grad_hs.shape
        grad_gates = torch.empty_like(activations)
        grad_scores = torch.empty_like(attentions)
        dh, dc = torch.zeros_like(hs[0]), torch.zeros_like(c_prev[0])
        for t in reversed(range(T)):
            i, f, g, o = activations[t].chunk(4, dim=-1)
            dh = dh + grad_hs[t]
            dc = dc + dh * o * (1 - tanhs[t] ** 2)
            d = grad_gates[t]
            torch.mul(dc * g, i * (1 - i), out=d[..., :H])
            torch.mul(dc * c_prev[t], f * (1 - f), out=d[..., H:2 * H])
            torch.mul(dc * i, 1 - g * g, out=d[..., 2 * H:3 * H])
            torch.mul(dh * tanhs[t], o * (1 - o), out=d[..., 3 * H:])
            dc = dc * f
            grad_attention = torch.bmm(d, memory_gates.transpose(1, 2))          # [S, k, L]
            a = attentions[t]
            torch.mul(a, grad_attention - (grad_attention * a).sum(-1, keepdim=True), out=grad_scores[t])
            dh = d @ weight + torch.bmm(grad_scores[t], keys.transpose(1, 2))
        h_prev = hs[:-1]
        grad_weight = grad_gates.reshape(-1, 4 * H).T @ h_prev.reshape(-1, H)
        by_segment = lambda x: x.transpose(0, 1).reshape(S, T * k, -1)           # noqa: E731  [S, T·k, ...]
        grad_keys = torch.bmm(by_segment(h_prev).transpose(1, 2), by_segment(grad_scores))
        grad_memory_gates = torch.bmm(by_segment(attentions).transpose(1, 2), by_segment(grad_gates))
        return grad_gates, dh, dc, grad_weight, grad_keys, grad_memory_gates, None
