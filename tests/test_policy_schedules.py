"""Known-answer tests of every policy's write schedule on a scripted model (tests/scripted_model.py):
6 chunks of 2 states (320 ms each); the schedules below are worked out by hand from the script.

Script (:func:`script`): target ``[10, 11, 12, 13, 14]`` then EOS. Token j (0-based) is predicted right
once ``s >= 2 * NEED[j]`` states are visible (chunk NEED[j]), before that the guess ``20 + j + s``
(a different guess at every chunk); EOS from j = 5. Attention of token j: 0.6 on frame
``min(2 * NEED[j] - 1, s - 1)`` (the last frame of the chunk that makes it right, or the last received),
0.4 spread evenly over the other frames; EOS attends the last frame. Length cap: ``max_len_b=10``
(a = 0), so before the end the cap is ``min(10, S + 2)``: 4 tokens on chunk 1.
"""

import logging

import pytest
import torch
from scripted_model import EOS, ScriptedModel, stream

from mmst.simultaneous import AlignAttPolicy, EDAttPolicy, HoldNPolicy, PolicyState, make_spec

torch.set_num_threads(1)
NEED = [1, 2, 2, 4, 5]


def attention(peak: int, s: int) -> list[float]:
    if s == 1:
        return [1.0]
    return [0.6 if f == peak else 0.4 / (s - 1) for f in range(s)]


def script(prefix, s):
    j = len(prefix)
    if j >= 5:
        return {EOS: 1.0}, attention(s - 1, s)
    tok = 10 + j if s >= 2 * NEED[j] else 20 + j + s
    return {tok: 1.0}, attention(min(2 * NEED[j] - 1, s - 1), s)


#: CTC greedy paths per states received: counts 1, 2, 1 (goes down), 3, 3, 4
CTC_PATHS = {2: [0, 5], 4: [0, 5, 0, 6], 6: [0, 5, 5, 5, 5, 5], 8: [0, 5, 0, 6, 0, 7, 7, 0],
             10: [0, 5, 0, 6, 0, 7, 7, 0, 0, 0], 12: [0, 5, 0, 6, 0, 7, 0, 8, 0, 0, 0, 0]}

# policy -> (tokens, delays in ms); chunk c ends at 320 c ms
SCHEDULES = {
    # token i written after k + i - 1 = i + 1 chunks, seeing min(2 (i + 1), S) states
    "waitk:k=2": ([10, 11, 12, 13, 14], [640, 960, 1280, 1600, 1920]),
    # WRITE while the peak frame is not the last received one: c2 10 | c3 11, 12 (13 guessed on frame 5 of 6)
    # | c4 13 peaks on frame 7 of 8: READ | c5 13 | c6 14
    "alignatt:frames=1": ([10, 11, 12, 13, 14], [640, 960, 960, 1600, 1920]),
    # mass on the last 2 frames < 0.2: peak not there and 0.8 / (S - 1) < 0.2, i.e. S >= 6
    "edatt:alpha=0.2,frames=2": ([10, 11, 12, 13, 14], [960, 960, 960, 1600, 1920]),
    # c1 capped (READ) | c2 first hypothesis | c3 agrees on 10 11 12 | c4 13 vs 29: no | c5 13 | c6 14
    "la:n=2": ([10, 11, 12, 13, 14], [960, 960, 960, 1600, 1920]),
    # c1 capped | c2 [10 11 12 27 28 EOS]: all but 2 real tokens | c3..c5 hold 2 | c6 the rest
    "holdn:n=2": ([10, 11, 12, 13, 14], [640, 640, 640, 1920, 1920]),
    # c2 writes 4 of [10 11 12 27 28]: the guess 27 stays; later [30]/[32]/[14] hold 1; c6 writes 14
    "holdn:n=1": ([10, 11, 12, 27, 14], [640, 640, 640, 640, 1920]),
    # source count N (running max) 1 2 2 3 3 | token i when N >= i + 1: c2 10 | c4 11 | c6 the rest
    "ctcwaitk:k=2": ([10, 11, 12, 13, 14], [640, 1280, 1920, 1920, 1920]),
}


@pytest.mark.parametrize("pol", list(SCHEDULES))
def test_write_schedule_known_answer(pol):
    m = ScriptedModel(script, ratio=2, ctc_paths=CTC_PATHS)
    tokens, delays = stream(m, policy=pol, max_len_b=10)
    assert (tokens, delays) == SCHEDULES[pol]


