"""Builders of ``tandem eval`` and ``tandem compare`` inputs shared by the evaluation tests: a four-problem
benchmark file, and the two commands run in-process as a user types them."""

import json

from tandem_rlvr.cli import main


def write_bench(path, answers=None, order=None):
    """Four problems "Mia has i shells." (ids 0..3, answer i or ``answers[i]``), in ``order``; ``path``."""
    rows = [{"id": str(i), "problem": f"Mia has {i} shells.", "answer": str(i if answers is None else answers[i])}
            for i in range(4)]
    rows = [rows[i] for i in (order or range(4))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def eval_ok(out, senior, bench, *extra, mode="solo"):
    """``tandem eval MODE`` with two samples of three tokens per problem into ``out``; it must succeed."""
    rc = main(["eval", mode, "--senior", str(senior), "--benchmarks", str(bench), "--n", "2", "--max-tokens", "3",
               "--template", "plain", "--out", str(out), *extra])
    assert rc == 0


def run_compare(capsys, tmp_path, *args):
    """``tandem compare ARGS`` into ``tmp_path/cmp``: (exit status, stdout, its ``tandem: error:`` lines)."""
    capsys.readouterr()
    rc = main(["compare", *args, "--n-boot", "200", "--out", str(tmp_path / "cmp")])
    res = capsys.readouterr()
    return rc, res.out, [ln for ln in res.err.splitlines() if ln.startswith("tandem: error:")]
