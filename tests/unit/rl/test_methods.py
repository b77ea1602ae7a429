"""Training methods as registry rows (``config/methods.py``; losses in ``rl/methods.py`` over ``rl/losses.py``).

Expected values come from outside the code under test: TRL 1.16's own ``GRPOTrainer._compute_loss`` (every
``loss_type`` the tandem loss implements, token and sequence importance sampling: loss, gradient and the
logged figures), and the plain-torch loss of ``test_loss_reference`` (tandem-klreg = the gated clipped
surrogate + beta x k3 to the junior on the senior's tokens + the junior-imitation NLL). ``tandem-klreg``
(one function, one row) trains on the shipped tiny world; a method registered by a plug-in module in
``tmp_path`` trains through ``tandem train --plugins``; and no module outside the registry decides by a
method's name.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from trl import GRPOTrainer

from tandem_rlvr.cli import main
from tandem_rlvr.config import TrainConfig
from tandem_rlvr.config.loss import LOSS_TYPES, TRL_LOSS_UNSUPPORTED
from tandem_rlvr.config.methods import REGISTRY, MethodKind, method_kind, register_method
from tandem_rlvr.errors import TandemError

from helpers.loss import check_loss_and_grads, prepared, trainer_loss_and_grads
from reference.grpo_loss import teacher_forced_logps


SRC = Path(__file__).resolve().parents[3] / "src" / "tandem_rlvr"


def _trl_loss_and_grads(trainer, batch):
    """TRL's own loss of the batch (its ``_compute_loss``, with its beta 0 as the run holds it)."""
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.zero_grad()
    loss = GRPOTrainer._compute_loss(trainer, trainer.model, batch)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    trainer.model.zero_grad()
    return loss.detach(), grads


def _figures(trainer, fn, batch):
    trainer._metrics["train"].clear()
    loss, grads = fn(trainer, batch)
    figures = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    trainer._metrics["train"].clear()
    return loss, grads, figures


def test_each_implemented_trl_loss_type_equals_trls_own_loss_gradient_and_figures(train_inputs, tmp_path):
    run, batch = prepared(train_inputs, tmp_path, temperature=0.6)  # ratios 0.5 .. 4: clipped, dual-clipped, inside
    trainer = run.trainer
    assert trainer.args.beta == 0.0 and trainer.args.delta == 3.0
    senior = batch["completion_mask"] * batch["tool_mask"]
    assert 0 < senior.sum() < batch["completion_mask"].sum()  # TRL gates by the same 0/1 mask (w = 0)
    for loss_type in LOSS_TYPES:
        for level in ("token", "sequence"):
            trainer.loss_type, trainer.importance_sampling_level = loss_type, level
            loss, grads, figures = _figures(trainer, trainer_loss_and_grads, batch)
            want, want_grads, want_figures = _figures(trainer, _trl_loss_and_grads, batch)
            where = f"{loss_type}/{level}"
            torch.testing.assert_close(loss, want, atol=1e-6, rtol=1e-5, msg=where)
            assert grads.keys() == want_grads.keys() and grads, where
            for n in grads:
                torch.testing.assert_close(grads[n], want_grads[n], atol=1e-7, rtol=1e-4, msg=f"{where} {n}")
            assert figures.keys() == want_figures.keys(), where
            assert figures == pytest.approx(want_figures, rel=1e-5, abs=1e-7, nan_ok=True), where
            assert float(loss) != 0.0, where


def _trl_loss_source() -> str:
    import inspect

    return inspect.getsource(GRPOTrainer._compute_loss)


# every GRPOConfig field TRL 1.16's loss reads (``self.args.X``): how the tandem loss answers it
TRL_LOSS_ARGS = {
    "delta": "LossSettings.delta (verl's dual-clip)",
    "sapo_temperature_pos": "LossSettings.sapo_temperatures", "sapo_temperature_neg": "LossSettings.sapo_temperatures",
    "steps_per_generation": "the token-mean normaliser (TandemGRPOTrainer._token_mean_normalizer)",
    "use_bias_correction_kl": "fixed False by rl/grpo_config.py; the k3 term has no ratio factor",
    **{f"entropy_{k}": "the entropy bonus: entropy_coef fixed 0, use_adaptive_entropy refused"
       for k in ("coef_delta", "coef_max", "coef_min", "target")},
    **{f"vespo_{k}": "loss_type vespo refused" for k in ("k_neg", "k_pos", "lambda_neg", "lambda_pos")},
}


