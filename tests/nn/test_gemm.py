"""The networks' oneDNN matmul path (herl.nn.gemm) against PyTorch's own ops: the same values and gradients, to
float rounding, for every input form the networks pass it."""

from __future__ import annotations

import pytest
import torch

from herl.nn import MLP, EnsembleMLP, gemm
from herl.nn.batch_renorm import RenormMLP
from herl.nn.mlp import set_precision

pytestmark = pytest.mark.skipif(not gemm.onednn_available(), reason="this PyTorch build has no oneDNN linear op")


@pytest.fixture
def backend(monkeypatch):
    """Set the backend for one test, and restore the rule after it; products of any size take the backend set (the
    networks here are small)."""
    monkeypatch.setattr(gemm, "MIN_MULTIPLY_ADDS", 0)
    yield gemm.set_cpu_backend
    gemm.set_cpu_backend("auto")


def outputs_and_grads(backend, name: str, net: torch.nn.Module, x: torch.Tensor, **kwargs):
    backend(name)
    net.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    y = net(x, **kwargs)
    (y.float().square().sum() + y.float().sum()).backward()
    return y.detach(), x.grad, [None if p.grad is None else p.grad.clone() for p in net.parameters()]


def assert_close_runs(a, b, tol: float = 1e-4) -> None:
    (ya, gxa, gpa), (yb, gxb, gpb) = a, b
    torch.testing.assert_close(ya, yb, rtol=tol, atol=tol)
    torch.testing.assert_close(gxa, gxb, rtol=tol, atol=tol)
    assert [g is None for g in gpa] == [g is None for g in gpb]
    for ga, gb in zip(gpa, gpb):
        if ga is not None:
            torch.testing.assert_close(ga, gb, rtol=tol, atol=tol)


NETWORKS = {
    "mlp relu": lambda g: MLP(7, 3, [16, 16], generator=g),
    "mlp tanh": lambda g: MLP(7, 3, [16, 16], activation="tanh", generator=g),
    "mlp layer norm": lambda g: MLP(7, 3, [16, 16], layer_norm=True, generator=g),
    "mlp one hidden": lambda g: MLP(7, 3, [16], generator=g),
    "mlp no hidden": lambda g: MLP(7, 3, [], generator=g),
    "ensemble relu": lambda g: EnsembleMLP(7, 3, [16, 16], n_members=2, generator=g),
    "ensemble three members": lambda g: EnsembleMLP(7, 5, [16, 8, 16], n_members=3, generator=g),
    "ensemble elu": lambda g: EnsembleMLP(7, 3, [16, 16], activation="elu", generator=g),
    "ensemble layer norm": lambda g: EnsembleMLP(7, 3, [16, 16], layer_norm=True, generator=g),
    "renorm ensemble": lambda g: RenormMLP(7, 3, [16, 16], n_members=2, generator=g),
    "renorm single": lambda g: RenormMLP(7, 3, [16, 16], generator=g),
}


@pytest.mark.parametrize("name", NETWORKS)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided rows"])
def test_onednn_matches_aten(backend, name, layout):
    net = NETWORKS[name](torch.Generator().manual_seed(0))
    base = torch.randn(32, 14, generator=torch.Generator().manual_seed(1))
    x = {"contiguous": base[:, :7].contiguous(), "transposed": base[:, :7].t().contiguous().t(),
         "strided rows": base[:, ::2]}[layout]
    assert_close_runs(outputs_and_grads(backend, "aten", net, x), outputs_and_grads(backend, "onednn", net, x))


@pytest.mark.parametrize("name", ["ensemble relu", "renorm ensemble"])
def test_detached_parameters_give_input_gradients_only(backend, name):
    """The actor's loss through the critics: gradients for the input, none for the weights, on both paths."""
    net = NETWORKS[name](torch.Generator().manual_seed(0))
    x = torch.randn(32, 7, generator=torch.Generator().manual_seed(1))
    aten = outputs_and_grads(backend, "aten", net, x, detach_params=True)
    onednn = outputs_and_grads(backend, "onednn", net, x, detach_params=True)
    assert all(g is None for g in onednn[2])
    assert_close_runs(aten, onednn)


@pytest.mark.parametrize("name", ["mlp relu", "ensemble relu"])
def test_bfloat16_hidden_layers_mix_with_onednn(backend, name):
    """Mixed precision: the float32 first and last layers take oneDNN's path, the bfloat16 ones PyTorch's."""
    net = NETWORKS[name](torch.Generator().manual_seed(0))
    set_precision(net, "bfloat16")
    x = torch.randn(32, 7, generator=torch.Generator().manual_seed(1))
    assert_close_runs(outputs_and_grads(backend, "aten", net, x), outputs_and_grads(backend, "onednn", net, x), tol=2e-2)


def test_without_gradients_and_in_no_grad(backend):
    net = NETWORKS["ensemble relu"](torch.Generator().manual_seed(0))
    x = torch.randn(5, 7)
    backend("aten")
    expected = net(x).detach()
    backend("onednn")
    with torch.no_grad():
        torch.testing.assert_close(net(x), expected, rtol=1e-5, atol=1e-5)
    with torch.inference_mode():
        torch.testing.assert_close(net(x), expected, rtol=1e-5, atol=1e-5)


