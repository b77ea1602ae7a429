"""Plant known bugs in a copy of ``src/`` and check that the fast tests catch each one.

Each mutant is one substitution in one source file (the kinds of bug issue 16 found passing
the suite: a shifted senior mask, a KL reference at the wrong temperature, top-p ignored under
top-k, a sentence set without '.', pass@k computed as pass@1, an evaluation rerun that resamples
and duplicates, a junior-imitation term cut from the gradient, and a few more), anchored by the
function, class or module-level assignment it changes (``where``, a qualified name) and the code
it replaces, found as tokens inside that definition: a re-wrapped line, another indentation or an
edit elsewhere in the file leaves it applying. For every mutant the script copies ``src/`` to a
temporary directory, applies the substitution, and runs only the test files named for it with that
copy first on ``PYTHONPATH``. A mutant is caught when pytest fails (exit status 1).

Run from the repository root:

    TANDEM_THREADS=1 python scripts/mutants.py            # all mutants, then a summary table
    TANDEM_THREADS=1 python scripts/mutants.py --only mask-shift,pass-at-k-as-pass-at-1
    TANDEM_THREADS=1 python scripts/mutants.py --baseline # also check the unmutated copy passes

Exit status 0 when every mutant is caught (and the baseline passes).
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to src/tandem_rlvr
    where: str  # the def, class or module-level assignment it changes, by qualified name ("Class.method")
    old: str  # the code it replaces, found as tokens inside ``where`` (wrapping, indentation, comments aside)
    new: str
    tests: tuple[str, ...]


_STDIO_TESTS = tuple(f"tests/unit/tasks/test_code_task.py::{t}" for t in (
    "test_a_stdin_program_that_times_out_on_one_input_is_stopped_there",
    "test_a_stdin_grade_takes_one_wall_clock_limit_whatever_the_inputs",
    "test_a_stdin_program_that_meets_a_limit_on_one_input_is_stopped_there_and_a_crash_is_not"))

MUTANTS = [
    Mutant("mask-shift", "rl/rollout.py", "TandemRollout.finish",
           "senior_mask = [roll.row_mask(b) for b in range(len(ids))]",
           "senior_mask = [roll.row_mask(b)[1:] + roll.row_mask(b)[:1] for b in range(len(ids))]",
           ("tests/unit/rl/test_mask_alignment.py",)),
    Mutant("klreg-reference-at-temperature-1", "rl/trainer.py", "TandemGRPOTrainer._prepare_reference",
           "add_fused_lm_head(junior, temperature=self.temperature,",
           "add_fused_lm_head(junior, temperature=1.0,",
           ("tests/unit/rl/test_loss_reference.py",)),
    Mutant("top-p-ignored-under-top-k", "decoding/sampling.py", "_sample_top_k",
           "        vals = vals.masked_fill(_top_p_drop(vals, params.top_p), float(\"-inf\"))",
           "        pass",
           ("tests/unit/decoding/test_sampling_reference.py",)),
    Mutant("sentence-set-without-dot", "decoding/boundary.py", "_boundary_list",
           'mask = [any(c in s for c in ".!?\\n") for s in surfaces]',
           'mask = [any(c in s for c in "!?\\n") for s in surfaces]',
           ("tests/unit/decoding/test_boundary_sets.py",)),
    Mutant("pass-at-k-as-pass-at-1", "eval/measure/metrics.py", "pass_at_k_summary",
           "vals = {b: pass_at_k_per_problem(n, c, k) for b, (n, c) in per_bench.items()}",
           "vals = {b: pass_at_k_per_problem(n, c, 1) for b, (n, c) in per_bench.items()}",
           ("tests/unit/eval/test_battery_reference.py",)),
    Mutant("eval-rerun-resamples-and-duplicates", "eval/sample/sampler.py", "run_eval",
           'done = {(r["benchmark"], str(r["problem_id"])) for r in rows}',
           "done = set()",
           ("tests/unit/rl/test_resume.py",)),
    Mutant("junior-imitation-cut-from-gradient", "rl/losses.py", "imitation_term",
           "nll = -(b.logps * jmask).sum()",
           "nll = -(b.logps.detach() * jmask).sum()",
           ("tests/unit/rl/test_loss_reference.py",)),
    # further bugs of the same kinds
    Mutant("normalizer-response-tokens-counts-senior-only", "rl/losses.py", "loss_denominator",
           'if normalizer == "response_tokens":\n        return completion_mask.to(torch.float32).sum()',
           'if normalizer == "response_tokens":\n        return weights.sum()',
           ("tests/unit/rl/test_loss_reference.py",)),
    Mutant("junior-token-weight-ignored", "rl/losses.py", "loss_weights",
           "return token_weights(b.response_mask, b.senior_mask, s.junior_token_weight)",
           "return token_weights(b.response_mask, b.senior_mask, 0.0)",
           ("tests/unit/rl/test_loss_reference.py",)),
    Mutant("advantages-not-std-scaled", "rl/grpo_config.py", "from_train_config",
           'scale_rewards="group" if loss.scale_rewards else "none"',
           'scale_rewards="none"',
           ("tests/unit/rl/test_loss_reference.py",)),
    Mutant("logprobs-ignore-temperature", "decoding/sampling.py", "scaled_logprobs",
           "    logits = logits.float()\n    if params.temperature > 0:\n        logits = logits / params.temperature\n"
           "    return torch.log_softmax(logits, dim=-1)",
           "    logits = logits.float()\n    return torch.log_softmax(logits, dim=-1)",
           ("tests/unit/decoding/test_sampling_reference.py", "tests/unit/rl/test_mask_alignment.py")),
    Mutant("top-k-drops-tied-kth-token", "decoding/sampling.py", "filter_logits",
           "logits.masked_fill(logits < kth, float(\"-inf\"))",
           "logits.masked_fill(logits <= kth, float(\"-inf\"))",
           ("tests/unit/decoding/test_sampling_reference.py",)),
    Mutant("word-set-misses-sentencepiece-marker", "decoding/boundary.py", "_boundary_list",
           'r[:1] in ("Ġ", "▁")', 'r[:1] in ("Ġ",)',
           ("tests/unit/decoding/test_boundary_sets.py",)),
    Mutant("drift-share-threshold-half-nat", "eval/measure/drift.py", "drift_statistics",
           "(np.abs(lr[n][frequent]) > 1).mean()", "(np.abs(lr[n][frequent]) > 0.5).mean()",
           ("tests/unit/eval/test_battery_reference.py",)),
    Mutant("survival-counts-ties-as-exceeding", "eval/measure/metrics.py", "survival_curve",
           'np.asarray(grid, dtype=np.float64), side="right")', 'np.asarray(grid, dtype=np.float64), side="left")',
           ("tests/unit/eval/test_battery_reference.py",)),
    Mutant("compaction-keeps-stale-uniforms", "decoding/tandem.py", "TandemDecoder._generate",
           "u_sample, attn_full, mask_full = u_sample[keep], attn_full[keep], mask_full[keep]",
           "u_sample, attn_full, mask_full = u_sample[: keep.shape[0]], attn_full[keep], mask_full[keep]",
           ("tests/unit/decoding/test_decoder_speed_paths.py",)),
    Mutant("lean-step-rotary-sign", "decoding/lean.py", "_rotate",
           "x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin",
           "x * cos + torch.cat((x[..., half:], x[..., :half]), dim=-1) * sin",
           ("tests/unit/decoding/test_decoder_speed_paths.py",)),
    Mutant("roofline-inactive-head-free", "recipes/roofline.py", "_matrix",
           "return 0.0 if rows <= 0 else max(2.0 * rows * n / flops, n * elem / bw)",
           "return 2.0 * rows * n / flops if rows < 2 else max(2.0 * rows * n / flops, n * elem / bw)",
           ("tests/unit/recipes/test_roofline.py",)),
    Mutant("kl-monitor-on-every-token", "rl/rollout.py", "TandemRollout._kl_to_junior",
           "m = torch.tensor(senior_mask[b], dtype=torch.bool)",
           "m = torch.ones(len(senior_mask[b]), dtype=torch.bool)",
           ("tests/unit/rl/test_train.py",)),
    # issue 22: paper-scale training
    Mutant("imitation-normalised-per-micro-batch", "rl/losses.py", "imitation_term",
           "s.junior_imitation * nll / b.junior_normalizer",
           "s.junior_imitation * nll / jmask.sum().clamp(min=1) / b.accumulation",
           ("tests/unit/rl/test_microbatch.py",)),
    Mutant("master-weights-in-compute-dtype", "config/models.py", "ModelsPart.dtypes_on",
           'torch.float32 if self.master_dtype == "float32" else compute)',
           "compute)",
           ("tests/unit/rl/test_precision.py",)),
    Mutant("kl-clamp-ignored", "rl/losses.py", "k3_kl",
           "return k3.clamp(-kl_clamp, kl_clamp) if kl_clamp > 0 else k3",
           "return k3",
           ("tests/unit/rl/test_loss_reference.py",)),
    Mutant("dual-clip-not-passed", "rl/grpo_config.py", "from_train_config",
           "delta=loss.dual_clip or None,",
           "delta=None,",
           ("tests/unit/rl/test_loss_reference.py",)),
    # issue 35: behaviours no test pinned down (and their neighbours)
    Mutant("kl-dropped-when-unclamped", "rl/losses.py", "kl_term",
           "return s.beta * (k3 * mask).sum() / b.normalizer",
           "return (s.beta if s.kl_clamp > 0 else 0.0) * (k3 * mask).sum() / b.normalizer",
           ("tests/unit/rl/test_kl_term.py",)),
    Mutant("kl-clamp-zero-zeroes-the-term", "rl/losses.py", "k3_kl",
           "return k3.clamp(-kl_clamp, kl_clamp) if kl_clamp > 0 else k3",
           "return k3.clamp(-kl_clamp, kl_clamp)",
           ("tests/unit/rl/test_kl_term.py",)),
    Mutant("kl-clamp-on-the-log-ratio", "rl/losses.py", "k3_kl",
           "d = (ref_logps - logps).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)",
           "d = (ref_logps - logps).clamp(-(kl_clamp or LOG_RATIO_BOUND), kl_clamp or LOG_RATIO_BOUND)",
           ("tests/unit/rl/test_kl_term.py",)),
    Mutant("kl-log-ratio-unguarded", "rl/losses.py", "k3_kl",
           "d = (ref_logps - logps).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)",
           "d = ref_logps - logps",
           ("tests/unit/rl/test_kl_term.py",)),
    Mutant("kl-mask-counts-padding", "rl/losses.py", "kl_term",
           "    mask = loss_weights(b, s)\n    k3 = k3_kl(",
           "    mask = b.senior_mask.float() if b.senior_mask is not None else loss_weights(b, s)\n    k3 = k3_kl(",
           ("tests/unit/rl/test_loss_padding.py",)),
    Mutant("tandem-klreg-drops-its-kl-term", "rl/methods.py", "tandem_klreg_loss",
           "return add_terms(policy_term(b, s), kl_term(b, s), imitation_term(b, s))",
           "return add_terms(policy_term(b, s), imitation_term(b, s))",
           ("tests/unit/rl/test_methods.py",)),
    Mutant("per-row-token-mean-as-batch-token-mean", "rl/losses.py", "aggregate",
           "loss = (summed.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()",
           "loss = summed.sum() / mask.sum().clamp(min=1.0)",
           ("tests/unit/rl/test_methods.py",)),
    Mutant("token-weights-ignore-padding", "rl/losses.py", "token_weights",
           "return completion_mask.to(torch.float32) * (senior + junior_token_weight * (1.0 - senior))",
           "return senior + junior_token_weight * (1.0 - senior)",
           ("tests/unit/rl/test_loss_padding.py",)),
    Mutant("junior-weight-given-to-padding", "rl/losses.py", "token_weights",
           "return completion_mask.to(torch.float32) * (senior + junior_token_weight * (1.0 - senior))",
           "return completion_mask.to(torch.float32) * senior + junior_token_weight * (1.0 - senior)",
           ("tests/unit/rl/test_loss_padding.py",)),
    Mutant("text-turn-drops-the-break", "eval/sample/turns.py", "turn_result",
           'return text[: cut + len(BREAK)], len(toks), "break", logprob',
           'return text[:cut], len(toks), "break", logprob',
           ("tests/unit/eval/test_text_turns.py",)),
    Mutant("text-turn-keeps-text-after-the-break", "eval/sample/turns.py", "turn_result",
           'return text[: cut + len(BREAK)], len(toks), "break", logprob',
           'return text, len(toks), "break", logprob',
           ("tests/unit/eval/test_text_turns.py",)),
    Mutant("text-response-strips-the-breaks", "eval/sample/text_handoff.py", "TextHandoff._turn",
           "c.text += text\n",
           'c.text += text.rstrip("\\n")\n',
           ("tests/unit/eval/test_text_turns.py",)),
    Mutant("text-ids-in-the-authors-tokenizer", "eval/sample/text_handoff.py", "TextHandoff.row",
           "x = s_tok.encode(text, add_special_tokens=False)",
           "x = self.pair[who].tokenizer.encode(text, add_special_tokens=False)",
           ("tests/unit/eval/test_text_turns.py",)),
    Mutant("text-mask-in-reverse-turn-order", "eval/sample/text_handoff.py", "TextHandoff.row",
           "mask += [int(who == SENIOR)] * len(x)",
           "mask[:0] = [int(who == SENIOR)] * len(x)",
           ("tests/unit/eval/test_text_turns.py",)),
    Mutant("compare-counts-problems-only", "eval/measure/comparable.py", "settings_differences",
           'if r["problems"] != s["problems"] or (r["sha256"] and s["sha256"] and r["sha256"] != s["sha256"]):',
           'if r["problems"] != s["problems"]:',
           ("tests/unit/eval/test_compare_problem_sets.py",)),
    Mutant("problem-set-fingerprint-ignores-order", "fingerprint.py", "problem_set_fingerprint",
           "    for p in problems:\n        h.update(",
           "    for p in sorted(problems, key=lambda q: str(q.problem_id)):\n        h.update(",
           ("tests/unit/eval/test_compare_problem_sets.py",)),
    Mutant("problem-fingerprint-ignores-the-answer", "fingerprint.py", "problem_fingerprint",
           "json.dumps([problem.problem, problem.answer])",
           "json.dumps([problem.problem])",
           ("tests/unit/eval/test_compare_problem_sets.py",)),
    Mutant("allow-mixed-refuses-anyway", "eval/measure/comparable.py", "refuse_or_warn",
           "if differences and not allow_mixed:",
           "if differences:",
           ("tests/unit/eval/test_compare_problem_sets.py",)),
    Mutant("macro-se-not-divided-by-benchmarks", "eval/measure/metrics.py", "macro_bootstrap_se",
           "return float((stats / max(len(groups), 1)).std(ddof=1))",
           "return float(stats.std(ddof=1))",
           ("tests/unit/eval/test_stratified_bootstrap.py",)),
    Mutant("pass-at-k-macro-se-mean-of-ses", "eval/measure/metrics.py", "pass_at_k_summary",
           '"se": macro_bootstrap_se(vals, n_boot, seed)}',
           '"se": float(np.mean([bootstrap_se(v, n_boot, seed) for v in vals.values()]))}',
           ("tests/unit/eval/test_stratified_bootstrap.py",)),
    Mutant("summary-macro-se-pooled-over-problems", "eval/measure/metrics.py", "mean_se_summary",
           '"se": macro_bootstrap_se(vals, n_boot, seed), "problems"',
           '"se": bootstrap_se(np.concatenate(list(vals.values())), n_boot, seed), "problems"',
           ("tests/unit/eval/test_stratified_bootstrap.py",)),
    Mutant("paper-legibility-macro-se-pooled", "eval/measure/legibility_text.py", "paper_summary",
           "summ = mean_se_summary(by_p)",
           'summ = {**mean_se_summary(by_p), "macro": mean_se_summary({"all": sum(by_p.values(), [])})["all"]}',
           ("tests/unit/eval/test_stratified_bootstrap.py",)),
    Mutant("ids-legibility-macro-se-pooled", "eval/measure/legibility.py", "run_legibility",
           'summary = {stat: mean_se_summary({b: [p[stat] for p in ps] for b, ps in by_bench.items()})\n'
           '               for stat in ("ce", "alpha")}',
           'summary = {stat: {**mean_se_summary({b: [p[stat] for p in ps] for b, ps in by_bench.items()}), "macro": '
           'mean_se_summary({"all": [p[stat] for p in per_problem]})["all"]}\n'
           '               for stat in ("ce", "alpha")}',
           ("tests/unit/eval/test_stratified_bootstrap.py",)),
    # issue 35 behaviour 4: a stdin/stdout program is graded under one wall-clock limit and stops at a limit
    Mutant("stdio-timeout-runs-on", "rewards/code.py", "_FATAL",
           '_FATAL = ("timeout", "memory", "process limit", "output limit")',
           '_FATAL = ("memory", "process limit", "output limit")',
           _STDIO_TESTS),
    Mutant("stdio-each-input-a-full-wall-limit", "rewards/code.py", "_stdio",
           "replace(limits, wall_s=left), slot) if left > 0 else None",
           "limits, slot) if left > 0 else None",
           _STDIO_TESTS),
    Mutant("stdio-deadline-restarts-per-input", "rewards/code.py", "_stdio",
           "        left = deadline - time.monotonic()\n",
           "        left = limits.wall_s\n",
           _STDIO_TESTS),
    Mutant("stdio-limit-reported-as-failed-test", "rewards/code.py", "_stdio",
           'return Grade(0.0, status, {**details, "error": f"{status} on input {len(results)}"})',
           'return Grade(0.0, f"failed test {len(results)}", '
           '{**details, "error": f"{status} on input {len(results)}"})',
           _STDIO_TESTS),
    Mutant("stdio-memory-runs-on", "rewards/code.py", "_FATAL",
           '_FATAL = ("timeout", "memory", "process limit", "output limit")',
           '_FATAL = ("timeout", "process limit", "output limit")',
           _STDIO_TESTS),
    Mutant("stdio-output-limit-runs-on", "rewards/code.py", "_FATAL",
           '_FATAL = ("timeout", "memory", "process limit", "output limit")',
           '_FATAL = ("timeout", "memory", "process limit")',
           _STDIO_TESTS),
    Mutant("stdio-crash-stops-the-grade", "rewards/code.py", "_FATAL",
           '_FATAL = ("timeout", "memory", "process limit", "output limit")',
           '_FATAL = ("timeout", "memory", "process limit", "output limit", "crashed")',
           _STDIO_TESTS),
]


# --------------------------------------------------------------------------- anchoring
_SKIP = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT, tokenize.ENDMARKER}


def _tokens(text: str) -> list[tokenize.TokenInfo]:
    """The significant tokens of ``text``; a fragment may end inside a bracket (tokenize stops there)."""
    out = []
    try:
        for t in tokenize.generate_tokens(io.StringIO(text).readline):
            if t.type not in _SKIP:
                out.append(t)
    except (tokenize.TokenError, IndentationError):
        pass
    return out


def _nodes(tree: ast.AST, prefix: str = "", in_def: bool = False):
    """(qualified name, node) of every def and class, and of every named assignment at module or class level
    (a function's own assignments belong to the function)."""
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = prefix + node.name
            yield name, node
            yield from _nodes(node, name + ".", in_def or not isinstance(node, ast.ClassDef))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and not in_def:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    yield prefix + t.id, node


def node_named(text: str, where: str) -> ast.AST:
    found = [n for name, n in _nodes(ast.parse(text)) if name == where]
    if len(found) != 1:
        raise LookupError(f"{where}: {len(found)} definitions")
    return found[0]


def _offsets(text: str) -> list[int]:
    starts, pos = [0], 0
    for line in text.splitlines(keepends=True):
        pos += len(line)
        starts.append(pos)
    return starts


def _spans(text: str, where: str, old: str) -> list[tuple[int, int]]:
    """Character spans, in ``text``, of each token-wise occurrence of ``old`` inside ``where``."""
    node = node_named(text, where)
    starts = _offsets(text)
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    lo, hi = starts[first - 1], starts[node.end_lineno]
    toks = [t for t in _tokens(text) if lo <= starts[t.start[0] - 1] + t.start[1] < hi]
    want = [t.string for t in _tokens(old)]
    if not want:
        raise ValueError("old holds no code")
    spans = []
    for i in range(len(toks) - len(want) + 1):
        if [t.string for t in toks[i:i + len(want)]] == want:
            a, b = toks[i], toks[i + len(want) - 1]
            spans.append((starts[a.start[0] - 1] + a.start[1], starts[b.end[0] - 1] + b.end[1]))
    return spans


def occurrences(text: str, where: str, old: str) -> int:
    return len(_spans(text, where, old))


def apply(text: str, where: str, old: str, new: str) -> str:
    """``text`` with the one occurrence of ``old`` inside ``where`` replaced by ``new`` (the whitespace that
    ``old`` has before its first and after its last token is taken off ``new`` too)."""
    spans = _spans(text, where, old)
    if len(spans) != 1:
        raise LookupError(f"{where}: the mutant's code occurs {len(spans)} times there")
    lead = old[: len(old) - len(old.lstrip())]
    trail = old[len(old.rstrip()):]
    body = new[len(lead):] if new.startswith(lead) else new.lstrip()
    body = body[: len(body) - len(trail)] if trail and body.endswith(trail) else body.rstrip() if trail else body
    a, b = spans[0]
    return text[:a] + body + text[b:]


def _copy_with(mutant: Mutant | None, tmp: Path) -> Path:
    src = tmp / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    if mutant is not None:
        f = src / "tandem_rlvr" / mutant.path
        try:
            f.write_text(apply(f.read_text(), mutant.where, mutant.old, mutant.new))
        except LookupError as e:
            msg = f"mutant {mutant.name}: {e} in {mutant.path} (the source changed; update the mutant)"
            raise SystemExit(msg) from e
    return src


def _run_tests(src: Path, tests: tuple[str, ...], timeout: int) -> tuple[int, float, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT / "tests")]),
           "TANDEM_THREADS": os.environ.get("TANDEM_THREADS", "1"), "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.monotonic()
    try:
        res = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out = res.returncode, res.stdout
    except subprocess.TimeoutExpired:
        rc, out = -1, "timeout"
    last = [ln for ln in out.strip().splitlines() if ln.strip()][-1:] or [""]
    return rc, time.monotonic() - start, last[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated mutant names (default: all)")
    ap.add_argument("--baseline", action="store_true", help="first check that the unmutated copy passes the tests")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per mutant")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    a = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if not a.only or m.name in a.only.split(",")]
    if a.list:
        for m in MUTANTS:
            print(f"{m.name:48s} {m.path:24s} {' '.join(m.tests)}")
        return 0
    ok = True
    if a.baseline:
        tests = tuple(sorted({t for m in chosen for t in m.tests}))
        with tempfile.TemporaryDirectory() as tmp:
            rc, secs, last = _run_tests(_copy_with(None, Path(tmp)), tests, a.timeout * 2)
        print(f"baseline (no mutant): {'passes' if rc == 0 else 'FAILS'} in {secs:.0f}s  {last}", flush=True)
        ok = rc == 0
    rows = []
    for m in chosen:
        with tempfile.TemporaryDirectory() as tmp:
            rc, secs, last = _run_tests(_copy_with(m, Path(tmp)), m.tests, a.timeout)
        caught = rc == 1
        rows.append((m, caught, secs, rc, last))
        print(f"{'caught' if caught else 'MISSED':6s} {m.name:48s} {secs:5.0f}s rc={rc}  {last}", flush=True)
    n_caught = sum(r[1] for r in rows)
    print(f"\n{n_caught} of {len(rows)} mutants caught\n")
    print("| mutant | file | tests run | caught |\n|---|---|---|---|")
    for m, caught, secs, _rc, _ in rows:
        print(f"| {m.name} | {m.path} | {', '.join(dict.fromkeys(t.split('/')[-1].split('::')[0] for t in m.tests))} | "
              f"{'yes' if caught else 'NO'} ({secs:.0f} s) |")
    return 0 if ok and n_caught == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
