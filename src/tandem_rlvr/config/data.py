"""The data part: which problems train and validate, how they are prompted, what grades them.

Derived once, here: ``run_task`` (``tasks.task_for_eval`` of the task name with the run's instruction,
last-box answers and grader), which loads the problems, builds the prompts, grades validation and
is recorded in config.json as the run's verifier.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..errors import TandemError
from ..rewards.math import GRADERS
from ..prompting import DEFAULT_INSTRUCTION, INSTRUCTIONS
from .fields import at_least, check_part, setting

# what validation measures (DataPart.validation); paper-test-sets validates on these benchmarks
VALIDATIONS = ("method", "solo", "paper-test-sets")
PAPER_TEST_SETS = ("amc23_25", "aime", "minerva")


def task_names() -> str:
    """The registered tasks' names (``tasks.TASKS``), for help texts."""
    from ..tasks import TASKS

    return ", ".join(TASKS)


@dataclass(frozen=True)
class DataPart:
    """Training and validation problems, their prompts, their task and grader."""

    dataset: str = setting("tiny", "training problems: benchmark name, local file or hub id")
    dataset_split: str | None = setting("train", "split of a registered or hub dataset")
    val_dataset: str | None = setting(None, "validation problems (default: a held-out slice of the training data, "
                                      "never a reported benchmark)")
    val_split: str | None = setting("val", "split of the validation dataset (registered/hub datasets)")
    val_size: int = setting(200, "validation problems (held out from training when val_dataset is unset)",
                            range=(1, None, False))
    val_draw: str = setting("shuffle", "how the held-out slice is drawn: shuffle (a seeded Python shuffle) or "
                            "pandas (pandas' DataFrame.sample(n=val_size, random_state=seed), the paper's draw of its "
                            "1,000 rows)", choices=("shuffle", "pandas"))
    validation: str = setting("method", "what validation measures: method (accuracy under the method's own rollout "
                              "schedule: tandem rollouts for tandem, as the paper's text selects checkpoints) or solo "
                              "(the senior alone, as the paper's released code validates) or paper-test-sets (the "
                              "older stack's: tandem rollouts on AMC 23-25, AIME 24-26 and Minerva, best by macro "
                              "pass@eval_n; selects on test sets)", choices=VALIDATIONS)
    limit: int | None = setting(None, "use only the first N training problems", range=(1, None, False))
    template: str = setting("auto", "prompt template: auto, plain or chat")
    instruction: str = setting(DEFAULT_INSTRUCTION, "instruction after the problem in chat prompts: paper (the "
                               "paper's exact text, default), reason-step (this project's earlier wording) or none",
                               choices=tuple(INSTRUCTIONS))
    task: str = setting("math", "what is asked and how it is graded (a task of tasks.TASKS); its verifier is "
                        "recorded in config.json", names=lambda: task_names())
    grader: str = setting("ours", "math grader of the reward: ours (math-verify with repairs) or paper (the paper's "
                          "cascade, docs/paper_fidelity.md); part of the run's verifier", choices=GRADERS)
    max_prompt_tokens: int = setting(1024, "longest prompt; longer prompts are an error")

    def __post_init__(self):
        check_part(self)
        at_least(self, 1, "max_prompt_tokens", "val_size")
        if self.validation == "paper-test-sets" and self.val_dataset:
            raise TandemError("validation paper-test-sets validates on its own sets; leave val_dataset unset")
        _ = self.run_task  # a bad task name, or a grader the task does not take, fails here

    @cached_property
    def run_task(self):
        """The run's ``tasks.Task``: math prompts with the run's instruction and grades the last box."""
        from ..tasks import task_for_eval

        return task_for_eval(self.task, instruction=self.instruction, answer_mode="last-box", grader=self.grader)
