"""``tandem study pool``: its arms and their juniors, the held-out paired tests, the settings check.

The quick study end to end, with a re-run that trains, samples and rewrites nothing, is tested as the
README's ``tandem study pool`` command in ``tests/integration/test_readme_commands.py`` (slow; one run serves both).
"""

import numpy as np
import pytest

from tandem_rlvr.errors import TandemError
from tandem_rlvr.recipes.study_stats import record_settings
from tandem_rlvr.recipes.study_pool import PoolStudySettings, arm_junior, arms, held_out_tests


def test_every_junior_is_trained_alone_and_held_out_of_one_pool_of_the_others():
    paths = {"weak": "/w", "base": "/b", "mid": "/m"}
    assert arms() == ["alone-weak", "alone-base", "alone-mid", "pool-no-weak", "pool-no-base", "pool-no-mid"]
    assert [arm_junior(a, paths) for a in arms()] == ["/w", "/b", "/m", "/b,/m", "/w,/m", "/w,/b"]


def test_held_out_tests_pair_seed_averaged_problems_and_match_a_hand_t_statistic():
    rng = np.random.default_rng(0)
    keys = [f"tiny/{i}" for i in range(12)]

    def vecs():  # two seeds of per-problem pass@1 in [0, 0.5] for solo and handoff to each junior
        return [{s: {k: float(rng.uniform(0, 0.5)) for k in keys}
                 for s in ("solo", "handoff_weak", "handoff_base", "handoff_mid")} for _ in range(2)]

    per = {a: vecs() for a in arms()}
    per["pool-no-mid"] = [{s: {k: x + 0.3 + rng.uniform(-0.05, 0.05) for k, x in v.items()} for s, v in seed.items()}
                          for seed in per["alone-weak"]]  # alone-weak's figures, 0.3 better with a little noise
    tests = held_out_tests(per)
    t = tests["pool-no-mid vs alone-weak: handoff_mid"]
    cand = np.mean([[v["handoff_mid"][k] for k in keys] for v in per["pool-no-mid"]], axis=0)
    ref = np.mean([[v["handoff_mid"][k] for k in keys] for v in per["alone-weak"]], axis=0)
    d = cand - ref
    assert t["n"] == 12 and t["held_out"] == "mid" and t["mean_diff"] == pytest.approx(d.mean())
    assert t["t"] == pytest.approx(d.mean() / (d.std(ddof=1) / np.sqrt(d.size)))
    assert t["p"] < 0.05 and t["bootstrap_macro"]["lo"] > 0  # the shifted pool is better, and the tests say so
    assert {"pool-no-weak vs alone-base: solo", "pool-no-base vs alone-base: handoff_base"} <= set(tests)
    assert not any(name.startswith("alone-") for name in tests)


def test_a_study_directory_of_other_settings_is_refused(tmp_path, monkeypatch):
    s = PoolStudySettings(seeds=[0], limit=5)
    assert record_settings(tmp_path, s, "a pool study") == [0]
    assert record_settings(tmp_path, PoolStudySettings(seeds=[1], limit=5), "a pool study") == [0, 1]  # seeds add up
    with pytest.raises(TandemError, match="other settings"):
        record_settings(tmp_path, PoolStudySettings(seeds=[0], limit=6), "a pool study")


def _finished_study(out, world_models):
    """A study directory whose aggregate covers seed 0 (the files a finished ``run_pool_study`` leaves)."""
    import json

    out.mkdir()
    record_settings(out, PoolStudySettings(seeds=[0], limit=5), "a pool study")
    (out / "study.json").write_text(json.dumps({"seeds_done": [0], "world_models": world_models}))
    (out / "study.md").write_text("the table\n")


def test_a_finished_study_of_the_worlds_models_as_they_are_is_a_no_op(tmp_path):
    from tandem_rlvr.fingerprint import model_fingerprint
    from tandem_rlvr.recipes.study_pool import run_pool_study
    from tandem_rlvr.world.shipped import shipped_world

    w = shipped_world("tiny-drift")
    now = {"base": model_fingerprint(str(w.base)), "weak": model_fingerprint(str(w.junior))}
    assert now["base"] != now["weak"]  # two models, told apart
    _finished_study(tmp_path / "same", now)
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "same").iterdir()}
    printed = []
    assert run_pool_study(tmp_path / "same", PoolStudySettings(seeds=[0], limit=5), print_fn=printed.append,
                          progress=False)["seeds_done"] == [0]
    assert "nothing to do" in printed[0] and printed[1] == "the table\n"
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "same").iterdir()} == before  # nothing rewritten


def test_a_finished_study_of_other_models_is_refused_naming_them(tmp_path):
    from tandem_rlvr.recipes.study_pool import run_pool_study

    _finished_study(tmp_path / "other", {"base": "0" * 16, "weak": "1" * 16})
    with pytest.raises(TandemError, match="tiny-drift world's models changed since this study ran"):
        run_pool_study(tmp_path / "other", PoolStudySettings(seeds=[0], limit=5), print_fn=lambda *a: None,
                       progress=False)
