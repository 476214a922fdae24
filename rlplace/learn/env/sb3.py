"""Stable-Baselines3 on PlacementEnv: a graph features extractor.

Needs the ``sb3`` extra (``pip install 'rlplace[sb3]'``); nothing else in rlplace imports this
module, so Stable-Baselines3 stays optional::

    from stable_baselines3 import PPO
    from rlplace.learn.env import PlacementEnv
    from rlplace.learn.env.sb3 import GraphExtractor

    env = PlacementEnv("layered", mode="sequential", graph_options={"num_ops": 300})
    model = PPO("MultiInputPolicy", env, policy_kwargs={"features_extractor_class": GraphExtractor})

The same ``policy_kwargs`` work for sb3-contrib's ``MaskablePPO`` (the environment's
``action_masks()`` gives the masks).
"""

from __future__ import annotations

import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch_geometric.nn.conv.gcn_conv import gcn_norm


class GraphExtractor(BaseFeaturesExtractor):
    """A GCN (Kipf & Welling, ICLR'17; Mars §3.1 encodes the op graph with one too) over the unit
    graph of a PlacementEnv observation, with the placement so far among the node features.

    Node features: one-hot op type, the unit features, one-hot device (or "unplaced"), a flag
    for the unit to place now and, when the environment has ``schedule_features``, the unit's
    ``unit_schedule`` row. ``layers`` GCN layers of ``hidden`` units (ReLU), each
    ``H' = relu(Â H W)`` with Â the symmetrically normalised adjacency with self loops (PyG's
    ``gcn_norm``) of the unit edges taken in both directions. The features of an observation are
    the embedding of the current unit, the mean embedding of all units, the free memory and
    busy time of each device, and with ``schedule_features`` the ``device_schedule`` and
    ``partial_step_time`` entries: ``2 * hidden + 2 * D`` values, plus ``3 * D + 1``.

    The graph comes from each observation's ``edge_index``; a batch is one block-diagonal sparse
    matrix, kept for the next batch of the same size and edges (an environment's edges never
    change, so it is built once per batch size). It expects SB3's preprocessing: Boxes as floats
    and ``current_unit`` one-hot.
    """

    def __init__(self, observation_space: spaces.Dict, hidden: int = 64, layers: int = 2):
        self.num_units = observation_space["op_type"].shape[0]
        self.num_devices = observation_space["device_busy"].shape[0]
        self.num_types = int(observation_space["op_type"].high.max()) + 1
        self.schedule = "unit_schedule" in observation_space.spaces
        extra = (observation_space["device_schedule"].shape[0] + 1) if self.schedule else 0
        super().__init__(observation_space, features_dim=2 * hidden + 2 * self.num_devices + extra)
        num_features = observation_space["features"].shape[0] // max(self.num_units, 1)
        unit_schedule = observation_space["unit_schedule"].shape[0] // max(self.num_units, 1) if self.schedule else 0
        sizes = [self.num_types + num_features + self.num_devices + 2 + unit_schedule] + [hidden] * layers
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self._cached: tuple[torch.Tensor, torch.Tensor] | None = None  # (edge_index, Â)

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        U, D = self.num_units, self.num_devices
        batch = observations["op_type"].shape[0]
        op_type = torch.nn.functional.one_hot(observations["op_type"].long(), self.num_types).float()
        placed = torch.nn.functional.one_hot(observations["placement"].long() + 1, D + 1).float()
        current = observations["current_unit"].reshape(batch, -1)[:, :U, None]  # one-hot, [B, 1, U+1] in training
        nodes = [op_type, observations["features"].reshape(batch, U, -1), placed, current]
        if self.schedule:
            nodes.append(observations["unit_schedule"].reshape(batch, U, -1))
        x = torch.cat(nodes, dim=2)

        adjacency = self._adjacency(observations["edge_index"].long().reshape(batch, 2, -1))
        h = x.reshape(batch * U, -1)
        for layer in self.layers:
            h = torch.relu(adjacency @ layer(h))
        h = h.reshape(batch, U, -1)
        out = [(h * current).sum(dim=1), h.mean(dim=1), observations["device_free_memory"],
               observations["device_busy"]]
        if self.schedule:
            out += [observations["device_schedule"], observations["partial_step_time"]]
        return torch.cat(out, dim=1)

    def _adjacency(self, edge_index: torch.Tensor) -> torch.Tensor:
        """Â of the batch as one block-diagonal sparse matrix [B*U, B*U] (the last one again
        when the edges are the same)."""
        cached = self._cached
        if (cached is not None and cached[0].shape == edge_index.shape and cached[0].device == edge_index.device
                and torch.equal(cached[0], edge_index)):
            return cached[1]
        adjacency = self._block_adjacency(edge_index)
        self._cached = (edge_index.clone(), adjacency)
        return adjacency

    def _block_adjacency(self, edge_index: torch.Tensor) -> torch.Tensor:
        batch, n = edge_index.shape[0], edge_index.shape[0] * self.num_units
        edges = edge_index + (torch.arange(batch, device=edge_index.device) * self.num_units)[:, None, None]
        edges = edges.permute(1, 0, 2).reshape(2, -1)
        edges, weight = gcn_norm(torch.cat([edges, edges.flip(0)], dim=1), None, n, add_self_loops=True)
        return torch.sparse_coo_tensor(edges.flip(0), weight, (n, n), check_invariants=False).coalesce()
