"""``tandem eval handoff --junior A,B`` (a junior pool) and ``compare`` of pool runs.

- pass@k per junior is the unbiased estimator over the samples each junior got, checked against
  counts worked by hand and the estimator written here in numpy; a junior with fewer than k samples
  of a problem has no pass@k there, and a benchmark where none has k says why;
- each sample's junior is the pool's seeded draw from its row seed (recomputed here from sha256),
  recorded in the row, and a resumed run draws the same juniors and samples;
- a one-junior pool (``A:1``, a YAML list of one) is today's evaluation bit for bit;
- ``compare`` refuses two runs of different pools (``--allow-mixed`` compares them) and has a row and
  a paired test per junior.
"""

import json
from math import comb

import numpy as np
import pytest

from tandem_rlvr.cli import main
from tandem_rlvr.eval.measure.pool_metrics import junior_pass_at_k

from helpers.evals import write_bench
from reference.pool import draw


def _unbiased(n: int, c: int, k: int) -> float:
    """pass@k = 1 - C(n-c, k) / C(n, k) (Chen et al. 2021), in integers."""
    return 1.0 - comb(n - c, k) / comb(n, k)


def _rows(spec):
    """Sample rows from {(benchmark, problem): [(junior, correct), ...]}."""
    return [{"benchmark": b, "problem_id": p, "sample_idx": i, "junior": j, "correct": c, "senior_share": 0.5}
            for (b, p), samples in spec.items() for i, (j, c) in enumerate(samples)]


def test_per_junior_pass_at_k_is_the_unbiased_estimator_over_each_juniors_samples():
    # problem x1: A got 3 samples (1 correct), B got 1 (correct); x2: A 2 (both wrong), B 2 (1 correct);
    # y1: A 1 (correct), B 3 (2 correct)
    spec = {("x", "1"): [("A", True), ("A", False), ("B", True), ("A", False)],
            ("x", "2"): [("A", False), ("B", True), ("A", False), ("B", False)],
            ("y", "1"): [("B", True), ("A", True), ("B", False), ("B", True)]}
    out = junior_pass_at_k(_rows(spec), {"x": ["1", "2"], "y": ["1"]}, [1, 2, 4], ["A", "B"], n_boot=200)
    a, b = out["A"], out["B"]
    assert a["samples"] == 6 and b["samples"] == 6
    # pass@1 = c/n per problem: A on x = mean(1/3, 0/2); on y = 1/1
    assert a["x"]["pass@1"]["mean"] == pytest.approx(np.mean([1 / 3, 0.0]))
    assert a["y"]["pass@1"]["mean"] == pytest.approx(1.0)
    assert a["macro"]["pass@1"]["mean"] == pytest.approx(np.mean([np.mean([1 / 3, 0.0]), 1.0]))
    # pass@2: A has >= 2 samples on x1 (3, c=1) and x2 (2, c=0) only; y1 (1 sample) is short
    assert a["x"]["pass@2"]["mean"] == pytest.approx(np.mean([_unbiased(3, 1, 2), _unbiased(2, 0, 2)]))
    assert a["x"]["pass@2"]["problems"] == 2 and a["y"]["pass@2"]["problems"] == 0 and a["y"]["pass@2"]["short"] == 1
    assert a["y"]["pass@2"]["mean"] is None and "no problem got 2" in a["y"]["pass@2"]["why"]
    assert a["macro"]["pass@2"]["mean"] is None and "y" in a["macro"]["pass@2"]["why"]
    # B pass@2: x1 has 1 sample (short), x2 (2, c=1), y1 (3, c=2)
    assert b["x"]["pass@2"]["mean"] == pytest.approx(_unbiased(2, 1, 2)) and b["x"]["pass@2"]["short"] == 1
    assert b["y"]["pass@2"]["mean"] == pytest.approx(_unbiased(3, 2, 2))
    assert b["macro"]["pass@2"]["mean"] == pytest.approx(np.mean([_unbiased(2, 1, 2), _unbiased(3, 2, 2)]))
    # nobody got 4 samples of any problem: absent everywhere, never a statistic of an empty set
    assert all(x[bench]["pass@4"]["mean"] is None for x in (a, b) for bench in ("x", "y", "macro"))
    # the standard error of a one-problem benchmark mean is 0, of a two-problem one the bootstrap's (> 0 here)
    assert a["y"]["pass@1"]["se"] == 0.0 and a["x"]["pass@1"]["se"] > 0


def _handoff(out, senior, junior, bench, *extra):
    rc = main(["eval", "handoff", "--senior", str(senior), "--junior", junior, "--benchmarks", str(bench), "--n", "4",
               "--max-tokens", "4", "--template", "plain", "--protocol", "stream", "--schedule", "word",
               "--out", str(out), *extra])
    assert rc == 0


