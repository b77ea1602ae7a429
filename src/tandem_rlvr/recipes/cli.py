"""The recipes' subcommands of ``tandem`` (added by ``cli.build_parser``; thin: parse, call).

- ``tandem demo [--out DIR] [--world tiny-drift|tiny] [--quick]`` (``recipes.demo``)
- ``tandem study drift --seeds 0,1,2 --out DIR ...`` (``recipes.study``)
"""

from __future__ import annotations


def cmd_demo(a) -> None:
    from .demo import run_demo

    run_demo(a.out, quick=a.quick, world=a.world)


def cmd_study(a) -> None:
    from .study import run_study, settings_from_args

    run_study(a.out, settings_from_args(a))


def register_demo(sub) -> None:
    d = sub.add_parser("demo", help="the whole pipeline on a built-in tiny world")
    d.add_argument("--out", default="demo_out", help="output directory (default demo_out)")
    d.add_argument("--world", default="tiny-drift", choices=["tiny-drift", "tiny"],
                   help="tiny-drift (default): two styles and a weak junior, where GRPO drifts and Tandem "
                        "anchors; tiny: one style, self-paired")
    d.add_argument("--quick", action="store_true", help="a smaller, faster run (smoke test)")
    d.set_defaults(fn=cmd_demo)


def register_study(sub) -> None:
    p = sub.add_parser("study", help="multi-seed studies: drift = GRPO vs Tandem vs KL-Reg on the drift world")
    p.add_argument("study", choices=["drift"], help="which study (drift: the drift world, issue 6)")
    p.add_argument("--seeds", default="0,1,2", help="RL seeds, comma-separated (default 0,1,2)")
    p.add_argument("--out", required=True, help="study directory (rerun to resume or add seeds)")
    p.add_argument("--juniors", default="self,weak", help="self (the base), weak (the world's small word-only junior) or both")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the preset's)")
    p.add_argument("--limit", type=int, default=200, help="test problems per evaluation (default 200)")
    p.add_argument("--n", type=int, default=4, help="samples per problem (default 4)")
    p.add_argument("--checkpoint", default="final", choices=["final", "best"],
                   help="evaluate each run's final (default) or validation-best checkpoint")
    p.add_argument("--quick", action="store_true", help="seconds-long smoke version on a throwaway world")
    p.set_defaults(fn=cmd_study)
