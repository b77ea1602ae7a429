"""``tandem generate``: one tandem completion, senior and junior words in two colours."""

from __future__ import annotations

from ..errors import TandemError
from ..runtime import configure_cpu_threads
from .flags import engine_flags, model_flags, open_from_args, sampling_flags, schedule_flags, seed_type, template_flag


# --------------------------------------------------------------------------- commands
def cmd_generate(a):
    from rich.text import Text

    from ..decoding.render import author_segments
    from ..progress import console
    from ..prompting import encode_prompt, format_prompt

    from ..io import lone_surrogate

    sched = a.schedule
    if (bad := lone_surrogate(a.prompt)) is not None:  # a byte that is not UTF-8 on the command line
        raise TandemError(f"--prompt holds {bad}; pass UTF-8 text")
    if sched == "senior" and (a.junior or a.junior_device):
        raise TandemError("--junior/--junior-device have no effect with --schedule senior (the senior writes alone)")
    configure_cpu_threads()
    dec, tok, close = open_from_args(a, sched)
    try:
        text = format_prompt(tok, a.prompt, a.template, a.instruction)
        roll = dec.generate([encode_prompt(tok, text)], [a.seed])
    finally:
        close()
    segs = author_segments(tok, roll.row_tokens(0), roll.row_mask(0))
    con = console(highlight=False, force_terminal=None if not a.no_color else False)
    out = Text()
    for piece, senior in segs:
        out.append(piece, style="bold cyan" if senior else "magenta")
    con.print(Text("senior", style="bold cyan"), Text(" / "), Text("junior", style="magenta"), f"  schedule={sched}")
    con.print(out)
    con.print(f"senior share: {float(roll.senior_share[0]):.2f}  tokens: {int(roll.lengths[0])}"
              f"  {'(EOS)' if bool(roll.finished[0]) else '(max tokens)'}")


def register(sub) -> None:
    g = sub.add_parser("generate", help="one tandem completion, senior and junior words in two colours")
    g.add_argument("--prompt", required=True, help="the problem or prompt text")
    g.add_argument("--seed", type=seed_type, default=0, help="row seed: same seed, same tokens and authors")
    g.add_argument("--no-color", action="store_true", help="plain text output")
    model_flags(g)
    schedule_flags(g, "word")
    sampling_flags(g)
    template_flag(g)
    engine_flags(g, server=True)
    g.set_defaults(fn=cmd_generate)
