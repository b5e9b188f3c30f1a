"""The host's GPUs as the node agent reads them: N stand-ins (`FakeGpus`) or the real devices
through NVML (`NvmlGpus`). Plain Python, like the agent: no Django, nothing of the console."""

from __future__ import annotations

from typing import Any


class Gpus:
    """The host's GPUs: `devices()` for registration, `samples(busy)` for each beat."""

    def devices(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def samples(self, busy: set[int]) -> list[dict[str, Any]]:
        raise NotImplementedError


class FakeGpus(Gpus):
    """N deterministic stand-ins (CI, a laptop): a device is busy while a replica holds it."""

    MEMORY_MIB = 81_920

    def __init__(self, count: int, node: str) -> None:
        self.count = count
        self.node = node

    def devices(self) -> list[dict[str, Any]]:
        return [
            {"index": i, "uuid": f"GPU-fake-{self.node}-{i}"[:100], "model": "", "memory_mib": self.MEMORY_MIB}
            for i in range(self.count)
        ]

    def samples(self, busy: set[int]) -> list[dict[str, Any]]:
        return [
            {
                "index": i,
                "utilization": float(90 + i % 10) if i in busy else 0.0,
                "memory_used_mib": self.MEMORY_MIB // 2 if i in busy else 0,
                "memory_total_mib": self.MEMORY_MIB,
            }
            for i in range(self.count)
        ]


class NvmlUnavailable(Exception):
    """NVML cannot be read here (no NVIDIA driver, no device); the message is for a person."""


class NvmlGpus(Gpus):
    """The real devices, through NVML (nvidia-ml-py)."""

    def __init__(self) -> None:
        import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py ships no types

        self.nvml = pynvml
        try:
            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except pynvml.NVMLError as error:
            raise NvmlUnavailable(
                f"NVML does not answer on this host ({error}): it needs the NVIDIA driver; "
                "without a GPU, run the agent with --fake-gpus N"
            ) from None

    @staticmethod
    def _text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    def devices(self) -> list[dict[str, Any]]:
        found = []
        for index, handle in enumerate(self.handles):
            memory = self.nvml.nvmlDeviceGetMemoryInfo(handle)
            found.append(
                {
                    "index": index,
                    "uuid": self._text(self.nvml.nvmlDeviceGetUUID(handle))[:100],
                    # The inventory names models its own way; the console compares them only when both are set.
                    "model": self._text(self.nvml.nvmlDeviceGetName(handle))[:100],
                    "memory_mib": int(memory.total // (1024 * 1024)),
                }
            )
        return found

    def memory_mib(self, index: int) -> int:
        return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handles[index]).total // (1024 * 1024))

    def samples(self, busy: set[int]) -> list[dict[str, Any]]:
        taken = []
        for index, handle in enumerate(self.handles):
            rates = self.nvml.nvmlDeviceGetUtilizationRates(handle)
            memory = self.nvml.nvmlDeviceGetMemoryInfo(handle)
            taken.append(
                {
                    "index": index,
                    "utilization": float(min(100, rates.gpu)),
                    "memory_used_mib": int(memory.used // (1024 * 1024)),
                    "memory_total_mib": int(memory.total // (1024 * 1024)),
                }
            )
        return taken
