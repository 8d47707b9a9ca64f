"""SimulEval 1.1 agent for mmst models: :class:`MMSTSpeechToTextAgent`.

Usage (SimulEval's own evaluator)::

    simuleval --agent-class mmst.agents.MMSTSpeechToTextAgent \\
        --model MODEL_DIR --tgt-lang de --waitk-lagging 3 \\
        --source SRC.list --target TGT.de.txt --source-segment-size 320 --output OUT
    simuleval --agent-class mmst.agents.MMSTSpeechToTextAgent ... --policy alignatt --policy-args frames=4
    simuleval --agent-class mmst.agents.MMSTSpeechToTextAgent ... --policy la --policy-args n=2 --beam 4

Policies: ``--policy`` waitk | alignatt | edatt | la | holdn | ctcwaitk with ``--policy-args k=v,...``
(FBK's ``--frame-num``, ``--extract-attn-from-layer``, ``--attn-threshold``, ``--attn-compat`` and
``--attn-prefix`` are accepted as aliases),
``--policy-per-lang ja=alignatt:frames=4`` for one language; see ``docs/policies.md``.

``--source`` lists one audio file per line (any rate, mono or stereo), ``--target`` one reference
per line.  The DATA option is ``--mmst-data``, not ``--data``: SimulEval's first-stage parser
prefix-matches ``--data`` against its own ``--dataloader``/``--dataloader-class`` and exits with
"ambiguous option" before the agent sees it.  ``--tgt-lang`` is a language code (``de``) or, as in plain SimulEval, a file with one
code per line (one per source).  Importing this module registers :class:`MMSTSpeechToTextDataloader`
as SimulEval's ``speech-to-text`` dataloader: it accepts both forms of ``--tgt-lang`` (plain
SimulEval 1.1.4 would try to open a file called ``de``) and downmixes stereo files to mono with a
warning (SimulEval's loader would hand the agent interleaved channel pairs).

SimulEval contract honoured here (SimulEval 1.1.4 ``SentenceLevelEvaluator``):

- each call of :meth:`policy` consumes ALL the audio received so far and writes every word the
  streaming translator completed (one ``WriteAction`` per call; words joined by spaces), or reads;
- after the last source segment (``states.source_finished``), SimulEval calls ``policy`` exactly
  once more and stops reading; we flush the translator and write everything left with
  ``finished=True`` (possibly an empty string);
- no state leaks across instances: :meth:`reset` (called by SimulEval between instances) and our
  own reset after the final write clear the translator, the resampler and the scale detector;
- input scaling: SimulEval reads audio as float in [-1, 1]; a client that sends int16-scaled
  samples (any ``|x| > 1``) is detected per instance and divided by 32768 (``--input-scale`` forces
  either); any sample rate is resampled to 16 kHz with a streaming soxr resampler.

Sentence restarts (``--sentence-restart``, on by default; ``--restart-min-speech-ms``, ``--restart-eos-chunks``:
the options and defaults of ``mmst-eval-longform``): an instance is one segment of the long-form driver
(:class:`~mmst.simultaneous.longform.LongFormTranslator` with a
:class:`~mmst.simultaneous.longform.WholeStreamSegmenter` and Silero VAD speech probabilities; 40 ms chunks), so an instance
that holds several sentences gets all of them translated: a language that ends its sentence while speech goes
on starts a new one where it ended (docs/longform.md). An instance of one sentence is translated as without
restarts. ``--no-sentence-restart`` feeds the translator directly.
"""

from __future__ import annotations

import logging
import os
import sys
from argparse import SUPPRESS, ArgumentParser, Namespace
from pathlib import Path
from typing import Any

import numpy as np
from simuleval.agents import SpeechToTextAgent
from simuleval.agents.actions import ReadAction, WriteAction
from simuleval.data.dataloader import register_dataloader
from simuleval.data.dataloader.s2t_dataloader import SpeechToTextDataloader, load_list_from_file

