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


class FullDisk:
    """A file open for writing on a disk with ``room`` bytes left: what fits is written, then OSError(ENOSPC)."""

    def __init__(self, file, room: int) -> None:
        self.file, self.room = file, room

    def write(self, data) -> int:
        size = len(memoryview(data).cast("B")) if not isinstance(data, str) else len(data)
        fits = min(size, self.room)
        if fits:
            self.file.write(data[:fits] if isinstance(data, str) else memoryview(data).cast("B")[:fits])
            self.room -= fits
        if fits < size:
            import errno

            raise OSError(errno.ENOSPC, "No space left on device")
        return size

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch):
    """``full_disk(room)``: from then on, every file herl writes through :mod:`herl.io.atomic` fills the disk after
    ``room`` bytes (a write that fails midway, as on a full disk)."""
    import builtins

    from herl.io import atomic

    def fill_after(room: int = 100) -> None:
        monkeypatch.setattr(atomic, "open", lambda *a, **k: FullDisk(builtins.open(*a, **k), room), raising=False)

    return fill_after
