"""Rollout engines: requests in, records out, weights in by version.

The controller never calls a sampler itself.  It cuts each round of rollout work into
``RolloutRequest``s of fixed composition (``rollout.request_groups`` groups each) and hands
them to an engine.  A request carries everything its records depend on - the problems, the
group index of each, the sampling settings, one seed per completion, the weights version
the engine must hold - so the records are the same whichever engine serves it, and however
many engines share the work.

* ``LocalEngine``: the KV-cached sampler (``rollout/sampler.py``) on a policy in this process.
* ``TaskTeacherEngine``: the task's own demonstrations (SFT data); nothing is sampled.
* ``RayEngine`` (``rollout/ray_engine.py``): ``rollout.workers`` Ray actors, each a ``LocalEngine``.

Every engine is a ``RolloutEngine`` (below): ``run(requests, ledger) -> records per request`` (the ledger,
``rollout/ledger.py``, stores each request's records once) and ``publish(model, version)`` (the learner's new
weights); one that holds weights of its own also ``load_weights(named_tensors, version) -> digest``.  The engines
``rollout.engine`` names are registered classes (``veriloop.registry.ENGINES``, filled in ``rollout/__init__.py``)
that declare what they can serve (``EngineCapabilities``): the config's rules about engines are derived from those
declarations in one place (``training/capabilities.py``).
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch

from veriloop.errors import InputError
from veriloop.rollout.records import Record
from veriloop.rollout.sampler import SamplingParams
from veriloop.rollout.thinking import generate_with_thinking_budget
from veriloop.rollout.tools import ToolSettings, generate_with_tools, split_segments
from veriloop.seeding import derive_seed
from veriloop.tasks.base import Problem

FROZEN = -1  # the policy version of a source that never changes (initial policy, teacher, task traces)


@dataclass(frozen=True)
class EngineCapabilities:
    """What a rollout engine can serve (read by ``training/capabilities.py``, never by name)."""

    tool_calls: bool = False  # pauses mid-completion to run a code block and feeds its output back
    thinking_budget: bool = False  # forces the end-of-thinking marker at sampling.max_thinking_tokens
    owns_weights: bool = False  # samples from its own copy of the weights: they travel after every update
    runs_ahead: bool = False  # serves later steps' requests while the learner updates (mode async, lag overlap)
    many_workers: bool = False  # several engines share a round (rollout.workers > 1)
    in_worker: bool = False  # can be what each Ray rollout actor holds (ray.worker_engine)
    extra: str = ""  # the optional install it needs ("vllm": pip install 'veriloop[vllm]')
    devices: tuple[str, ...] = ("cpu", "cuda")  # the device kinds it samples on (the run's `device`)
    dtypes: tuple[str, ...] = ("float32", "bfloat16", "float16")  # the weight dtypes it samples in (`dtype`)


class RolloutEngine(Protocol):
    """Requests in, records out, weights in by version (what the trainer and the collectors call)."""

    name: str
    version: int  # the policy version of the weights it holds (FROZEN: a source that never changes)
    capabilities: ClassVar[EngineCapabilities]

    def run(self, requests: list[RolloutRequest], ledger=None) -> list[list[Record]]: ...

    def publish(self, model: torch.nn.Module, version: int) -> Any: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class EngineSections:
    """The option sections an engine is built from (``EngineSections.of(train_config)``; a Ray actor builds its own
    engine from the same sections)."""

    rollout: Any = None  # RolloutConfig
    ray: Any = None  # RayConfig
    vllm: Any = None  # VLLMConfig
    threads: int = 0

    @classmethod
    def of(cls, cfg) -> EngineSections:
        return cls(cfg.rollout, cfg.ray, cfg.vllm, cfg.threads)


class RegisteredEngine:
    """What a class registered in ``ENGINES`` adds to ``RolloutEngine``: how a run's config builds it, and what it
    serves under that config (an engine made of others, as Ray's actors, declares the union in ``serves``)."""

    name: ClassVar[str]
    capabilities: ClassVar[EngineCapabilities] = EngineCapabilities()
    # the options it reads besides rollout.engine (keys or whole sections: "vllm"); set on another engine they are
    # refused as unread (training/option_scopes.py's ENGINE scope is derived from this)
    options: ClassVar[tuple[str, ...]] = ()
    shipping: str = "trainable"  # what travels to it after an update (vLLM: full, merged or adapter)

    @classmethod
    def labels(cls) -> list[str]:
        """Every label it can take (``label``): what the options reference and the option tests walk."""
        return [cls.name]

    @classmethod
    def choosing(cls, label: str) -> dict:
        """The options that choose it under ``label``."""
        return {"rollout.engine": cls.name}

    @classmethod
    def reads(cls, label: str) -> tuple[str, ...]:
        """The options it reads under ``label`` (besides rollout.engine)."""
        return cls.options

    @classmethod
    def weights_to_ship(cls, model: torch.nn.Module, shipping: str, dtype: torch.dtype):
        """(named tensors an update sends to an engine of this kind in another process, the digest it must answer):
        the trainable tensors, against the digest of all the learner's weights."""
        return trainable_tensors(model), weights_digest(model.state_dict().items())

    @classmethod
    def serves(cls, sections: EngineSections) -> EngineCapabilities:
        return cls.capabilities

    @classmethod
    def label(cls, sections: EngineSections) -> str:
        """The engine as the options reference names it (Ray's: with the engine its actors hold)."""
        return cls.name

    @classmethod
    def require(cls, sections: EngineSections) -> None:
        """An ``InputError`` naming the install when what the engine needs is missing (before a run starts)."""

    @classmethod
    def build(cls, policy, version: int, sections: EngineSections, **options) -> RolloutEngine:
        raise NotImplementedError


class WeightsVersionError(RuntimeError):
    """A request names a weights version its engine does not hold: refused, never served with other weights."""


@dataclass(frozen=True)
class RolloutRequest:
    """``group_size`` completions of each problem; completion ``b * group_size + k`` draws from ``row_seeds[...]``."""

    request_id: str
    step: int
    round: int
    problems: tuple[Problem, ...]
    group_indices: tuple[int, ...]  # each problem's group index within its round (names its group_id)
    group_size: int
    sampling: SamplingParams
    row_seeds: tuple[int, ...]  # one per completion: derive_seed(run seed, step, round, group, sample)
    weights_version: int  # the policy version the engine must hold (FROZEN: a frozen source)
    source: str = "policy"  # provenance written into every record's sampling settings
    tools: ToolSettings | None = None  # task.reasoning tool: code blocks run in the sandbox mid-sampling

    def __post_init__(self):
        if len(self.group_indices) != len(self.problems):
            raise ValueError(
                f"request {self.request_id}: {len(self.group_indices)} group indices for {len(self.problems)} problems"
            )
        if len(self.row_seeds) != len(self.problems) * self.group_size:
            raise ValueError(
                f"request {self.request_id}: {len(self.row_seeds)} row seeds for "
                f"{len(self.problems)} x {self.group_size} completions"
            )

    def group_id(self, b: int) -> str:
        return f"{self.step}-{self.round}-{self.group_indices[b]}"


def build_requests(
    seed: int,
    step: int,
    round_: int,
    problems: list[Problem],
    group_size: int,
    sampling: SamplingParams,
    weights_version: int,
    source: str,
    request_groups: int = 0,
    tools: ToolSettings | None = None,
) -> list[RolloutRequest]:
    """A round's work as requests of ``request_groups`` groups each (0: one request for the round).

    The cut depends only on the configuration, never on how many engines there are, and each
    completion's seed only on (run seed, step, round, group, sample): records are a function of
    the request alone.
    """
    per = request_groups or max(len(problems), 1)
    requests = []
    for first in range(0, len(problems), per):
        groups = tuple(range(first, min(first + per, len(problems))))
        seeds = tuple(derive_seed(seed, step, f"rollout/{round_}", g, k) for g in groups for k in range(group_size))
        requests.append(
            RolloutRequest(
                request_id=f"{step}-{round_}-{first}",
                step=step,
                round=round_,
                problems=tuple(problems[g] for g in groups),
                group_indices=groups,
                group_size=group_size,
                sampling=sampling,
                row_seeds=seeds,
                weights_version=weights_version,
                source=source,
                tools=tools,
            )
        )
    return requests


def weights_digest(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """SHA-256 of the weights' names, dtypes, shapes and bytes, in name order: equal iff bit-identical."""
    h = hashlib.sha256()
    for name, t in sorted(named_tensors, key=lambda item: item[0]):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class SequentialEngine:
    """``run``: the requests one after another, in this process."""

    name = "local"

    def run(self, requests: list[RolloutRequest], ledger=None) -> list[list[Record]]:
        out = []
        for request in requests:
            if ledger is not None:
                ledger.event("issued", request, self.name)
            records = self.generate(request)
            if ledger is not None:
                ledger.done(request, records, self.name, 0)
            out.append(records)
        return out

    def close(self) -> None:
        pass


class LocalEngine(SequentialEngine, RegisteredEngine):
    """The local KV-cached sampler on ``policy``, stamping each record with the version it holds."""

    name = "local"
    capabilities = EngineCapabilities(tool_calls=True, thinking_budget=True, in_worker=True)

    def __init__(self, policy, version: int = 0):
        self.policy, self.version = policy, version

    @classmethod
    def build(cls, policy, version: int, sections: EngineSections, **options) -> LocalEngine:
        return cls(policy, version)

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> str:
        """Copy the named tensors in (a no-op for tensors it already shares with the learner), hold
        ``version``, return the digest of the weights now held."""
        own = copy_tensors_into(self.policy.model, named_tensors)
        self.version = version
        return weights_digest(own.items())

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """Hold ``version``: when the engine samples from ``model``'s own tensors (the learner's, already updated)
        there is nothing to copy or hash; otherwise the trainable tensors are copied in."""
        if model is not self.policy.model:
            self.load_weights(trainable_tensors(model), version)
        self.version = version

    def generate(self, request: RolloutRequest) -> list[Record]:
        check_version(request, self.version)
        prompt_ids = [self.policy.encode_prompt(p.prompt) for p in request.problems]
        created = time.time()
        if request.tools is not None:
            gen = generate_with_tools(
                self.policy,
                prompt_ids,
                request.sampling,
                request.tools,
                row_seeds=list(request.row_seeds),
                n=request.group_size,
            )
            return sampled_records(
                request,
                self.policy,
                prompt_ids,
                gen.completion_ids,
                gen.logprobs,
                gen.finish_reasons,
                self.version,
                created,
                model_masks=gen.model_masks,
                tool_calls=gen.tool_calls,
            )
        if request.sampling.max_thinking_tokens:
            gen = generate_with_thinking_budget(
                self.policy, prompt_ids, request.sampling, row_seeds=list(request.row_seeds), n=request.group_size
            )
            return sampled_records(
                request,
                self.policy,
                prompt_ids,
                gen.completion_ids,
                gen.logprobs,
                gen.finish_reasons,
                self.version,
                created,
                model_masks=gen.model_masks,
            )
        gen = self.policy.sample(prompt_ids, request.sampling, row_seeds=list(request.row_seeds), n=request.group_size)
        return sampled_records(
            request,
            self.policy,
            prompt_ids,
            gen.completion_ids,
            gen.logprobs,
            gen.finish_reasons,
            self.version,
            created,
        )


def check_version(request: RolloutRequest, version: int) -> None:
    """An engine serves a request only with exactly the weights version it names."""
    if request.weights_version != version:
        raise WeightsVersionError(
            f"request {request.request_id} wants weights version {request.weights_version}; this engine holds {version}"
        )


def sampled_records(
    request: RolloutRequest,
    policy,
    prompt_ids,
    completions,
    logprobs,
    finishes,
    version: int,
    created: float,
    model_masks=None,
    tool_calls=None,
    **provenance,
) -> list[Record]:
    """The records of a request's completions (row ``i`` of prompt ``i // group_size``), stamped with ``version``;
    ``model_masks`` / ``tool_calls``: a tool-integrated rollout's (``rollout/tools.py``); ``provenance``: extra
    sampling settings (which engine, which weights)."""
    records, G = [], request.group_size
    tools = request.tools.as_dict() if request.tools is not None else {}
    for i, (ids, lps, finish) in enumerate(zip(completions, logprobs, finishes)):
        b, p = i // G, request.problems[i // G]
        sampling = {
            **request.sampling.as_dict(),
            "seed": request.row_seeds[i],
            "source": request.source,
            **tools,
            **provenance,
        }
        records.append(
            Record(
                problem_id=p.id,
                data_source=p.data_source,
                group_id=request.group_id(b),
                prompt=p.prompt,
                reference=p.reference,
                prompt_ids=prompt_ids[b],
                completion_ids=ids,
                completion=policy.completion_text(ids, finish),
                behavior_logprobs=lps,
                sampling=sampling,
                policy_version=version,
                finish_reason=finish,
                created_at=created,
                finish_token=ids[-1] if finish in ("eos", "stop") and ids else None,
                model_mask=list(model_masks[i]) if model_masks is not None else None,
                tool_calls=[c.as_dict() for c in tool_calls[i]] if tool_calls is not None else None,
            )
        )
    return records


def copy_tensors_into(model: torch.nn.Module, named_tensors) -> dict[str, torch.Tensor]:
    """Copy each named tensor into ``model``'s own (a no-op where it is that tensor); return the state dict."""
    own = model.state_dict()
    with torch.no_grad():
        for name, t in named_tensors:
            if name not in own:
                raise KeyError(f"load_weights: the engine's model has no tensor {name!r}")
            if own[name].data_ptr() != t.data_ptr():
                own[name].copy_(t)
    return own


def trainable_tensors(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The tensors an update can change (for LoRA: the adapters), under their state-dict names, on the CPU."""
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    return [(n, t.detach().cpu()) for n, t in model.state_dict(keep_vars=True).items() if id(t) in trainable]


class TaskTeacherEngine(SequentialEngine):
    """The task's own traces (SFT data): no model sampled them, so no behaviour log-probs.

    Completion ``i`` is written with ``random.Random(row_seeds[i])``: as partition-free as sampling.
    """

    version = FROZEN

    def __init__(self, task, policy):
        self.require_demonstrations(task)
        self.task, self.policy = task, policy
        self.tool_format = getattr(task, "tool_format", None) if getattr(task, "reasoning", "cot") == "tool" else None

    @staticmethod
    def require_demonstrations(task) -> None:
        """Refuse a task that writes no traces (the controller asks before it creates the run directory)."""
        if not hasattr(task, "teacher_completion"):
            raise InputError(f"task {task.name!r} has no demonstrations for rollout.source=task-teacher (sft)")

    name = "task-teacher"

    def load_weights(self, named_tensors, version: int) -> str:
        raise RuntimeError("the task's teacher holds no weights")

    def publish(self, model, version: int) -> None:
        pass  # frozen

    def generate(self, request: RolloutRequest) -> list[Record]:
        G, records = request.group_size, []
        for i, seed in enumerate(request.row_seeds):
            p = request.problems[i // G]
            text = self.task.teacher_completion(p, random.Random(seed))
            ids, mask = self.encode(text)
            records.append(
                Record(
                    problem_id=p.id,
                    data_source=p.data_source,
                    group_id=request.group_id(i // G),
                    prompt=p.prompt,
                    reference=p.reference,
                    prompt_ids=self.policy.encode_prompt(p.prompt),
                    completion_ids=ids + [self.policy.eos_id],
                    completion=text,
                    behavior_logprobs=None,
                    sampling={"source": "task-teacher", "seed": seed},
                    policy_version=FROZEN,
                    finish_reason="eos",
                    created_at=time.time(),
                    finish_token=self.policy.eos_id,
                    model_mask=mask + [1] if mask is not None else None,
                )
            )
        return records

    def encode(self, text: str) -> tuple[list[int], list[int] | None]:
        """Token ids of a demonstration and, in the tool format, its model mask: the output blocks are the tool's
        (SFT imitates the code, never the interpreter's output), each part tokenized as a rollout tokenizes it."""
        tok = self.policy.tokenizer
        if self.tool_format is None:
            return tok(text, add_special_tokens=False).input_ids, None
        ids, mask = [], []
        for segment, by_model in split_segments(text, self.tool_format):
            part = tok(segment, add_special_tokens=False).input_ids
            ids += part
            mask += [int(by_model)] * len(part)
        return ids, mask
