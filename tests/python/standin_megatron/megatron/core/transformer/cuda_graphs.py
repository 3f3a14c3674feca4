"""Stand-in of megatron-core 0.19.2's cuda_graphs.py, the part fp8audit.te takes over: the global
record of layers to capture (each entry's runner first), and create_cudagraphs, which the
schedules call at the end of every forward-backward pass (capturing once, after the first)."""

from typing import Any, List


class _CudagraphGlobalRecord:
    cudagraph_created = False
    cudagraph_record: List[tuple] = []
    captured: List[Any] = []  # the stand-in's capture: the runners, in order

    @classmethod
    def record_fwd_graph(cls, runner: Any) -> None:
        cls.cudagraph_record.append((runner, "fwd"))

    @classmethod
    def create_cudagraphs(cls) -> None:
        if cls.cudagraph_created or not cls.cudagraph_record:
            return
        cls.captured = [entry[0] for entry in cls.cudagraph_record]
        cls.cudagraph_created = True


def create_cudagraphs() -> None:
    return _CudagraphGlobalRecord.create_cudagraphs()
