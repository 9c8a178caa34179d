"""Learning from demonstrations: scripted Fetch experts, recording (``generate_expert_traj``), datasets in
Minari's format, and behaviour cloning (``model.pretrain``).

Recording and pretraining need only herl; reading and writing dataset files needs Minari
(``pip install 'herl[demos]'``).
"""

from herl.demos.dataset import DatasetError, Demonstrations, load_minari, save_minari
from herl.demos.experts import SCRIPTED_EXPERTS, scripted_expert
from herl.demos.pretrain import pretrain
from herl.demos.record import generate_expert_traj

__all__ = ["DatasetError", "Demonstrations", "SCRIPTED_EXPERTS", "generate_expert_traj", "load_minari", "pretrain",
           "save_minari", "scripted_expert"]
