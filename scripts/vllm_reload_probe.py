"""Does one ``load_weights`` reach the vLLM engine's decoder layers? (docs/results.md, "ZeRO-3 + LoRA on engine vllm").

Opens engine vllm (float32, CPU) on a test world's senior and junior, feeds it W + (alpha / r) B A by
hand from a LoRA save (``tests/sharded_entry.hand_merged``) in float32, then the same cast to bf16,
and prints which of the engine's senior tensors changed each time.

Run (vLLM's venv): PYTHONPATH=src python scripts/vllm_reload_probe.py WORLD LORA_SAVE
(WORLD: a directory with senior/ and junior/, as tests/conftest.save_training_inputs writes with
hidden 128; LORA_SAVE: a run's final/ with adapter_model.safetensors.)
"""
import sys
from pathlib import Path

import torch
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from pathlib import Path
from tandem_rlvr.engines import EngineSetup, open_engine
from tandem_rlvr.engines.vllm_engine import VLLMSettings
from sharded_entry import hand_merged
if __name__ == "__main__":
    W = Path(sys.argv[1])
    run = Path(sys.argv[2])
    eng = open_engine("vllm", EngineSetup(str(W / "senior"), junior=str(W / "junior"), dtype="float32", vllm_settings=VLLMSettings(kv_cache_gib=0.1)))
    e0 = eng.engine_params("senior")
    ref = hand_merged(W / "senior", run)
    base = {k: v.float() for k, v in __import__("safetensors.torch", fromlist=["x"]).load_file(str(W / "senior/model.safetensors")).items()}
    print("hand != base tensors:", sum(not torch.equal(ref[k], base[k]) for k in ref))
    eng.load_weights(list(ref.items()))
    e1 = eng.engine_params("senior")
    print("fp32 load changed engine:", sorted(k for k in e0 if not torch.equal(e0[k], e1[k])))
    eng.load_weights([(k, v.to(torch.bfloat16)) for k, v in ref.items()])
    e2 = eng.engine_params("senior")
    print("bf16 load changed engine:", sorted(k for k in e1 if not torch.equal(e1[k], e2[k])))
    print("engine keys", sorted(e0))
    eng.close()
