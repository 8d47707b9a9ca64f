"""Policies by name: ``--policy NAME --policy-args k=v,...``, one-parameter sweeps and per-language policies.

* :func:`parse_policy_args` reads ``"frames=2,4,6,layer=3"``: a value without ``key=`` continues the
  previous key's list (here ``frames`` takes 2, 4 and 6); at most one key may have several values
  (the sweep).
* FBK's option names are accepted as aliases (:data:`ALIASES`): ``frame_num`` / ``frame-num`` ->
  ``frames``, ``extract_attn_from_layer`` -> ``layer``, ``attn_threshold`` -> ``alpha``.
* :func:`parse_per_lang` reads ``ja=alignatt:frames=4`` (several entries separated by ``;``).
* :func:`build_policy` makes the policy for a model: the pre-decision ratio of wait-k, the decoder
  layer range of AlignAtt/EDAtt and the CTC head of ``ctcwaitk`` are checked there.
* ``ctc`` is a deprecated alias of ``ctcwaitk`` (:data:`DEPRECATED`; one warning line on use).
* String parameters: ``compat=paper|fbk`` and ``prefix=cache|redecode`` (AlignAtt, EDAtt; aliases
  ``attn_compat``, ``attn_prefix``).

Errors are ``ValueError`` naming the unknown policy or parameter and listing the valid ones.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from .policies import (
    AlignAttPolicy,
    CTCWaitKPolicy,
    EDAttPolicy,
    HoldNPolicy,
    LocalAgreementPolicy,
    Policy,
    WaitKPolicy,
)

#: name -> policy class
POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (WaitKPolicy, AlignAttPolicy, EDAttPolicy, LocalAgreementPolicy, HoldNPolicy, CTCWaitKPolicy)
}
#: deprecated policy names -> current ones
DEPRECATED = {"ctc": "ctcwaitk"}
#: FBK agent option names -> ours
ALIASES = {
    "attn_compat": "compat", "attn-compat": "compat",
    "attn_prefix": "prefix", "attn-prefix": "prefix",
    "frame_num": "frames", "frame-num": "frames",
    "extract_attn_from_layer": "layer", "extract-attn-from-layer": "layer",
    "attn_threshold": "alpha", "attn-threshold": "alpha",
    "waitk_lagging": "k", "waitk-lagging": "k",
}
#: parameters that take numbers; ``_STR_PARAMS`` take strings; the others integers
_FLOAT_PARAMS = {"alpha"}
_STR_PARAMS = {"compat", "prefix"}
logger = logging.getLogger("mmst.simultaneous.policy_spec")
_warned: set[str] = set()


def policy_params(name: str) -> list[str]:
    """User-settable parameters of policy ``name`` (``ratio`` of wait-k is the model's)."""
    cls = _policy_class(name)
    return [f.name for f in dataclasses.fields(cls) if f.name != "ratio"]


def canonical_name(name: str) -> str:
    """``name``, or the current name of a deprecated one (``ctc`` -> ``ctcwaitk``, with one warning line)."""
    if name in DEPRECATED:
        if name not in _warned:
            _warned.add(name)
            logger.warning("policy %r is deprecated: it is %r (wait-k over source CTC tokens, not StreamSpeech's "
                           "rule); use --policy %s", name, DEPRECATED[name], DEPRECATED[name])
        return DEPRECATED[name]
    return name


def _policy_class(name: str) -> type[Policy]:
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; valid policies: {', '.join(POLICIES)}"
                         f" (deprecated: {', '.join(f'{a} = {b}' for a, b in DEPRECATED.items())})")
    return POLICIES[name]


def _convert(name: str, key: str, value: str):
    v = value.strip()
    if key in _STR_PARAMS:
        return v
    if key in _FLOAT_PARAMS:
        try:
            return float(v)
        except ValueError:
            raise ValueError(f"policy {name}: parameter {key} must be a number, got {v!r}") from None
    if key in ("layer", "k", "heads") and v.lower() in ("none", "offline", "", "all"):
        return None
    if key == "heads":
        try:
            return tuple(int(h) for h in v.split("+"))
        except ValueError:
            raise ValueError(f"policy {name}: parameter heads must be head numbers joined by '+' (0+2), "
                             f"got {v!r}") from None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"policy {name}: parameter {key} must be an integer, got {v!r}") from None