@pytest.mark.parametrize("pol", ["alignatt:frames=1", "edatt:alpha=0.2,frames=2"])
def test_redecoding_the_prefix_gives_the_cached_schedule_on_a_model_whose_states_ignore_the_frames(pol):
    # the script's output depends on the prefix and the frames seen by the query only, so re-decoding the
    # written prefix over new frames changes nothing; no continuation here reaches the cap after chunk 1
    m = ScriptedModel(script, ratio=2)
    assert stream(m, policy=pol + ",prefix=redecode", max_len_b=10) == SCHEDULES[pol]


def test_ctc_count_is_a_running_maximum_and_ctc_is_a_deprecated_alias(caplog):
    m = ScriptedModel(script, ratio=2, ctc_paths=CTC_PATHS)
    seen = []
    with caplog.at_level(logging.WARNING, logger="mmst.simultaneous.policy_spec"):
        import mmst.simultaneous.policy_spec as ps

        ps._warned.discard("ctc")
        out = stream(m, policy="ctc:k=2", max_len_b=10, after_chunk=lambda c, tr: seen.append(tr._src_tokens["de"]))
    assert seen == [1, 2, 2, 3, 3, 4]  # the raw count on chunk 3 is 1
    assert out == SCHEDULES["ctcwaitk:k=2"]
    assert make_spec("ctc", {"k": "2"}).name == "ctcwaitk"
    assert sum("deprecated" in r.getMessage() for r in caplog.records) == 1


# ---------------------------------------------------------------- a model that never predicts EOS
def never_eos(prefix, s):
    return {40 + len(prefix) % 20: 1.0}, attention(0, s)  # always attends frame 0: attention says WRITE


@pytest.mark.parametrize("pol,beam", [("waitk:k=2", 1), ("alignatt:frames=1", 1), ("edatt:alpha=0.9,frames=1", 1),
                                      ("la:n=2", 1), ("holdn:n=1", 1), ("holdn:n=1", 2), ("la:n=2", 2),
                                      ("alignatt:frames=1", 2)])
def test_never_eos_model_is_bounded_before_the_end_and_capped_at_the_end(pol, beam):
    m = ScriptedModel(never_eos, ratio=2)
    counts = []
    tokens, delays = stream(m, policy=pol, max_len_b=10, beam=beam,
                            after_chunk=lambda c, tr: counts.append(len(tr.tokens["de"])))
    name = pol.split(":")[0]
    if name == "waitk":
        assert counts[:5] == [0, 1, 2, 3, 4]  # k + i - 1 chunks for token i
    elif name in ("la", "holdn") or beam > 1:
        assert counts[:5] == [0] * 5  # every re-decoded continuation is cut by the cap: no hypothesis
    else:  # greedy, token by token: attention allows every token; the partial cap min(10, S + 2) bounds it
        assert counts[:5] == [4, 6, 8, 10, 10]
    assert counts[5] == 10 and tokens == [40 + j for j in range(10)]  # at the end: up to the cap


def rarely_eos(prefix, s):
    """Never ends on its own, but EOS keeps probability 0.001: EOS forced at the length cap has a finite score
    and ends the continuation, as with a trained model."""
    return {40 + len(prefix) % 20: 0.999, EOS: 0.001}, attention(0, s)


@pytest.mark.parametrize("pol", ["holdn:n=1", "la:n=2", "alignatt:frames=1,prefix=redecode"])
def test_a_capped_continuation_ending_with_forced_eos_is_not_a_hypothesis(pol):
    # chunk c (S = 2c states) re-decodes min(10, S + 2) tokens and the forced EOS; taking it for a hypothesis,
    # hold-1 would write [3, 5, 7, 9, 9, 10] tokens after the chunks, LA-2 4 on chunk 2, AlignAtt 4 on chunk 1
    counts = []
    tokens, _ = stream(ScriptedModel(rarely_eos, ratio=2), policy=pol, max_len_b=10,
                       after_chunk=lambda c, tr: counts.append(len(tr.tokens["de"])))
    assert counts == [0, 0, 0, 0, 0, 10] and tokens == [40 + j for j in range(10)]


