"""Tandem RLVR from Python: your own Dataset and reward function, TandemGRPOTrainer, then a handoff evaluation
of the best checkpoint. The run is `tandem train`'s (log.jsonl, validation on eval_dataset, best/, resume by
running the script again); it takes about two minutes on a CPU.

    python examples/tandem_trainer.py
"""

import random
import re

from datasets import Dataset

from tandem_rlvr import TandemGRPOConfig, TandemGRPOTrainer, evaluate


def word_problems(n: int, seed: int) -> Dataset:
    rng, rows = random.Random(seed), []
    for _ in range(n):
        a, b = rng.randint(2, 20), rng.randint(2, 20)
        rows.append({"prompt": f"Tom has {a} apples. He buys {b} more. How many apples does Tom have now?\n\n",
                     "answer": str(a + b)})
    return Dataset.from_list(rows)


def correct(completions, answer, **kwargs):
    boxed = [re.findall(r"\\boxed\{([^}]*)\}", c) for c in completions]
    return [1.0 if b and b[-1].strip() == a else 0.0 for b, a in zip(boxed, answer, strict=True)]


args = TandemGRPOConfig(
    output_dir="runs/tandem-trainer", use_cpu=True, bf16=False, learning_rate=1e-4, num_generations=4,
    per_device_train_batch_size=16, max_completion_length=96, max_steps=4, temperature=1.0, save_steps=2,
    junior="tiny-junior", schedule="word", p=0.5, K=32, eval_every=2, report_to="tensorboard")
trainer = TandemGRPOTrainer(model="tiny", reward_funcs=[correct], args=args,
                            train_dataset=word_problems(64, seed=0), eval_dataset=word_problems(16, seed=1))
print(trainer.train())

val = [{"problem": r["prompt"].strip(), "answer": r["answer"]} for r in word_problems(16, seed=1)]
metrics = evaluate("runs/tandem-trainer/best", junior="tiny-junior", mode="handoff", problems=val, n=2,
                   template="plain", schedule="word", out="runs/tandem-trainer/handoff-eval")
print("handoff pass@1:", metrics["macro"]["pass@1"])
