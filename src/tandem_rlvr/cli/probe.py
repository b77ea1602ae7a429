"""``tandem probe forced-junior``: its flags and its printout (the probe: ``eval/sample/probe.py``)."""

from __future__ import annotations

from ..eval.sample.probe import POSITIONS, ProbeSettings, run_probe
from .flags import COUNT, number


def cmd_probe(a) -> None:
    s = ProbeSettings(samples=a.samples, junior=a.junior, senior=a.senior, position=a.position, seed=a.seed,
                      limit=a.limit, engine=a.engine, device=a.device, junior_device=a.junior_device, dtype=a.dtype,
                      batch_size=a.batch_size, n_boot=a.n_boot)
    res = run_probe(s, a.out)
    o = res["overall"]
    ci = "" if o["ci95"] is None else f" (95% CI {o['ci95'][0]:.3f}-{o['ci95'][1]:.3f})"
    rate = "n/a" if o["success_rate"] is None else f"{o['success_rate']:.3f}"
    print(f"forced-junior probe: {o['probed']} of {res['correct_solo_samples']} correct samples probed "
          f"({res['no_divergence']} without a divergence); still correct {rate}{ci}")
    for q, b in res["by_relative_position"].items():
        rate = "n/a" if b["success_rate"] is None else f"{b['success_rate']:.3f}"
        print(f"  position {q} of the response: {b['probed']} probed, still correct {rate}")


def register(sub) -> None:
    """Add ``tandem probe forced-junior`` to the command parser's subparsers."""
    from ..engines.base import DEFAULT_ENGINE, LOCAL_ENGINES
    from ..config import SEED_MAX
    
    p = sub.add_parser("probe", help="probes of a trained senior: forced-junior")
    psub = p.add_subparsers(dest="what", required=True, metavar="WHAT", parser_class=type(p))
    f = psub.add_parser("forced-junior", help="force the junior's greedy token into correct solo samples; does the "
                        "senior still finish correctly?")
    f.add_argument("--samples", required=True, help="a solo eval run directory (tandem eval solo --out)")
    f.add_argument("--junior", required=True, help="the junior model")
    f.add_argument("--senior", default=None, help="the senior model (default: the run's)")
    f.add_argument("--position", default="first", choices=POSITIONS, help="which differing position per sample")
    f.add_argument("--seed", type=number(int, 0, SEED_MAX), default=0,
                   help="seed of the random positions and of the continuations")
    f.add_argument("--limit", type=COUNT, default=None, help="first N correct samples")
    f.add_argument("--engine", default=DEFAULT_ENGINE, choices=LOCAL_ENGINES,
                   help="engine of the senior's continuations")
    f.add_argument("--device", default="auto")
    f.add_argument("--junior-device", default=None)
    f.add_argument("--dtype", default="auto")
    f.add_argument("--batch-size", type=COUNT, default=16, help="samples forced and continued together")
    f.add_argument("--n-boot", type=number(int, 1, 10**7), default=10_000, help="bootstrap resamples of the interval")
    f.add_argument("--out", required=True, help="output directory (resumes if it exists)")
    f.set_defaults(fn=cmd_probe)