@dataclass(frozen=True)
class PolicySpec:
    """A policy by name and parameters, not yet bound to a model.

    Attributes:
        name: a key of :data:`POLICIES`.
        args: ``{parameter: value}`` (canonical names, converted values).
    """

    name: str
    args: tuple[tuple[str, object], ...] = ()

    @property
    def kwargs(self) -> dict:
        """``args`` as a dict."""
        return dict(self.args)

    def label(self) -> str:
        """Short label for reports and folders: ``waitk-k3``, ``alignatt-frames4-layer1``."""
        parts = [self.name] + [f"{k}{_fmt(v)}" for k, v in self.args]
        return "-".join(parts)

    def describe(self) -> str:
        """``name(k=v, ...)``."""
        return f"{self.name}(" + ", ".join(f"{k}={_fmt(v)}" for k, v in self.args) + ")"


def _fmt(v) -> str:
    return "+".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def make_spec(name: str, args: dict | None = None) -> PolicySpec:
    """Validated :class:`PolicySpec` (aliases resolved, ranges checked without a model).

    Raises:
        ValueError: unknown policy, unknown parameter (the valid ones are listed), bad value.
    """
    name = canonical_name(name)
    cls = _policy_class(name)
    valid = policy_params(name)
    canon: dict[str, object] = {}
    for key, val in (args or {}).items():
        k = ALIASES.get(key, key).replace("-", "_")
        if k not in valid:
            raise ValueError(f"policy {name}: unknown parameter {key!r}; valid parameters: {', '.join(valid)}"
                             f" (aliases: {', '.join(a for a, c in ALIASES.items() if c in valid) or 'none'})")
        canon[k] = _convert(name, k, val) if isinstance(val, str) else val
    cls(**canon)  # range checks (ValueError naming the parameter)
    order = [p for p in valid if p in canon]
    return PolicySpec(name, tuple((p, canon[p]) for p in order))


def parse_policy_args(text: str | None) -> dict[str, list[str]]:
    """``"frames=2,4,6,layer=3"`` -> ``{"frames": ["2", "4", "6"], "layer": ["3"]}``.

    Raises:
        ValueError: a value before any ``key=``, an empty key, or a key given twice.
    """
    out: dict[str, list[str]] = {}
    last = None
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        if "=" in part:
            key, val = (x.strip() for x in part.split("=", 1))
            if not key:
                raise ValueError(f"policy arguments {text!r}: empty parameter name in {part!r}")
            if key in out:
                raise ValueError(f"policy arguments {text!r}: parameter {key!r} given twice")
            out[key] = [val]
            last = key
        else:
            if last is None:
                raise ValueError(f"policy arguments {text!r}: value {part!r} has no 'name=' before it")
            out[last].append(part)
    return out


def policy_sweep(name: str, args_text: str | None, overrides: dict | None = None) -> tuple[str | None, list[PolicySpec]]:
    """Specs of a sweep: ``("frames", [alignatt(frames=2), alignatt(frames=4), ...])``.

    ``overrides`` (e.g. from ``--frame-num``) set single parameters. Returns ``(swept parameter or
    None, specs)``.

    Raises:
        ValueError: several swept parameters, or any error of :func:`make_spec`.
    """
    name = canonical_name(name)
    parsed = parse_policy_args(args_text)
    for key, val in (overrides or {}).items():
        if val is not None:
            parsed = {k: v for k, v in parsed.items() if ALIASES.get(k, k) != ALIASES.get(key, key)}
            parsed[key] = [str(val)]
    multi = [k for k, v in parsed.items() if len(v) > 1]
    if len(multi) > 1:
        raise ValueError(f"policy {name}: only one parameter can be swept, got several values for {', '.join(multi)}")
    base = {k: v[0] for k, v in parsed.items() if len(v) == 1}
    if not multi:
        return None, [make_spec(name, base)]
    key = multi[0]
    specs = [make_spec(name, dict(base, **{key: v})) for v in parsed[key]]
    return ALIASES.get(key, key).replace("-", "_"), specs


