"""``mmst-hf-encoder``: write Hugging Face speech-encoder folders (``save_pretrained``, safetensors).

Usage::

    mmst-hf-encoder init --size wav2vec2-tiny --out exp/hf_init           # a random encoder to pretrain
    mmst-hf-encoder extract --model exp/asr/checkpoint_best.pt --out exp/hf_pretrained

``init`` writes a randomly initialised encoder of a named size (``mmst.models.hf_encoder.HF_SIZES``).
``extract`` writes the pretrained encoder of a trained mmst model over ``encoder_type: hf`` (a training
checkpoint or an exported model folder) with its trained weights, without the length adapter or the
decoders: e.g. an encoder pretrained here on English ASR, for ST training with
``model.overrides.hf_encoder_path=OUT``. Both folders load with ``transformers``
(``Wav2Vec2Model.from_pretrained(OUT)``). Exit status 1 with one ``error:`` line for bad input.
"""

from __future__ import annotations

import argparse
import sys

from mmst.cli_help import ArgumentParser, run_cli
from mmst.models.checkpoint import CheckpointError


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(prog="mmst-hf-encoder", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="write a random encoder of a named size")
    init.add_argument("--size", required=True, help="named size (wav2vec2-tiny)")
    init.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    init.add_argument("--out", required=True, help="folder to write")
    ext = sub.add_parser("extract", help="write the trained encoder of an mmst model over an HF encoder")
    ext.add_argument("--model", dest="model", required=True,
                     help="a training checkpoint (.pt) or an exported model folder")
    ext.add_deprecated_alias("--checkpoint", "--model")
    ext.add_argument("--out", required=True, help="folder to write")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""

    def run(args: argparse.Namespace) -> int:
        from mmst.models.registry import HF_EXTRA_HINT

        try:
            from mmst.models.hf_encoder import HFSpeechEncoder, write_random_encoder
        except ModuleNotFoundError as e:
            raise ValueError(f"needs the Hugging Face transformers package: {HF_EXTRA_HINT}") from e
        if args.command == "init":
            out = write_random_encoder(args.out, args.size, seed=args.seed)
        else:
            from mmst.models.checkpoint import load_model

            model, _ = load_model(args.model)
            if not isinstance(model.encoder, HFSpeechEncoder):
                raise ValueError(f"{args.model}: the model's encoder is not a Hugging Face encoder "
                                 "(model.overrides.encoder_type is not 'hf')")
            out = model.encoder.save_pretrained(args.out)
        print(f"mmst-hf-encoder: wrote {out}")
        return 0

    return run_cli(build_parser(), run, argv, errors=(ValueError, CheckpointError, OSError))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
