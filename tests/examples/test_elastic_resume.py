import os
import subprocess
import sys

from runner import EXAMPLES, load


def test_two_ranks_then_one_rank_train_on_every_step_once(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    first = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    first += ["--nproc_per_node=2", str(EXAMPLES / "elastic_resume.py")]
    first += ["--out", str(tmp_path), "--stop", "5"]
    done = subprocess.run(first, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "first run, rank 1/2: 5 batches, " in done.stdout
    assert (tmp_path / "checkpoint.pt").exists()

    module = load("elastic_resume")
    result = module.main(["--out", str(tmp_path), "--resume", "--batch-size", "4"])
    assert result["exactly_once"] and result["targets_once"]
    first_steps = sum(
        len(module.json.loads((tmp_path / f"seen-first-{r}.json").read_text())["inputs"])
        for r in (0, 1)
    )
    assert 0 < first_steps < result["total"]
    assert first_steps + len(result["seen"]) == result["total"]
