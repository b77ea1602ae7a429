"""The engine seam (``engines/base.py``): one registry table, one protocol, one weight stream.

Checked on the hf engine (the others are checked in the vLLM venv: test_vllm_train.py,
test_vllm_server_train.py): rollouts through the seam are the transformers decoder's own, the
stream reaches the compute-dtype rollout copy exactly (by hand: each master cast to bf16),
one tensor at a time and in buckets, once per update; and no module above ``engines/`` asks
which engine it holds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from conftest import make_model, make_tokenizer
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.decoding.schedule import make_schedule
from tandem_rlvr.decoding.tandem import TandemDecoder
from tandem_rlvr.engines.base import ENGINES, EngineSetup, RolloutSpec, engine_kind, open_engine
from tandem_rlvr.errors import TandemError
from tandem_rlvr.rl.precision import RolloutModel
from tandem_rlvr.rl.weights import EngineSync, senior_weights

SRC = Path(__file__).resolve().parents[3] / "src" / "tandem_rlvr"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, tok, pair):
    root = tmp_path_factory.mktemp("seam")
    out = []
    for name, model in zip(("senior", "junior"), pair, strict=True):
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        out.append(str(root / name))
    return out


def test_every_registered_engine_has_the_protocol_and_an_opener_that_imports():
    """Each row names an importable opener whose module holds one engine class of the row's name with
    the protocol's methods (a new row needs no entry here)."""
    import importlib

    assert {"hf", "vllm", "vllm-server"} <= set(ENGINES)
    for name, kind in ENGINES.items():
        module = importlib.import_module(kind.opener.partition(":")[0])
        assert callable(getattr(module, kind.opener.partition(":")[2]))
        classes = [c for c in vars(module).values() if isinstance(c, type) and getattr(c, "name", None) == name]
        assert len(classes) == 1, (name, classes)
        cls = classes[0]
        for method in ("decoder", "generate", "load_weights", "sleep", "close"):
            assert callable(getattr(cls, method)), (name, method)


def test_an_unknown_engine_is_one_error_listing_the_valid_names():
    with pytest.raises(TandemError, match=r"unknown engine 'jax'; valid: hf, vllm, vllm-server"):
        engine_kind("jax")


def test_hf_rollouts_through_the_seam_equal_the_transformers_decoder(dirs, tok, pair):
    """Greedy and sampled, tandem and solo: generate(prompts, seeds, spec) gives the TandemDecoder's
    tokens, authors and log-probs, also when the batch is decoded in parts of batch_rows rows."""
    eng = open_engine("hf", EngineSetup(dirs[0], dirs[1], "cpu", dtype="float32"))
    parted = open_engine("hf", EngineSetup(dirs[0], dirs[1], "cpu", dtype="float32", batch_rows=3))
    prompts = [tok.encode(x) for x in ("Mia has 7 shells.", "Leo has", "The answer is", "Tom", "Ann")]
    seeds = [11, 12, 13, 14, 15]
    for schedule, sampling in (("word", SamplingParams(0.0, 1.0, 0, 12)), ("token", SamplingParams(1.0, 1.0, 0, 12)),
                               ("senior", SamplingParams(1.0, 0.9, 5, 12))):
        spec = RolloutSpec(schedule, sampling, p=0.5, K=3)
        sched = make_schedule(schedule, tok, p=0.5, K=3, vocab_size=pair[0].config.vocab_size)
        ref = TandemDecoder(pair[0].to("cpu"), pair[1].to("cpu"), sched, sampling, [tok.eos_token_id],
                            tok.pad_token_id).generate(prompts, seeds)
        for e in (eng, parted):
            got = e.generate(prompts, seeds, spec)
            for b in range(len(prompts)):
                assert got.row_tokens(b) == ref.row_tokens(b) and got.row_mask(b) == ref.row_mask(b), (schedule, b)
                n = len(ref.row_tokens(b))
                torch.testing.assert_close(got.logprobs[b, :n], ref.logprobs[b, :n], rtol=0, atol=1e-5)  # batch shape
        if schedule == "token":
            assert any(0 < sum(ref.row_mask(b)) < len(ref.row_mask(b)) for b in range(len(prompts))), "no mixed row"


class Recorder:
    """A weight stream that checks, before yielding each tensor, that the previous one has already
    reached the copy: the consumer takes the stream one tensor at a time."""

    def __init__(self, model, dtype, target):
        self.pairs = list(senior_weights(model, dtype))
        self.target, self.served = target, 0

    def __iter__(self):
        prev = None
        for name, t in self.pairs:
            if prev is not None and self.target.copy is not None:
                assert torch.equal(dict(self.target.copy.named_parameters())[prev[0]], prev[1]), prev[0]
            prev = (name, t)
            self.served += 1
            yield name, t