GREEDY_CAP_CASES = [("waitk:k=2", 1, [0, 1, 2, 3, 4]), ("alignatt:frames=1", 1, [4, 6, 8, 10, 12]),
                    ("edatt:alpha=0.9,frames=1", 1, [4, 6, 8, 10, 12]),
                    ("alignatt:frames=1,prefix=redecode", 1, [0] * 5), ("holdn:n=1", 1, [0] * 5), ("la:n=2", 1, [0] * 5)]


# beam search with EOS at probability 0.001 ends at once (a finished hypothesis): beam only with never_eos
@pytest.mark.parametrize("model,pol,beam,before", [(m, *c) for m in (never_eos, rarely_eos) for c in GREEDY_CAP_CASES]
                         + [(never_eos, "holdn:n=1", 2, [0] * 5), (never_eos, "alignatt:frames=1", 2, [0] * 5)])
def test_the_cap_at_source_end_is_floor_a_s_plus_b_not_the_partial_cap(model, pol, beam, before):
    # a = 1.5, b = 2: before the end min(floor(1.5 S + 2), S + 2) = S + 2 (4 on chunk 1); at the end S = 12 and
    # floor(1.5 * 12 + 2) = 20, where the partial cap would give 14. A continuation that reaches the cap at the
    # end is written (the source is finished: nothing more to wait for)
    counts = []
    tokens, delays = stream(ScriptedModel(model, ratio=2), policy=pol, max_len_a=1.5, max_len_b=2, beam=beam,
                            after_chunk=lambda c, tr: counts.append(len(tr.tokens["de"])))
    assert counts == before + [20]
    assert tokens == [40 + j % 20 for j in range(20)] and delays[-1] == 1920.0


def la_script(prefix, s):
    """Chunks 1, 3, 4, ...: the hypothesis [10, 11] EOS; chunk 2 (s = 4): a long guess that the cap cuts."""
    seq = [10, 11, 30, 31, 32, 33, 34, 35] if s == 4 else [10, 11]
    return {seq[len(prefix)] if len(prefix) < len(seq) else EOS: 1.0}, attention(0, s)


def test_local_agreement_compares_with_the_previous_chunk_not_the_last_uncapped_one():
    # c1 [10 11 EOS]: nothing before it | c2 cut by the cap min(10, 6): no hypothesis | c3 [10 11 EOS]: the
    # previous chunk had none, READ | c4 agrees with c3: 10 11. Comparing with the last uncapped hypothesis (c1)
    # would write them on chunk 3 (960 ms)
    assert stream(ScriptedModel(la_script, ratio=2), policy="la:n=2", max_len_b=10) == ([10, 11], [1280.0, 1280.0])


# ---------------------------------------------------------------- beam: streaming vs offline
def beam_script(prefix, s):
    """At the end (s = 12) from prefix (10,): greedy gives 11 12, beam 2 gives 15 (worked out in the
    test); before the end everything is certain: 10 11 EOS."""
    if prefix == ():
        return {10: 1.0}, attention(0, s)
    if s < 12:
        return ({11: 1.0} if prefix == (10,) else {EOS: 1.0}), attention(0, s)
    table = {(10,): {11: 0.5, 15: 0.45, 17: 0.05}, (10, 11): {12: 0.35, EOS: 0.3, 16: 0.3, 17: 0.05},
             (10, 15): {EOS: 0.95, 17: 0.05}}
    return table.get(prefix, {EOS: 1.0}), attention(0, s)


def test_streaming_beam_equals_offline_beam_and_beam_continuing_the_written_prefix():
    # beam 2 from (10,): step 1 keeps 11 (.5), 15 (.45); step 2: 15 EOS (log .4275 / 2 = -.425) and 11 EOS
    # (log .15 / 2 = -.949) finish: best 15. Greedy would take 11 then 12.
    m = ScriptedModel(beam_script, ratio=2)
    greedy, _ = stream(m, policy="holdn:n=1000", max_len_b=10)
    assert greedy == [10, 11, 12]
    nothing_before, d0 = stream(m, policy="holdn:n=1000", max_len_b=10, beam=2)
    offline, _ = stream(m, waitk=None, max_len_b=10, beam=2)
    assert nothing_before == offline == [10, 15] and d0 == [1920, 1920]
    # hold-1 writes 10 on chunk 1 ([10 11 EOS]); at the end beam search continues (10,): 15
    prefix_first, d1 = stream(m, policy="holdn:n=1", max_len_b=10, beam=2)
    assert prefix_first == [10, 15] and d1 == [320, 1920]


