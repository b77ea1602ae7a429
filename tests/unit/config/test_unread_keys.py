"""A knob the run never reads is refused when the user sets it (flags or a config file), never silently dropped;
a preset's knob is left alone; a recorded run whose unread knob differs is still the same run."""


import pytest

from tandem_rlvr.config import load_train_config
from tandem_rlvr.errors import TandemError

# which knobs each schedule reads, worked out from the schedules' definitions (docs/paper_fidelity.md, Algorithm 1
# for word): a coin needs p; a K-token backstop or a K-sized chunk needs K; a fixed author reads neither
READS = {"senior": set(), "junior": set(), "token": {"p"}, "word": {"p", "K"}, "word-atomic": {"p", "K"},
         "sentence": {"p"}, "paragraph-bernoulli": {"p"}, "paragraph-roundrobin": set(),
         "blankline-token-roundrobin": set(), "chunk": {"K"}, "chunk-word": {"K"}, "alternating": set()}


@pytest.mark.parametrize("schedule", sorted(READS))
@pytest.mark.parametrize("knob,value", [("p", 0.3), ("K", 16)])
def test_a_schedule_knob_given_on_the_command_line_is_refused_exactly_when_the_schedule_does_not_read_it(
        schedule, knob, value):
    keys = {"schedule": schedule, knob: value}
    if knob in READS[schedule]:
        cfg = load_train_config("tiny", None, keys)
        assert getattr(cfg.rollout, knob) == value
    else:
        with pytest.raises(TandemError, match=rf"^--{knob} is set but never read: schedule {schedule} "):
            load_train_config("tiny", None, keys)


@pytest.mark.parametrize("key,value", [("schedule", "token"), ("p", 0.3), ("K", 8)])
def test_a_rollout_knob_under_a_method_whose_rollouts_one_model_writes_is_refused(key, value):
    with pytest.raises(TandemError, match=rf"--{key} is set but never read: method grpo rolls out with the senior"):
        load_train_config("tiny", None, {"method": "grpo", key: value})


def test_a_config_file_setting_an_unread_knob_is_refused_by_file_and_key(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("schedule: chunk\nK: 8\np: 0.9\n")
    with pytest.raises(TandemError, match=rf"^p in {f} is set but never read: schedule chunk"):
        load_train_config("tiny", str(f), None)


def test_a_presets_knob_a_users_schedule_does_not_read_is_left_alone():
    # the tiny preset sets neither p nor K: the defaults (0.5, 32) under chunk are not the user's
    cfg = load_train_config("tiny", None, {"schedule": "senior"})
    assert (cfg.rollout.schedule, cfg.rollout.p, cfg.rollout.K) == ("senior", 0.5, 32)
    paper = load_train_config("qwen3-4b-deepscaler", None, {"method": "grpo"})
    assert paper.rollout_schedule == "senior"


def test_the_cli_refuses_an_unread_knob_in_one_line_before_any_model_loads(capsys):
    from tandem_rlvr.cli import main

    assert main(["train", "--preset", "tiny", "--schedule", "token", "--K", "16", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["tandem: error: --K is set but never read: schedule token does not read it; drop it"]


def test_a_recorded_run_whose_unread_knob_differs_resumes_as_the_same_run(tmp_path):
    from tandem_rlvr.rl.run_identity import check_run_dir, stored_config
    from tandem_rlvr.io import write_json

    run = tmp_path / "run"
    run.mkdir()
    cfg = load_train_config("tiny", None, {"schedule": "chunk", "K": 8, "output_dir": str(run)})
    write_json(run / "config.json", {**stored_config(cfg), "p": 0.9})  # a run recorded with a p chunk never read
    assert check_run_dir(cfg) == 0
    write_json(run / "config.json", {**stored_config(cfg), "K": 9})  # K is read by chunk: another run
    with pytest.raises(TandemError, match="K"):
        check_run_dir(cfg)
