"""Incremental decoding of several target languages that each advance at their own pace.

:class:`LanguageStepper` keeps one row per language in the decoder caches (unified model: the N
languages are the N rows of ONE decoder call, sharing the encoder's cross-attention keys/values;
separate model: one decoder and state per language). One :meth:`LanguageStepper.step` feeds, for the
languages asked, their last written token at their own position and returns the logits of their
next (candidate) token, plus the head-averaged cross-attention of the layers asked for.

A language that READs after seeing its candidate must not keep that step's input in its cache:
:meth:`LanguageStepper.rollback` marks its cache column invalid; later queries of that row never
attend it (self-attention mask = valid columns). Rows that are not asked in a step get a pad input
whose column is invalid for later queries. While every column is valid, no self-attention mask is
passed at all, so a lockstep wait-k decode runs exactly the computation it always did.

A language that starts a new sentence inside the same utterance (:meth:`LanguageStepper.restart`) has every
column of its row marked invalid and its position set back to 0; with ``first_visible`` its queries
cross-attend only the states from its restart point on (the rows of one call may have different windows).

On an endless stream the state stays bounded (:meth:`LanguageStepper.forget`): the encoder states before every
language's restart point leave the cross-attention caches, and the leading columns that no row attends any more
(inputs of ended sentences, rolled-back candidates) leave the self-attention caches. State indices stay
absolute: ``states`` passed to :meth:`LanguageStepper.step_steps` start at stream state ``states_start``.
"""

from __future__ import annotations

import torch

from mmst.models.decoder import DecoderStep
from mmst.models.stacked import Steps, run_alone