def test_every_loss_type_and_field_trls_loss_reads_is_implemented_or_refused():
    """Read from TRL's own ``_compute_loss``, so a TRL release with a new loss type or knob fails here."""
    src = _trl_loss_source()
    known = set()
    for m in re.finditer(r'self\.loss_type\s*(==|!=|in|not in)\s*(\[[^\]]*\]|\([^)]*\)|"[^"]*")', src):
        known |= set(re.findall(r'"([^"]+)"', m.group(2)))
    assert set(LOSS_TYPES) <= known  # the parse found TRL's names
    for name in sorted(known - set(LOSS_TYPES)):
        with pytest.raises(TandemError, match=f"loss_type '{name}' is not implemented"):
            TrainConfig.from_keys(trl={"loss_type": name})
    read = set(re.findall(r"self\.args\.(\w+)", src))
    assert read and not read - set(TRL_LOSS_ARGS), f"TRL's loss reads {sorted(read - set(TRL_LOSS_ARGS))}"


@pytest.mark.parametrize("trl,needle", [
    ({"loss_type": "vespo"}, "loss_type 'vespo' is not implemented"),
    ({"importance_sampling_level": "row"}, "unknown importance_sampling_level 'row'"),
    *[({name: not value if isinstance(value, bool) else 0.5}, name)
      for name, value in TRL_LOSS_UNSUPPORTED.items()]])
def test_a_trl_loss_setting_the_tandem_loss_does_not_implement_is_one_line(trl, needle):
    with pytest.raises(TandemError) as e:
        TrainConfig.from_keys(trl=trl)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_tandem_klreg_is_the_gated_surrogate_plus_k3_to_the_junior_on_senior_tokens(train_inputs, tmp_path):
    run, batch = prepared(train_inputs, tmp_path, temperature=0.6, method="tandem-klreg", beta=0.5,
                          junior_imitation=0.5)
    response, senior = batch["completion_mask"], batch["completion_mask"] * batch["tool_mask"]
    assert 0 < senior.sum() < response.sum()  # tandem rollouts: both authors wrote
    with torch.no_grad():
        ref = teacher_forced_logps(run.prep.pair.junior, batch, 0.6)
    m = response.bool()
    torch.testing.assert_close(batch["ref_per_token_logps"][m], ref[m], atol=1e-4, rtol=1e-4)
    check_loss_and_grads(run, batch, 0.6, beta=0.5, lam=0.5)  # loss and every gradient, by plain torch
    assert run.trainer._metrics["train"]["kl"] and run.trainer._metrics["train"]["junior_imitation/nll"]
    with pytest.raises(TandemError, match="no senior mask"):  # fail-closed, as tandem
        run.trainer._compute_loss(run.trainer.model, {k: v for k, v in batch.items() if k != "tool_mask"})


def _train(tmp_path, *flags) -> Path:
    run = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--limit", "8", "--group-size", "4", "--prompts-per-step", "2",
                 "--prompts-per-minibatch", "2", "--max-new-tokens", "48", "--max-steps", "3", "--eval-every", "0",
                 "--save-every", "3", "--val-size", "4", "--output-dir", str(run), *flags]) == 0
    return run


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _moved(run: Path) -> float:
    from tandem_rlvr.models import NAMED_MODELS

    base = load_file(Path(NAMED_MODELS["tiny"]()) / "model.safetensors")
    final = load_file(run / "final" / "model.safetensors")
    return max(float((final[k].float() - base[k].float()).abs().max()) for k in base)


