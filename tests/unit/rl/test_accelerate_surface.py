"""accelerate's private surface that rl/accelerate_state.py relies on is still where we left it, and
nothing else in the package touches it.

Every private name is listed in ``rl.accelerate_state.PRIVATE_SURFACE``; when an accelerate release
moves one, this test names it instead of a sharded CPU run silently training as plain DDP. The
behaviour behind the names (each rank holds 1/N of a parameter) is tested in test_sharded_training.py.
"""

import importlib
import inspect
from pathlib import Path

from tandem_rlvr.rl.accelerate_state import PRIVATE_SURFACE

WHERE = "; rl/accelerate_state.py relies on it (PRIVATE_SURFACE): adapt it to this accelerate release"
SRC = Path(__file__).resolve().parents[3] / "src" / "tandem_rlvr"


def _resolve(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_shared_state_dict_exists_on_the_class():
    missing = []
    for path in PRIVATE_SURFACE["class_attributes"]:
        owner, _, attr = path.rpartition(".")
        if not isinstance(vars(_resolve(owner)).get(attr), dict):
            missing.append(path)
    assert not missing, f"accelerate has no class-level dict {', '.join(missing)}{WHERE}"


def test_private_keywords_are_accepted():
    missing = []
    for entry in PRIVATE_SURFACE["keywords"]:
        func, _, keyword = entry.partition(":")
        owner, _, method = func.rpartition(".")
        if keyword not in inspect.signature(getattr(_resolve(owner), method)).parameters:
            missing.append(entry)
    assert not missing, f"accelerate no longer takes {', '.join(missing)}{WHERE}"


def test_state_attributes_we_write_are_set_by_accelerate():
    from accelerate.state import AcceleratorState

    src = inspect.getsource(AcceleratorState)
    missing = [a for a in PRIVATE_SURFACE["instance_attributes"] if f"self.{a} =" not in src]
    assert not missing, f"AcceleratorState no longer sets self.{', self.'.join(missing)}{WHERE}"


def test_distributed_types_we_force_exist():
    from accelerate.utils import DistributedType

    missing = [k for k in ("FSDP", "DEEPSPEED", "MULTI_CPU") if k not in DistributedType.__members__]
    assert not missing, f"accelerate's DistributedType has no {', '.join(missing)}{WHERE}"


def test_no_other_module_touches_the_private_names():
    names = {p.rpartition(".")[2] for p in PRIVATE_SURFACE["class_attributes"]}
    names |= {k.partition(":")[2] for k in PRIVATE_SURFACE["keywords"]}
    home = SRC / "rl" / "accelerate_state.py"
    found = [f"{p.relative_to(SRC)}: {n}" for p in sorted(SRC.rglob("*.py")) if p != home
             for n in sorted(names) if n in p.read_text(encoding="utf-8")]
    assert not found, f"accelerate's private names outside rl/accelerate_state.py: {found}"