class LanguageStepper:
    """Per-language incremental decoding with rollback (see the module docstring).

    Args:
        model: a sync ``MMSTModel`` (unified or separate; async unified models decode elsewhere).
        langs: languages (row order).
    """

    def __init__(self, model, langs: list[str]) -> None:
        self.model = model
        self.langs = list(langs)
        self.pad = int(model.cfg.pad_id)
        if model.arch == "unified":
            self.groups = [(model.decoder, model.decoder.init_state(), list(langs))]
        else:
            self.groups = [(model.decoder_for(lang), model.decoder_for(lang).init_state(), [lang]) for lang in langs]
        self.valid: list[list[torch.Tensor]] = [[] for _ in self.groups]  # per group: (rows,) bool per column
        self.pos = {lang: 0 for lang in langs}  # inputs kept per language
        self._last_col: dict[str, tuple[int, int, int]] = {}  # lang -> (group, column, row)

    def invalidate_cross(self) -> None:
        """Forget cached cross-attention keys/values (after re-encoding the source)."""
        for _, st, _ in self.groups:
            st.invalidate_cross()

    def step(self, *args, **kwargs) -> tuple[dict[str, torch.Tensor], dict[str, dict[int, torch.Tensor]]]:
        """:meth:`step_steps` (same arguments and value) with every decoder call computed on its own."""
        return run_alone(self.step_steps(*args, **kwargs))

    def step_steps(
        self,
        want: list[str],
        inputs: dict[str, int],
        states: torch.Tensor,
        n_visible: dict[str, int],
        attn_layers: tuple[int, ...] = (),
        first_visible: dict[str, int] | None = None,
        states_start: int = 0,
    ) -> Steps:
        """Feed ``inputs[lang]`` for every ``lang`` in ``want`` (a generator, :mod:`mmst.models.stacked`:
        each decoder call is a yielded :class:`~mmst.models.decoder.DecoderStep`, so the calls of several
        streams can be stacked).

        Args:
            want: languages to step.
            inputs: ``{lang: token id}`` (the start token, then the last written token).
            states: ``(1, S - states_start, D)`` encoder states received, from stream state ``states_start``
                on (the earlier ones were freed, :meth:`forget`).
            n_visible: ``{lang: states the new token may attend}``: the states before this index (stream
                positions, like ``first_visible``).
            attn_layers: decoder layers whose cross-attention to return.
            first_visible: ``{lang: first state the new token may attend}`` (a restarted sentence's restart
                point; default 0).

        Returns (the generator's value):
            ``({lang: logits (V,)}, {lang: {layer: attention (H, S_vis)}})`` (per head); attention rows
            cover the states ``first_visible[lang] .. n_visible[lang] - 1``.
        """
        base = int(states_start)
        lows = {lang: lo - base for lang, lo in (first_visible or {}).items()}  # indices into states
        n_visible = {lang: n - base for lang, n in n_visible.items()}
        bad = [lang for lang in want if lows.get(lang, 0) < 0]
        if bad:
            raise ValueError(f"{bad}: first visible state before the states kept (from {base})")
        dev = states.device
        logits: dict[str, torch.Tensor] = {}
        attn: dict[str, dict[int, torch.Tensor]] = {}
        for g, (dec, st, rows) in enumerate(self.groups):
            asked = [lang for lang in rows if lang in want]
            if not asked:
                continue
            col = st.num_tokens
            asked_mask = torch.tensor([lang in asked for lang in rows], dtype=torch.bool, device=dev)
            toks = torch.tensor([[inputs[lang] if lang in asked else self.pad] for lang in rows], device=dev)
            all_valid = bool(asked_mask.all()) and all(bool(v.all()) for v in self.valid[g])
            same_pos = len({self.pos[lang] for lang in rows}) == 1 and self.pos[rows[0]] == col
            positions = None if (all_valid and same_pos) else torch.tensor(
                [[self.pos[lang]] for lang in rows], dtype=torch.long, device=dev)
            self_mask = None
            if not all_valid:
                prev = torch.stack(self.valid[g], dim=1) if self.valid[g] else torch.zeros(len(rows), 0, dtype=torch.bool,
                                                                                          device=dev)
                self_mask = torch.cat([prev, torch.ones(len(rows), 1, dtype=torch.bool, device=dev)], 1)[:, None, :]
            vis = {n_visible[lang] for lang in asked}
            s_all = states.size(1)
            windowed = any(lows.get(lang, 0) for lang in asked)
            if len(vis) == 1 and next(iter(vis)) >= st.cross_len and not windowed:  # never shrink the cached cross keys
                n_vis = vis.pop()
                enc, cross_mask = states[:, :n_vis], None
            else:
                enc = states
                lim = torch.tensor([n_visible.get(lang, s_all) for lang in rows], device=dev)
                low = torch.tensor([lows.get(lang, 0) if lang in asked else 0 for lang in rows], device=dev)
                ar = torch.arange(s_all, device=dev)[None, :]
                cross_mask = ((ar < lim[:, None]) & (ar >= low[:, None]))[:, None, :]  # (rows, 1, S)
            extra = None
            if hasattr(self.model, "decoder_extra_embed") and len(rows) == 1:
                extra = self.model.decoder_extra_embed(rows[0])
            out = yield DecoderStep(dec, st, toks, enc, cross_mask, self_mask, positions, extra, attn_layers)
            self.valid[g].append(asked_mask)
            for r, lang in enumerate(rows):
                if lang not in asked:
                    continue
                logits[lang] = out[r, -1]
                lo = lows.get(lang, 0)
                attn[lang] = {li: a[r, :, -1, lo: n_visible[lang]] for li, a in st.cross_attn.items()}
                self.pos[lang] += 1
                self._last_col[lang] = (g, col, r)
        return logits, attn

    def forget(self, states_dropped: int, min_columns: int = 64) -> int:
        """Free what no language can attend any more.

        Args:
            states_dropped: the encoder states passed to later steps lost this many leading rows (the front
                end freed them): their cross-attention keys/values go.
            min_columns: self-attention columns go once the leading columns that no row attends (invalid
                for every row) are at least this many and at least as many as the columns kept (amortised:
                each column is copied O(1) times).

        Returns the self-attention columns dropped (positions are then passed explicitly to later steps).
        """
        dropped = 0
        for g, (_, st, _) in enumerate(self.groups):
            if states_dropped:
                st.forget_cross_before(states_dropped)
            dead = 0
            for v in self.valid[g]:
                if bool(v.any()):
                    break
                dead += 1
            if dead < max(min_columns, len(self.valid[g]) - dead):
                continue
            st.forget_tokens_before(dead)
            self.valid[g] = self.valid[g][dead:]
            self._last_col = {lang: (gg, c - dead if gg == g else c, r) for lang, (gg, c, r) in self._last_col.items()
                              if gg != g or c >= dead}
            dropped += dead
        return dropped

    def rollback(self, lang: str) -> None:
        """Undo the last :meth:`step` input of ``lang`` (its candidate was not written)."""
        g, col, r = self._last_col.pop(lang)
        v = self.valid[g][col].clone()
        v[r] = False
        self.valid[g][col] = v
        self.pos[lang] -= 1

    def restart(self, lang: str) -> None:
        """``lang`` starts a new sentence: its earlier inputs are never attended again and its next input (the
        start token) takes position 0."""
        for g, (_, _, rows) in enumerate(self.groups):
            if lang in rows:
                r = rows.index(lang)
                for c, v in enumerate(self.valid[g]):
                    if bool(v[r]):
                        v = v.clone()
                        v[r] = False
                        self.valid[g][c] = v
        self.pos[lang] = 0
        self._last_col.pop(lang, None)
