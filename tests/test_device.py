"""Training on a torch device (``torch_device=auto|cpu|cuda|cuda:N``): the option, its errors, and,
where torch sees a GPU, training on it, scoring there as on the CPU, and its checkpoints on the CPU."""

import copy
import subprocess

import pytest
import torch
from conftest import gpu_written

from rlplace.learn.checkpoint import read_checkpoint
from rlplace.learn.device import multinomial, resolve_device, uniform
from rlplace.learn.placer import PolicyPlacer
from rlplace.learn.policies import make_policy
from rlplace.learn.policies.input_feeding import TeacherForced
from rlplace.learn.policies.seq2seq import AdditiveScores
from rlplace.learn.train import TrainConfig, train
from rlplace.learn.warmstart import WarmStartConfig
from rlplace.backends import SimBackend
from rlplace.cluster import load_preset
from rlplace.learn.env import PlacementEnv
from rlplace.errors import CheckpointError, ConfigError
from rlplace.zoo import layered

torch.set_num_threads(1)
GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not GPU, reason="torch sees no CUDA GPU")
HP = {"num_groups": 8, "placer_hidden": 16, "grouper_hidden": 8, "noise_steps": 3}
MARS = {"encoder_hidden": 16, "placer_hidden": 24, "segment_size": 8, "pretrain": False}
AGENTS = {"hierarchical": ("reinforce", 4, HP), "mars": ("ppo", 5, MARS)}


