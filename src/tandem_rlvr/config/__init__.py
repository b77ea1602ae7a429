"""Settings in frozen parts that import nothing above them (docs/architecture.md, "Settings").

``TrainConfig`` (``train``) is made of the parts ``models``, ``data``, ``rollout``, ``loss``, ``rewards``
and ``loop``, one module each; every field carries help text and is a ``tandem train`` flag. Presets
live in ``presets/*.yaml``; ``load_train_config(preset, file, overrides)`` (``load``) layers defaults <
preset < file < flags and rejects unknown keys naming the closest valid one. ``EvalConfig``
(``evaluation``) holds one ``tandem eval solo|handoff`` run (``eval.sample.sampler.evaluate``).
"""

from .data import PAPER_TEST_SETS, VALIDATIONS, DataPart  # noqa: F401
from .evaluation import EVAL_PARTS, EvalConfig, eval_keys, paper_eval_sampling  # noqa: F401
from .fields import SEED_MAX, check_seed  # noqa: F401
from .load import RENAMED, load_preset, load_train_config, preset_names  # noqa: F401
from .loop import LoopPart  # noqa: F401
from .loss import LOSS_NORMALIZERS, LossPart  # noqa: F401
from .models import SHARDINGS, ModelsPart, Precision  # noqa: F401
from .rewards import RewardsPart  # noqa: F401
from .rollout import RolloutPart  # noqa: F401
from .train import METHODS, PARTS, TrainConfig, config_fields, part_of_key  # noqa: F401
