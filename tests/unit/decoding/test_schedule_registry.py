"""A schedule is a registry row that carries its capabilities (``decoding.schedule.ScheduleKind``).

The contributor path: a plug-in module written to ``tmp_path`` (outside the package), loaded by
``plugins.load_plugins`` as ``--plugins`` / ``$TANDEM_PLUGINS`` load it, registers two schedules as
``Rule`` rows; nothing else in the package is told of them. ``sentence-flip`` (the junior writes
first, the author flips after every token whose text holds '.', '!', '?' or a newline) is then
decoded by the batched decoder and checked against the authorship worked out here from the rule in
words, against the slow reference decoder, and against ``replay``; its capabilities (no coin, so a
server request needs no seed) follow from the rule. ``paragraph-pairs`` (chunks of K paragraphs)
has a ``paragraph-`` name but no text turns, so a handoff evaluation defaults to the stream protocol
(it used to default to text by its name, which then refused it).
"""

from __future__ import annotations

import pytest
import torch

from tandem_rlvr import plugins
from tandem_rlvr.config import EvalConfig
from reference.decoder import reference_generate
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.decoding.schedule import REGISTRY, SCHEDULES, Rule, ScheduleKind, make_schedule, replay
from tandem_rlvr.decoding.tandem import TandemDecoder
from tandem_rlvr.engines.request_args import parse
from tandem_rlvr.errors import TandemError

PLUGIN = '''
"""A contributor's schedules: one registry row each."""
from tandem_rlvr.decoding.schedule import Rule, ScheduleKind, register_schedule

register_schedule(ScheduleKind("sentence-flip", Rule(first="junior", fires="sentence", then="flip"),
                               about="junior first, the other model after each sentence end"))
register_schedule(ScheduleKind("paragraph-pairs", Rule(first="senior", fires="paragraph", then="count"),
                               about="chunks of K paragraphs, senior first"))
'''
PROMPTS = ["Mia has 7 shells.", "Leo has 9 cards. He gives away 4!\n\n", "Tom", "The answer is"]
SEEDS = [11, 22, 33, 44]


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The plug-in module loaded as a run's ``plugins`` setting loads it; the registry restored after."""
    (tmp_path / "my_schedules.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(plugins.ENV, "")
    monkeypatch.setattr(plugins, "_loaded", {})
    before = dict(REGISTRY)
    loaded = plugins.load_plugins(["my_schedules"])
    yield loaded
    REGISTRY.clear()
    REGISTRY.update(before)
    import sys

    sys.modules.pop("my_schedules", None)


def sentence_ids(tok) -> set[int]:
    """Ids whose own text holds '.', '!', '?' or a newline: the rule's boundary set, from the tokenizer."""
    return {i for i in range(len(tok)) if any(c in tok.decode([i]) for c in ".!?\n")}


def flip_authors(tokens: list[int], ends: set[int]) -> list[bool]:
    """The rule in words: the junior (False) writes first; after a sentence-end token the other model writes."""
    out, senior = [], False
    for t in tokens:
        out.append(senior)
        senior ^= t in ends
    return out


@pytest.mark.parametrize("sampling", [SamplingParams(temperature=0.0, max_new_tokens=24),
                                      SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=24)],
                         ids=["greedy", "sampled"])
