"""The one ``argparse`` parser and help formatter of mmst's command-line scripts (with deprecated option
spellings), the option groups several scripts share (one name, default and help text per option) and the
entry-point wrapper of the evaluation and corpus-preparation scripts. The option vocabulary is in
``docs/CONTRACTS.md``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

EVAL_LOG_FORMAT = "%(levelname)s: %(message)s"
"""Log lines of the evaluation scripts: ``LEVEL: message``."""
PREP_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""Log lines of the corpus-preparation scripts (long runs): time, level and logger name first."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Description and epilog printed as written; ``(default: X)`` after an option's help only when the
    default means something (not ``None``/``False``) and the help does not already mention a default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        h = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in h:
            return h
        return super()._get_help_string(action)


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` with :class:`HelpFormatter` and deprecated option spellings.

    :meth:`add_deprecated_alias` keeps an old spelling of a renamed option working: it is listed nowhere in
    ``--help``, is rewritten to the new spelling before parsing (``--old V`` and ``--old=V``), and prints one
    line ``PROG: warning: --old is deprecated; use --new`` on stderr. Arguments after a bare ``--`` are
    left alone.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.deprecated_aliases: dict[str, str] = {}

    def add_deprecated_alias(self, old: str, new: str) -> None:
        """Accept ``old`` as a deprecated spelling of the option ``new``.

        Raises:
            ValueError: ``new`` is not an option of this parser, or ``old`` still is one.
        """
        if new not in self._option_string_actions:
            raise ValueError(f"{self.prog}: {new} is not an option (alias {old})")
        if old in self._option_string_actions:
            raise ValueError(f"{self.prog}: {old} is still an option; it cannot be an alias of {new}")
        self.deprecated_aliases[old] = new

    def _rewrite_deprecated(self, args: Sequence[str] | None) -> list[str]:
        args = list(sys.argv[1:] if args is None else args)
        out = []
        for i, a in enumerate(args):
            if a == "--":
                return out + args[i:]
            name, eq, value = a.partition("=")
            new = self.deprecated_aliases.get(name) if name.startswith("--") else None
            if new is not None:
                print(f"{self.prog}: warning: {name} is deprecated; use {new}", file=sys.stderr)
                a = new + eq + value
            out.append(a)
        return out

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102 (argparse's)
        return super().parse_known_args(self._rewrite_deprecated(args), namespace)

    def parse_known_intermixed_args(self, args=None, namespace=None):  # noqa: D102 (argparse's)
        return super().parse_known_intermixed_args(self._rewrite_deprecated(args), namespace)


def add_progress_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup, *,
                           log_level: bool = True) -> None:
    """Add ``--no-progress`` (hide the tqdm progress bars; pass ``progress=not args.no_progress`` on) and, with
    ``log_level``, ``--log-level`` (a :mod:`logging` level name in any case, default INFO; a name that is not a
    level means INFO), which :func:`run_cli` applies."""
    p.add_argument("--no-progress", action="store_true", help="hide tqdm progress bars")
    if log_level:
        p.add_argument("--log-level", default="INFO", help="logging level")


def add_quantize_argument(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add ``--quantize none|int8``: run the model's linear layers in fp32 or dynamic int8
    (``mmst.models.quantize.quantize_model``; CPU only). Pass ``args.quantize`` to ``load_bundle``."""
    from mmst.models.quantize import QUANTIZE_CHOICES

    p.add_argument("--quantize", choices=QUANTIZE_CHOICES, default="none",
                   help="linear layers in fp32 (none) or dynamic int8 (int8: int8 weights and activations, "
                        "CPU only; with torch 2.13's CPU int8 kernels it is slower than fp32, not faster: "
                        "see docs/performance.md)")


def add_model_arguments(p: argparse.ArgumentParser, *, data_required: bool = False,
                        langs_default: str | None = "all of the model's") -> None:
    """Add ``--model`` (required; ``--checkpoint``, its old spelling, is a deprecated alias), ``--data``, ``--tgt-langs`` and
    ``--quantize``: the trained system a script loads, the languages it decodes and the arithmetic of its
    linear layers (``mmst.evaluation.bundle.load_bundle``). Read the model back as ``args.model``.

    Args:
        p: the parser.
        data_required: ``--data`` must be given (else, with a checkpoint, it defaults to the DATA directory
            recorded in the checkpoint; a model folder needs no DATA for its vocabularies).
        langs_default: which languages are decoded without ``--tgt-langs``, in words (the option's value is
            then ``None``); ``None``: no ``--tgt-langs`` option.
    """
    g = p.add_argument_group("model")
    g.add_argument("--model", dest="model", required=True, metavar="MODEL",
                   help="an exported model folder (mmst-export: vocabularies, CMVN and feature settings inside) "
                        "or a training checkpoint (.pt, with the vocabularies and CMVN of --data)")
    if isinstance(p, ArgumentParser):
        p.add_deprecated_alias("--checkpoint", "--model")
    data_help = ("DATA directory: with a model folder, only where the test utterances come from; with a "
                 "checkpoint, also its vocabularies and CMVN")
    if data_required:
        g.add_argument("--data", required=True, help=data_help)
    else:
        g.add_argument("--data", default=None, help=data_help + " (default: the data_dir stored in the checkpoint)")
    if langs_default is not None:
        g.add_argument("--tgt-langs", default=None,
                       help=f"comma-separated target languages (default: {langs_default})")
    add_quantize_argument(g)


