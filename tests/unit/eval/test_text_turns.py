"""Text-level turns keep their paragraph breaks (``--protocol text``).

The paper's code stops each turn at ``\\n\\n`` and keeps the stop string (vLLM's
``include_stop_str_in_output``), so the co-written response is the exact concatenation of the
turns, each turn but the last ending in the ``\\n\\n`` that stopped it. Checked here:
``turn_result`` on hand-made token pieces (a break inside a token, two breaks, EOS, the cap),
and on chains the tiny pair writes: response = the turns joined; every break turn ends in its
first ``\\n\\n``; the re-tokenised ids are the senior tokenizer's encoding of each turn and
decode to exactly the response; and the senior mask, read as runs of equal values, decodes to
exactly the senior's turns (and its zeros to the junior's).
"""

import itertools

import pytest

from tandem_rlvr.eval.sample.turns import turn_result
from tandem_rlvr.tasks import task_row

from helpers.handoff import PROBLEMS, TASK, handoff


class Pieces:
    """A tokenizer whose id i decodes to PIECES[i] (special ids dropped when asked)."""

    PIECES = {1: "Mia", 2: " has", 3: " 7.\n\nShe", 4: "\n\n", 5: "<eos>", 6: "\n"}

    def decode(self, toks, skip_special_tokens=False):
        return "".join(self.PIECES[t] for t in toks if not (skip_special_tokens and t == 5))


@pytest.mark.parametrize("toks,eos,want", [
    ([1, 2, 3], False, ("Mia has 7.\n\n", 3, "break")),  # the text after the break, in the same token, is cut
    ([1, 4, 2, 4], False, ("Mia\n\n", 4, "break")),  # cut at the first break
    ([1, 6, 6], False, ("Mia\n\n", 3, "break")),  # a break made of two tokens
    ([1, 2, 6], False, ("Mia has\n", 3, "length")),  # one newline is not a break; the cap ended the turn
    ([1, 2, 5], True, ("Mia has", 3, "eos")),  # EOS: the whole text, special tokens skipped
])
def test_a_turn_keeps_the_paragraph_break_that_stopped_it(toks, eos, want):
    text, n, end, lp = turn_result(Pieces(), toks, eos, -1.5)
    assert (text, n, end) == want and lp == -1.5


def test_co_written_rows_are_their_turns_joined_and_the_mask_covers_the_seniors_turns(cross_pair):
    _, ts, _, _ = cross_pair
    th = handoff(cross_pair, budget=80)
    chains = [th.new_chain(p, k, 7 + k, TASK) for p in PROBLEMS for k in range(2)]
    th.run(chains)
    breaks, authors = 0, set()
    for c in chains:
        row = th.row(c, TASK.grade([c.text], [task_row(c.problem)])[0])
        turns = row["turns"]
        authors |= {t["author"] for t in turns}
        assert row["response"] == "".join(t["text"] for t in turns)
        for i, t in enumerate(turns):
            if i < len(turns) - 1:
                assert t["end"] == "break"  # a chain goes on only after a paragraph break
            if t["end"] == "break":
                breaks += 1
                assert t["text"].endswith("\n\n") and t["text"].find("\n\n") == len(t["text"]) - 2, t
        assert ts.decode(row["token_ids"]) == row["response"]
        # in the senior's tokenizer, turn by turn (the junior's ids would decode alike here: its BPE
        # merges are the senior's first 280)
        assert row["token_ids"] == [i for t in turns for i in ts.encode(t["text"], add_special_tokens=False)]
        assert len(row["senior_mask"]) == len(row["token_ids"])
        # the mask's runs of equal values, decoded, are the two authors' texts
        by_author = {0: "", 1: ""}
        pos = 0
        for v, run in itertools.groupby(row["senior_mask"]):
            n = len(list(run))
            by_author[v] += ts.decode(row["token_ids"][pos: pos + n])
            pos += n
        assert by_author[1] == "".join(t["text"] for t in turns if t["author"] == "senior")
        assert by_author[0] == "".join(t["text"] for t in turns if t["author"] == "junior")
    assert breaks >= len(chains) and authors == {"senior", "junior"}  # hand-overs happened, both models wrote