def test_other_dtypes_take_pytorchs_path(backend):
    """float64 tensors never reach oneDNN's float32 op (they would be refused there)."""
    backend("onednn")
    net = NETWORKS["ensemble relu"](torch.Generator().manual_seed(0)).double()
    x = torch.randn(4, 7, dtype=torch.float64, requires_grad=True)
    y = net(x)
    assert y.dtype == torch.float64
    y.sum().backward()
    assert x.grad is not None and x.grad.dtype == torch.float64


def test_gradcheck_in_float64_reference_matches_onednn_float32(backend):
    """The backward formulas: float32 oneDNN gradients against float64 autograd on the same network."""
    net = NETWORKS["ensemble three members"](torch.Generator().manual_seed(0))
    x = torch.randn(16, 7, generator=torch.Generator().manual_seed(2))
    onednn = outputs_and_grads(backend, "onednn", net, x)
    reference = outputs_and_grads(backend, "aten", net.double(), x.double())
    assert_close_runs(onednn, tuple(t.float() if torch.is_tensor(t) else [g.float() for g in t] for t in reference))


def test_onednns_path_is_chosen_on_amd_processors_with_full_width_avx512_only():
    """Zen 4 (family 25) splits AVX-512 in halves and gains nothing from oneDNN; Zen 5 (family 26) and later do."""
    def cpuinfo(vendor: str, family: int) -> str:
        core = f"vendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: 17\nflags\t\t: avx2 avx512f\n"
        return f"processor\t: 0\n{core}\nprocessor\t: 1\n{core}"

    assert not gemm.amd_with_full_width_avx512(cpuinfo("AuthenticAMD", 25))
    assert gemm.amd_with_full_width_avx512(cpuinfo("AuthenticAMD", 26))
    assert not gemm.amd_with_full_width_avx512(cpuinfo("GenuineIntel", 6))
    assert not gemm.amd_with_full_width_avx512("vendor_id\t: AuthenticAMD\n")  # no family line: keep PyTorch's path


def test_backend_choice(backend):
    assert gemm.cpu_backend() in ("onednn", "aten")
    backend("aten")
    assert gemm.cpu_backend() == "aten"
    backend("onednn")
    assert gemm.cpu_backend() == "onednn"
    with pytest.raises(ValueError, match="unknown CPU matmul backend 'mkl'"):
        gemm.set_cpu_backend("mkl")


@pytest.mark.filterwarnings("ignore:`torch.jit.trace:DeprecationWarning")
def test_traced_graphs_hold_pytorchs_standard_ops(backend):
    """Exported files (TorchScript, ONNX) must not depend on oneDNN's op: tracing takes PyTorch's path."""
    backend("onednn")
    net = NETWORKS["ensemble relu"](torch.Generator().manual_seed(0))
    x = torch.randn(4, 7)
    net.requires_grad_(False)
    traced = torch.jit.trace(net, x)
    graph = str(traced.graph)
    assert "mkldnn" not in graph and "baddbmm" in graph
    torch.testing.assert_close(traced(x), net(x), rtol=1e-5, atol=1e-5)


def test_small_products_keep_pytorchs_path(backend, monkeypatch):
    """Below MIN_MULTIPLY_ADDS oneDNN's op is never called; at it, it is (and gives PyTorch's result)."""
    backend("onednn")
    calls = []
    real = gemm._mm
    monkeypatch.setattr(gemm, "_mm", lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    net = NETWORKS["ensemble relu"](torch.Generator().manual_seed(0))
    x = torch.randn(32, 7)
    monkeypatch.setattr(gemm, "MIN_MULTIPLY_ADDS", 32 * 16 * 16 + 1)  # above every layer's product here
    small = net(x)
    assert not calls
    monkeypatch.setattr(gemm, "MIN_MULTIPLY_ADDS", 32 * 16 * 16)  # the hidden layer's product reaches it
    torch.testing.assert_close(net(x), small, rtol=1e-5, atol=1e-5)
    assert len(calls) == 2  # one per member, the hidden layer only


@pytest.mark.parametrize("choice", ["onednn", "auto"])
def test_compilers_trace_the_networks_whole(backend, choice):
    """torch.compile sees one graph of PyTorch's standard ops: asking which backend is in use must not break it
    (torch.backends.mkldnn.is_available is marked untraceable)."""
    gemm.onednn_available.cache_clear()  # the first call in a process comes from inside the compiled region
    backend(choice)
    net = NETWORKS["ensemble relu"](torch.Generator().manual_seed(0))
    x = torch.randn(4, 7)
    explained = torch._dynamo.explain(net)(x)
    if any("autograd.Function with custom setup_context" in r.reason for r in explained.break_reasons):
        pytest.skip(f"this torch ({torch.__version__}) breaks the graph at an autograd.Function (seen on 2.3)")
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons
    ops = {str(n.target) for g in explained.graphs for n in g.graph.nodes if n.op == "call_function"}
    assert not any("mkldnn" in op for op in ops)