def parse_spec(text: str) -> PolicySpec:
    """``"alignatt:frames=4,layer=1"`` or ``"waitk"`` -> :class:`PolicySpec` (no sweep)."""
    name, _, args = text.partition(":")
    swept, specs = policy_sweep(name.strip(), args)
    if swept is not None:
        raise ValueError(f"{text!r}: a per-language policy takes one value per parameter")
    return specs[0]


def parse_per_lang(values: list[str] | str | None) -> dict[str, PolicySpec]:
    """``["ja=alignatt:frames=4", "de=waitk:k=5;es=la:n=2"]`` -> ``{lang: PolicySpec}``.

    Raises:
        ValueError: an entry without ``lang=``, a language given twice, or a bad policy.
    """
    if values is None:
        return {}
    if isinstance(values, str):
        values = [values]
    out: dict[str, PolicySpec] = {}
    for value in values:
        for entry in value.split(";"):
            entry = entry.strip()
            if not entry:
                continue
            lang, sep, spec = entry.partition("=")
            if not sep or not lang.strip() or ":" in lang or "," in lang or not spec.strip():
                raise ValueError(f"--policy-per-lang entry {entry!r}: expected LANG=POLICY[:k=v,...]")
            if lang.strip() in out:
                raise ValueError(f"--policy-per-lang: language {lang.strip()!r} given twice")
            out[lang.strip()] = parse_spec(spec.strip())
    return out


def build_policy(spec: PolicySpec | Policy | str, model) -> Policy:
    """Bind a spec to a model: wait-k takes the model's pre-decision ratio; the AlignAtt/EDAtt layer
    must exist (None -> ``L // 2``); ``ctcwaitk`` needs a CTC head.

    Raises:
        ValueError: unknown policy, layer out of range, ``ctcwaitk`` on a model without a CTC head.
    """
    if isinstance(spec, str):
        spec = parse_spec(spec)
    if isinstance(spec, Policy):
        pol = spec
    else:
        kw = spec.kwargs
        if spec.name == "waitk":
            kw["ratio"] = model.pre_decision_ratio
        pol = POLICIES[spec.name](**kw)
    if pol.needs_ctc and getattr(model, "ctc_proj", None) is None:
        raise ValueError(f"policy {pol.name} needs a CTC head, and this checkpoint has none "
                         "(train with criterion.ctc_weight > 0 and a source vocabulary)")
    if pol.needs_attn:
        n_layers = int(model.cfg.decoder_layers)
        layer = pol.layer if pol.layer is not None else n_layers // 2
        if not 0 <= layer < n_layers:
            raise ValueError(f"policy {pol.name}: parameter layer must be in 0..{n_layers - 1} "
                             f"(the decoder has {n_layers} layers), got {layer}")
        n_heads = int(model.cfg.attention_heads)
        if pol.heads is not None and max(pol.heads) >= n_heads:
            raise ValueError(f"policy {pol.name}: parameter heads must be in 0..{n_heads - 1} "
                             f"(the decoder has {n_heads} heads), got {'+'.join(map(str, pol.heads))}")
        pol = dataclasses.replace(pol, layer=layer)
    if isinstance(pol, WaitKPolicy) and pol.ratio != model.pre_decision_ratio:
        pol = dataclasses.replace(pol, ratio=model.pre_decision_ratio)
    return pol


