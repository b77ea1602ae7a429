"""Numbers the docs state about the built-in world match what the code serves."""

from pathlib import Path

from tandem_rlvr.data.benchmarks import load_benchmark

DOCS = Path(__file__).resolve().parents[2] / "docs"


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
    assert len(preset_names()) == 6 and all(p in out for p in preset_names())


def test_tiny_world_parameter_counts_in_the_docs_are_the_models():
    """The counts of the default tiny world (its tokenizer trained as the build does; no model training)."""
    from tandem_rlvr.prompting import plain_prompt
    from tandem_rlvr.world.build import _n_params, _new_model, named_world
    from tandem_rlvr.world.tasks import make_problems
    from tandem_rlvr.world.tokenizer import train_tokenizer

    cfg = named_world("tiny")
    tok = train_tokenizer([plain_prompt(p.problem) + p.solution for p in make_problems(cfg.n_train, cfg.seed, "train")],
                          cfg.vocab_size)
    base = _n_params(_new_model(tok, cfg.hidden, cfg.layers, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.intermediate))
    small = _n_params(_new_model(tok, cfg.small_hidden, cfg.small_layers, 2, 1, cfg.head_dim, 2 * cfg.small_hidden))
    assert (base, small) == (360_704, 106_688)
    text = (DOCS / "tiny_world.md").read_text()
    assert f"embeddings: {base:,} parameters" in text and f"| base model (senior init) | {base:,} |" in text
    assert f"same data order): {small:,} parameters" in text
    src = Path(__file__).resolve().parents[2] / "src" / "tandem_rlvr" / "world"
    for name in ("build.py", "tasks.py"):  # the docstrings round it
        assert f"{base / 1e6:.2f}M" in (src / name).read_text(), name


def test_architecture_package_map_lists_every_preset():
    from tandem_rlvr.config import preset_names

    line = next(x for x in (DOCS / "architecture.md").read_text().splitlines() if "presets/*.yaml" in x)
    assert sorted(line.split("presets/*.yaml")[1].replace(",", " ").split()) == preset_names()
