"""The peak-memory probe the benchmarks' child processes run (pasted into their source)."""

#: defines ``peak_mib()``: this process's own high-water mark in MiB (VmHWM); a child's
#: ``ru_maxrss`` on Linux starts at its parent's resident size, so it would overstate
PEAK_MIB = r"""
import resource
def peak_mib():
    try:
        with open("/proc/self/status") as fh:
            return next(int(l.split()[1]) for l in fh if l.startswith("VmHWM")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""