@pytest.fixture(scope="module")
def pool_runs(chat_models, tmp_path_factory):
    """Handoff runs of seniors a and b with the pool a,b and one of a with the pool a:0.7,b:0.3."""
    root = tmp_path_factory.mktemp("pool")
    bench = write_bench(root / "b.jsonl")
    pool = f"{chat_models['a']},{chat_models['b']}"
    _handoff(root / "a", chat_models["a"], pool, bench)
    _handoff(root / "b", chat_models["b"], pool, bench)
    _handoff(root / "a-other", chat_models["a"], f"{chat_models['a']}:0.7,{chat_models['b']}:0.3", bench)
    return root, bench


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_each_samples_junior_is_the_seeded_draw_and_a_resume_draws_the_same(pool_runs, chat_models):
    root, bench = pool_runs
    rows = _lines(root / "a" / "samples.jsonl")
    names = [str(chat_models["a"].resolve()), str(chat_models["b"].resolve())]
    assert [r["junior"] for r in rows] == [names[draw([0.5, 0.5], r["seed"])] for r in rows]
    assert {r["junior"] for r in rows} == set(names)  # 16 draws: both juniors drawn
    cfg = json.loads((root / "a" / "config.json").read_text())
    assert cfg["schedule"]["pool"] == {"juniors": names, "weights": [0.5, 0.5], "draw": "sample"}
    assert set(cfg["inputs"]["models"]) == {"senior", *(f"junior/{n}" for n in names)}
    # resume: drop the last two problems and the metrics, run again: the same rows, the same bytes
    before = (root / "a" / "samples.jsonl").read_text()
    keep = [ln for ln in before.splitlines() if json.loads(ln)["problem_id"] in ("0", "1")]
    (root / "a" / "samples.jsonl").write_text("\n".join(keep) + "\n")
    (root / "a" / "metrics.json").unlink()
    _handoff(root / "a", chat_models["a"], f"{chat_models['a']},{chat_models['b']}", bench)

    def key(r):  # what a resume must reproduce (log-prob sums move in the last float digits with the batch)
        return r["problem_id"], r["sample_idx"], r["seed"], r["junior"], r["token_ids"], r["senior_mask"]

    assert [key(r) for r in _lines(root / "a" / "samples.jsonl")] == [key(json.loads(x)) for x in before.splitlines()]
    m = json.loads((root / "a" / "metrics.json").read_text())
    per = {j: sum(r["junior"] == j for r in rows) for j in names}
    assert {j: m["juniors"][j]["samples"] for j in names} == per


def test_a_resume_with_another_pool_is_refused(pool_runs, chat_models, capsys):
    root, bench = pool_runs
    capsys.readouterr()
    rc = main(["eval", "handoff", "--senior", str(chat_models["a"]), "--junior",
               f"{chat_models['b']},{chat_models['a']}",
               "--benchmarks", str(bench), "--n", "4", "--max-tokens", "4", "--template", "plain", "--protocol",
               "stream", "--schedule", "word", "--out", str(root / "a")])
    assert rc == 2 and "schedule" in capsys.readouterr().err


@pytest.mark.parametrize("form", ["weight", "yaml"])
def test_a_one_junior_pool_is_todays_evaluation_bit_for_bit(chat_models, tmp_path, form):
    bench = write_bench(tmp_path / "b.jsonl")
    spec = f"{chat_models['b']}:1"
    if form == "yaml":
        (tmp_path / "pool.yaml").write_text(f"- name: {chat_models['b']}\n  weight: 2\n")
        spec = str(tmp_path / "pool.yaml")
    _handoff(tmp_path / "plain", chat_models["a"], str(chat_models["b"]), bench)
    _handoff(tmp_path / "pool", chat_models["a"], spec, bench)
    for name in ("samples.jsonl", "metrics.json", "config.json"):
        assert (tmp_path / "plain" / name).read_bytes() == (tmp_path / "pool" / name).read_bytes(), name


def test_compare_refuses_another_pool_and_gives_each_junior_a_row_and_a_test(pool_runs, chat_models, capsys):
    root, _ = pool_runs
    out = root / "cmp"
    capsys.readouterr()
    rc = main(["compare", "--handoff", f"a:pool={root / 'a'}", "--handoff", f"b:pool={root / 'a-other'}",
               "--n-boot", "200", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "differ in schedule" in err and "--allow-mixed" in err
    assert main(["compare", "--handoff", f"a:pool={root / 'a'}", "--handoff", f"b:pool={root / 'a-other'}",
                 "--n-boot", "200", "--allow-mixed", "--out", str(out)]) == 0
    assert main(["compare", "--handoff", f"a:pool={root / 'a'}", "--handoff", f"b:pool={root / 'b'}",
                 "--n-boot", "200", "--out", str(out)]) == 0
    comp = json.loads((out / "compare.json").read_text())
    names = [str(chat_models["a"].resolve()), str(chat_models["b"].resolve())]
    assert set(comp["handoff"]["pool"]["a"]["juniors"]) == set(names)
    stats = [t["statistic"] for t in comp["ttests"]]
    assert "handoff pass@1 (pool)" in stats
    assert sum(s.startswith("handoff pass@1 (pool, junior ") for s in stats) == 2
    # the per-junior test pairs the problems where both seniors handed off to that junior: the same draws
    # (row seeds depend on the run seed and the problem, not the senior), so every problem that junior got
    rows = _lines(root / "a" / "samples.jsonl")
    for t in comp["ttests"]:
        if ", junior " in t["statistic"]:
            j = next(n for n in names if n.endswith(t["statistic"].rsplit(" ", 1)[1].rstrip(")")))
            assert t["n"] == len({r["problem_id"] for r in rows if r["junior"] == j})
    md = (out / "compare.md").read_text()
    assert "per junior of the pool" in md


def test_the_text_protocol_hands_each_chain_to_its_drawn_junior(chat_models, tmp_path):
    bench = write_bench(tmp_path / "b.jsonl")
    rc = main(["eval", "handoff", "--senior", str(chat_models["a"]), "--junior",
               f"{chat_models['a']},{chat_models['b']}",
               "--benchmarks", str(bench), "--n", "4", "--max-tokens", "6", "--template", "plain",
               "--out", str(tmp_path / "t")])
    assert rc == 0
    names = [str(chat_models["a"].resolve()), str(chat_models["b"].resolve())]
    rows = _lines(tmp_path / "t" / "samples.jsonl")
    assert [r["junior"] for r in rows] == [names[draw([0.5, 0.5], r["seed"])] for r in rows]
    cfg = json.loads((tmp_path / "t" / "config.json").read_text())
    assert cfg["schedule"]["protocol"] == "text" and cfg["schedule"]["pool"]["juniors"] == names