def test_tandem_klreg_trains_three_steps_on_the_tiny_world(tmp_path):
    run = _train(tmp_path, "--method", "tandem-klreg", "--junior", "tiny-junior", "--beta", "0.5", "--lr", "1e-3")
    steps = [r for r in _rows(run / "log.jsonl") if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    for r in steps:
        assert 0 < r["senior/token_share"] < 1  # tandem rollouts
        assert r["kl/beta_term"] > 0 and r["grad_norm"] > 0  # the KL term to tiny-junior is in the loss
    assert _moved(run) > 0
    saved = json.loads((run / "config.json").read_text())
    assert saved["method"] == "tandem-klreg" and saved["beta"] == 0.5
    card = (run / "README.md").read_text()
    assert "method **tandem-klreg**: Tandem RLVR with KL-Reg's term" in card and "beta = 0.5 x KL" in card


PLUGIN = '''
from tandem_rlvr import register_method
from tandem_rlvr.config.methods import MethodKind
from tandem_rlvr.rl.losses import Stat, loss_weights, policy_term

SEEN = []  # per loss call: the mean NLL of the weighted tokens, as the plug-in computed it


def own_words_loss(b, s):
    """GRPO on the senior's tokens plus 0.1 x their NLL under the senior."""
    w = loss_weights(b, s)
    nll = -(b.logps * w).sum()
    SEEN.append(float(nll.detach() / w.sum()))
    policy, stats = policy_term(b, s)
    return policy + 0.1 * nll / b.normalizer, {**stats, "own_words/nll": Stat(-b.logps, w)}


register_method(MethodKind("own-words", rollout="schedule", loss=own_words_loss,
                           card="a plug-in: GRPO plus 0.1 x the senior's own-token NLL, schedule `{schedule}`"))
'''


@pytest.fixture
def own_words(tmp_path, monkeypatch):
    """The plug-in module ``own_words_method`` in tmp_path (importable), undone after the test."""
    from tandem_rlvr import plugins

    (tmp_path / "own_words_method.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "_loaded", {})
    monkeypatch.setenv("TANDEM_PLUGINS", "")
    yield
    REGISTRY.pop("own-words", None)
    sys.modules.pop("own_words_method", None)


def test_a_method_registered_by_a_plugin_module_trains_through_its_own_loss(own_words, tmp_path):
    assert "own-words" not in REGISTRY
    run = _train(tmp_path, "--method", "own-words", "--plugins", "own_words_method")
    seen = sys.modules["own_words_method"].SEEN
    steps = [r for r in _rows(run / "log.jsonl") if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3] and len(seen) == 3  # one loss call per update
    for r, nll in zip(steps, seen, strict=True):  # its own figure reached the log: the value it computed
        assert r["own_words/nll"] == pytest.approx(nll, rel=1e-5)
        assert 0 < r["senior/token_share"] < 1  # rolled out by the schedule, as its row says
    assert _moved(run) > 0
    assert json.loads((run / "config.json").read_text())["plugins"] == ["own_words_method"]
    assert "method **own-words**: a plug-in: GRPO plus 0.1 x the senior's own-token NLL, schedule `word`" in \
        (run / "README.md").read_text()


@pytest.mark.parametrize("row,needle", [
    (dict(rollout="both"), "unknown rollout 'both'"),
    (dict(reference="senior", beta=1e-3), "unknown reference 'senior'"),
    (dict(beta=1e-3), "a default beta > 0 goes with a KL reference"),
    (dict(reference="junior"), "a default beta > 0 goes with a KL reference"),
    (dict(loss="no_colon"), "loss must be a function or 'module:function'"),
    (dict(card=""), "card must say"),
])
def test_a_bad_method_row_is_one_line_when_registered(row, needle):
    kw = {**dict(name="bad", rollout="senior", loss="m:f", card="words"), **row}
    with pytest.raises(TandemError) as e:
        register_method(MethodKind(**kw))
    assert needle in str(e.value) and "\n" not in str(e.value) and "bad" not in REGISTRY


def test_a_method_whose_loss_or_card_is_wrong_fails_before_training(monkeypatch):
    monkeypatch.setitem(REGISTRY, "typo", MethodKind("typo", "senior", "tandem_rlvr.rl.methods:nosuch", "words"))
    with pytest.raises(TandemError, match="its loss 'tandem_rlvr.rl.methods:nosuch' does not import"):
        method_kind("typo").loss_function()
    monkeypatch.setitem(REGISTRY, "typo", MethodKind("typo", "senior", "m:f", "K = {KK}"))
    with pytest.raises(TandemError, match="its card names 'KK', which is no config key"):
        TrainConfig.from_keys(method="typo")
    with pytest.raises(TandemError, match=r"unknown method 'nosuch'; valid: tandem, grpo, klreg, tandem-klreg, typo"):
        TrainConfig.from_keys(method="nosuch")


# files that name the paper's arms as result labels (the baseline "grpo", the candidate "tandem", the study's
# variants), never to decide what a method does
ARM_LABELS = ("recipes/bench.py", "recipes/demo.py", "recipes/demo_headline.py", "recipes/elegance.py",
              "recipes/study.py", "recipes/study_stats.py")


def _method_name_patterns(names) -> list[re.Pattern]:
    """Lines that decide by a method's name: a comparison with a registered name, a literal membership
    test or a literal list holding one, a comparison of a ``method`` value. A name passed as an argument
    (a default, a recipe's arm) decides nothing. ``grpo`` is also a TRL ``loss_type`` (lines naming
    loss types are the loss's), ``tandem`` a request field (``{"tandem": ...}``)."""
    q = r"""["']"""
    alt = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return [
        re.compile(rf"(==|!=)\s*{q}({alt}){q}|{q}({alt}){q}\s*(==|!=)"),
        re.compile(rf"\bin\s*[\(\[\{{][^)\]}}]*{q}({alt}){q}"),
        re.compile(rf"(?<![\w\)\]])[\(\[\{{]\s*{q}({alt}){q}\s*[,\)\]\}}]|{q}({alt}){q}\s*,\s*{q}({alt}){q}"),
        re.compile(r"\bmethod\w*\s*(==|!=)|(?<!for\s)\bmethod\w*\s+(not\s+)?in\b"),
    ]


def _scan(patterns, skip) -> list[str]:
    hits = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel in skip:
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "loss_type" not in line.lower() and any(p.search(line) for p in patterns):
                hits.append(f"{rel}:{i}: {line.strip()}")
    return hits


def test_no_module_outside_the_registry_compares_method_names():
    """What differs between methods is a field of their row (``rollout``, ``reference``, ``beta``, ``card``,
    ``loss``), asked of the row; only the registry names its rows."""
    assert all((SRC / f).is_file() for f in ARM_LABELS)
    hits = _scan(_method_name_patterns(list(REGISTRY)), ("config/methods.py", *ARM_LABELS))
    assert not hits, "\n".join(hits)


@pytest.mark.parametrize("line", [
    'if cfg.method == "klreg":', 'both = cfg.method == "tandem"', 'METHODS = ("tandem", "grpo", "klreg")',
    'require_senior_mask=cfg.method == "tandem", junior_imitation=loss.junior_imitation,',
    'if self.method != "tandem":', 'junior=s.junior if method == "tandem" else None,',
    'if method in ("tandem", "tandem-klreg"):', 'if cfg.method in RUNS_WITH_JUNIOR:', 'methods=("grpo", "tandem")'])
def test_the_method_name_scan_catches_each_way_code_decided_by_name(line):
    assert any(p.search(line) for p in _method_name_patterns(list(REGISTRY))), line


@pytest.mark.parametrize("line", ['if kind.reference is not None:', 'tandem = cfg.rollout_schedule != "senior"',
                                  'return self.rollout.schedule if rollout == "schedule" else rollout',
                                  'extra = {"tandem": {"schedule": name}}', 'for method in METHODS:',
                                  'method: str = setting("tandem", "training method")',
                                  'train_method(settings.preset, "grpo", base, None, run)'])
def test_the_method_name_scan_leaves_row_questions_alone(line):
    assert not any(p.search(line) for p in _method_name_patterns(list(REGISTRY))), line
