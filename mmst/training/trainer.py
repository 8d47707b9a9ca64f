"""The training entry points, importable from one place: the loop (:mod:`mmst.training.loop`), its builder
(:mod:`mmst.training.build`), validation (:mod:`mmst.training.validation`) and logs (:mod:`mmst.training.train_log`).

:func:`build_trainer` reads a DATA directory and a :class:`~mmst.training.config.TrainConfig`, builds every part
and returns a :class:`Trainer`; ``trainer.train()`` runs the loop (docs/training.md).
"""

from __future__ import annotations

from mmst.training.build import build_trainer as build_trainer
from mmst.training.build import override_changes as override_changes
from mmst.training.build import training_augmentation as training_augmentation
from mmst.training.build import warn_override_changes as warn_override_changes
from mmst.training.build import waveform_time_masks as waveform_time_masks
from mmst.training.loop import Trainer as Trainer
from mmst.training.loop import TrainingDivergedError as TrainingDivergedError
from mmst.training.loop import TrainState as TrainState
from mmst.training.loop import WaitkSampler as WaitkSampler
from mmst.training.loop import resolve_device as resolve_device
from mmst.training.loop import seed_everything as seed_everything
from mmst.training.loop import summarise_dist_stats as summarise_dist_stats
from mmst.training.train_log import TrainLogger as TrainLogger
from mmst.training.validation import Validator as Validator
