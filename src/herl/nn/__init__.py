"""Networks: MLPs (and ensembles of them as one batched network), actors, the observation encoder and normalizer."""

from herl.nn.mlp import MLP, EnsembleMLP
from herl.nn.normalizer import RunningNormalizer
from herl.nn.policies import DeterministicActor, ObservationEncoder, SquashedGaussianActor

__all__ = ["MLP", "DeterministicActor", "EnsembleMLP", "ObservationEncoder", "RunningNormalizer", "SquashedGaussianActor"]