def add_streaming_policy_arguments(p: argparse.ArgumentParser) -> None:
    """Add one streaming policy setting: ``--waitk-lagging`` (k in pre-decision chunks, the policy without
    ``--policy``), the policy options of ``mmst.simultaneous.policy_spec.add_policy_arguments`` (no sweep)
    and ``--beam``. Read them back with ``specs_from_args(args, [args.waitk_lagging])``."""
    from mmst.simultaneous.policy_spec import add_policy_arguments

    p.add_argument("--waitk-lagging", type=int, default=3,
                   help="wait-k lagging k in pre-decision chunks (the policy when --policy is not given)")
    add_policy_arguments(p, sweep=False)
    p.add_argument("--beam", type=int, default=1, help="beam search while streaming (alignatt, edatt, la, holdn)")


def add_length_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup, *, min_len: bool = True) -> None:
    """Add the output length limits of a decoding, as in fairseq: ``--max-len-a`` and ``--max-len-b`` (at most
    ``a * encoder_states + b`` target tokens per language) and, with ``min_len``, ``--min-len`` (no EOS
    before that many tokens). Pass ``args.max_len_a``, ``args.max_len_b`` and ``args.min_len`` on."""
    p.add_argument("--max-len-a", type=float, default=0.0, help="max target tokens = a * encoder_states + b")
    p.add_argument("--max-len-b", type=int, default=200, help="max target tokens = a * encoder_states + b")
    if min_len:
        p.add_argument("--min-len", type=int, default=0,
                       help="suppress EOS before this many tokens (only for cost/agreement checks with untrained "
                            "models)")


def add_vad_arguments(p: argparse.ArgumentParser) -> None:
    """Add the Silero VAD segmentation options of a long stream (``mmst.simultaneous.vad.StreamingVad``):
    ``--max-segment-s`` (s), ``--vad-threshold`` (speech probability), ``--vad-min-silence-ms`` and
    ``--vad-speech-pad-ms`` (ms)."""
    p.add_argument("--max-segment-s", type=float, default=20.0,
                   help="longest VAD segment in seconds; longer speech is cut there")
    p.add_argument("--vad-threshold", type=float, default=0.5, help="Silero VAD speech probability threshold")
    p.add_argument("--vad-min-silence-ms", type=float, default=250.0,
                   help="silence (ms) that ends a VAD segment")
    p.add_argument("--vad-speech-pad-ms", type=float, default=30.0, help="padding (ms) on each side of a segment")


def add_restart_arguments(p: argparse.ArgumentParser) -> None:
    """Add the sentence-restart options of the long-form driver (``mmst.simultaneous.longform``):
    ``--sentence-restart``/``--no-sentence-restart``, ``--restart-min-speech-ms`` (ms of VAD speech),
    ``--restart-eos-chunks`` (chunks)."""
    p.add_argument("--sentence-restart", action=argparse.BooleanOptionalAction, default=True,
                   help="a language that ended its sentence while its VAD segment goes on starts a new sentence "
                        "where the last one ended (found from its attention, the CTC head and the VAD); "
                        "--no-sentence-restart: one sentence per segment")
    p.add_argument("--restart-min-speech-ms", type=float, default=200.0,
                   help="speech (ms, VAD) needed after the restart point before a language restarts")
    p.add_argument("--restart-eos-chunks", type=int, default=6,
                   help="adaptive policies: end-of-sentence predicted on partial input for this many consecutive "
                        "chunks ends the sentence")


def restart_options(args: argparse.Namespace) -> dict:
    """The keyword arguments of ``mmst.simultaneous.longform.LongFormTranslator`` from the options of
    :func:`add_restart_arguments`: ``{"restart", "restart_min_speech_ms", "restart_eos_chunks"}``.

    Raises:
        ValueError: ``--restart-min-speech-ms`` < 0 or ``--restart-eos-chunks`` < 1.
    """
    if args.restart_min_speech_ms < 0 or args.restart_eos_chunks < 1:
        raise ValueError("--restart-min-speech-ms must be >= 0 and --restart-eos-chunks >= 1")
    return {"restart": bool(args.sentence_restart), "restart_min_speech_ms": float(args.restart_min_speech_ms),
            "restart_eos_chunks": int(args.restart_eos_chunks)}


def run_cli(parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace], int],
            argv: Sequence[str] | None, errors: tuple[type[BaseException], ...], *,
            log_format: str = EVAL_LOG_FORMAT, error_log: logging.Logger | None = None) -> int:
    """Parse ``argv`` (``None``: the process's arguments) and return ``run(args)``, with logging to stderr at
    ``args.log_level`` (:func:`add_progress_arguments`; INFO when the parser has no ``--log-level``).

    Args:
        parser: the script's options.
        run: the script's work; returns the exit status.
        argv: the command line without the program name.
        errors: exception types that mean bad options or input: each becomes one line on stderr and exit
            status 1.
        log_format: the :mod:`logging` format of every line (:data:`EVAL_LOG_FORMAT` or
            :data:`PREP_LOG_FORMAT`).
        error_log: where ``errors`` are reported: ``error_log.error(MESSAGE)`` (a log line in
            ``log_format``); ``None``: printed as ``error: MESSAGE``.

    Raises:
        SystemExit: status 2 from ``argparse`` for unknown or malformed options (0 for ``--help``).
    """
    args = parser.parse_args(argv)
    level = getattr(logging, str(getattr(args, "log_level", "INFO")).upper(), logging.INFO)
    logging.basicConfig(level=level, format=log_format, stream=sys.stderr)
    try:
        return run(args)
    except errors as e:
        if error_log is None:
            print(f"error: {e}", file=sys.stderr)
        else:
            error_log.error("%s", e)
        return 1
