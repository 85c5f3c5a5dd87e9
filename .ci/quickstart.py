"""Run README.rst's quickstart as written, on small videos, with the installed streamseq.

Used by ``.ci/job wheel``: run from outside the tree, it imports the package from the
environment (a wheel), never from the working tree.

    python .ci/quickstart.py FOLDER
"""

import re
import sys
import textwrap
from pathlib import Path

import av
import numpy as np

import streamseq

README = Path(__file__).resolve().parents[1] / "README.rst"


def write_video(path: Path, frames: int) -> None:
    """A clip of ``frames`` 32x32 frames of moving noise."""
    rng = np.random.default_rng(frames)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=25)
        stream.height, stream.width, stream.pix_fmt = 32, 32, "yuv420p"
        for _ in range(frames):
            img = rng.integers(0, 256, (32, 32, 3), np.uint8)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")))
        out.mux(stream.encode())


def quickstart() -> str:
    """The README's ``.. code-block:: python`` that reads a folder of videos, dedented."""
    blocks = re.findall(r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)", README.read_text())
    [block] = [b for b in blocks if "streamseq.io.video" in b]
    return textwrap.dedent(block)


def main(folder: str) -> None:
    """Write five videos into ``folder`` and run the quickstart on them."""
    assert "site-packages" in streamseq.__file__, streamseq.__file__
    print(f"streamseq {streamseq.__version__} from {streamseq.__file__}")
    for name, frames in {"a": 37, "b": 20, "c": 29, "d": 24, "e": 33}.items():
        write_video(Path(folder) / f"{name}.mp4", frames)
    code = quickstart().replace('Path("videos")', f"Path({folder!r})")
    names = {"__name__": "quickstart"}
    exec(compile(code, "README.rst", "exec"), names)
    batch = names["batch"]  # tbins steps and the look-ahead step that follows them
    assert batch.data.shape[1:] == (16 + batch.lookahead, 32, 32, 3), batch.data.shape
    print("quickstart: ok")


if __name__ == "__main__":
    main(sys.argv[1])