from mmst.audio import TARGET_SAMPLE_RATE
from mmst.cli_help import add_length_arguments, add_quantize_argument, add_restart_arguments, restart_options
from mmst.evaluation.frontend import StreamInput, read_source_file
from mmst.simultaneous.longform import (
    RESTART_EOS_CHUNKS,
    RESTART_MIN_SPEECH_MS,
    LongFormTranslator,
    LongFormWord,
    WholeStreamSegmenter,
)
from mmst.simultaneous.waitk import parse_waitk

logger = logging.getLogger("mmst.agents")

SAMPLE_RATE = TARGET_SAMPLE_RATE
#: the long-form driver's processing chunk inside an instance (ms): one encoder state, so a SimulEval source
#: segment of a multiple of 40 ms at 16 kHz reaches the translator within its call (a resampled one may leave
#: a few samples, under 40 ms, for the next call); finer chunks cost more per second of audio
INSTANCE_CHUNK_MS = 40.0
_VAD_MODEL: list = []  # the Silero model, loaded once per process by the first agent that restarts sentences


def _word_text(w: Any) -> str:
    return w if isinstance(w, str) else str(getattr(w, "text", w))


@register_dataloader("speech-to-text")
class MMSTSpeechToTextDataloader(SpeechToTextDataloader):
    """SimulEval ``speech-to-text`` dataloader that accepts ``--tgt-lang de`` and stereo audio.

    - ``--tgt-lang``: an existing file is read as one code per line (SimulEval's behaviour);
      otherwise the value is a language code used for every source.
    - Stereo (or multi-channel) files are averaged to mono (warning).  The native sample rate is
      kept (SimulEval computes delays from it); the agent resamples to 16 kHz.
    - An empty audio file is kept (0 samples): the agent writes an empty hypothesis and SimulEval
      leaves the instance out of latency.
    """

    def preprocess_source(self, source: str | Path) -> list[float]:
        """Read ``source`` as float32 in [-1, 1], downmixed to mono (:func:`mmst.evaluation.frontend.read_source_file`);
        returns a list (SimulEval's type)."""
        mono, _ = read_source_file(source)
        return mono.tolist()

    @classmethod
    def from_files(cls, source, target, tgt_lang):  # noqa: D102 - SimulEval signature
        """Build from list files; ``tgt_lang`` is a file of codes or one code for all sources."""
        source_list = load_list_from_file(source)
        target_list = load_list_from_file(target) if target is not None else [None] * len(source_list)
        if tgt_lang is None:
            langs: list[str] = []
        elif os.path.isfile(tgt_lang):
            langs = load_list_from_file(tgt_lang)
        else:
            langs = [str(tgt_lang)] * len(source_list)
        return cls(source_list, target_list, langs)


