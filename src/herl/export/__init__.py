"""Trained policies out of Python: ONNX graphs for any runtime, TorchScript for PyTorch without herl.

What is exported is what :meth:`predict(obs, deterministic=True)` computes, in one graph: the observation
entries the networks read (``observation`` and ``desired_goal`` for a goal env) as named inputs in the env's
dtypes, the running normalization with its clipping, the deterministic actor (SAC, TQC, CrossQ: tanh of the
Gaussian's mean; DDPG, TD3: the actor; DQN: the argmax of the Q-values) and the scaling to the env's action
bounds. :func:`check_onnx` compares onnxruntime's actions with ``predict``'s.

Nothing here is imported by the rest of herl; ``model.export_onnx(path)`` imports it when called.
"""

from herl.export.formats import check_onnx, export_onnx, export_torchscript
from herl.export.graph import PolicyGraph, input_specs

__all__ = ["PolicyGraph", "check_onnx", "export_onnx", "export_torchscript", "input_specs"]
