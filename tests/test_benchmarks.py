"""Smoke runs of the benchmarks that have a ``--quick`` mode."""

import importlib.util
import os
import sys

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks")


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCHMARKS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_corpus_scale_quick(tmp_path, capsys):
    bench = load("bench_corpus_scale")
    out = bench.main(["--quick", "--data", str(tmp_path), "--json", str(tmp_path / "out.json")])
    (result,) = out["results"]
    assert result["docs"] == 100_000
    rows = result["rows"]
    for name in ("floor", "current", "current manifest"):
        assert "error" not in rows[name], rows[name]
    current = rows["current"]
    assert current["build_s"] > 0 and current["resume_s"] > 0 and current["state"] > 0
    assert rows["current manifest"]["build_s"] > 0
    printed = capsys.readouterr().out
    assert "build+len" in printed and "manifest of video files" in printed
    assert os.listdir(tmp_path) == ["out.json"]  # the corpus and the manifest were deleted


def test_corpus_scale_reports_a_child_that_fails_or_hangs(tmp_path):
    bench = load("bench_corpus_scale")
    job = {"what": "floor", "index": str(tmp_path / "none.npy"), "tokens": 0, "root": "."}
    assert "exit 1" in bench.run_child(job, 60, 1e10)["error"]
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    assert bench.run_child({"root": "."}, 1, 1e10, sleep)["error"].startswith("timeout")


def test_unequal_cpu_lines_compare_cpu_a_frame_and_the_workers_split():
    bench = load("bench_throughput")
    details = {
        ("decode1", 1): [{"cpu_ms_per_1000": 250.0, "main_ms_per_1000": 5.0}] * 3,
        ("decode224", 2): [
            {"cpu_ms_per_1000": c, "main_ms_per_1000": 12.0, "split": [[1900, 1800, 0.6, 0.5]]}
            for c in (300.0, 320.0, 310.0)
        ],
    }
    text = bench.cpu_lines(details, [("decode1", 1), ("decode224", 2)])
    assert "decode224 2 workers:  310.0 (main process  12.0; repeats 300 320 310)" in text
    assert "0.81 of the CPU efficiency of 1 process" in text  # 250 / 310
    assert "frames 1900 / 1800 (the busiest +2.7% over the mean)" in text
    assert "ms per 1000 frames 316 / 278" in text


def test_unequal_worker_split_counts_the_frames_of_each_group_of_rows():
    bench = load("bench_throughput")
    rows = bench.np.array([465, 482, 491, 466, 448, 449, 448, 443])
    split = bench.worker_split(rows, 2, before=set())
    assert split[:2] == [1847.0, 1845.0]  # (rows 0, 2, 6, 7 and 1, 3, 4, 5, as the loader has)
    assert len(split) == 4  # (no worker here: their CPU is not a number)