class MMSTSpeechToTextAgent(SpeechToTextAgent):
    """Streaming speech-to-text agent over an mmst checkpoint, under any mmst policy (see the module docstring).

    Args:
        args: SimulEval namespace with the options of :meth:`add_args`.
        translator: a ready streaming translator (tests); default: built from ``args``.
            It must provide ``reset()`` and ``accept_audio(samples_16k_float32, finished) ->
            {lang: [word, ...]}`` (words completed by this call; all remaining ones when finished).
        speech: the speech probabilities of a sentence restart (a ``StreamingVad``-like object with
            ``accept``, ``reset``, ``take_window_probs`` and ``threshold``); default: Silero VAD. Used only
            when restarts are on and the translator supports them (``supports_restart``).
    """

    def __init__(self, args: Namespace | None = None, translator: Any = None, speech: Any = None) -> None:
        self.translator = None
        self.longform: LongFormTranslator | None = None
        self.input_scale = getattr(args, "input_scale", "auto") if args is not None else "auto"
        self.input = StreamInput(self.input_scale)
        super().__init__(args)
        self.tgt_langs = _parse_langs(getattr(args, "tgt_lang", None)) if args is not None else []
        self.translator = translator if translator is not None else build_translator_from_args(args, self.tgt_langs)
        if not self.tgt_langs:
            self.tgt_langs = list(getattr(self.translator, "tgt_langs", []))
        self.longform = _instance_driver(args, self.translator, speech)
        self._reset_stream()

    # --------------------------------------------------------------------- SimulEval API
    @staticmethod
    def add_args(parser: ArgumentParser) -> None:
        """Agent options (added to SimulEval's parser)."""
        parser.add_argument("--model", type=str, default=None,
                            help="an exported model folder (mmst-export), or a training checkpoint (.pt)")
        parser.add_argument("--checkpoint", type=str, default=None, help=SUPPRESS)  # old spelling of --model
        parser.add_argument(
            "--mmst-data",
            type=str,
            default=None,
            help="DATA directory (config.yaml, vocab, gcmvn) of a checkpoint; default: the data_dir stored in the "
            "checkpoint; not needed with a model folder "
            "(named --mmst-data because SimulEval's own parser takes --data as a prefix of --dataloader)",
        )
        parser.add_argument(
            "--tgt-lang",
            type=str,
            default=None,
            help="target language code (e.g. de), or a file with one code per source line",
        )
        parser.add_argument("--waitk-lagging", type=parse_waitk, default=3,
                            help="wait-k lagging k in pre-decision chunks (an int >= 1, or 'offline'); the default policy")
        from mmst.simultaneous.policy_spec import add_policy_arguments

        add_policy_arguments(parser)
        parser.add_argument("--beam", type=int, default=1,
                            help="beam search while streaming (alignatt, edatt, la, holdn); 1 = greedy")
        add_length_arguments(parser)
        add_restart_arguments(parser)
        add_quantize_argument(parser)
        parser.add_argument(
            "--input-scale",
            choices=["auto", "float", "int16"],
            default="auto",
            help="input samples are floats in [-1,1], int16-scaled, or auto-detected per instance (|x|>1 => int16)",
        )

    @classmethod
    def from_args(cls, args: Namespace) -> MMSTSpeechToTextAgent:
        """Build the agent; known configuration errors exit with a one-line message (no traceback)."""
        try:
            return cls(args)
        except (AgentConfigError, FileNotFoundError, ValueError, KeyError) as e:
            sys.exit(f"mmst agent: error: {e}")

    def to(self, device: str, *args: Any, **kwargs: Any) -> None:
        """Move the model to ``device`` (SimulEval ``--device``)."""
        self.device = device
        if self.translator is not None and hasattr(self.translator, "to"):
            self.translator.to(device)

    def reset(self) -> None:
        """Forget the current instance (SimulEval calls this between instances)."""
        super().reset()
        self._reset_stream()

    def policy(self) -> ReadAction | WriteAction:
        """Feed the new audio to the translator; write the completed words, or read.

        After the last source segment, flushes the translator and writes everything left with
        ``finished=True``, then resets itself (no state survives into the next instance).
        """
        st = self.states
        finished = bool(st.source_finished)
        new = st.source[self._consumed :]
        self._consumed = len(st.source)
        samples = self.input(np.asarray(new, dtype=np.float32), int(st.source_sample_rate or SAMPLE_RATE), finished)
        lang = self._current_lang()
        if samples.size == 0 and not finished:
            return ReadAction()
        if self.longform is not None:
            evs = self.longform.push(samples) if samples.size else []
            if finished:
                evs += self.longform.finish()
            words = [e.text for e in evs if isinstance(e, LongFormWord) and e.lang == lang]
        else:
            out = self.translator.accept_audio(samples, finished=finished)
            words = [_word_text(w) for w in (out.get(lang) or [])]
        text = " ".join(w for w in words if w)
        if finished:
            self.input.check_level("source audio")
            self._reset_translator()
            self._reset_stream(keep_consumed=True)
            return WriteAction(text, finished=True)
        if text:
            return WriteAction(text, finished=False)
        return ReadAction()

    # --------------------------------------------------------------------- internals
    def _reset_stream(self, keep_consumed: bool = False) -> None:
        if not keep_consumed:
            self._consumed = 0
        self.input.reset()
        if self.translator is not None and not keep_consumed:
            self._reset_translator()

    def _reset_translator(self) -> None:
        if self.longform is not None:
            self.longform.reset()  # its segmenter and the translator
        else:
            self.translator.reset()

    def _current_lang(self) -> str:
        lang = getattr(self.states, "tgt_lang", None)
        if isinstance(lang, str) and lang:
            if self.tgt_langs and lang not in self.tgt_langs:
                raise AgentConfigError(f"instance asks for target language {lang!r}; agent decodes {self.tgt_langs}")
            return lang
        if not self.tgt_langs:
            raise AgentConfigError("no target language: pass --tgt-lang")
        return self.tgt_langs[0]


