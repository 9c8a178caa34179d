import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Learning tests run on one intra-op thread: on a busy machine, OpenMP's second thread made them 25x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