@pytest.fixture
def full_precision():
    """GPU float32 products in full precision (no TF32), to compare with the CPU."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.fixture(scope="module")
def problem():
    return layered(30, seed=1), load_preset("baechi_2080")


def config(agent: str, device: str, **overrides) -> TrainConfig:
    algorithm, samples, policy = AGENTS[agent]
    return TrainConfig(**{"agent": agent, "algorithm": algorithm, "samples": samples, "policy": policy,
                          "budget_placements": 4 * samples, "checkpoint_every": 2, "progress": False,
                          "plots": False, "seed": 3, "torch_device": device, **overrides})


# ------------------------------------------------------------------------------ the option
def test_auto_is_a_gpu_only_where_torch_sees_one():
    assert resolve_device("auto") == torch.device("cuda" if GPU else "cpu")
    assert TrainConfig().torch_device == "auto"


@pytest.mark.parametrize("name", ["tpu", "gpu", "cuda:", "cuda:x", "CPU", ""])
def test_an_unknown_device_is_a_config_error(name):
    with pytest.raises(ConfigError, match="device must be auto, cpu, cuda or cuda:N"):
        TrainConfig(torch_device=name)


@pytest.mark.skipif(GPU, reason="here torch sees a GPU")
def test_a_gpu_where_torch_sees_none_is_a_config_error():
    for name in ("cuda", "cuda:1"):
        with pytest.raises(ConfigError, match="sees no CUDA GPU"):
            resolve_device(name)


@pytest.mark.parametrize("override, message", [("torch_device=tpu", "torch_device must be auto, cpu, cuda or cuda:N, got 'tpu'"),
                                               ("torch_device=cuda:7", "torch_device=cuda:7: torch")])
def test_rlplace_train_bad_device_is_one_line_and_exit_2(rlplace_cli, tmp_path, override, message):
    if GPU and override == "torch_device=cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    run = subprocess.run([*rlplace_cli("train"), "graph=layered", "graph.num_ops=30", "agent=hierarchical",
                          "budget.placements=4", f"hydra.run.dir={tmp_path}", override],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2
    lines = [line for line in run.stderr.splitlines() if line.startswith("rlplace-train: error:")]
    assert len(lines) == 1 and message in lines[0], run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "checkpoint.pt").exists()


def test_cpu_run_names_its_device_and_draws_on_the_cpu(problem, tmp_path):
    graph, cluster = problem
    summary = train(graph, cluster, SimBackend(), config("mars", "cpu"), tmp_path)
    assert summary["torch_device"] == "cpu" and summary["evaluated"] == 20
    assert read_checkpoint(tmp_path / "checkpoint.pt").generator.numel() > 16  # the CPU's Mersenne Twister


def test_resuming_with_another_kind_of_generator_is_a_checkpoint_error(problem, tmp_path):
    """A run written on a GPU saves a 16-byte Philox state; resumed on the CPU it is refused."""
    graph, cluster = problem
    train(graph, cluster, SimBackend(), config("hierarchical", "cpu", stop_after_updates=2), tmp_path)
    gpu_written(tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match="not a cpu generator: resume the run on the kind of device"):
        train(graph, cluster, SimBackend(), config("hierarchical", "cpu", resume=True), tmp_path)


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_resume_across_devices_reseeds_the_generator_and_says_where(problem, tmp_path, agent):
    """resume_across_devices=true continues a run whose generator cannot move: the same weights
    and progress, the generator seeded with seed + placements evaluated, recorded in results.json."""
    graph, cluster = problem
    samples = AGENTS[agent][1]
    stopped = train(graph, cluster, SimBackend(), config(agent, "cpu", stop_after_updates=2), tmp_path)
    gpu_written(tmp_path / "checkpoint.pt")
    resumed = train(graph, cluster, SimBackend(), config(agent, "cpu", resume=True, resume_across_devices=True),
                    tmp_path)
    assert resumed["generator_reseeded_at"] == [stopped["evaluated"]] == [2 * samples]
    progress = read_checkpoint(tmp_path / "checkpoint.pt").progress
    assert progress["generator_reseeded_at"] == [2 * samples] and resumed["evaluated"] == 4 * samples
    uninterrupted = train(graph, cluster, SimBackend(), config(agent, "cpu"), tmp_path / "whole")
    assert "generator_reseeded_at" not in uninterrupted


def test_draws_follow_the_generator_to_the_policy_device():
    """On the CPU the helpers draw exactly what torch.rand and torch.multinomial draw."""
    cpu = torch.device("cpu")
    a, b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert torch.equal(uniform((3, 4), a, cpu), torch.rand(3, 4, generator=b))
    probs = torch.rand(6, 3, generator=torch.Generator().manual_seed(1))
    assert torch.equal(multinomial(probs, 2, a, replacement=True),
                       torch.multinomial(probs, 2, replacement=True, generator=b))


# ------------------------------------------------------------------------------ on a GPU
@needs_gpu
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_training_on_a_gpu_and_its_checkpoint_on_the_cpu(problem, tmp_path, agent):
    graph, cluster = problem
    summary = train(graph, cluster, SimBackend(), config(agent, "cuda"), tmp_path / "gpu")
    assert summary["torch_device"].startswith("cuda:0 (") and summary["evaluated"] == 4 * AGENTS[agent][1]
    saved = read_checkpoint(tmp_path / "gpu" / "checkpoint.pt")
    assert all(t.device.type == "cpu" for t in saved.policy.values())
    trained = PolicyPlacer(agent, tmp_path / "gpu" / "checkpoint.pt").place(graph, cluster)  # rebuilt on the CPU
    assert trained.device_of.shape == (graph.num_ops,)
    tuned = train(graph, cluster, SimBackend(),
                  config(agent, "cpu", init_checkpoint=str(tmp_path / "gpu" / "checkpoint.pt")), tmp_path / "cpu")
    assert tuned["init_tensors_copied"] > 0 and tuned["torch_device"] == "cpu"
    with pytest.raises(CheckpointError, match="not a cpu generator"):
        train(graph, cluster, SimBackend(), config(agent, "cpu", resume=True), tmp_path / "gpu")


@needs_gpu
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_gpu_runs_warm_start_and_resume_there(problem, tmp_path, agent):
    """(Not bit for bit: scatter-adds on a GPU sum in no fixed order.)"""
    graph, cluster = problem
    warm = WarmStartConfig(placer="heft", behaviour_cloning=True, first_sample=True, bc_steps=5)
    cut = config(agent, "cuda", warm_start=warm, stop_after_updates=3)
    stopped = train(graph, cluster, SimBackend(), cut, tmp_path)
    assert stopped["stopped"] and stopped["bc_steps"] >= 1 and stopped["warm_start_placer"] == "heft"
    resumed = train(graph, cluster, SimBackend(), config(agent, "cuda", warm_start=warm, resume=True), tmp_path)
    progress = read_checkpoint(tmp_path / "checkpoint.pt").graph_progress()
    assert resumed["evaluated"] == len(progress["step_times"]) >= 4 * AGENTS[agent][1]
    assert progress["step_times"][0] == pytest.approx(stopped["warm_start_step_time"])


@needs_gpu
def test_a_family_trains_on_the_gpu_and_places_an_unseen_graph_on_the_cpu(tmp_path):
    cluster, family = load_preset("mars_p100"), [layered(14, width=3, seed=1, name="a"), layered(10, seed=2, name="b")]
    policy = {**MARS, "segment_size": 4, "type_buckets": 8}
    summary = train(family, cluster, SimBackend(), config("mars", "cuda", samples=4, budget_placements=16,
                                                          policy=policy, order="sample"), tmp_path)
    assert summary["torch_device"].startswith("cuda") and summary["evaluated"] == 16
    assert all(g["greedy_evaluation"]["step_time"] > 0 for g in summary["graphs"].values())
    unseen = layered(12, seed=5, name="c")
    assert PolicyPlacer("mars", tmp_path / "checkpoint.pt").place(unseen, cluster).device_of.shape == (unseen.num_ops,)


VARIANTS = [("hierarchical", {}), ("hierarchical", {"grouping": "random"}), ("hierarchical", {"grouping": "none"}),
            ("mars", {}), ("mars", {"encoder": "sage", "placer": "transformer", "transformer_heads": 2})]


@needs_gpu
@pytest.mark.parametrize("agent, variant", VARIANTS)
def test_a_policy_scores_on_the_gpu_as_on_the_cpu(problem, agent, variant, full_precision):
    """Same weights, same placements: log probabilities and gradients agree across devices,
    which exercises the custom backward passes (input feeding, additive attention) on the GPU;
    the GPU policy scores a heuristic's placement as the CPU one does (behaviour cloning's path)."""
    graph, cluster = problem
    env = PlacementEnv(graph, cluster)
    cpu = make_policy(agent, env, seed=0, **{**AGENTS[agent][2], **variant})
    gpu = copy.deepcopy(cpu).to("cuda")
    sample = cpu.sample(3, torch.Generator().manual_seed(0))
    results = []
    for policy in (cpu, gpu):
        device = next(policy.parameters()).device
        extras = {k: v.to(device) for k, v in sample.extras.items()}
        log_p, entropy = policy.log_prob(sample.actions.to(device), extras)
        (log_p.sum() + 0.1 * entropy.sum()).backward()
        results.append((log_p.cpu(), entropy.cpu(), {n: p.grad.cpu() for n, p in policy.named_parameters()
                                                     if p.grad is not None}))
    (lp_c, ent_c, grad_c), (lp_g, ent_g, grad_g) = results
    for name, tensor in cpu.extras_for(sample.actions).items():
        assert torch.equal(gpu.extras_for(sample.actions.cuda())[name].cpu(), tensor), name
    torch.testing.assert_close(lp_g, lp_c, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ent_g, ent_c, rtol=1e-4, atol=1e-4)
    assert grad_c.keys() == grad_g.keys() and grad_c
    for name in grad_c:
        torch.testing.assert_close(grad_g[name], grad_c[name], rtol=1e-3, atol=1e-4, msg=name)


@needs_gpu
def test_the_custom_autograd_functions_on_the_gpu_match_the_cpu(full_precision):
    g = torch.Generator().manual_seed(0)
    T, S, k, H, L = 5, 2, 3, 8, 4
    padding = torch.zeros(S, 1, L, dtype=torch.bool)
    padding[1, 0, 3] = True
    inputs = [torch.randn(T, S, k, 4 * H, generator=g), torch.randn(S, k, H, generator=g),
              torch.randn(S, k, H, generator=g), torch.randn(4 * H, H, generator=g) / H,
              torch.randn(S, H, L, generator=g), torch.randn(S, L, 4 * H, generator=g) / L]
    scores = [torch.randn(2, 6, H, generator=g), torch.randn(2, 5, H, generator=g), torch.randn(H, generator=g)]
    for function, args, extra in ((TeacherForced, inputs, (padding,)), (AdditiveScores, scores, ())):
        grads = []
        for device in ("cpu", "cuda"):
            leaves = [a.detach().to(device).requires_grad_() for a in args]
            out = function.apply(*leaves, *(e.to(device) for e in extra))
            (out * torch.linspace(-1, 1, out.numel(), device=device).view_as(out)).sum().backward()
            grads.append([out.detach().cpu()] + [leaf.grad.cpu() for leaf in leaves])
        for c, d in zip(*grads):
            torch.testing.assert_close(d, c, rtol=1e-4, atol=1e-5)
