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
