"""What one sandboxed run may use (``SandboxLimits``): the resource limits the child sets before the interpreter
starts, the wall-clock and output limits its supervisor enforces, and the size of the run's own directory."""

from __future__ import annotations

from dataclasses import dataclass

from veriloop.errors import InputError


@dataclass(frozen=True)
class SandboxLimits:
    wall_seconds: float = 10.0  # per run, enforced by the parent
    cpu_seconds: int = 5
    memory_mb: int = 1024  # address space (RLIMIT_AS)
    output_bytes: int = 1 << 20  # stdout + stderr
    file_bytes: int = 16 << 20  # largest file the program may write
    open_files: int = 64  # per process (RLIMIT_NOFILE); a run has at most PIDS_MAX processes
    disk_bytes: int = 64 << 20  # all the run writes (its directory is a tmpfs of this size, in namespaces)
    disk_files: int = 4096  # files and directories in it (the tmpfs's inodes)

    def __post_init__(self):
        if (
            self.wall_seconds <= 0
            or self.cpu_seconds < 1
            or self.memory_mb < 64
            or self.output_bytes < 1
            or self.disk_bytes < 1 << 20
            or self.disk_files < 16
        ):
            raise InputError(f"bad sandbox limits: {self}")


DEFAULT_LIMITS = SandboxLimits()  # a run's limits where its caller names none