def test_the_stream_refreshes_the_hf_rollout_copy_exactly_one_tensor_at_a_time(dirs, tok):
    """fp32 masters, bf16 compute: the copy holds each master rounded to bf16 after load_weights,
    whether the update comes as one stream or as two buckets back to back."""
    senior = make_model(len(tok), 0)  # the saved senior's weights, in fp32
    master = {n: p.detach().clone() for n, p in senior.named_parameters()}
    with torch.no_grad():  # a trained senior: every weight moved off the checkpoint
        for p in senior.parameters():
            p.add_(1e-3)
    copy = RolloutModel(dirs[0], torch.bfloat16)
    eng = open_engine("hf", EngineSetup(dirs[0], None, "cpu", pair=_Pair(senior, None), rollout_copy=copy))
    assert eng.weight_dtype == torch.bfloat16 and eng.rollout_copy is copy
    stream = Recorder(senior, eng.weight_dtype, copy)
    eng.load_weights(stream)
    assert stream.served == len(master)
    got = dict(copy.copy.named_parameters())
    for n, m in master.items():
        assert torch.equal(got[n], (m + 1e-3).to(torch.bfloat16)), n
    with torch.no_grad():
        for p in senior.parameters():
            p.add_(1e-2)
    pairs = list(senior_weights(senior, torch.bfloat16))
    eng.load_weights(pairs[: len(pairs) // 2])  # buckets, back to back
    eng.load_weights(pairs[len(pairs) // 2:])
    for n, m in master.items():
        assert torch.equal(got[n], (m + 1e-3 + 1e-2).to(torch.bfloat16)), n
    assert eng.syncs == 3


def test_a_senior_that_decodes_itself_reads_no_stream(pair, dirs):
    """Same dtype, same device: no copy, and load_weights leaves the stream unread."""
    senior = pair[0].to("cpu")
    eng = open_engine("hf", EngineSetup(dirs[0], None, "cpu", pair=_Pair(senior, None),
                                        rollout_copy=RolloutModel(dirs[0], torch.float32)))
    assert eng.rollout_copy is None and eng.senior is senior and eng.weight_dtype is None

    def never():
        raise AssertionError("the stream was read")
        yield

    eng.load_weights(never())


class _Pair:
    def __init__(self, senior, junior):
        self.senior, self.junior, self.tokenizer, self.eos_ids = senior, junior, make_tokenizer(), [0]
        self.xjunior = None  # a junior of the senior's own tokenizer
        self.juniors = ()  # one junior, no pool (models.Pair.juniors)
        self.xjuniors = ()  # no pool, so no other-tokenizer pool juniors (models.Pair.xjuniors)


class FakeEngine:
    weight_dtype = torch.bfloat16

    def __init__(self):
        self.updates = []

    def load_weights(self, weights):
        self.updates.append([(n, t.dtype) for n, t in weights])


def test_engine_sync_pushes_once_per_update_cast_to_the_engines_dtype(pair):
    senior, eng = pair[0], FakeEngine()
    sync = EngineSync(eng)
    sync(senior, 0)
    sync(senior, 0)  # validation right after the rollout of the same update
    sync(senior, 1)
    sync(pair[1], 1)  # another model object is another senior
    names = [n for n, _ in senior.named_parameters()]
    assert len(eng.updates) == 3
    assert [n for n, _ in eng.updates[0]] == names and {d for _, d in eng.updates[0]} == {torch.bfloat16}


def _scan(patterns, skip) -> list[str]:
    """``file:line: text`` of every source line (outside the folders/files ``skip``) a pattern matches."""
    hits = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(skip):
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(p.search(line) for p in patterns):
                hits.append(f"{rel}:{i}: {line.strip()}")
    return hits


def _schedule_name_patterns(names) -> list[re.Pattern]:
    """Lines that decide by a schedule's name: a comparison or literal membership test with a registered
    name, a prefix test on one, or a literal list of two or more. ``senior`` and ``junior`` are also the
    two roles (``author == "senior"``), so they count in lists only beside another schedule's name; the
    solo schedule ``senior`` is the one name code may compare with (it means "no handoff", as records say).
    ``word``, ``sentence`` and ``token`` are also boundary kinds (a rule's ``fires``), so comparisons with
    them count only where the line speaks of a schedule."""
    plain = [n for n in names if n not in ("senior", "junior", "word", "sentence", "token")]
    shared = [n for n in names if n in ("word", "sentence", "token")]
    alt = lambda ns: "|".join(re.escape(n) for n in ns)  # noqa: E731
    q = r"""["']"""
    others = alt([n for n in names if n not in ("senior", "junior")])
    heads = {n.split("-")[0] for n in names if "-" in n}
    prefixes = alt(sorted(heads | {h + "-" for h in heads}))
    return [
        re.compile(rf"(==|!=)\s*{q}({alt(plain)}){q}|{q}({alt(plain)}){q}\s*(==|!=)"),
        re.compile(rf"\bin\s*[\(\[\{{][^)\]}}]*{q}({alt(plain)}){q}"),
        re.compile(rf"sched\w*(\.name|\[{q}name{q}\])?\s*(==|!=|(not\s+)?in\s*[\(\[\{{])\s*{q}({alt(shared)}){q}"),
        re.compile(rf"startswith\(\s*{q}({prefixes}){q}"),
        re.compile(rf"=\s*[\(\[\{{]\s*{q}({alt(plain)}){q}\s*,"),  # a literal list (of one, too) assigned
        re.compile(rf"{q}({others}){q}\s*[,:]\s*[\(\[]?\s*{q}({alt(names)}){q}"
                   rf"|{q}({alt(names)}){q}\s*[,:]\s*[\(\[]?\s*{q}({others}){q}"),
    ]


def test_no_module_above_the_registries_compares_engine_or_schedule_names():
    """The registry tables replaced every `engine == ...` check and every list of schedule names
    (which needed a tokenizer, drew coins, could run on vLLM, had text turns, crossed tokenizers):
    what differs between engines or schedules is a field of their row (``EngineKind``,
    ``ScheduleKind``), asked of the row; the memory plan too prices each engine by its capabilities.
    Only the registries themselves name their rows (``engines/``, ``decoding/schedule.py``; and
    ``decoding/boundary.py``, whose boundary kinds ``word`` and ``sentence`` share schedules' names)."""
    from tandem_rlvr.decoding.schedule import SCHEDULES

    engine = re.compile(r"""engine\s*(==|!=|\s(not\s+)?in\s*\()\s*["']|[=!]=\s*["'](vllm|vllm-server|hf)["']""")
    hits = _scan([engine], ("engines/",))
    hits += _scan(_schedule_name_patterns(list(SCHEDULES)), ("decoding/schedule.py", "decoding/boundary.py"))
    assert not hits, "\n".join(hits)


@pytest.mark.parametrize("line", [
    'if schedule in ("paragraph-roundrobin", "paragraph-bernoulli"):', 'if self.name == "paragraph-bernoulli":',
    'NO_COINS = ("senior", "junior", "chunk")', 'paragraph = schedule.startswith("paragraph")',
    'if r.schedule not in ("word", "token"):', 'CROSS = {"word": ("word", True), "sentence": ("sentence", False)}',
    'use_K = schedule == "word"', 'NOT_ON_VLLM = ("word-atomic",)',
                                  '_NO_TOKENIZER = ("senior", "junior", "token", "chunk", "alternating")'])
def test_the_schedule_name_scan_catches_each_way_code_decided_by_name(line):
    """Each line is one of the forms the scan replaced (name lists, name comparisons, prefix tests)."""
    from tandem_rlvr.decoding.schedule import SCHEDULES

    assert any(p.search(line) for p in _schedule_name_patterns(list(SCHEDULES))), line


@pytest.mark.parametrize("line", ['if author == "senior":', 'ROLES = ("senior", "junior")', 'if kind == "word":',
                                  'hit = rule.fires == "token" or tok in boundary',
                                  'if cfg.schedule_name == "senior":'])
def test_the_schedule_name_scan_leaves_roles_and_boundary_kinds_alone(line):
    from tandem_rlvr.decoding.schedule import SCHEDULES

    assert not any(p.search(line) for p in _schedule_name_patterns(list(SCHEDULES))), line


def test_a_tied_head_streams_under_both_names_and_reaches_the_copy(tmp_path, tok):
    """vLLM needs a tied head under its own name (a reload feeding only the embedding left it
    stale); the hf copy takes the same stream."""
    senior = make_model(len(tok), 0)
    senior.config.tie_word_embeddings = True
    senior.lm_head.weight = senior.model.embed_tokens.weight
    senior.save_pretrained(tmp_path / "tied")
    tok.save_pretrained(tmp_path / "tied")
    names = [n for n, _ in senior_weights(senior)]
    assert names.count("lm_head.weight") == 1 and "model.embed_tokens.weight" in names
    with torch.no_grad():
        senior.model.embed_tokens.weight.add_(1e-2)
    copy = RolloutModel(str(tmp_path / "tied"), torch.bfloat16)
    copy.load_weights(senior_weights(senior, torch.bfloat16))
    assert torch.equal(copy.copy.lm_head.weight, (senior.model.embed_tokens.weight).to(torch.bfloat16))
