"""Where a completion's reply begins and ends, before any answer is read.

A sampled completion often holds more than the reply to grade:

* a reasoning block: when the completion closes one (``</think>``) and writes anything after it, only
  what follows is the reply;
* **special tokens** of a chat template or a tokenizer, left in the text when the sampler did not stop
  on them: ``<|eot_id|>`` (Llama 3), ``<|im_end|>`` (Qwen), ``<|end|>`` (Phi-3), ``</s>`` / ``<eos>`` /
  ``<end_of_turn>`` (Llama 2, Mistral, Gemma), ``<｜end▁of▁sentence｜>`` (DeepSeek; NFKC has made its bars
  ASCII), ``<|endoftext|>``.  The first one after some text ends the reply: whatever follows is another
  turn (``... is 2/3. <|im_start|>user ...``).  Any ``<|name|>`` token counts (a name of two or more
  letters, digits, ``_`` or ``▁``), and the angle-bracket tokens above;
* **the next few-shot example**: a base model prompted with worked examples runs on into a new one
  ("The answer is 72.\\n\\nQuestion: Weng earns ...").  A line that opens a new example (``Question:``,
  ``Q:``, ``Problem 2:``, ``**Question 2:**``, ``Exercise:``, ``Example:``, ``Human:``, ``User:``,
  ``### Instruction:``) after a blank line ends the reply
  when an answer marker (``####``, a box, "answer", ``答案``) came before it, unless the label's line
  doubts or withdraws what came before ("Question: Is that right?" is the model questioning itself).
  Before any marker it is a restated question and stays ("Question: ...?\\nAnswer: ...").

What this module does not decide: which statement in the reply is the answer (``answers.py``).
"""

from __future__ import annotations

import re

from veriloop.verifiers.speech_acts import speech_act

# special tokens: "<|eot_id|>", "<|im_end|>", "<|end|>", "<|end▁of▁sentence|>", "</s>", "<eos>", "<end_of_turn>"
_SPECIAL = re.compile(r"<\|[A-Za-z0-9_\u2581]{2,}\|>|</s>|<eos>|<(?:end|start)_of_turn>")
# a line that opens the next few-shot example or chat turn, after a blank line
_NEXT_EXAMPLE = re.compile(
    r"\n[ \t]*\n[ \t]*(?:[#*_>][ \t]*)*(?:question|q|problem|exercise|example|human|user|"
    r"instruction)[ \t]*\d*[ \t]*[*_]*[ \t]*:",
    re.IGNORECASE,
)
_MARKER = re.compile(r"####|\\boxed|\\fbox|answer|答案|得数", re.IGNORECASE)


def reply(text: str) -> str:
    """The reply to read: what follows a closed reasoning block (when anything does), up to the first
    special token after some text or the next few-shot example after an answer marker (reasoning tags
    as line breaks)."""
    turn = next((m.start() for m in _SPECIAL.finditer(text) if text[: m.start()].strip()), None)
    text = text if turn is None else text[:turn]
    text = _SPECIAL.sub(" ", text)  # a token before any text ("<|im_start|>assistant\n...") is no text
    cut = text.rfind("</think>")
    if cut >= 0 and text[cut + len("</think>") :].strip():
        text = text[cut + len("</think>") :]
    else:
        text = re.sub(r"</?think>", "\n", text)
    for m in _NEXT_EXAMPLE.finditer(text):
        line = text[m.end() :].split("\n", 1)[0]
        if _MARKER.search(text, 0, m.start()) and not speech_act(line):  # "Question: Is that right?" asks about it
            return text[: m.start()]
    return text
