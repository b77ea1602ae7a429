"""``engines.vllm_logits.TandemLogitsProcessor`` driven on CPU without vLLM: the module loaded against stand-ins for
the vLLM names it imports."""

import sys
import types
from pathlib import Path


def processor_class_on_stubs(monkeypatch):
    """``engines.vllm_logits.TandemLogitsProcessor`` loaded against stand-ins for the three vLLM names it
    imports, under a private module name; every stand-in and that module leave ``sys.modules`` after
    the test, so nothing stubbed is ever seen by a test that has the real vLLM."""
    import importlib.util

    import tandem_rlvr.engines as engines

    lp = types.ModuleType("vllm.v1.sample.logits_processor")
    lp.BatchUpdate = object
    lp.LogitsProcessor = object
    lp.MoveDirectionality = types.SimpleNamespace(SWAP="swap", UNIDIRECTIONAL="uni")
    for name in ("vllm", "vllm.v1", "vllm.v1.sample"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.v1.sample.logits_processor", lp)
    name = "tandem_rlvr.engines._vllm_logits_on_stubs"
    spec = importlib.util.spec_from_file_location(name, Path(engines.__file__).parent / "vllm_logits.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module.TandemLogitsProcessor