def test_a_schedule_registered_by_a_plugin_module_decodes_as_its_rule_says(plugin, tok, pair, sampling):
    assert "my_schedules" in plugin and "sentence-flip" in SCHEDULES
    senior, junior = pair
    ends = sentence_ids(tok)
    prompts = [tok.encode(x) for x in PROMPTS]
    sched = make_schedule("sentence-flip", tok, vocab_size=len(tok))
    out = TandemDecoder(senior, junior, sched, sampling, [tok.eos_token_id], tok.pad_token_id).generate(prompts, SEEDS)
    rows = [out.row_tokens(b) for b in range(len(prompts))]
    flips = 0
    for b, toks in enumerate(rows):
        want = flip_authors(toks, ends)
        assert out.row_mask(b) == [int(w) for w in want], f"row {b}"
        flips += sum(want[t] != want[t - 1] for t in range(1, len(want)))
        ref_toks, ref_flags, _ = reference_generate(senior, junior, "sentence-flip", sampling, prompts[b], SEEDS[b],
                                                    [tok.eos_token_id], ends)
        assert (ref_toks, ref_flags) == (toks, want), f"row {b}: the reference decoder reads the plug-in's rule"
    assert flips > 0, "no sentence end was written: the check saw a single author"
    assert replay(sched, torch.tensor(SEEDS), rows) == [flip_authors(t, ends) for t in rows]


def test_a_plugin_schedules_capabilities_follow_from_its_rule(plugin):
    flip = REGISTRY["sentence-flip"]
    assert (flip.needs_tokenizer, flip.draws_coins, flip.replays, flip.text_turns, flip.cross_tokenizers) == (
        True, False, True, None, False)
    assert parse({"tandem_schedule": "sentence-flip"}).seed == 0  # no coin: a request needs no seed
    with pytest.raises(TandemError, match="needs a tokenizer") as e:
        make_schedule("sentence-flip")
    assert "\n" not in str(e.value)
    # a paragraph-* name without text turns: the stream protocol by default, text refused naming the schedule
    assert REGISTRY["paragraph-pairs"].text_turns is None
    assert EvalConfig.from_keys(mode="handoff", schedule="paragraph-pairs").handoff_protocol == "stream"
    with pytest.raises(TandemError, match="paragraph-pairs") as e:
        EvalConfig.from_keys(mode="handoff", schedule="paragraph-pairs", protocol="text")
    assert "\n" not in str(e.value)


def test_builtin_capabilities_are_the_ones_each_rule_implies():
    """Worked out by hand from each schedule's definition (module docstring of decoding.schedule): a coin
    only where a Bernoulli draw happens; a tokenizer only for a boundary set; word-atomic decides before
    the token, so it alone cannot be replayed; paragraph turns for the two paragraph schedules; a junior
    of another tokenizer for the stateless Bernoulli redraws."""
    want = {  # name: (needs_tokenizer, draws_coins, replays, text_turns, cross_tokenizers)
        "senior": (False, False, True, None, False), "junior": (False, False, True, None, False),
        "token": (False, True, True, None, True), "word": (True, True, True, None, True),
        "word-atomic": (True, True, False, None, False), "sentence": (True, True, True, None, True),
        "paragraph-bernoulli": (True, True, True, "coin", False),
        "paragraph-roundrobin": (True, False, True, "alternate", False),
        "blankline-token-roundrobin": (True, False, True, None, False),
        "chunk": (False, False, True, None, False), "chunk-word": (True, False, True, None, False),
        "alternating": (False, False, True, None, False),
    }
    got = {n: (k.needs_tokenizer, k.draws_coins, k.replays, k.text_turns, k.cross_tokenizers)
           for n, k in REGISTRY.items()}
    assert got == want


def test_a_row_that_contradicts_its_rule_or_is_not_a_row_is_one_line(monkeypatch):
    with pytest.raises(TandemError, match="draws_coins=False contradicts its rule"):
        ScheduleKind("coin-less", Rule(fires="word"), draws_coins=False)
    with pytest.raises(TandemError, match="unknown then 'swap'"):
        Rule(first="senior", fires="word", then="swap")
    with pytest.raises(TandemError, match="rule or a build"):
        ScheduleKind("nothing")
    monkeypatch.setitem(REGISTRY, "bare", lambda tok, p, K, V: None)
    with pytest.raises(TandemError, match="'bare' is registered as a function, not a ScheduleKind") as e:
        make_schedule("bare")
    assert "\n" not in str(e.value)
