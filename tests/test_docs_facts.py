"""Numbers the docs state about the built-in world match what the code serves."""

from pathlib import Path

from tandem_rlvr.data.benchmarks import load_benchmark

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_tiny_world_doc_states_the_split_sizes_the_benchmark_serves():
    sizes = {s: len(load_benchmark("tiny", split=s)) for s in ("train", "val", "test")}
    assert sizes == {"train": 20000, "val": 500, "test": 2000}  # stated in the issue (counted by a user)
    text = (DOCS / "tiny_world.md").read_text()
    assert f"{sizes['train']} train, {sizes['val']} val, {sizes['test']} test problems" in text


def test_train_help_lists_every_preset(capsys):
    from tandem_rlvr.cli import main
    from tandem_rlvr.config import preset_names

    assert main(["train", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # argparse wraps at hyphens
    assert len(preset_names()) == 4 and all(p in out for p in preset_names())
