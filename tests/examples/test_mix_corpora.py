from runner import load


def test_three_corpora_get_their_shares_and_the_summary_is_what_was_delivered(capsys, tmp_path):
    out = load("mix_corpora").main(["--workers", "2", "--epochs", "2", "--dir", str(tmp_path)])
    printed = capsys.readouterr().out
    assert "Mixture({web: 60, code: 12, books: 4}" in printed and "(row ends)" in printed
    assert len(set(out["lengths"])) == 1  # every epoch has the same number of batches
    for summary, counts in zip(out["summaries"], out["delivered"], strict=True):
        assert {g.group: g.steps for g in summary.groups} == dict(counts)
        total = sum(counts.values())
        for g in summary.groups:
            assert abs(g.share - g.weight) <= max(0.01, 1200 / total)
    web = [s.groups[0].streams for s in out["summaries"]]
    assert all(n < 60 for n in web)  # web asks for less than it has: a subset
    rest = out["rest"]  # resumed with books at 0.8: the rest of the epoch is mostly books
    assert rest["books"] > rest["web"] + rest["code"]


def test_same_output_in_process(tmp_path):
    module = load("mix_corpora")
    a = module.main(["--workers", "0", "--epochs", "1", "--dir", str(tmp_path / "a")])
    b = module.main(["--workers", "2", "--epochs", "1", "--dir", str(tmp_path / "b")])
    assert a["delivered"] == b["delivered"] and a["rest"] == b["rest"]
