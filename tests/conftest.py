import pytest
import torch

ONE_THREAD_FOLDERS = {"algorithms", "demos", "export"}


@pytest.fixture(autouse=True)
def one_torch_thread(request: pytest.FixtureRequest):
    """Learning tests run on one intra-op thread: on a busy machine, OpenMP's second thread made them 25x slower."""
    if request.path.parent.name not in ONE_THREAD_FOLDERS:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
