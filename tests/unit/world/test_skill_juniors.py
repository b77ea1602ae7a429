"""Skill juniors (``tandem world build --juniors``, world/skill.py, recipes/skill.py; issue 36).

Fast: the level flag, the dial along the training path, the bisection on measures worked by hand,
the refusal of a level above the base, the model names. Slow (about a minute on an idle core): the
juniors of the shipped tiny world at two levels under ``SkillConfig.for_tests()`` (20 test problems x
2 samples, tolerance 0.05), each recounted from the graded samples of a fresh ``tandem eval solo``
run, built twice to the same bytes, a finished build re-run doing nothing and a killed one leaving
nothing. (A ``WorldConfig.for_tests()`` world cannot serve: its accuracy is 0 at every point, so no
level is reachable; the shipped tiny world has a base to calibrate against and needs no build.)

Run: ``python -m pytest -q -p no:cacheprovider tests/unit/world/test_skill_juniors.py`` (add ``-m slow`` for the
builds).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tandem_rlvr.cli import main
from tandem_rlvr.errors import TandemError
from tandem_rlvr.world.skill import (SKILL_JSON, SkillConfig, level_name, parse_levels, point, refuse_unreachable,
                                     search, skill_model, skill_root)

LEVELS = (0.3, 0.6)


# --------------------------------------------------------------------------- fast
def test_levels_read_as_fractions_or_percents_sorted():
    assert parse_levels("0.5,0.3") == (0.3, 0.5)
    assert parse_levels("30%, 70%") == (0.3, 0.7)
    assert level_name(0.05) == "skill5" and level_name(0.7) == "skill70"


@pytest.mark.parametrize("bad",
                         ["0", "1", "1.2", "-0.3", "0.305", "abc", "0.3,30%", "", "0.5,inf", "-inf", "inf%", "1e400"])
def test_a_bad_level_is_a_one_line_usage_error_before_any_work(bad, capsys):
    assert main(["world", "build", "--world", "tiny", "--juniors", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tandem world build: error: argument --juniors:") and "\n" not in err


def test_the_code_world_is_refused_in_one_line(capsys):
    assert main(["world", "build", "--world", "tiny-code", "--juniors", "0.3"]) == 2
    assert capsys.readouterr().err.strip() == ("tandem: error: --juniors: the code world has no skill juniors yet "
                                               "(math worlds: tiny, tiny-drift)")


def test_the_dial_passes_through_each_checkpoint_and_is_linear_between():
    g = torch.Generator().manual_seed(0)
    path = [{"w": torch.randn(3, 4, generator=g), "n": torch.tensor([i])} for i in range(3)]
    assert torch.equal(point(path, 0.0)["w"], path[0]["w"])
    assert torch.equal(point(path, 0.5)["w"], path[1]["w"])
    assert torch.equal(point(path, 1.0)["w"], path[2]["w"])
    # t = 0.75: halfway along the second segment (each segment half the dial)
    torch.testing.assert_close(point(path, 0.75)["w"], (path[1]["w"] + path[2]["w"]) / 2)
    torch.testing.assert_close(point(path, 0.125)["w"], 0.75 * path[0]["w"] + 0.25 * path[1]["w"])
    with pytest.raises(TandemError):
        point(path, 1.5)


def test_the_search_bisects_to_the_first_probe_within_tolerance():
    cfg = SkillConfig(tol=0.01)
    seen = []

    def acc(t):  # accuracy t**2 along the dial: by hand, 0.3 is met at t = 0.546875 (0.2991)
        seen.append(t)
        return t * t

    found = search(0.3, acc, cfg, base_acc=1.0)
    # probes: 0.5 -> 0.25 (low), 0.75 -> 0.5625 (high), 0.625 -> 0.390625, 0.5625 -> 0.3164, 0.53125 -> 0.2822,
    # 0.546875 -> 0.29907 (within 0.01)
    assert seen == [0.5, 0.75, 0.625, 0.5625, 0.53125, 0.546875]
    assert found["t"] == 0.546875 and found["accuracy"] == 0.546875 ** 2
    assert found["probes"][0] == [1.0, 1.0] and len(found["probes"]) == 7


def test_a_level_in_a_jump_of_the_curve_is_refused_naming_the_nearest_point():
    # probes: 0.5 -> 0.8, then 0.25 ... 0.484375 -> 0.1: none within 0.02; nearest 0.8 (t = 1 and 0.5 tie: the later)
    with pytest.raises(TandemError, match=r"--juniors 0.5: .* in 6 probes \(nearest: t=1, accuracy 0.800\)"):
        search(0.5, lambda t: 0.8 if t >= 0.5 else 0.1, SkillConfig(tol=0.02, max_probes=6), base_acc=0.8)


def test_a_level_above_the_base_is_refused_with_what_the_world_reaches():
    cfg = SkillConfig(tol=0.02)
    refuse_unreachable((0.5, 0.72), 0.70, cfg, "tiny")  # 0.72 <= 0.70 + 0.02: reachable
    refuse_unreachable((0.88,), 0.865, cfg, "tiny")
    with pytest.raises(TandemError, match=r"levels up to 0.88 can be made\)$"):  # 0.865 + 0.02 = 0.885: 0.89 is not
        refuse_unreachable((0.89,), 0.865, cfg, "tiny")
    with pytest.raises(TandemError, match=r"^--juniors 0.8,0.9: above what world tiny reaches \(its base measures "
                                          r"0.700 .* levels up to 0.72 can be made\)$"):
        refuse_unreachable((0.5, 0.8, 0.9), 0.70, cfg, "tiny")


def test_a_skill_name_resolves_to_its_built_junior_and_an_unbuilt_one_says_how(tmp_path, monkeypatch):
    from tandem_rlvr.models import resolve_model_path
    from tandem_rlvr.world.build import named_world
    from tandem_rlvr.world.shipped import shipped_model

    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path))
    with pytest.raises(TandemError, match=r"tiny-skill30 is not built on this machine: run `tandem world build "
                                          r"--world tiny --juniors 0.3`"):
        resolve_model_path("tiny-skill30")
    d = skill_root(named_world("tiny"), SkillConfig(), tmp_path) / "skill30"
    shutil.copytree(shipped_model("tiny-junior"), d)
    (d / SKILL_JSON).write_text(json.dumps({"level": 0.3}))
    assert resolve_model_path("tiny-skill30") == str(d)
    assert skill_model("tiny-junior") is None and skill_model("tiny-code-skill30") is None


def test_skill_json_is_not_part_of_a_models_fingerprint(tmp_path):
    from tandem_rlvr.fingerprint import model_fingerprint
    from tandem_rlvr.world.shipped import shipped_model

    d = tmp_path / "m"
    shutil.copytree(shipped_model("tiny-junior"), d)
    before = model_fingerprint(str(d))
    (d / SKILL_JSON).write_text("{}")
    assert model_fingerprint(str(d)) == before


# --------------------------------------------------------------------------- slow: real builds
def _build(cache, levels=LEVELS):
    from tandem_rlvr.recipes.skill import build_skill_juniors

    return build_skill_juniors("tiny", levels, cfg=SkillConfig.for_tests(), cache=cache, progress=False)


def _tree(root, names):
    return {str(p.relative_to(root)): p.read_bytes()
            for n in names for p in sorted((root / n).rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = tmp_path_factory.mktemp("skill-a")
    return cache, _build(cache)


@pytest.mark.slow
def test_each_junior_measures_within_tolerance_of_its_level_recounted_from_a_fresh_eval_solo(built, tmp_path):
    _, root = built
    tol = SkillConfig.for_tests().tol
    for level in LEVELS:
        d = root / level_name(level)
        rec = json.loads((d / SKILL_JSON).read_text())
        out = tmp_path / level_name(level)
        argv = rec["command"].replace("THIS_DIR", str(d)).replace("OUT", str(out)).split()[1:]
        assert main(argv) == 0
        rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
        assert len(rows) == 20 * 2
        acc = sum(bool(r["correct"]) for r in rows) / len(rows)
        assert abs(acc - level) <= tol, (level, acc)
        assert acc == rec["accuracy"]  # the recorded measurement is what tandem eval solo measures
        kept = [json.loads(line) for line in (d / "eval" / "samples.jsonl").read_text().splitlines()]
        assert [r["correct"] for r in kept] == [r["correct"] for r in rows]
        assert 0 < rec["t"] < 1


@pytest.mark.slow
def test_the_same_command_twice_gives_byte_identical_juniors(built, tmp_path):
    _, root = built
    again = _build(tmp_path)
    names = [level_name(lv) for lv in LEVELS]
    a, b = _tree(root, names), _tree(again, names)
    assert a.keys() == b.keys() and "skill30/model.safetensors" in a
    assert [k for k in a if a[k] != b[k]] == []


@pytest.mark.slow
def test_a_finished_build_run_again_is_a_no_op(built, monkeypatch):
    import tandem_rlvr.recipes.skill as recipe

    cache, root = built
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*")}

    def refuse(*a, **k):
        raise AssertionError("a finished build measured or loaded something")

    monkeypatch.setattr(recipe, "measure", refuse)
    monkeypatch.setattr(recipe, "world_models", refuse)
    assert _build(cache) == root
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*")} == before


@pytest.mark.slow
def test_an_unreachable_level_is_refused_before_any_search_and_leaves_nothing(built, monkeypatch):
    import tandem_rlvr.recipes.skill as recipe

    cache, root = built
    base = json.loads((root / "base" / "measure.json").read_text())["accuracy"]
    level = round(min(base + 0.06, 0.99), 2)
    monkeypatch.setattr(recipe, "skill_path", lambda *a: pytest.fail("searched"))
    with pytest.raises(TandemError, match=rf"^--juniors {level:g}: above what world tiny reaches"):
        _build(cache, (level,))
    assert not (root / level_name(level)).exists()


@pytest.mark.slow
def test_a_build_killed_mid_search_leaves_no_junior_and_no_temporary_folder(built, monkeypatch):
    import tandem_rlvr.recipes.skill as recipe

    cache, root = built
    calls = []
    real = recipe.measure

    def dies_on_the_second_probe(model, out, cfg):
        calls.append(model)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(model, out, cfg)

    monkeypatch.setattr(recipe, "measure", dies_on_the_second_probe)
    with pytest.raises(KeyboardInterrupt):
        _build(cache, (0.45,))
    assert len(calls) == 2
    assert not (root / "skill45").exists()
    assert sorted(p.name for p in root.iterdir()) == ["base", *[level_name(lv) for lv in LEVELS]]


@pytest.mark.slow
def test_world_ls_lists_each_junior_with_its_level_and_measured_accuracy(built, monkeypatch, capsys):
    cache, root = built
    monkeypatch.setenv("TANDEM_CACHE", str(cache))
    assert main(["world", "ls", "--json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out) if r["where"] == "skill junior"]
    assert [(r["world"], r["level"], r["path"]) for r in rows] == [("tiny", lv, str(root / level_name(lv)))
                                                                   for lv in LEVELS]
    for r in rows:  # not named: the tests' settings are not the default ones that tiny-skillNN names
        assert r["name"] == level_name(r["level"])
        assert r["accuracy"] == json.loads((root / level_name(r["level"]) / SKILL_JSON).read_text())["accuracy"]
