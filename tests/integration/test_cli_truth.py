"""What the `tandem` command tells the user is true (issue 26, item 9): help texts agree with
what is accepted, error hints name the flag the user typed, piped tables keep their rows whole."""

from __future__ import annotations

import json

import pytest

from tandem_rlvr.cli import build_parser, main
from tandem_rlvr.errors import TandemError


def _help(argv, capsys) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines; compare words


def test_train_help_says_the_shown_defaults_are_replaced_by_a_preset(capsys):
    from tandem_rlvr.config import TrainConfig, load_preset

    text = _help(["train"], capsys)
    assert load_preset("tiny")["lr"] != TrainConfig().loss.lr  # a preset does change a shown default
    assert f"(base default {TrainConfig().loss.lr})" in text and f"(default {TrainConfig().loss.lr})" not in text
    assert "its values replace the base defaults shown below" in text and "--dry-run` prints the resolved" in text


def test_study_juniors_help_offers_only_accepted_values(capsys):
    from tandem_rlvr.cli.recipes import study_settings
    from tandem_rlvr.recipes.study import JUNIORS

    text = _help(["study", "drift", "--out", "x"], capsys)
    offered = text.split("--juniors JUNIORS ", 1)[1].split("--steps", 1)[0]  # the option, not the usage line
    assert "both" not in offered and all(j in offered for j in JUNIORS)
    a = build_parser().parse_args(["study", "drift", "--out", "x"])
    assert study_settings(a).juniors == list(JUNIORS)  # the default the help names is accepted
    a.juniors = "both"
    with pytest.raises(TandemError, match="juniors"):
        study_settings(a)


def test_a_recipe_run_with_other_settings_names_the_out_flag(tmp_path, model_dir):
    from tandem_rlvr.config import load_train_config
    from tandem_rlvr.recipes.pipeline import train_method
    from tandem_rlvr.rl.run_identity import stored_config

    run = tmp_path / "demo_out" / "runs" / "grpo"
    run.mkdir(parents=True)
    other = load_train_config("tiny", overrides=dict(method="grpo", senior=str(model_dir), junior=None,
                                                      output_dir=str(run), max_steps=7))
    (run / "config.json").write_text(json.dumps(stored_config(other)))
    with pytest.raises(TandemError) as e:
        train_method("tiny", "grpo", str(model_dir), None, run, dict(max_steps=3), print_fn=lambda *_: None)
    assert "max_steps" in str(e.value) and "--out" in str(e.value) and "--output-dir" not in str(e.value)


def test_a_piped_table_keeps_each_row_on_one_line(capsys, monkeypatch, tmp_path, model_dir):
    monkeypatch.delenv("COLUMNS", raising=False)
    name = "a_benchmark_with_a_long_descriptive_file_name_of_more_than_eighty_characters_in_all"
    bench = tmp_path / f"{name}.jsonl"
    bench.write_text(json.dumps({"problem": "Mia has 7 shells.", "answer": "7"}) + "\n")
    assert main(["eval", "solo", "--senior", str(model_dir), "--benchmarks", str(bench), "--n", "2",
                 "--max-tokens", "2", "--out", str(tmp_path / "ev")]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if name in line]
    assert len(rows) == 1 and "0.000 ± 0.000" in rows[0] and len(rows[0]) > 80, rows
