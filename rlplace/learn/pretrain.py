"""Deep Graph Infomax pre-training of a graph encoder (Mars §3.2, Eq. 2–6; Veličković et al.,
ICLR'19), cached per graph.

Positive sample: the graph itself; negative sample: the same graph with node features permuted
between nodes (Eq. 2, node-permutation corruption). Summary: the sigmoid of the mean node
representation (Eq. 4). Discriminator: bilinear, ``sigmoid(h^T W s)`` (Eq. 5). Loss: binary
cross-entropy of positives against negatives (Eq. 6). PyG's ``DeepGraphInfomax`` provides the
discriminator and the loss. Mars trains 1000 iterations and keeps the weights of the lowest loss
(§4.2).

The result is cached in a file named by a hash of the graph's node features and edges and of
everything that determines the weights (encoder architecture and initial weights, pre-training
options, seed): a
second call with the same inputs loads the file and does not train. Pre-training runs on the
device of ``x`` (the encoder's); a GPU run caches apart from a CPU run (its weights differ in the
last bits), so a CPU run's result never depends on what a GPU run cached. The cache is only a
cache: a file that cannot be read (truncated, not a torch file) is trained again and rewritten,
and a folder that cannot be written keeps the trained weights in memory; both warn.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch_geometric.nn import DeepGraphInfomax

from rlplace.atomic import write_whole
from rlplace.learn.configs import DGIConfig

log = logging.getLogger(__name__)


@dataclass
class PretrainResult:
    losses: list[float]      # loss of every iteration (of the run that made the cached file)
    best_loss: float
    trained: bool            # False when the weights came from the cache
    path: Path | None        # the cache file


def pretrain_encoder(encoder: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor,
                     hidden: int, config: DGIConfig = DGIConfig()) -> PretrainResult:
    """Pre-train ``encoder`` (``encoder(x, edge_index) -> [N, hidden]``) in place with DGI and
    leave it with the weights of the lowest loss seen."""
    path = _cache_path(encoder, x, edge_index, config)
    if path is not None and path.is_file():
        try:
            saved = torch.load(path, weights_only=True, map_location=x.device)
            encoder.load_state_dict(saved["encoder"])
            return PretrainResult(saved["losses"], min(saved["losses"]), trained=False, path=path)
        except Exception as exc:  # torch.load's errors of a bad file have no common type
            log.warning(f"DGI cache {path}: cannot read it ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
                        "pre-training again")

    generator = torch.Generator().manual_seed(config.seed)

    def corruption(x, edge_index):
        return x[torch.randperm(x.shape[0], generator=generator).to(x.device)], edge_index

    def summary(z, *args, **kwargs):
        return torch.sigmoid(z.mean(dim=0))

    with torch.random.fork_rng():
        torch.manual_seed(config.seed)
        dgi = DeepGraphInfomax(hidden, encoder, summary, corruption).to(x.device)
    optimizer = torch.optim.Adam(dgi.parameters(), lr=config.lr)
    losses, best, best_state = [], float("inf"), copy.deepcopy(encoder.state_dict())
    for _ in range(config.iterations):
        loss = dgi.loss(*dgi(x, edge_index))
        losses.append(loss.item())
        if losses[-1] < best:
            best, best_state = losses[-1], copy.deepcopy(encoder.state_dict())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    encoder.load_state_dict(best_state)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_whole(path, lambda f: torch.save({"encoder": best_state, "losses": losses}, f))
        except OSError as exc:
            log.warning(f"DGI cache {path}: cannot write it ({exc.strerror or exc}); the pre-trained weights are "
                        "used but not cached (agent.policy.dgi.cache_dir=null turns the cache off)")
            path = None
    return PretrainResult(losses, best, trained=True, path=path)


def _cache_path(encoder: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor,
                config: DGIConfig) -> Path | None:
    if config.cache_dir is None:
        return None
    key = hashlib.sha256()
    key.update(x.detach().cpu().contiguous().numpy().tobytes())
    key.update(str(tuple(x.shape)).encode())
    key.update(edge_index.cpu().contiguous().numpy().tobytes())
    key.update(repr(encoder).encode())
    for value in encoder.state_dict().values():
        key.update(value.detach().cpu().contiguous().numpy().tobytes())
    if x.device.type != "cpu":
        key.update(x.device.type.encode())
    key.update(repr({k: v for k, v in asdict(config).items() if k != "cache_dir"}).encode())
    return Path(config.cache_dir).expanduser() / f"dgi-{key.hexdigest()[:24]}.pt"
