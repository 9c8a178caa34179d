"""``make demo`` runs (small): DQN+HER on bit flipping prints the success rate it reached."""

from herl.demo import main


def test_demo_small(capsys):
    success = main(["--n-bits", "5", "--max-steps", "2000"])
    out = capsys.readouterr().out
    assert "Success rate reached" in out
    assert success >= 0.9
