"""Steps and their end tokens: the positions a PRM reads and process advantages credit."""

import pytest

from veriloop.models.tiny import build_char_tokenizer
from veriloop.prm import split_steps, step_end_positions


def test_semicolon_steps_of_an_arithmetic_trace():
    text = "2+3=5;5*4=20;answer=20"
    steps = split_steps(text)
    assert [s.text for s in steps] == ["2+3=5", "5*4=20", "answer=20"]
    assert [(s.start, s.end) for s in steps] == [(0, 5), (6, 12), (13, 22)]
    assert all(text[s.start : s.end] == s.text for s in steps)


def test_line_steps_of_a_gsm8k_solution():
    text = "Natalia sold 48/2 = 24 clips in May.\n\n  She sold 48+24 = 72 in all.\n#### 72\n"
    steps = split_steps(text, "lines")
    assert [s.text for s in steps] == ["Natalia sold 48/2 = 24 clips in May.", "She sold 48+24 = 72 in all.", "#### 72"]
    assert all(text[s.start : s.end] == s.text for s in steps)


def test_repeated_pieces_and_empty_text():
    text = "1+1=2;1+1=2;answer=2"
    assert [(s.start, s.end) for s in split_steps(text)] == [(0, 5), (6, 11), (12, 20)]
    assert split_steps("") == [] and split_steps(";;") == []
    with pytest.raises(ValueError, match="unknown step splitter"):
        split_steps("x", "commas")


def test_step_end_tokens_with_the_character_tokenizer():
    tok = build_char_tokenizer()
    text = "2+3=5;5*4=20;answer=20"
    ends = step_end_positions(tok, text, split_steps(text))
    assert ends == [4, 11, 21]  # one token per character: the last character of each step
    ids = tok(text, add_special_tokens=False).input_ids
    assert [tok.decode([ids[i]]) for i in ends] == ["5", "0", "0"]


def test_every_task_names_its_splitter():
    from veriloop.prm import SPLITTERS
    from veriloop.tasks import get_task

    assert get_task("arithmetic").step_splitter == "semicolon"
    assert get_task("gsm8k").step_splitter == "lines"
    assert get_task("fixed", prompt="q", reference="1").step_splitter in SPLITTERS
