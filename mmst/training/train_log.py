"""Training logs: ``SAVE_DIR/train_log.jsonl``, TensorBoard (``SAVE_DIR/tensorboard``) and the console, trimmed on resume."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger("mmst.train")


class TrainLogger:
    """JSONL log (``SAVE_DIR/train_log.jsonl``), TensorBoard (``SAVE_DIR/tensorboard``) and console.

    Each JSONL line is ``{"kind": "train"|"valid"|"nan"|"event", "update": int, "time": float, ...}``.
    """

    def __init__(self, save_dir: Path, tensorboard: bool = True, enabled: bool = True) -> None:
        self.enabled = enabled
        self.path = save_dir / "train_log.jsonl"
        self.tb_dir = save_dir / "tensorboard"
        self.tb = None
        self._want_tb = bool(enabled and tensorboard)
        self._purge_step: int | None = None

    def _writer(self) -> Any:
        """The TensorBoard writer, opened on first use (after :meth:`resume_at`, with its purge step)."""
        if self.tb is None and self._want_tb:
            self._want_tb = False
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(log_dir=str(self.tb_dir), purge_step=self._purge_step)
            except Exception as e:  # pragma: no cover - tensorboard missing
                logger.warning("TensorBoard disabled: %s", e)
        return self.tb

    def resume_at(self, update: int) -> int:
        """Forget what a killed run logged after the checkpoint it resumes from.

        Records of ``train_log.jsonl`` with ``update > update`` (written between the last checkpoint
        and the crash, and about to be written again) are removed (atomic rewrite), and TensorBoard
        is opened with ``purge_step=update + 1``, so its readers drop that run's later points.

        Returns:
            The number of JSONL records removed.
        """
        self._purge_step = int(update) + 1
        if not self.enabled or not self.path.is_file():
            return 0
        from mmst.atomic import atomic_write_text

        kept, dropped = [], 0
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                u = int(json.loads(line).get("update", 0))
            except (ValueError, AttributeError):  # a line cut by the crash
                dropped += 1
                continue
            if u > update:
                dropped += 1
            else:
                kept.append(line + "\n")
        if dropped:
            atomic_write_text(self.path, "".join(kept))
        return dropped

    def log(self, kind: str, update: int, values: dict[str, Any]) -> None:
        """Append one record; numeric values also go to TensorBoard as ``<kind>/<key>``."""
        if not self.enabled:
            return
        rec = {"kind": kind, "update": int(update), "time": round(time.time(), 3), **values}
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")
        if self._writer() is not None:
            for k, v in values.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
                    self.tb.add_scalar(f"{kind}/{k}", float(v), update)

    def close(self) -> None:
        """Flush and close TensorBoard."""
        if self.tb is not None:
            self.tb.flush()
            self.tb.close()
