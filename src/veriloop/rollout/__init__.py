"""Rollouts: requests in, records out.  The built-in rollout engines are registered here (``registry.ENGINES``):
``local`` (the KV-cached sampler in this process), ``vllm`` (vLLM in this process) and ``ray`` (Ray actors, each
holding one of the others).  By path: their modules import torch, and ``rollout.records`` is read without it."""

from veriloop.registry import ENGINES

ENGINES.register_path("local", "veriloop.rollout.engine:LocalEngine")
ENGINES.register_path("vllm", "veriloop.rollout.vllm_engine:VLLMEngine")
ENGINES.register_path("ray", "veriloop.rollout.ray_engine:RayEngine")
