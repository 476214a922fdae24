"""PlacementEnv observations as PyTorch Geometric graphs."""

from __future__ import annotations

import numpy as np


def observation_to_data(observation: dict, num_op_types: int):
    """A ``torch_geometric.data.Data`` with ``x`` = one-hot op type followed by the unit
    features, ``edge_index`` and ``edge_attr`` from the unit edges, and ``placement``."""
    import torch
    from torch_geometric.data import Data

    op_type = torch.as_tensor(np.asarray(observation["op_type"]), dtype=torch.long)
    one_hot = torch.nn.functional.one_hot(op_type, num_op_types).float()
    features = torch.as_tensor(np.asarray(observation["features"]), dtype=torch.float32).reshape(len(op_type), -1)
    return Data(x=torch.cat([one_hot, features], dim=1),
                edge_index=torch.as_tensor(np.asarray(observation["edge_index"]), dtype=torch.long).reshape(2, -1),
                edge_attr=torch.as_tensor(np.asarray(observation["edge_features"]), dtype=torch.float32).reshape(-1, 1),
                placement=torch.as_tensor(np.asarray(observation["placement"]), dtype=torch.long))
