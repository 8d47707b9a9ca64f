"""``mmst-train``: train a multilingual simultaneous ST model.

Usage::

    mmst-train --config FILE.yaml --data DATA --save-dir DIR [key=value ...]

Every config key (see the list below, or ``docs/training.md``) can be set in the YAML file
and overridden on the command line with a dotted ``key=value`` (the value is parsed as YAML, e.g.
``optim.lr=1e-3``, ``waitk_lagging=[1,3,5,offline]``, ``model.overrides.dropout=0.2``). Unknown keys and
out-of-range values are errors that name the key. Training resumes from ``DIR/checkpoint_last.pt`` when
it exists (``checkpoint.resume=false`` to disable).

Overrides and flags may be given in any order (``a=1 --dist-timeout 20 b=2``).

Exit status: 0 = done, 2 = bad config / usage, 1 = training error (e.g. too many NaN updates,
vocabulary or language mismatch with the checkpoint, a distributed peer that died or timed out),
printed as one ``mmst-train: error: ...`` line.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from mmst.cli_help import HelpFormatter
from mmst.training.config import ConfigError, format_config_help, load_config


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of ``mmst-train`` (its epilog lists every config key with its doc)."""
    from mmst.training.strategy import available_strategies

    ap = argparse.ArgumentParser(prog="mmst-train", description=__doc__.split("Exit status")[0],
                                 epilog=format_config_help(), formatter_class=HelpFormatter)
    ap.add_argument("--config", default=None, help="YAML config file (sections as in the key list below)")
    ap.add_argument("--data", required=True, help="DATA directory written by mmst-prep-multiway (or another mmst-prep-* command)")
    ap.add_argument("--save-dir", required=True, help="output directory: checkpoints, train_log.jsonl, tensorboard/")
    ap.add_argument("--distributed", default="none", choices=available_strategies(),
                    help="update strategy: none = single process (gradient accumulation); others come from "
                    "mmst.distributed")
    ap.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                    help="console log level")
    g = ap.add_argument_group("fairseq-style aliases (each is the same as the config key in brackets)")
    for flag, key, hlp in FLAG_ALIASES:
        g.add_argument(flag, dest=key.replace(".", "__"), default=None, metavar="V", help=f"[{key}] {hlp}")
    for flag, key, value, hlp in FLAG_SWITCHES:
        g.add_argument(flag, dest=key.replace(".", "__"), action="store_const", const=value, default=None,
                       help=f"[{key}={value}] {hlp}")
    ap.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (dotted keys)")
    return ap


#: ``(flag, config key, help)``: convenience flags translated into ``key=value`` overrides (applied
#: before the positional overrides).
FLAG_ALIASES = [
    ("--max-tokens", "data.max_tokens", "padded fbank frames per micro-batch"),
    ("--update-freq", "optim.update_freq", "gradient accumulation (micro-batches per update)"),
    ("--clip-norm", "optim.clip_norm", "gradient-norm clipping"),
    ("--lr", "optim.lr", "peak learning rate"),
    ("--max-update", "optim.max_update", "number of updates"),
    ("--stop-time-hours", "optim.stop_time_hours", "stop after this much training wall time (hours)"),
    ("--waitk-lagging", "waitk_lagging", "wait-k: int, offline, or a list like [1,3,offline]"),
    ("--fixed-pre-decision-ratio", "model.overrides.pre_decision_ratio", "encoder states per chunk (7 = 280 ms)"),
    ("--ctc-weight", "criterion.ctc_weight", "auxiliary CTC loss weight"),
    ("--arch", "model.arch", "separate or unified"),
    ("--load-pretrained-encoder-from", "checkpoint.load_pretrained_encoder_from",
     "fairseq s2t_transformer or mmst checkpoint"),
    ("--seed", "seed", "random seed"),
    ("--precision", "precision", "auto (bf16 autocast on CUDA, fp32 on CPU), fp32 or bf16"),
    ("--compute-threshold", "distributed.options.compute_threshold",
     "DropCompute threshold tau: seconds, auto or inf"),
    ("--max-drop-rate", "distributed.options.max_drop_rate",
     "DropCompute auto threshold: cap on the predicted drop rate (0-1)"),
    ("--max-staleness", "distributed.options.max_staleness",
     "param-server SSP staleness bound s (default: W, the number of workers; inf = no bound)"),
    ("--straggler-delay", "distributed.options.straggler_delay",
     "injected delay: none|lognormal:cv=0.5|exp:c=1|pareto:alpha=2.5"),
    ("--slow-rank", "distributed.options.slow_rank", "persistent straggler R:factor"),
    ("--dist-timeout", "distributed.options.dist_timeout", "collective timeout in seconds"),
]


#: ``(flag, config key, value, help)``: flags without a value, each setting one key to one value.
FLAG_SWITCHES = [
    ("--staleness-lr", "distributed.options.lr_per_push", "staleness",
     "param-server: divide the learning rate of a push by its staleness"),
]


def alias_overrides(args: argparse.Namespace) -> list[str]:
    """``key=value`` strings for the alias flags (and switches) given on the command line."""
    out = []
    for key in [k for _, k, _ in FLAG_ALIASES] + [k for _, k, _, _ in FLAG_SWITCHES]:
        v = getattr(args, key.replace(".", "__"))
        if v is not None:
            out.append(f"{key}={v}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit status (see module docstring)."""
    ap = build_parser()
    args = ap.parse_intermixed_args(argv)  # overrides may come before, between and after flags
    logging.basicConfig(level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(args.config, [*alias_overrides(args), *args.overrides])
    except (ConfigError, FileNotFoundError) as e:
        print(f"mmst-train: config error: {e}", file=sys.stderr)
        return 2
    from mmst.data.dataset import LanguageMismatchError
    from mmst.distributed.env import DistributedError
    from mmst.training.build import build_trainer
    from mmst.training.checkpoint import CheckpointError
    from mmst.training.loop import TrainingDivergedError
    from mmst.training.strategy import StrategyError, build_strategy

    try:
        strategy = build_strategy(args.distributed, **cfg.distributed.options)
        main_process = bool(getattr(strategy, "is_main_process", True))
        if not main_process:  # only rank 0 (or the parameter server) talks; warnings and errors still show
            logging.getLogger("mmst").setLevel(max(logging.WARNING, logging.getLogger().level))
        trainer = build_trainer(cfg, args.data, args.save_dir, strategy=strategy)
        state = trainer.train()
    except (ConfigError, LanguageMismatchError, CheckpointError, TrainingDivergedError, FileNotFoundError,
            ValueError, StrategyError, DistributedError) as e:
        print(f"mmst-train: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2 if isinstance(e, ConfigError) else 1
    if not main_process:
        return 0
    print(f"mmst-train: done at update {state.num_updates} (best {cfg.valid.best_metric}: {state.best}); "
          f"checkpoints in {args.save_dir}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