def add_policy_arguments(parser, sweep: bool = False) -> None:
    """Add ``--policy``, ``--policy-args``, ``--policy-per-lang`` and FBK's aliases ``--frame-num``,
    ``--extract-attn-from-layer``, ``--attn-threshold``, ``--attn-compat``, ``--attn-prefix`` to an ``argparse``
    parser (the CLIs and the SimulEval agent share these names)."""
    names = ", ".join(POLICIES)
    parser.add_argument("--policy", default=None,
                        help=f"read/write policy for every language: {names} (default: waitk with --waitk-lagging)")
    parser.add_argument("--policy-args", default=None,
                        help="policy parameters key=value,... e.g. frames=4,layer=1 (waitk: k; alignatt: frames, "
                             "layer, heads, compat, prefix; edatt: alpha, frames, layer, heads, compat, prefix; "
                             "la: n; holdn: n; "
                             "ctcwaitk: k)"
                             + ("; several values for ONE key sweep it in one run: frames=2,4,6" if sweep else ""))
    parser.add_argument("--policy-per-lang", action="append", default=None, metavar="LANG=POLICY[:k=v,...]",
                        help="a different policy for one language, e.g. ja=alignatt:frames=4 (repeat the option, "
                             "or separate entries with ';')")
    parser.add_argument("--frame-num", type=int, default=None,
                        help="alias of the policy parameter frames (AlignAtt f, EDAtt lambda; FBK's name)")
    parser.add_argument("--extract-attn-from-layer", type=int, default=None,
                        help="alias of the policy parameter layer: 0-based decoder layer of the attention "
                             "(AlignAtt, EDAtt; FBK's name; default: decoder layers // 2)")
    parser.add_argument("--attn-threshold", type=float, default=None,
                        help="alias of the policy parameter alpha (EDAtt; FBK's name)")
    parser.add_argument("--attn-compat", choices=("paper", "fbk"), default=None,
                        help="alias of the policy parameter compat (AlignAtt, EDAtt): paper = the papers' rule "
                             "(default); fbk = FBK's agents (last frame's attention dropped; EDAtt L2-normalised)")
    parser.add_argument("--attn-prefix", choices=("cache", "redecode"), default=None,
                        help="alias of the policy parameter prefix (AlignAtt, EDAtt, greedy): cache = the written "
                             "prefix's decoder states stay in the incremental cache, computed over the audio received "
                             "when each token was written (default, cheaper); redecode = the written prefix is "
                             "re-decoded over all audio received at every new chunk, as FBK's agents do")


def specs_from_args(args, default_ks: list[int | None] | None = None) -> tuple[str | None, list[PolicySpec], dict]:
    """``(swept parameter, [PolicySpec per sweep point], {lang: PolicySpec})`` from the options of
    :func:`add_policy_arguments`. Without ``--policy`` the policy is wait-k with ``default_ks`` (the
    ``--waitk-lagging`` list; swept when it has several values).

    Raises:
        ValueError: see :func:`make_spec`, :func:`policy_sweep`, :func:`parse_per_lang`; an alias
            given for a policy that has no such parameter.
    """
    overrides = {"frames": getattr(args, "frame_num", None), "layer": getattr(args, "extract_attn_from_layer", None),
                 "alpha": getattr(args, "attn_threshold", None), "compat": getattr(args, "attn_compat", None),
                 "prefix": getattr(args, "attn_prefix", None)}
    per = parse_per_lang(getattr(args, "policy_per_lang", None))
    name = getattr(args, "policy", None)
    if name is None:
        given = [k for k, v in overrides.items() if v is not None]
        if given or getattr(args, "policy_args", None):
            raise ValueError("--policy-args / --frame-num / --extract-attn-from-layer / --attn-threshold / "
                             "--attn-compat / --attn-prefix need --policy")
        ks = default_ks or [3]
        specs = [make_spec("waitk", {"k": k}) for k in ks]
        return ("k" if len(ks) > 1 else None), specs, per
    name = canonical_name(name)
    valid = policy_params(name)
    for key, val in overrides.items():
        if val is not None and key not in valid:
            raise ValueError(f"policy {name} has no parameter {key} (valid parameters: {', '.join(valid)})")
    swept, specs = policy_sweep(name, getattr(args, "policy_args", None), overrides)
    return swept, specs, per