def _instance_driver(args: Namespace | None, translator: Any, speech: Any) -> LongFormTranslator | None:
    """The long-form driver of one instance (module docstring), or None: restarts off, or a translator without
    them (offline decoding, async models, test doubles).

    Raises:
        AgentConfigError: ``--restart-min-speech-ms`` < 0 or ``--restart-eos-chunks`` < 1.
    """
    ns = Namespace(sentence_restart=getattr(args, "sentence_restart", True),
                   restart_min_speech_ms=getattr(args, "restart_min_speech_ms", RESTART_MIN_SPEECH_MS),
                   restart_eos_chunks=getattr(args, "restart_eos_chunks", RESTART_EOS_CHUNKS))
    try:
        restart = restart_options(ns)
    except ValueError as e:
        raise AgentConfigError(str(e)) from None
    if not restart["restart"] or not getattr(translator, "supports_restart", False):
        return None
    if speech is None:
        from mmst.simultaneous.vad import StreamingVad, load_vad_model

        if not _VAD_MODEL:
            _VAD_MODEL.append(load_vad_model())
        speech = StreamingVad(model=_VAD_MODEL[0])
    return LongFormTranslator(translator, vad=WholeStreamSegmenter(speech=speech), chunk_ms=INSTANCE_CHUNK_MS,
                              measure_state=False, **restart)


class AgentConfigError(ValueError):
    """Bad agent configuration (unknown language, missing checkpoint, vocab mismatch)."""


def _parse_langs(value: str | None) -> list[str]:
    if value is None:
        return []
    if os.path.isfile(value):
        langs: list[str] = []
        for lang in load_list_from_file(value):
            if lang and lang not in langs:
                langs.append(lang)
        return langs
    return [v for v in str(value).split(",") if v]


def build_translator_from_args(args: Namespace | None, tgt_langs: list[str]) -> Any:
    """Load the model bundle (:func:`mmst.evaluation.bundle.load_bundle`) named by ``args.model`` (or
    ``args.checkpoint``: a model folder or a training checkpoint) and build its streaming translator.

    Raises:
        AgentConfigError: no ``--model``, both ``--model`` and ``--checkpoint``, languages not in the model,
            vocab mismatch, a bad model folder.
    """
    model = getattr(args, "model", None) if args is not None else None
    ckpt = getattr(args, "checkpoint", None) if args is not None else None
    if model and ckpt and model != ckpt:
        raise AgentConfigError("give --model or --checkpoint, not both")
    if ckpt and not model:
        logger.warning("--checkpoint is deprecated; use --model")
    model = model or ckpt
    if not model:
        raise AgentConfigError("--model is required (a model folder or a checkpoint)")
    from mmst.evaluation.bundle import LoadError, load_bundle
    from mmst.simultaneous.policy_spec import specs_from_args

    waitk = getattr(args, "waitk_lagging", 3)
    try:
        swept, specs, per_lang = specs_from_args(args, [waitk])
    except ValueError as e:
        raise AgentConfigError(str(e)) from None
    if swept is not None:
        raise AgentConfigError(f"the agent runs one policy: give one value for {swept} "
                               "(sweeps are for eval/simultaneous_eval.py)")
    policy = {lang: per_lang.get(lang, specs[0]) for lang in tgt_langs} if tgt_langs else specs[0]
    if per_lang and not tgt_langs:
        raise AgentConfigError("--policy-per-lang needs --tgt-lang")
    try:
        bundle = load_bundle(model, data_dir=getattr(args, "mmst_data", None), tgt_langs=tgt_langs or None,
                             quantize=getattr(args, "quantize", "none"))
        return bundle.translator(waitk, max_len_a=getattr(args, "max_len_a", 0.0),
                                 max_len_b=getattr(args, "max_len_b", 200), beam=getattr(args, "beam", 1) or 1,
                                 min_len=getattr(args, "min_len", 0), policy=policy)
    except LoadError as e:
        raise AgentConfigError(str(e)) from None
