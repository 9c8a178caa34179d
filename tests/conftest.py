import pytest
import torch

from herl.utils import denormals_flushed

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


@pytest.fixture(autouse=True)
def denormal_setting_restored():
    """learn and herl train's runs flush denormals while they run and put the setting back; should anything leave it
    changed, each test still starts with the setting the one before it started with."""
    before = denormals_flushed()
    yield
    torch.set_flush_denormal(before)
