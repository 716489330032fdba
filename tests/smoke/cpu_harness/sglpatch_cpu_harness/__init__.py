"""sglpatch CPU harness: run the real SGLang (0.5.9; 0.5.23 too) on a machine without a GPU. TEST-ONLY.

Never shipped, never imported by ``sglpatch`` or the overlay wheel. ``tests/sglang_runtime.py`` puts
this directory on ``PYTHONPATH`` of every process a test starts (SGLang's spawned scheduler and
detokenizer processes inherit it); ``sitecustomize.py`` then calls :func:`activate` at interpreter
start, before anything imports torch or SGLang.

What it replaces -- kernels and hardware queries only:

- ``libcuda.so.1``: a generated stub (see ``libcuda_stub.py``) loaded ``RTLD_GLOBAL`` so that
  ``sgl_kernel``'s native libraries load; every driver call answers CUDA_ERROR_NO_DEVICE.
- ``torch.cuda.synchronize``: a no-op while no CUDA device exists (``set_embed_and_head`` calls it).
- the CUDA-only EAGLE tree kernels ``build_tree_kernel_efficient`` / ``verify_tree_greedy``:
  reference implementations in ``tree_kernels.py``, bound where SGLang looks them up
  (0.5.9: ``eagle_utils.sgl_build_tree_kernel_efficient`` and ``eagle_utils.verify_tree_greedy_func``;
  0.5.23: ``sgl_kernel.build_tree_kernel_efficient_cpu`` / ``verify_tree_greedy_cpu``).
- 0.5.23 only (feature-detected): ``sgl_kernel``'s CPU speculative/KV ops, whose wrappers the CUDA
  build of sgl-kernel exports without the ops behind them: references in ``cpu_ops.py``; and
  ``eagle_utils.default_tree_mask_mode``, which picks the layout of the intel_amx CPU attention
  kernel (QLEN_ONLY) on the CPU engine: the harness runs Triton attention, which reads FULL_MASK.
- environment: :data:`ENV` (CPU engine, Triton interpreter, no cuDNN check).

What it never touches: the code paths the patch series changes (the KimiK25 model class,
model_runner's capture-layer wiring, cuda_graph_runner, the communicator gates). Those run as
shipped, so the smoke tests test them.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.machinery
import os
import sys

# Environment every harness process gets (tests/sglang_runtime.py sets it; activate() fills gaps).
ENV = {
    "SGLANG_USE_CPU_ENGINE": "1",  # SGLang's CPU code paths
    "TRITON_INTERPRET": "1",  # Triton kernels (KV copy, triton attention) run in the interpreter
    "SGLANG_DISABLE_CUDNN_CHECK": "1",  # multimodal targets check cuDNN at start-up
    "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK": "1",  # nothing to check against without CUDA
    "CUDA_VISIBLE_DEVICES": "",
    "TOKENIZERS_PARALLELISM": "false",
    # torch.compile'd helpers (MoE top-k, ...) run eagerly: on CPU inductor would compile C++ for
    # each new shape, minutes per launch. Same Python code, no compiler.
    "TORCHDYNAMO_DISABLE": "1",
}

ACTIVE_FLAG = "SGLPATCH_CPU_HARNESS"  # "1": activate in this process
STUB_LIBCUDA = "SGLPATCH_STUB_LIBCUDA"  # path of the generated libcuda.so.1

_activated = False


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``hook(module)`` right after a named module has executed, before its importer resumes."""

    def __init__(self, hooks: dict):
        self.hooks = hooks

    def find_spec(self, fullname, path, target=None):
        hook = self.hooks.get(fullname)
        if hook is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module):
            original_exec(module)
            hook(module)

        loader.exec_module = exec_module
        return spec


def _patch_torch(torch):
    original = torch.cuda.synchronize

    def synchronize(device=None):
        if torch.cuda.is_available():
            return original(device)
        return None  # no device: nothing to wait for

    synchronize.__wrapped__ = original
    torch.cuda.synchronize = synchronize


