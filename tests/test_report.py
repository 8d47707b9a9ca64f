"""The marked results block of a docs page (mmst.evaluation.report.replace_marked_block)."""

from __future__ import annotations

import pytest

from mmst.evaluation.report import replace_marked_block

START, END = "<!-- r:start -->", "<!-- r:end -->"


def test_block_between_the_markers_is_replaced_and_the_rest_kept(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro {END}\n{START}\nold\ntable\n{END}\nrest {START}\n", encoding="utf-8")
    replace_marked_block(doc, START, END, "| a | b |\n\n\n")
    # an END before START is text; the first START and the END after it delimit the block
    assert doc.read_text(encoding="utf-8") == f"intro {END}\n{START}\n| a | b |\n{END}\nrest {START}\n"


@pytest.mark.parametrize("text", ["no markers\n", f"{END}\nonly an end before the start\n{START}\n"])
def test_missing_markers_name_the_file(tmp_path, text):
    doc = tmp_path / "doc.md"
    doc.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=r"doc\.md: markers <!-- r:start --> \.\.\. <!-- r:end --> not found"):
        replace_marked_block(doc, START, END, "x")
    assert doc.read_text(encoding="utf-8") == text
