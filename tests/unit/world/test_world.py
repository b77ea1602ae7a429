"""The tiny world: task generator, tokenizer, cached build. Quick (about 20 s on 2 cores).

Accuracy of the default world is not asserted here (it takes minutes to build); the build
tests use ``WorldConfig.for_tests()`` and check mechanics: loadable dirs, one tokenizer,
reuse without rebuild, no half world after an interrupted build.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tandem_rlvr.errors import TandemError
from tandem_rlvr.rewards.math import extract_boxed
from tandem_rlvr.world import build as world_build
from tandem_rlvr.world.build import WorldConfig, build_world, load_world
from tandem_rlvr.prompting import plain_prompt
from tandem_rlvr.world.tasks import make_problems, noisy_solution, split_of
from tandem_rlvr.world.tokenizer import boundary_ids, train_tokenizer


@pytest.fixture(scope="module")
def problems():
    return make_problems(400, seed=3, split="train")


@pytest.fixture(scope="module")
def tok(problems):
    return train_tokenizer((plain_prompt(p.problem) + p.solution for p in problems), vocab_size=400)


# ---- task generator ---------------------------------------------------------------------------

def test_make_problems_is_deterministic_and_prefix_stable():
    a, b = make_problems(50, seed=1, split="val"), make_problems(80, seed=1, split="val")
    assert a == b[:50]
    assert [p.problem for p in a] != [p.problem for p in make_problems(50, seed=2, split="val")]
    assert len({p.problem_id for p in b}) == len(b)


def test_splits_are_disjoint_whatever_the_seeds():
    texts = {s: {p.problem for seed in (0, 1) for p in make_problems(300, seed, s)} for s in ("train", "val", "test")}
    assert not texts["train"] & texts["val"] and not texts["train"] & texts["test"] and not texts["val"] & texts["test"]
    assert all(split_of(t) == s for s, ts in texts.items() for t in ts)
    with pytest.raises(TandemError, match="unknown split"):
        make_problems(1, split="dev")


def test_solutions_are_paragraphs_ending_in_the_true_boxed_answer(problems):
    for p in problems:
        paras = p.solution.split("\n\n")
        assert 4 <= len(paras) <= 6 and all(par.strip() == par and par for par in paras)  # intro, 2-4 steps, answer
        assert paras[-1] == f"The answer is \\boxed{{{p.answer}}}." and extract_boxed(p.solution) == p.answer
        value = p.start
        for s in p.steps:
            value += s.sign * s.amount
            assert value >= 0
        assert str(value) == p.answer
        assert noisy_solution(p, random.Random(0), 0.0) == p.solution
        assert not re.search(r"-\d", p.problem + p.solution)  # no negative numbers anywhere


def test_slip_rate_matches_slip_prob_and_every_slip_changes_the_answer(problems):
    rng, n, slipped = random.Random(0), 4000, 0
    for i in range(n):
        p = problems[i % len(problems)]
        sol = noisy_solution(p, rng, 0.3)
        assert sol.count("\n\n") == p.solution.count("\n\n") and not re.search(r"-\d", sol)
        wrong = extract_boxed(sol) != p.answer
        assert wrong == (sol != p.solution)  # a slip always propagates to the boxed answer
        slipped += wrong
    assert abs(slipped / n - 0.3) < 0.03
    with pytest.raises(TandemError, match="slip_prob"):
        noisy_solution(problems[0], rng, 1.5)


# ---- tokenizer --------------------------------------------------------------------------------

def test_paragraph_break_is_one_token_with_cc(tok, problems):
    ids = tok("\n\n")["input_ids"]
    assert len(ids) == 1 and "ĊĊ" in tok.convert_ids_to_tokens(ids)[0]
    sol_ids = tok(problems[0].solution)["input_ids"]
    assert sol_ids.count(ids[0]) == problems[0].solution.count("\n\n")


def test_word_initial_tokens_start_with_g_marker(tok, problems):
    text = plain_prompt(problems[0].problem) + problems[0].solution
    toks = tok.convert_ids_to_tokens(tok(text)["input_ids"])
    assert "Ġplus" in toks or "Ġminus" in toks
    for t in toks:
        surface = tok.convert_tokens_to_string([t])
        assert t.startswith("Ġ") == surface.startswith(" ")
    assert len(boundary_ids(tok)) > 20


def test_decode_inverts_encode_on_task_text(tok, problems):
    rng = random.Random(1)
    texts = [plain_prompt(p.problem) + noisy_solution(p, rng, 0.5) for p in problems[:200]] + ["Zoë has 3 ünïcode €!"]
    for x in texts:
        assert tok.decode(tok(x)["input_ids"]) == x
    assert tok.eos_token == tok.pad_token == "<|endoftext|>" and len(tok) <= 400


def test_tokenizer_round_trips_through_save_pretrained(tok, problems, tmp_path):
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    x = plain_prompt(problems[1].problem) + problems[1].solution
    assert loaded(x)["input_ids"] == tok(x)["input_ids"] and loaded.eos_token_id == tok.eos_token_id


# ---- build and cache --------------------------------------------------------------------------

def test_config_validation_names_the_field():
    with pytest.raises(TandemError, match="junior"):
        WorldConfig(junior="big")
    with pytest.raises(TandemError, match="kv_heads"):
        WorldConfig(heads=4, kv_heads=3)
    with pytest.raises(TandemError, match="slip_prob"):
        WorldConfig(slip_prob=1.0)
    assert WorldConfig().key() != WorldConfig(seed=1).key() and WorldConfig().key() == WorldConfig().key()
    assert WorldConfig().key() == WorldConfig(small_layers=3).key()  # a field the early junior never uses
    assert WorldConfig(junior="small").key() != WorldConfig(junior="small", small_layers=3).key()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TANDEM_CACHE", str(cache))
        yield build_world(WorldConfig.for_tests(), progress=False), cache


def _check_pair_loads_and_runs(w):
    """Loadable by tandem itself (one shared tokenizer checked by load_pair), and both models run."""
    from tandem_rlvr.models import load_pair

    pair = load_pair(str(w.base), str(w.junior), "cpu")
    ids = torch.tensor([pair.tokenizer.encode("Mia has 7 shells.")])
    for model in (pair.senior, pair.junior):
        assert model(ids).logits.shape == (1, ids.shape[1], len(pair.tokenizer))


def test_build_makes_loadable_dirs_sharing_one_tokenizer(built):
    w, cache = built
    assert w.root.parent == cache / "worlds" and w.root.name == WorldConfig.for_tests().key()
    for d in (w.base, w.junior):
        model, tk = AutoModelForCausalLM.from_pretrained(d), AutoTokenizer.from_pretrained(d)
        assert type(model).__name__ == "Qwen3ForCausalLM" and model.config.vocab_size == len(tk)
        assert tk.eos_token == "<|endoftext|>"
    assert (w.base / "tokenizer.json").read_bytes() == (w.junior / "tokenizer.json").read_bytes()
    _check_pair_loads_and_runs(w)
    meta = json.loads((w.root / "world.json").read_text())
    assert meta == w.meta and set(meta["accuracy"]) == {"senior/acc_t1", "senior/acc_greedy", "junior/acc_t1",
                                                        "junior/acc_greedy"}
    assert all(0.0 <= a <= 1.0 for a in meta["accuracy"].values())
    assert [p.name for p in (cache / "worlds").iterdir()] == [w.root.name]  # no temporary dirs left


def test_second_build_reuses_the_cached_world(built, monkeypatch):
    w, cache = built
    monkeypatch.setenv("TANDEM_CACHE", str(cache))
    mtime = (w.root / "world.json").stat().st_mtime_ns
    monkeypatch.setattr(world_build, "_build_into", lambda *a: pytest.fail("rebuilt a cached world"))
    again = build_world(WorldConfig.for_tests(), progress=False)
    assert again.root == w.root and (w.root / "world.json").stat().st_mtime_ns == mtime
    assert load_world(WorldConfig.for_tests(), build_if_missing=False).meta == w.meta
    with pytest.raises(TandemError, match="no tiny world"):
        load_world(WorldConfig.for_tests(seed=9), build_if_missing=False)


def test_force_rebuilds_in_place(tmp_path):
    cfg = WorldConfig.for_tests(steps=2)
    first = build_world(cfg, cache=tmp_path, progress=False)
    mtime = (first.root / "world.json").stat().st_mtime_ns
    second = build_world(cfg, cache=tmp_path, progress=False, force=True)
    assert second.root == first.root and (second.root / "world.json").stat().st_mtime_ns != mtime
    assert [p.name for p in (tmp_path / "worlds").iterdir()] == [first.root.name]


def test_interrupted_build_leaves_no_world(tmp_path, monkeypatch):
    real, calls = world_build.make_batch, []

    def boom(*a, **k):  # interrupt at step 5 of 6: after the early junior (step 3) was saved
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(world_build, "make_batch", boom)
    with pytest.raises(KeyboardInterrupt):
        build_world(WorldConfig.for_tests(), cache=tmp_path, progress=False)
    assert list((tmp_path / "worlds").iterdir()) == []


def _weights(w) -> dict[str, bytes]:
    return {who: (w.root / who / "model.safetensors").read_bytes() for who in ("senior", "junior")}


def test_world_build_is_the_same_whatever_the_thread_setting(tmp_path, monkeypatch):
    # A build must not read the load or $TANDEM_THREADS: torch runs it on 1 thread (issue 26: a
    # build on 2 threads under load made another model under the same key). Seen from inside the
    # training: every step runs with torch.get_num_threads() == 1, whatever was set before.
    real, seen = world_build.make_batch, []

    def spy(*a, **k):
        seen.append(torch.get_num_threads())
        return real(*a, **k)

    monkeypatch.setattr(world_build, "make_batch", spy)
    cfg = WorldConfig.for_tests()
    builds = []
    saved = torch.get_num_threads()
    try:
        for env in ("2", "1"):
            monkeypatch.setenv("TANDEM_THREADS", env)
            torch.set_num_threads(int(env))
            builds.append(build_world(cfg, cache=tmp_path / f"t{env}", progress=False))
            assert torch.get_num_threads() == int(env)  # the caller's setting is restored after the build
    finally:
        torch.set_num_threads(saved)
    assert set(seen) == {1} and len(seen) == 2 * cfg.steps  # two builds x 6 steps, all on one thread
    assert [b.meta["threads"] for b in builds] == [1, 1]
    assert _weights(builds[0]) == _weights(builds[1])
    assert builds[0].meta["accuracy"] == builds[1].meta["accuracy"]


def test_world_key_changes_with_whatever_shapes_the_weights(tmp_path, monkeypatch):
    import shutil

    import transformers

    import tandem_rlvr

    # The build's code: a copy of the package's build sources hashes alike (CRLF line endings
    # too), and one edited character in any of them changes the hash.
    pkg = Path(tandem_rlvr.__file__).parent
    copy = tmp_path / "pkg"
    for rel in world_build.BUILD_SOURCES:
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(pkg / rel, copy / rel)
    assert world_build.source_hash(copy) == world_build.source_hash(pkg) == world_build.build_fingerprint()["code"]
    for rel in world_build.BUILD_SOURCES:
        text = (pkg / rel).read_bytes()
        (copy / rel).write_bytes(text.replace(b"\n", b"\r\n"))
        assert world_build.source_hash(copy) == world_build.source_hash(pkg), rel
        (copy / rel).write_bytes(text + b"#")
        assert world_build.source_hash(copy) != world_build.source_hash(pkg), rel
        (copy / rel).write_bytes(text)
    # The format version, the thread count and the libraries that train and initialise the models.
    base = WorldConfig().key()
    keys = {base}
    for target, name, value in ((world_build, "FORMAT_VERSION", 99), (world_build, "BUILD_THREADS", 2),
                                (torch, "__version__", "0.0.1"), (transformers, "__version__", "0.0.1")):
        with monkeypatch.context() as mp:
            mp.setattr(target, name, value)
            world_build.build_fingerprint.cache_clear()
            keys.add(WorldConfig().key())
        world_build.build_fingerprint.cache_clear()
    assert len(keys) == 5 and WorldConfig().key() == base
    with monkeypatch.context() as mp:  # and an edited source file
        mp.setattr(world_build, "source_hash", lambda pkg: "0" * 16)
        world_build.build_fingerprint.cache_clear()
        assert WorldConfig().key() != base
    world_build.build_fingerprint.cache_clear()


def test_small_junior_is_smaller_and_shares_the_tokenizer(tmp_path):
    w = build_world(WorldConfig.for_tests(junior="small"), cache=tmp_path, progress=False)
    assert w.meta["params"]["junior"] < w.meta["params"]["senior"]
    assert (w.base / "tokenizer.json").read_bytes() == (w.junior / "tokenizer.json").read_bytes()
    _check_pair_loads_and_runs(w)


def test_tiny_is_a_registered_benchmark():
    from tandem_rlvr.data.benchmarks import load_benchmark

    got = load_benchmark("tiny", split="val", limit=5)
    want = make_problems(5, seed=0, split="val")
    assert [(p.benchmark, p.problem_id, p.problem, p.answer) for p in got] == [
        ("tiny", q.problem_id, q.problem, q.answer) for q in want]
    with pytest.raises(TandemError, match="unknown split"):
        load_benchmark("tiny", split="nope", limit=1)


def test_readme_generate_example_is_a_problem_of_the_tiny_world_and_states_its_answer():
    # The README's first command should be in the world's distribution (2-4 steps in the
    # generator's wording) and its comment should name the right answer. The answer is worked
    # out here from the story's wording alone: a regex per clause template of tasks.py.
    from tandem_rlvr.world import tasks

    readme = (Path(__file__).parents[3] / "README.md").read_text()
    block = readme[readme.index("tandem generate --prompt"):]
    prompt = re.search(r'--prompt "([^"]+)"', block).group(1)
    names = "|".join(n for n, _ in tasks.NAMES)
    first, *steps, question = re.split(r"(?<=[.?]) ", prompt)
    m = re.fullmatch(rf"({names}) has (\d+) ({'|'.join(tasks.OBJECTS)})\.", first)
    assert m, first
    assert question == f"How many {m.group(3)} does {m.group(1)} have now?"
    assert 2 <= len(steps) <= 4, steps  # the generator's range; a one-step story is outside it

    def clause_regex(template: str) -> str:
        return re.escape(template).replace(r"\{p\}", "(?:She|He|she|he)").replace(r"\{k\}", r"(\d+)").replace(
            r"\{f\}", f"(?:{names})").replace(r"\{o\}", "(?:her|him)")

    value = int(m.group(2))
    for step in steps:
        body = next(step[len(c):] for c in sorted(tasks.CONNECTIVES, key=len, reverse=True) if step.startswith(c))
        body = body[0].upper() + body[1:] if body.startswith(("she ", "he ")) else body
        signs = [(sign, re.fullmatch(clause_regex(story), body))
                 for sign, group in ((1, tasks.GAINS), (-1, tasks.LOSSES))
                 for story, _ in group]
        sign, hit = next((s, h) for s, h in signs if h)
        value += sign * int(hit.group(1))
    assert value == 10  # 7 + 5 - 2
    comment = readme[:readme.index("tandem generate --prompt")].rsplit("```bash", 1)[1]
    assert f"the right answer, {value}" in comment