def _patch_eagle_utils(eagle_utils):
    from . import tree_kernels

    if hasattr(eagle_utils, "default_tree_mask_mode"):
        # SGLang 0.5.23: eagle_utils.py:132 default_tree_mask_mode() answers QLEN_ONLY on the CPU
        # engine (the layout of the intel_amx verify kernel, sgl-kernel's CPU build, AMX CPUs),
        # FULL_MASK elsewhere. The harness runs attention_backend="triton", whose target-verify
        # reads FULL_MASK rows (triton_backend.py: mask_indptr from n * (seq_len + n)); the tree
        # kernels then go through sgl_kernel (spec_tree.py, bound by _patch_sgl_kernel), not
        # through this module. Importers (eagle_worker_v2, verify_mask) copy the function after
        # this hook has run, so they get this one.
        mode = eagle_utils.TreeMaskMode.FULL_MASK
        original_mode = eagle_utils.default_tree_mask_mode

        def default_tree_mask_mode():
            return mode

        default_tree_mask_mode.__wrapped__ = original_mode
        eagle_utils.default_tree_mask_mode = default_tree_mask_mode
    if getattr(eagle_utils.verify_tree_greedy_func, "__module__", None) != eagle_utils.__name__:
        return  # 0.5.23: the tree kernels live in sglang.kernels.ops.speculative.spec_tree

    # build_tree_kernel_efficient() calls this module global on every non-NPU device; on CPU
    # SGLang never imports it from sgl_kernel (NameError without the harness).
    eagle_utils.sgl_build_tree_kernel_efficient = tree_kernels.build_tree_kernel_efficient
    original = eagle_utils.verify_tree_greedy_func

    def verify_tree_greedy_func(
        predicts,
        accept_index,
        accept_token_num,
        candidates,
        retrive_index,
        retrive_next_token,
        retrive_next_sibling,
        target_predict,
        topk=-1,
    ):
        # Same contract as upstream's: on CUDA it calls sgl_kernel.verify_tree_greedy; on CPU
        # upstream has no branch and returns the inputs untouched.
        tree_kernels.verify_tree_greedy(
            predicts=predicts,
            accept_index=accept_index,
            accept_token_num=accept_token_num,
            candidates=candidates,
            retrive_index=retrive_index,
            retrive_next_token=retrive_next_token,
            retrive_next_sibling=retrive_next_sibling,
            target_predict=target_predict,
        )
        return predicts, accept_index, accept_token_num

    verify_tree_greedy_func.__wrapped__ = original
    eagle_utils.verify_tree_greedy_func = verify_tree_greedy_func


def _patch_sgl_kernel(sgl_kernel):
    # SGLang 0.5.23's CPU engine calls sgl_kernel's CPU ops (KV slot writes on every extend/decode,
    # the EAGLE tree, draft cache locations); the CUDA build of sgl-kernel that pip brings exports
    # their Python wrappers but registers no op behind them (AttributeError on
    # torch.ops.sgl_kernel.<name>_cpu). Bind references for exactly those (cpu_ops.install checks
    # each one); sgl-kernel 0.3.21 (SGLang 0.5.9) has none of these names and is left as it is.
    import torch

    from . import cpu_ops

    cpu_ops.install(sgl_kernel, torch)


def activate() -> None:
    """Install the harness in this process. Idempotent; call before torch/SGLang are imported."""
    global _activated
    if _activated:
        return
    for key, value in ENV.items():
        os.environ.setdefault(key, value)
    stub = os.environ.get(STUB_LIBCUDA)
    if not stub:
        raise RuntimeError(
            f"{STUB_LIBCUDA} is not set: the runtime fixture builds the stub libcuda.so.1 and passes its path"
        )
    ctypes.CDLL(stub, mode=ctypes.RTLD_GLOBAL)
    if "torch" in sys.modules or "sglang" in sys.modules:
        raise RuntimeError("CPU harness activated after torch/sglang were imported")
    sys.meta_path.insert(
        0,
        _AfterImport(
            {
                "torch": _patch_torch,
                "sgl_kernel": _patch_sgl_kernel,  # 0.5.23's CPU ops (no-op for 0.5.9's sgl-kernel)
                "sglang.srt.speculative.eagle_utils": _patch_eagle_utils,
            }
        ),
    )
    _activated = True
