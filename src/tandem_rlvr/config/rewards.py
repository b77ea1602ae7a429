"""The rewards part: the reward's terms (``rewards.terms``), the user's reward function, the judge.

Term specs are made canonical here (``NAME:COEF``; ``user`` added when ``--reward`` is given), and
every judge setting is checked even when no judge term uses it, so a config file's typo is caught
before it matters.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TandemError
from .fields import check_part, setting


def _terms_help() -> str:
    from ..rewards.terms import terms_help

    return terms_help()


@dataclass(frozen=True)
class RewardsPart:
    """reward = sum of coef x term; the judge term's model, prompt, parser and transport."""

    reward_terms: list[str] = setting(["correct"], "reward = sum of coef x term over NAME[:COEF] specs "
                                      "(comma-separated on the command line), each logged per step as "
                                      "rewards/NAME/mean. Default: correct", names=lambda: _terms_help())
    reward: str | None = setting(None, "your own TRL reward function, module:function or path/to/file.py:function "
                                 "(prompts, completions, dataset columns as kwargs -> list of floats); the reward "
                                 "term user (added with coef 1 unless reward_terms names it)")
    length_ceiling: int | None = setting(None, "length term: tokens at which the penalty is full (default "
                                         "max_new_tokens)", range=(1, None, False))
    judge: str | None = setting(None, "judge term: the judge model, local (directory, hub id, tiny; our hf engine) "
                                "or the http(s) URL of an OpenAI-compatible server (API key: $TANDEM_JUDGE_API_KEY)")
    judge_model: str | None = setting(None, "judge term: the model name at the judge server (default: the first it "
                                      "lists)")
    judge_template: str = setting("elegance", "judge term: the judge's user prompt, a built-in (elegance, yes-no) or "
                                  "a text file with {question}, {response}, {answer}")
    judge_parser: str = setting("elegant-bashy", "judge term: how the verdict is read from the reply: elegant-bashy, "
                                "yes-no or score:N (the last word/number; unreadable = a logged zero)")
    judge_mode: str = setting("multiply", "judge term: multiply (term = verdict x correct, so correct x (1 + coef x "
                              "verdict): coef 0.5 is the replication's x1.5 for elegant correct solutions) or add "
                              "(term = verdict on correct responses, a flat bonus)", choices=("multiply", "add"))
    judge_max_tokens: int = setting(512, "judge term: reply budget in tokens", range=(1, None, False))
    judge_timeout: float = setting(120.0, "judge term: seconds per request to a judge server", range=(0, None, True))
    judge_retries: int = setting(2, "judge term: retries of a failed request to a judge server",
                                 range=(0, None, False))
    judge_concurrency: int = setting(8, "judge term: requests in flight to a judge server (a local judge: rows per "
                                     "batch)", range=(1, None, False))
    judge_device: str | None = setting(None, "judge term: device of a local judge (default: the senior's)")

    def __post_init__(self):
        from ..rewards.judge import check_parser, template_text
        from ..rewards.terms import parse_terms

        check_part(self)
        terms = parse_terms(self.reward_terms)
        names = [t.name for t in terms]
        if self.reward and "user" not in names:
            terms = [*terms, *parse_terms(["user"])]
        object.__setattr__(self, "reward_terms", [str(t) for t in terms])  # canonical NAME:COEF, once
        if self.reward:
            from ..rewards.user import load_reward

            load_reward(self.reward)  # a bad spec fails now, before anything is loaded
        elif "user" in names:
            raise TandemError("reward term 'user' needs --reward module:function (your reward function)")
        if ("judge" in names) != bool(self.judge):
            raise TandemError("reward term 'judge' and --judge MODEL go together (the judge grades for that term)")
        if not isinstance(self.judge_template, str) or not isinstance(self.judge_parser, str):
            raise TandemError("judge_template and judge_parser must be strings")
        template_text(self.judge_template)
        check_parser(self.judge_parser)
