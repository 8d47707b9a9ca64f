"""Evaluation of simultaneous speech translation (SimulEval 1.1 definitions).

Modules (import them directly; this package imports nothing heavy on its own):

- :mod:`mmst.evaluation.latency` - AL, LAAL, AP, DAL, ATD, StartOffset, EndOffset (+ computation-aware);
- :mod:`mmst.evaluation.quality` - sacrebleu corpus BLEU with per-language tokenizer;
- :mod:`mmst.evaluation.scorer` - :func:`~mmst.evaluation.scorer.score_instances` (BLEU + latency);
- :mod:`mmst.evaluation.instances` - SimulEval ``instances.log`` read/write;
- :mod:`mmst.evaluation.report` - ``scores.json``, ``scores.md``, BLEU-vs-AL plot;
- :mod:`mmst.evaluation.streaming` - drive a streaming translator exactly like SimulEval drives an agent;
- :mod:`mmst.evaluation.bundle` - the one loader: a model folder, or a checkpoint + its DATA, as a
  self-describing :class:`~mmst.evaluation.bundle.ModelBundle` (clear one-line errors);
  :mod:`mmst.evaluation.loading` keeps its older names (``load_system``, ``EvalSystem``);
- :mod:`mmst.evaluation.translator_input` - the DATA's dither and peak gain applied before a translator;
- :mod:`mmst.evaluation.utterances` - the utterances and references of a manifest split;
- :mod:`mmst.evaluation.frontend` - audio reading, level checks and stream input (shared with the agent);
- :mod:`mmst.evaluation.runner` - the per-utterance runner and wait-k sweeps (``eval/simultaneous_eval.py``);
- :mod:`mmst.evaluation.compare` - systems compared across a sweep.
"""
