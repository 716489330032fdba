"""Test-only observer: records which target layers feed EAGLE-3 its aux hidden states.

Active when ``SGLPATCH_OBSERVE=<file>`` is set (CPU and GPU alike). It wraps, without changing what
they do, three ModelRunner/CudaGraphRunner methods and records the model's ``layers_to_capture``:

- ``device_graphs``: when ``ModelRunner.init_device_graphs`` (0.5.23: ``init_cuda_graphs``) starts,
  i.e. what device graphs would be captured with (recorded on CPU too, where no graph is then
  captured);
- ``graph_capture``: when ``CudaGraphRunner.capture`` (0.5.23:
  ``runner/decode_cuda_graph_runner.DecodeCudaGraphRunner.capture``) starts, i.e. what every CUDA
  graph replay feeds the draft (GPU only);
- ``initialized``: when ``ModelRunner.initialize`` returns (0.5.23: when ``init_cuda_graphs``
  returns, the last step of a runner's set-up there), i.e. what eager forwards use.

One JSON object per line is appended to the file:
``{"event", "pid", "is_draft", "model", "layers_to_capture"}``.
"""

from __future__ import annotations

import functools
import json
import os
import sys

from . import _AfterImport

OBSERVE = "SGLPATCH_OBSERVE"


def _capture_layers(model):
    for module in model.modules():
        layers = getattr(module, "layers_to_capture", None)
        if layers is not None and not callable(layers):
            return [int(i) for i in layers]
    return None


def _record(event: str, model_runner) -> None:
    model = model_runner.model
    entry = {
        "event": event,
        "pid": os.getpid(),
        "is_draft": bool(getattr(model_runner, "is_draft_worker", False)),
        "model": type(model).__name__,
        "layers_to_capture": _capture_layers(model),
    }
    with open(os.environ[OBSERVE], "a") as fh:
        fh.write(json.dumps(entry) + "\n")


def _wrap_model_runner(module):
    cls = module.ModelRunner
    original_initialize = cls.initialize
    # 0.5.9: initialize() builds everything and calls init_device_graphs() last.
    # 0.5.23: initialize() only loads the model; the scheduler then calls init_attention_backends()
    # (which sets the capture layers, attention_backend_setup.py:39-61) and init_cuda_graphs()
    # (model_runner.py:1170, the renamed init_device_graphs) on every runner (scheduler.py:1113-1126).
    # There the runner is ready for eager forwards only when init_cuda_graphs() returns, so that is
    # when "initialized" is recorded.
    split_init = not hasattr(cls, "init_device_graphs")
    graphs_name = "init_cuda_graphs" if split_init else "init_device_graphs"
    original_init_device_graphs = getattr(cls, graphs_name)

    @functools.wraps(original_initialize)
    def initialize(self, *args, **kwargs):
        result = original_initialize(self, *args, **kwargs)
        _record("initialized", self)
        return result

    @functools.wraps(original_init_device_graphs)
    def init_device_graphs(self, *args, **kwargs):
        _record("device_graphs", self)
        result = original_init_device_graphs(self, *args, **kwargs)
        if split_init:
            _record("initialized", self)
        return result

    if not split_init:
        cls.initialize = initialize
    setattr(cls, graphs_name, init_device_graphs)


def _wrap_cuda_graph_runner(module):
    # 0.5.9: cuda_graph_runner.CudaGraphRunner; 0.5.23: runner/decode_cuda_graph_runner.py:251
    # DecodeCudaGraphRunner (the decode graphs, which the draft's aux states come from).
    cls = getattr(module, "CudaGraphRunner", None) or module.DecodeCudaGraphRunner
    original = cls.capture

    @functools.wraps(original)
    def capture(self, *args, **kwargs):
        _record("graph_capture", self.model_runner)
        return original(self, *args, **kwargs)

    cls.capture = capture


def activate() -> None:
    if "sglang" in sys.modules:
        raise RuntimeError("observer activated after sglang was imported")
    sys.meta_path.insert(
        0,
        _AfterImport(
            {
                "sglang.srt.model_executor.model_runner": _wrap_model_runner,
                "sglang.srt.model_executor.cuda_graph_runner": _wrap_cuda_graph_runner,  # 0.5.9
                "sglang.srt.model_executor.runner.decode_cuda_graph_runner": _wrap_cuda_graph_runner,  # 0.5.23
            }
        ),
    )


def read(path) -> list[dict]:
    try:
        with open(path) as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []
