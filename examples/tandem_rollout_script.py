"""grpo_script.py made Tandem RLVR: the same script with one import and one argument more. Every rollout
is co-written by the policy (the senior) and a frozen junior, and TRL's loss touches only the senior's
tokens (the senior mask reaches it as env_mask). Runs in about a minute on a CPU.

    python examples/tandem_rollout_script.py
"""

import random
import re

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from tandem_rlvr import tandem_rollout
from tandem_rlvr.models import resolve_model_path


def word_problems(n: int, seed: int) -> Dataset:
    """Your data: a `prompt` column, and the columns your reward reads (here `answer`)."""
    rng, rows = random.Random(seed), []
    for _ in range(n):
        a, b = rng.randint(2, 20), rng.randint(2, 20)
        rows.append({"prompt": f"Tom has {a} apples. He buys {b} more. How many apples does Tom have now?\n\n",
                     "answer": str(a + b)})
    return Dataset.from_list(rows)


def correct(completions, answer, **kwargs):
    """1.0 when the completion's last \\boxed{} holds the answer (TRL's reward convention)."""
    boxed = [re.findall(r"\\boxed\{([^}]*)\}", c) for c in completions]
    return [1.0 if b and b[-1].strip() == a else 0.0 for b, a in zip(boxed, answer, strict=True)]


args = GRPOConfig(output_dir="runs/tandem-rollout-script", use_cpu=True, bf16=False, learning_rate=1e-4,
                  num_generations=4, per_device_train_batch_size=16, max_completion_length=96, max_steps=2,
                  temperature=1.0, report_to="none", save_strategy="no")
trainer = GRPOTrainer(
    model=resolve_model_path("tiny"),  # the built-in tiny world's model; any causal LM id or directory works
    reward_funcs=[correct],
    args=args,
    train_dataset=word_problems(32, seed=0),
    rollout_func=tandem_rollout("tiny-junior"),  # the frozen junior: any model of the policy's tokenizer
)
trainer.train()
