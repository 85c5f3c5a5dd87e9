import importlib.util
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import streamseq

ROOT = Path(__file__).resolve().parents[1]


def setup_commands():
    text = (ROOT / "README.rst").read_text()
    return re.findall(r"::\n\n    (pip install .+)\n", text)


def test_readme_has_the_two_setup_commands():
    commands = setup_commands()
    assert len(commands) == 2
    assert "examples/text_streams.py" in commands[0]
    assert "pytest" in commands[1]
    assert all("-c constraints.txt" in c for c in commands)
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text()


def test_readme_names_every_pin_of_the_constraints():
    pins = [line.strip() for line in (ROOT / "constraints.txt").read_text().splitlines()]
    pins = [pin for pin in pins if pin and not pin.startswith("#")]
    text = " ".join((ROOT / "README.rst").read_text().split())
    assert pins and all(f"``{pin}``" in text for pin in pins), pins
    assert "CPU build" not in text


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert setup_commands()[1] in ci


def python_blocks(path):
    """The ``.. code-block:: python`` blocks of an rst file, dedented."""
    lines, blocks = path.read_text().splitlines(), []
    for i, line in enumerate(lines):
        if line.strip() != ".. code-block:: python":
            continue
        body = []
        for following in lines[i + 2 :]:
            if following.strip() and not following.startswith("    "):
                break
            body.append(following[4:])
        blocks.append(textwrap.dedent("\n".join(body)).strip() + "\n")
    return blocks


DOCS = [ROOT / "README.rst", *sorted((ROOT / "docs").rglob("*.rst"))]


class RankOf:
    """``streamseq`` as the README snippet sees it, with the loader on a given rank of two."""

    def __init__(self, rank):
        self.rank = rank

    def StreamLoader(self, *args, **kwargs):  # noqa: N802 - the name the snippet calls
        return streamseq.StreamLoader(*args, rank=self.rank, world_size=2, **kwargs)


@pytest.mark.parametrize("rank", [0, 1])
def test_readme_snippet_trains_a_gru_and_survives_all_padding_batches(rank):
    snippet = python_blocks(ROOT / "README.rst")[0]
    code = snippet.replace("import streamseq\n", "")
    rng = np.random.default_rng(0)
    streams = [rng.normal(size=(n, 3)).astype(np.float32) for n in (300, 20, 7)]
    names = {"streams": streams, "features": 3, "hidden": 8, "device": "cpu"}
    names["streamseq"] = RankOf(rank)
    exec(compile(code, "README.rst", "exec"), names)
    batch, loss, h = names["batch"], names["loss"], names["h"]
    assert h.shape == (1, 64, 8) and torch.isfinite(h).all()
    assert loss.ndim == 0 and torch.isfinite(loss)
    if rank == 1:  # rows 64-127 of the global plan: no stream reaches them
        assert not batch.valid.any() and loss.item() == 0
    else:
        assert batch.valid.any() and loss.item() > 0


def write_video(path, frames):
    """A small clip written with PyAV, by the helper of the tests of ``streamseq.io``."""
    spec = importlib.util.spec_from_file_location("media", ROOT / "tests" / "io" / "media.py")
    media = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(media)
    return media.write_video(path, n=frames, size=(32, 32))


def test_readme_quickstart_runs_as_written_on_a_folder_of_videos(tmp_path, capsys):
    pytest.importorskip("av")
    blocks = [b for b in python_blocks(ROOT / "README.rst") if "streamseq.io.video" in b]
    assert len(blocks) == 1 and len(blocks[0].splitlines()) <= 35
    lengths = {"a.mp4": 37, "b.mp4": 20, "c.mp4": 29, "d.mp4": 24, "e.mp4": 33}
    for name, frames in lengths.items():
        write_video(tmp_path / name, frames)
    (tmp_path / "notes.txt").write_text("not a video")
    code = blocks[0].replace('Path("videos")', f"Path({str(tmp_path)!r})")
    assert code != blocks[0]
    names = {"__name__": "quickstart"}
    exec(compile(code, "README.rst", "exec"), names)
    loader, loss, h = names["loader"], names["loss"], names["h"]
    assert [len(video) for video in names["videos"]] == list(lengths.values())
    assert names["batch"].data.shape[1:] == (17, 32, 32, 3)  # 16 steps and the next
    assert h.shape == (1, 4, 128) and torch.isfinite(h).all() and torch.isfinite(loss)
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["epoch 0", "epoch 1"]
    assert out[-1].endswith(f"{len(loader)} batches")
    frames = torch.zeros(len(lengths), dtype=torch.long)  # every frame once an epoch
    targets = torch.zeros(len(lengths), dtype=torch.long)  # every frame but the first once
    for batch in loader:
        chunk = batch.stream[:, :16][batch.valid[:, :16]]
        frames += torch.bincount(chunk, minlength=len(lengths))
        nexts = batch.stream[:, 1:][batch.target_mask()]
        targets += torch.bincount(nexts, minlength=len(lengths))
    assert frames.tolist() == list(lengths.values())
    assert targets.tolist() == [n - 1 for n in lengths.values()]


def test_docs_front_page_shows_the_readme_snippet():
    assert python_blocks(ROOT / "README.rst")[0] in python_blocks(ROOT / "docs" / "index.rst")


def test_snippets_reset_the_state_on_its_batch_axis():
    code = [block for path in DOCS for block in python_blocks(path)]
    code += [path.read_text() for path in sorted((ROOT / "examples").glob("*.py"))]
    lines = [
        line.strip()
        for text in code
        for line in text.splitlines()
        if re.search(r"\[.*batch\.reset\] = ", line)
    ]
    assert len(lines) >= 5
    assert all(re.match(r"h\[:, batch\.reset\] = 0( |$)", line) for line in lines), lines


def test_snippet_losses_stay_finite_on_all_padding_batches():
    blocks = [block for path in DOCS for block in python_blocks(path)]
    code = "\n".join(blocks)
    divisions = re.findall(r"/ *(\S*\.sum\(\)\S*)", code)
    assert len(divisions) >= 4
    assert all(d.endswith(".sum().clamp(min=1)") for d in divisions), divisions
    for call in re.findall(r"(?:cross_entropy|mse_loss|l1_loss)\([^)]*\)?[^)]*\)", code):
        assert 'reduction="sum"' in call, call
    assert not re.search(r"\[(valid|mask)\]\)?[^\n]*\.mean\(\)", code)
