"""A user's TandemGRPOTrainer script, run by tests/distributed/test_api_sharded.py under torchrun with the variables an
``accelerate launch --config_file`` of ``distributed_type: FSDP``, ``fsdp_version: 2`` exports: it trains one
update, then writes each process's share of every senior parameter to ``OUT/rank-R.json``."""

import json
import os
import sys
import warnings

warnings.simplefilter("ignore")


def main(out: str, run: str) -> None:
    import datasets
    from torch.distributed.tensor import DTensor

    from tandem_rlvr import TandemGRPOConfig, TandemGRPOTrainer
    from tandem_rlvr.data.benchmarks import load_benchmark
    from tandem_rlvr.rewards.math import score

    rows = [{"prompt": p.problem + "\n\n", "answer": p.answer} for p in load_benchmark("tiny", split="train", limit=8)]

    def correct(prompts, completions, answer, **kw):
        return [score(c, a) for c, a in zip(completions, answer, strict=True)]

    args = TandemGRPOConfig(output_dir=run, use_cpu=True, bf16=False, num_generations=4, per_device_train_batch_size=8,
                            max_completion_length=16, max_steps=1, save_steps=1, junior="tiny-junior", report_to=[])
    trainer = TandemGRPOTrainer("tiny", reward_funcs=[correct], args=args,
                                train_dataset=datasets.Dataset.from_list(rows))
    summary = trainer.train()
    senior = trainer.accelerator.unwrap_model(trainer.model)
    params = dict(senior.named_parameters())
    shares = {n: (p.to_local().numel() / p.numel() if isinstance(p, DTensor) else 1.0) for n, p in params.items()}
    rank = int(os.environ["RANK"])
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
        json.dump({"rank": rank, "fractions": shares, "processes": summary["processes"],
                   "sharding": trainer.config.models.sharding}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
