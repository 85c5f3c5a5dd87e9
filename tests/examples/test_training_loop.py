from runner import load


def test_schedule_ends_on_the_last_batch_with_kept_workers(capsys):
    module = load("training_loop")
    result = module.main(["--epochs", "3", "--streams", "40", "--workers", "2"])
    assert result["steps"] == sum(result["lengths"])  # OneCycleLR would raise past its end
    assert len(set(result["lengths"])) == 1  # shuffled epochs, all as long
    assert result["losses"][-1] < result["losses"][0]
    out = capsys.readouterr().out
    assert "the schedule planned" in out