# ---------------------------------------------------------------- hold-n counts real tokens
def test_hold_n_strips_eos_before_holding_back():
    st = PolicyState(i=1, n_chunks=2, n_states=4, source_finished=False, candidates=[5, 6, 7, EOS], eos=EOS)
    assert HoldNPolicy(n=1).decide(st) == 2
    assert HoldNPolicy(n=3).decide(st) == 0
    st.candidates = [5, 6, 7]  # no EOS: unchanged
    assert HoldNPolicy(n=1).decide(st) == 2


# ---------------------------------------------------------------- FBK-compatible attention
A = torch.tensor([
    # frames 0..4 (S = 5)
    [0.10, 0.50, 0.05, 0.05, 0.30],  # argmax 1; without the last frame still 1
    [0.05, 0.10, 0.15, 0.30, 0.40],  # argmax 4 (last); without it: 3
    [0.05, 0.05, 0.10, 0.20, 0.60],
])


def test_alignatt_paper_and_fbk_modes_on_a_hand_written_matrix():
    st = PolicyState(i=1, n_chunks=2, n_states=5, source_finished=False, candidates=[7, 8, 9], attn=A)
    # paper, f=1: row 0 argmax 1 < 4 W; row 1 argmax 4 >= 4 READ -> 1
    assert AlignAttPolicy(frames=1).decide(st) == 1
    # fbk, f=1: frames 0..3 (S' = 4): row 0 argmax 1 < 3 W; row 1 argmax 3 >= 3 READ -> 1
    assert AlignAttPolicy(frames=1, compat="fbk").decide(st) == 1
    # a row where the modes differ:
    b = torch.tensor([[0.1, 0.2, 0.3, 0.25, 0.15]])  # argmax 2; S = 5
    st2 = PolicyState(i=1, n_chunks=2, n_states=5, source_finished=False, candidates=[7], attn=b)
    assert AlignAttPolicy(frames=2).decide(st2) == 1  # 2 < 5 - 2
    assert AlignAttPolicy(frames=2, compat="fbk").decide(st2) == 0  # 2 >= 4 - 2
    st1 = PolicyState(i=1, n_chunks=1, n_states=1, source_finished=False, candidates=[7], attn=torch.ones(1, 1))
    assert AlignAttPolicy(frames=1, compat="fbk").decide(st1) == 0  # nothing left after the last frame


def test_edatt_paper_and_fbk_modes_on_a_hand_written_matrix():
    row = torch.tensor([[0.4, 0.3, 0.1, 0.1, 0.1]])
    st = PolicyState(i=1, n_chunks=2, n_states=5, source_finished=False, candidates=[7], attn=row)
    # paper, lambda=2: 0.1 + 0.1 = 0.2
    assert EDAttPolicy(alpha=0.25, frames=2).decide(st) == 1
    assert EDAttPolicy(alpha=0.2, frames=2).decide(st) == 0
    # fbk: drop frame 4 -> [.4 .3 .1 .1], L2 norm sqrt(.27) = 0.5196; last 2: 0.2 / 0.5196 = 0.3849
    assert EDAttPolicy(alpha=0.38, frames=2, compat="fbk").decide(st) == 0
    assert EDAttPolicy(alpha=0.39, frames=2, compat="fbk").decide(st) == 1


def test_compat_is_a_string_parameter_with_an_alias():
    spec = make_spec("edatt", {"compat": "fbk", "alpha": "0.3"})
    assert spec.kwargs == {"alpha": 0.3, "compat": "fbk"}
    assert make_spec("alignatt", {"attn_compat": "fbk"}).kwargs == {"compat": "fbk"}
    with pytest.raises(ValueError, match="policy parameter compat must be one of paper, fbk"):
        make_spec("alignatt", {"compat": "fairseq"})
    import argparse

    from mmst.simultaneous.policy_spec import add_policy_arguments, specs_from_args

    p = argparse.ArgumentParser()
    add_policy_arguments(p)
    _, specs, _ = specs_from_args(p.parse_args(["--policy", "alignatt", "--attn-compat", "fbk", "--frame-num", "3"]))
    assert specs[0].kwargs == {"frames": 3, "compat": "fbk"}
    with pytest.raises(ValueError, match="has no parameter compat"):
        specs_from_args(p.parse_args(["--policy", "la", "--attn-compat", "fbk"]))
