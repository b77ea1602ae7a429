"""``paragraph-bernoulli`` under ``--protocol text``: every turn's author is a fresh Bernoulli(p) draw
(senior with probability p) from the row's seed (docs/evaluation.md: "bernoulli: each turn's author is
a coin"; ``eval/sample/text_handoff``: turn i's coin is ``rng.uniform(chain seed, i, COIN)``).

The models are mock turn engines that write one token and a paragraph break per turn (as nanochat's
tests use a mock model): the property is the schedule's, and every chain then runs exactly ``T`` turns
(its budget is ``T`` tokens), so the authors form an N x T table of draws.

Statistical tests, one fixed seed, each at alpha = 2.5e-7 (four tests: a false alarm once in 10^6
runs at most, Bonferroni): the share of senior turns over all turns and over the first turns across
rows (binomial), the next author's rate after a senior and after a junior turn (chi-square on the
2 x 2 table of consecutive authors: independence), and the count of rows written wholly by one model
(Poisson tail of its expected N (p^T + (1 - p)^T)). p = 0.3, so a swap of p and 1 - p shows.
"""

import math

import pytest
import torch
from scipy import stats

from tandem_rlvr.data.benchmarks import Problem
from tandem_rlvr.decoding import rng
from tandem_rlvr.decoding.rng import row_seed
from tandem_rlvr.eval.sample.text_handoff import TextHandoff
from tandem_rlvr.eval.sample.turns import TurnEngine
from tandem_rlvr.tasks import task_for_eval

from conftest import make_tokenizer

P, T, N = 0.3, 12, 600
ALPHA = 1e-6 / 4
TASK = task_for_eval("math", instruction="none", answer_mode="last-box")


class ParagraphWriter(TurnEngine):
    """A mock model: every turn is one token, "w" then a paragraph break (end "break")."""

    def __init__(self, tokenizer):
        self.tokenizer, self.template, self.context = tokenizer, "plain", None

    def turns(self, prompts, seeds, caps):
        return [("w\n\n", 1, "break", 0.0) for _ in prompts]


@pytest.fixture(scope="module")
def handoff():
    tok = make_tokenizer(300)
    return TextHandoff(ParagraphWriter(tok), ParagraphWriter(tok), "paragraph-bernoulli", p=P, max_new_tokens=T,
                       max_rounds=T)


def _authors(handoff, seeds: list[int]) -> torch.Tensor:
    """(len(seeds), T) authors, 1 = senior, of one chain per seed, run as one batch."""
    problem = Problem("t", "0", "Mia has 7 shells.", "12")
    chains = [handoff.new_chain(problem, k, s, TASK) for k, s in enumerate(seeds)]
    handoff.run(chains)
    assert all(c.end == "budget" and len(c.turns) == T for c in chains)
    return torch.tensor([[int(who == 0) for who, *_ in c.turns] for c in chains])


@pytest.fixture(scope="module")
def table(handoff):
    return _authors(handoff, [row_seed(20261206, k) for k in range(N)])


def test_each_turns_author_is_the_rows_coin_for_that_turn_whatever_the_batch(handoff, table):
    seeds = [row_seed(20261206, k) for k in range(N)]
    coins = torch.stack([rng.uniform(torch.tensor(seeds), i, rng.COIN) for i in range(T)], dim=1)  # (N, T)
    assert torch.equal(table, (coins < P).long())
    again = _authors(handoff, seeds[::-1][:50])  # other batch, other order: the same authors per seed
    assert torch.equal(again, table.flip(0)[:50])


def test_turn_authors_are_senior_at_rate_p(table):
    assert stats.binomtest(int(table.sum()), table.numel(), P).pvalue > ALPHA
    assert stats.binomtest(int(table[:, 0].sum()), N, P).pvalue > ALPHA  # the first turn is a coin too


def test_turn_authors_are_independent_of_the_previous_turn(table):
    prev, nxt = table[:, :-1].flatten(), table[:, 1:].flatten()
    counts = [[int(((prev == a) & (nxt == b)).sum()) for b in (0, 1)] for a in (0, 1)]
    assert stats.chi2_contingency(counts).pvalue > ALPHA, counts
    for a in (0, 1):  # after either author, the senior writes next at rate p
        assert stats.binomtest(counts[a][1], sum(counts[a]), P).pvalue > ALPHA / 2, (a, counts)


def test_rows_written_wholly_by_one_model_are_as_rare_as_their_coins_make_them(table):
    whole = int(((table.sum(1) == 0) | (table.sum(1) == T)).sum())
    expected = N * (P ** T + (1 - P) ** T)  # 8.3 rows of 600
    assert math.isclose(expected, 8.3, rel_tol=0.01)
    assert stats.poisson.sf(whole - 1, expected) > ALPHA and stats.poisson.cdf(whole, expected) > ALPHA, whole
