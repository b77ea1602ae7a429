"""A user's TandemGRPOTrainer script reporting to trackio (offline, $TRACKIO_DIR) with log_completions, run by
tests/integration/test_api_trackio.py; with ``read`` it prints what trackio stored for the run as JSON."""

import json
import sys
import warnings

warnings.simplefilter("ignore")


def train(out: str) -> None:
    import datasets

    from tandem_rlvr import TandemGRPOConfig, TandemGRPOTrainer
    from tandem_rlvr.data.benchmarks import load_benchmark
    from tandem_rlvr.rewards.math import score

    def rows(split, n):
        return [{"prompt": p.problem + "\n\n",
                 "answer": p.answer} for p in load_benchmark("tiny", split=split, limit=n)]

    def correct(prompts, completions, answer, **kw):
        return [score(c, a) for c, a in zip(completions, answer, strict=True)]

    args = TandemGRPOConfig(output_dir=out, use_cpu=True, bf16=False, learning_rate=1e-4, num_generations=4,
                            per_device_train_batch_size=16, max_completion_length=32, max_steps=2, eval_every=1,
                            save_steps=2, junior="tiny-junior", report_to=["trackio"], log_completions=True,
                            num_completions_to_print=2, project="tandem-test", run_name="tiny")
    TandemGRPOTrainer("tiny", reward_funcs=[correct], args=args,
                      train_dataset=datasets.Dataset.from_list(rows("train", 8)),
                      eval_dataset=datasets.Dataset.from_list(rows("val", 4))).train()


def read() -> None:
    import trackio
    from trackio.utils import TRACKIO_DIR

    logs = trackio.SQLiteStorage.get_logs("tandem-test", "tiny")
    html = [(TRACKIO_DIR / "media" / r["completions/authored"]["file_path"]).read_text()
            for r in logs if "completions/authored" in r]
    val = [[r["train/global_step"], r["train/val/accuracy"]] for r in logs if "train/val/accuracy" in r]
    print(json.dumps({"val": val, "html": html}))


if __name__ == "__main__":
    train(sys.argv[2]) if sys.argv[1] == "train" else read()
