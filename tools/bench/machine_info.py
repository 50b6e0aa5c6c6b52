"""The machine a measurement ran on, for the documents the tools/ scripts write (standard library only)."""

import platform


def cpu_name():
    """The CPU's model name from /proc/cpuinfo, else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"
