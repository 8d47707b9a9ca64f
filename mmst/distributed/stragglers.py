"""Straggler injection for benchmarks and tests (``--straggler-delay``, ``--slow-rank``).

A delay is a ``time.sleep`` that simulates extra compute inside each micro-batch. Its length is
``base * X`` where

* ``base`` (seconds) = ``fraction`` x the rank's running mean of measured micro-batch compute time
  (forward + backward, exponential moving average), or a fixed ``base_s`` (the benchmark uses a fixed
  base so that sleeps dominate a tiny compute and 8 ranks fit on 2 cores);
* ``X`` is drawn from the chosen distribution, normalised to mean 1 (except ``exp:c``, mean ``c``):

  ============================  ===============================================================
  ``none``                      no delay
  ``const``                     X = 1 (deterministic; "CV = 0")
  ``lognormal:cv=C``            X = exp(s Z - s^2/2), s^2 = ln(1 + C^2), Z ~ N(0,1): mean 1, CV C
  ``exp:c=C``                   X = C * Exp(1): mean C, CV 1
  ``pareto:alpha=A``            X = x_m (1 + Lomax(A)), x_m = (A-1)/A: mean 1 (needs A > 1),
                                CV = 1/sqrt(A(A-2)) for A > 2
  ============================  ===============================================================

``--slow-rank R:F`` makes rank R a persistent straggler: its whole micro-batch (compute + delay) takes
``F`` times longer (an extra sleep of ``(F-1) * (compute + delay)``).

Where the sleep happens: inside the micro-batch, before the gradient all-reduce of the step. DDP and
the parameter server sleep between forward and backward (a sleep after DDP's last backward would fall
outside the synchronised region and not delay that step). DropCompute, whose threshold checks sit
between micro-batches and between forward and backward, splits each delay like the compute it
simulates: the forward's share of the measured compute time right after the forward, the rest right
after the backward, so a slow micro-batch is slow in both phases.

A delay is simulated compute and is never cut short. DropCompute checks its threshold only where the
reference implementation can (before each micro-batch, and between a micro-batch's forward and its
backward), so a slow forward phase overshoots the threshold, exactly as a slow real forward pass would;
:mod:`mmst.distributed.straggler_model` models that overshoot.

Seeds are per rank: ``numpy.random.default_rng([seed, rank])``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class DelaySpec:
    """A parsed ``--straggler-delay`` value: ``kind`` in {none, const, lognormal, exp, pareto} and its
    parameters (``cv``, ``c`` or ``alpha``)."""

    kind: str = "none"
    params: dict[str, float] = field(default_factory=dict)

    @property
    def mean(self) -> float:
        """Mean of the multiplier X (0 for ``none``)."""
        if self.kind == "none":
            return 0.0
        if self.kind == "exp":
            return float(self.params.get("c", 1.0))
        return 1.0

    @property
    def cv(self) -> float:
        """Coefficient of variation (std / mean) of X (inf for Pareto with alpha <= 2)."""
        if self.kind in ("none", "const"):
            return 0.0
        if self.kind == "lognormal":
            return float(self.params["cv"])
        if self.kind == "exp":
            return 1.0
        a = float(self.params["alpha"])
        return 1.0 / math.sqrt(a * (a - 2.0)) if a > 2 else math.inf

    def sample(self, rng: np.random.Generator, size: int | tuple[int, ...] | None = None) -> np.ndarray | float:
        """Draw X (float, or array of ``size``) with ``rng``."""
        if self.kind == "none":
            return np.zeros(size) if size is not None else 0.0
        if self.kind == "const":
            return np.ones(size) if size is not None else 1.0
        if self.kind == "lognormal":
            cv = float(self.params["cv"])
            s2 = math.log1p(cv * cv)
            z = rng.standard_normal(size)
            return np.exp(math.sqrt(s2) * z - s2 / 2.0)
        if self.kind == "exp":
            return float(self.params.get("c", 1.0)) * rng.exponential(1.0, size)
        a = float(self.params["alpha"])
        return (a - 1.0) / a * (1.0 + rng.pareto(a, size))

    def __str__(self) -> str:  # round-trips through parse_delay_spec
        if not self.params:
            return self.kind
        return self.kind + ":" + ",".join(f"{k}={v:g}" for k, v in self.params.items())


_KEYS = {"lognormal": ("cv",), "exp": ("c",), "pareto": ("alpha",), "none": (), "const": ()}


def parse_delay_spec(text: str | None) -> DelaySpec:
    """Parse ``none``, ``const``, ``lognormal:cv=0.5``, ``exp:c=1``, ``pareto:alpha=2.5``.

    Raises:
        ValueError: unknown kind, missing/unknown parameter, negative CV, or alpha <= 1.
    """
    if text is None or text.strip() in ("", "none"):
        return DelaySpec("none")
    kind, _, rest = text.strip().partition(":")
    kind = kind.lower()
    if kind not in _KEYS:
        raise ValueError(f"--straggler-delay {text!r}: unknown kind {kind!r}; expected one of {sorted(_KEYS)}")
    params: dict[str, float] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        k, eq, v = item.partition("=")
        if not eq or k not in _KEYS[kind]:
            raise ValueError(f"--straggler-delay {text!r}: bad parameter {item!r}; {kind} takes {_KEYS[kind]}")
        params[k] = float(v)
    if kind == "exp":
        params.setdefault("c", 1.0)
    for k in _KEYS[kind]:
        if k not in params:
            raise ValueError(f"--straggler-delay {text!r}: missing parameter {k}= (e.g. {kind}:{k}=0.5)")
    if kind == "lognormal" and params["cv"] < 0:
        raise ValueError(f"--straggler-delay {text!r}: cv must be >= 0")
    if kind == "pareto" and params["alpha"] <= 1:
        raise ValueError(f"--straggler-delay {text!r}: alpha must be > 1 (finite mean)")
    if kind == "lognormal" and params["cv"] == 0:
        return DelaySpec("const")
    return DelaySpec(kind, params)


def parse_slow_rank(text: str | None) -> tuple[int, float] | None:
    """Parse ``--slow-rank R:FACTOR`` (e.g. ``1:2.0``) into ``(R, FACTOR)``; ``None``/"" => None.

    Raises:
        ValueError: malformed text, negative rank or factor < 1, or a number (a YAML file that says
            ``slow_rank: 1:2`` unquoted gives the base-60 number 62: quote it).
    """
    if text is None or text == "":
        return None
    if not isinstance(text, str):
        raise ValueError(f"slow_rank {text!r}: expected the text RANK:FACTOR, e.g. '1:2.0' (in a YAML file, quote it: "
                         "unquoted, YAML reads 1:2 as the base-60 number 62)")
    r, sep, f = text.partition(":")
    try:
        rank, factor = int(r), float(f) if sep else 2.0
    except ValueError as e:
        raise ValueError(f"--slow-rank {text!r}: expected RANK:FACTOR, e.g. 1:2.0") from e
    if rank < 0 or factor < 1.0:
        raise ValueError(f"--slow-rank {text!r}: need rank >= 0 and factor >= 1")
    return rank, factor


class VirtualClock:
    """Simulated time that advances only by injected delays: compute and communication take no time.

    With ``StragglerInjector(..., sleep=vc.sleep, clock=vc.now)``, every time a strategy measures (the
    micro-batch times, the checks against tau, the recorded times that choose tau, the step time) is a
    sum of sampled delays, so what DropCompute computes and drops depends on the seeds alone, never on
    the machine's load. Per process (each rank has its own).
    """

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        """Seconds of simulated time so far."""
        return self.t

    def sleep(self, seconds: float) -> None:
        """Advance the simulated time by ``seconds`` (no real waiting)."""
        self.t += max(float(seconds), 0.0)


class StragglerInjector:
    """Per-rank delay generator (see module docstring for the formulas).

    Args:
        spec: the delay distribution. rank: this process's rank (seeds the RNG and selects the slow rank).
        seed: global seed; the RNG is ``default_rng([seed, rank])``.
        fraction: ``base = fraction * running-mean compute time`` (ignored when ``base_s`` is set).
        base_s: fixed base delay in seconds (benchmarks), or None.
        slow_rank: ``(R, factor)`` or None.
        sleep: the sleep function (tests inject a fake clock).
        clock: the clock the training strategies time micro-batches, tau and steps with (seconds);
            ``time.perf_counter`` by default, :meth:`VirtualClock.now` with ``sleep=VirtualClock.sleep``
            for runs whose timing depends on the injected delays only.
    """

    def __init__(self, spec: DelaySpec | str | None = None, rank: int = 0, seed: int = 0,
                 fraction: float = 1.0, base_s: float | None = None,
                 slow_rank: tuple[int, float] | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.spec = spec if isinstance(spec, DelaySpec) else parse_delay_spec(spec)
        self.rank = rank
        self.rng = np.random.default_rng([seed, rank])
        self.fraction = fraction
        self.base_s = base_s
        self.slow_factor = slow_rank[1] if slow_rank is not None and slow_rank[0] == rank else 1.0
        self._sleep = sleep
        self.clock = clock
        self._ema: float | None = None
        self.total_delay_s = 0.0
        self.last_delay_s = 0.0

    @property
    def active(self) -> bool:
        """True when this injector ever sleeps."""
        return self.spec.kind != "none" or self.slow_factor != 1.0

    def observe_compute(self, compute_s: float) -> None:
        """Feed one measured micro-batch compute time (seconds) into the running mean (EMA, 0.9)."""
        self._ema = compute_s if self._ema is None else 0.9 * self._ema + 0.1 * compute_s

    def sample_delay(self, compute_estimate_s: float | None = None) -> float:
        """Seconds to sleep for the next micro-batch (distribution delay, then slow-rank scaling)."""
        if not self.active:
            return 0.0
        if self.base_s is not None:
            base = self.base_s
        else:
            base = self.fraction * (self._ema if self._ema is not None else (compute_estimate_s or 0.0))
        d = base * float(self.spec.sample(self.rng))
        if self.slow_factor != 1.0:
            comp = self._ema if self._ema is not None else (compute_estimate_s or 0.0)
            d += (self.slow_factor - 1.0) * (comp + d)
        return max(d, 0.0)

    def sleep(self, seconds: float) -> float:
        """Sleep ``seconds`` (a part of a sampled delay, whole); returns it and adds it to ``total_delay_s``."""
        if seconds > 0:
            self._sleep(seconds)
            self.total_delay_s += seconds
        return max(seconds, 0.0)

    def delay(self, compute_estimate_s: float | None = None) -> float:
        """Sample one delay and sleep it, whole (simulated compute is never cut short).

        Returns:
            The seconds slept (also kept in ``last_delay_s`` and added to ``total_delay_s``).
        """
        self.last_delay_s = self.sleep(self.sample_delay(compute_estimate_s))
        return self.last_delay_s
