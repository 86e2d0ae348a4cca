"""Tool-integrated rollouts (seed 004's tool-integrated reasoning, as in ToRA): text with code blocks that
the sandbox runs, the output fed back, generation going on.

A completion is a sequence of *model* segments and *tool* segments.  Sampling pauses when a code block
closes (``ToolFormat.code_close``); the sandbox of the ``code`` verifier (``veriloop.sandbox``: a fresh
limited process, the audit hook, no network, no input) runs that block after the earlier blocks of the
same completion that ran to their end, so names they defined are still there (state by re-running: the
earlier blocks' own output is discarded); what the block printed is appended inside an output block
(``output_open ... output_close``), and sampling resumes from the longer context.  At most
``max_tool_calls`` blocks run; after that a closing marker is an ordinary token and nothing runs.

The block runs in ``ToolSettings.runner`` (``verifiers/tools.py``: the code verifier's sandbox).
The record keeps every call (``Record.tool_calls``: code, output shown, seconds, status) and a per-token
``Record.model_mask`` (1: the model sampled the token, 0: the tool's output).  Tool tokens carry no
behaviour log-prob (0.0 in the list; the mask says they were not sampled), the learner's loss, its KL and
its length normaliser read only mask-1 tokens, and the per-token advantages skip them.

A failing block (``crash``, ``timeout``, ``violation``, ``output_limit``) is the model's code going wrong:
the output block says so (the error's last line, as an interpreter would show it) and the model goes on;
the failure is in the record and in the step's ``tool_*`` metrics.  The sandbox itself failing to start
(the machine, not the model) raises: it is never scored.

``max_new_tokens`` bounds the whole completion, tool output included (it is the context the model reads):
a row whose budget ends inside a tool output is ``length``.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from veriloop.rollout.sampler import Generation
from veriloop.seeding import derive_seed
from veriloop.tasks.base import ToolFormat

TOOLS_UNSUPPORTED = (
    "the vllm engine does not run tool calls (task.reasoning tool): it samples each completion in "
    "one call, with no pause for the sandbox; use rollout.engine local, or ray with "
    "ray.worker_engine local"
)


@dataclass(frozen=True)
class ToolSettings:
    """What a rollout request needs to run tools (``rollout.max_tool_calls``, ``rollout.tool_timeout_s``)."""

    format: ToolFormat
    # (earlier blocks, block, settings) -> (status, shown output, seconds): verifiers/tools.run_block, the code
    # verifier's sandbox (passed in: rollout sits below verifiers; a module-level function pickles to Ray actors)
    runner: Callable[[list[str], str, ToolSettings], tuple[str, str, float]]
    max_tool_calls: int = 4
    wall_seconds: float = 5.0
    output_chars: int = 200  # the output shown to the model is cut to this many characters (the record says so)
    interpreter: str = "warm"  # warm: a forked copy of a kept sandboxed interpreter per call; fresh: a new process

    def as_dict(self) -> dict:
        return {
            "tool_format": self.format.name,
            "max_tool_calls": self.max_tool_calls,
            "tool_timeout_s": self.wall_seconds,
            "tool_interpreter": self.interpreter,
        }


@dataclass(frozen=True)
class ToolCall:
    """One code block the sandbox ran."""

    code: str
    output: str  # what the model was shown inside the output block
    status: str  # ok | crash | timeout | violation | output_limit
    seconds: float
    start: int  # index in completion_ids of the output block's first token
    tokens: int  # how many tool tokens were appended (fewer than the block's when the budget ran out)

    def as_dict(self) -> dict:
        return {
            "code": self.code,
            "output": self.output,
            "status": self.status,
            "seconds": round(self.seconds, 4),
            "start": self.start,
            "tokens": self.tokens,
        }


@dataclass
class ToolGeneration(Generation):
    model_masks: list[list[int]] = field(default_factory=list)  # 1: sampled by the model, 0: tool output
    tool_calls: list[list[ToolCall]] = field(default_factory=list)


def closed_block(text: str, fmt: ToolFormat) -> str | None:
    """The code of the block that ``text``'s last marker closed, or None when no block is open and closed there
    (the marker's characters can come up elsewhere: a closing brace in prose, a fence's first backtick)."""
    start = text.rfind(fmt.code_open)
    if start < 0 or text.rfind(fmt.output_open) > start:  # no block opened since the last output block
        return None
    body = text[start + len(fmt.code_open) :]
    end = body.find(fmt.code_close)
    if end < 0 or body[end + len(fmt.code_close) :].strip(" \t"):  # closed, and nothing but blanks after it
        return None
    return body[:end]


def split_segments(text: str, fmt: ToolFormat) -> list[tuple[str, bool]]:
    """``[(segment, written by the model?)]`` of a finished tool-format text (the task's demonstrations): output
    blocks are the tool's, everything else the model's."""
    out, pos = [], 0
    while True:
        start = text.find(fmt.output_open, pos)
        end = text.find(fmt.output_close, start + len(fmt.output_open)) if start >= 0 else -1
        if start < 0 or end < 0:
            out.append((text[pos:], True))
            return [(s, m) for s, m in out if s]
        out.append((text[pos:start], True))
        stop = end + len(fmt.output_close)
        out.append((text[start:stop], False))
        pos = stop


def stop_tokens(tokenizer, fmt: ToolFormat) -> tuple[int, ...]:
    """Every token whose text holds the closing marker's last character: sampling pauses on them and
    ``closed_block`` decides whether a block really closed (a multi-token marker needs several pauses)."""
    last = fmt.code_close[-1]
    vocab = tokenizer.get_vocab()
    ids = [i for i in vocab.values() if last in tokenizer.decode([i])]
    if not ids:
        raise ValueError(
            f"no token of this tokenizer holds {last!r}: the tool format {fmt.name!r} cannot close a code block"
        )
    return tuple(sorted(ids))


def generate_with_tools(
    policy,
    prompt_ids: list[list[int]],
    params,
    settings: ToolSettings,
    *,
    row_seeds: list[int],
    n: int,
    workers: int = 0,
) -> ToolGeneration:
    """``n`` completions per prompt, each pausing at its code blocks for the sandbox (see the module docstring).

    Round 0 samples like ``policy.sample`` (one prefill per prompt, shared by its group); every later round
    re-reads each paused row's prompt and completion so far.  Row ``i``'s round ``r`` draws from
    ``derive_seed(row_seeds[i], "tool-round", r)`` (round 0: ``row_seeds[i]``), so a row's tokens depend on its
    seed and the tool's outputs only, never on the rows beside it."""
    if params.min_new_tokens:
        raise ValueError(
            "sampling.min_new_tokens does not combine with tool calls (a tool output would count towards it)"
        )
    rows = _ToolRows(policy.tokenizer, settings, len(prompt_ids) * n, params.max_new_tokens)
    stops = stop_tokens(policy.tokenizer, settings.format)
    prompts = [p for p in prompt_ids for _ in range(n)]
    active, round_ = list(range(rows.N)), 0
    with ThreadPoolExecutor(max_workers=workers or 4) as pool:
        while active:
            budget = {i: params.max_new_tokens - len(rows.ids[i]) for i in active}
            round_params = replace(params, max_new_tokens=max(budget.values()))
            can_call = [i for i in active if len(rows.calls[i]) < settings.max_tool_calls]
            if round_ == 0:
                gen = policy.sample(
                    prompt_ids, round_params, row_seeds=list(row_seeds), n=n, stop_ids=stops if can_call else ()
                )
            else:  # rows that cannot call any more sample without the stop tokens
                gen = _resample(policy, prompts, rows.ids, active, can_call, round_params, row_seeds, round_, stops)
            paused = rows.take(gen, active, budget)
            rows.run(pool, [(i, code) for i, code in paused if code is not None])
            active = [i for i, _ in paused if not rows.full(i)]
            round_ += 1
    return ToolGeneration(rows.ids, rows.lps, rows.finish, rows.masks, rows.calls)


class _ToolRows:
    """The completions of one ``generate_with_tools`` call as they grow: tokens, log-probs, mask, calls, state."""

    def __init__(self, tokenizer, settings: ToolSettings, N: int, max_new_tokens: int):
        self.tok, self.settings, self.N, self.limit = tokenizer, settings, N, max_new_tokens
        self.ids: list[list[int]] = [[] for _ in range(N)]
        self.lps: list[list[float]] = [[] for _ in range(N)]
        self.masks: list[list[int]] = [[] for _ in range(N)]
        self.calls: list[list[ToolCall]] = [[] for _ in range(N)]
        self.ran: list[list[str]] = [[] for _ in range(N)]  # each row's blocks that ran to their end (its state)
        self.finish: list[str] = ["length"] * N

    def full(self, i: int) -> bool:
        if len(self.ids[i]) >= self.limit:
            self.finish[i] = "length"
            return True
        return False

    def take(self, gen: Generation, active: list[int], budget: dict[int, int]) -> list[tuple[int, str | None]]:
        """Append a round's tokens; the rows that paused at a marker, with the code it closed (None: no block)."""
        paused = []
        for k, i in enumerate(active):
            new, new_lp, why = gen.completion_ids[k], gen.logprobs[k], gen.finish_reasons[k]
            if len(new) > budget[i]:  # sampled past this row's own budget (the round's is the longest's)
                new, new_lp, why = new[: budget[i]], new_lp[: budget[i]], "length"
            self.ids[i] += new
            self.lps[i] += new_lp
            self.masks[i] += [1] * len(new)
            if why != "stop":
                self.finish[i] = why
            elif not self.full(i):  # a marker's character outside a block (None): nothing runs, sampling goes on
                paused.append(
                    (i, closed_block(self.tok.decode(self.ids[i], skip_special_tokens=False), self.settings.format))
                )
        return paused

    def run(self, pool: ThreadPoolExecutor, blocks: list[tuple[int, str]]) -> None:
        """Run the closed blocks (in parallel, each in its own sandbox) and append their output blocks."""
        s, fmt = self.settings, self.settings.format
        results = list(pool.map(lambda ic: s.runner(self.ran[ic[0]], ic[1], s), blocks))
        for (i, code), (status, shown, seconds) in zip(blocks, results):
            block = self.tok(fmt.output_open + shown + fmt.output_close, add_special_tokens=False).input_ids
            block = block[: self.limit - len(self.ids[i])]
            self.calls[i].append(ToolCall(code, shown, status, seconds, len(self.ids[i]), len(block)))
            self.ids[i] += block
            self.lps[i] += [0.0] * len(block)  # not sampled: no behaviour log-prob (the mask says so)
            self.masks[i] += [0] * len(block)
            if status == "ok":
                self.ran[i].append(code)


def _resample(policy, prompts, ids, active, can_call, params, row_seeds, round_, stops) -> Generation:
    """One round for the paused rows: those that may still call pause at the stop tokens, the others do not
    (two sampler calls at most, put back in ``active``'s order)."""
    out_ids, out_lp, out_fin = [None] * len(active), [None] * len(active), [None] * len(active)
    calling = set(can_call)
    for part, stop in (([i for i in active if i in calling], stops), ([i for i in active if i not in calling], ())):
        if not part:
            continue
        gen = policy.sample(
            [prompts[i] + ids[i] for i in part],
            params,
            n=1,
            stop_ids=stop,
            row_seeds=[derive_seed(row_seeds[i], "tool-round", round_) for i in part],
        )
        for k, i in enumerate(part):
            j = active.index(i)
            out_ids[j], out_lp[j], out_fin[j] = gen.completion_ids[k], gen.logprobs[k], gen.finish_reasons[k]
    return Generation(out_ids, out_lp, out_fin)
