import pytest
from runner import load

pytest.importorskip("matplotlib")


def test_the_picture_of_four_plans_is_written(tmp_path, capsys):
    from PIL import Image

    out = tmp_path / "plan.png"
    result = load("plot_plan").main(["--out", str(out)])
    assert result["out"] == str(out)
    with Image.open(out) as picture:
        assert picture.format == "PNG" and picture.size == (800, 1280)
    padding = result["padding"]
    assert set(padding) == {"zeros", "pack", "segments", "two ranks"}
    assert all(0 < p < 1 for p in padding.values())
    assert padding["segments"] < padding["pack"] <= padding["zeros"]  # segments end together
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "% padding" in printed
