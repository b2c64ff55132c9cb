"""Re-export of :mod:`kbuild.runtime.handover` (the tuner's process handover; moved to the core for issue 16)."""

from kbuild.runtime.handover import KernelPayload, kernel_from_payload, kernel_payload

__all__ = ["KernelPayload", "kernel_from_payload", "kernel_payload"]
