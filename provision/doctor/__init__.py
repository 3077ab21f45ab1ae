"""`provision doctor`: read the local machine, name the shipped profile that fits it, warn about what would break,
and write a profile for it.

Everything is read below a root directory (`/` on a real machine) so tests can point it at fixture trees
(tests/fixtures/doctor/<machine>/): files are read from <root>/proc/cpuinfo, <root>/etc/os-release, ...; the
output of a command is read from <root>/commands/<name>.txt instead of running it when the root is not `/`.
That is parsing, not a stand-in for a program: on `/` the real nvidia-smi and lspci run.

Its parts: machine.py (reading the machine), matching.py (the shipped profile that fits, the warnings, the
diagnosis), write.py (writing a profile for it). Every name is importable from provision.doctor.
"""

from __future__ import annotations

from provision.doctor.machine import (
    FRAMEWORK_MODULES,
    ISA_FLAG,
    NVIDIA_SMI_QUERY,
    FrameworkSeen,
    GpuSeen,
    Machine,
    Reader,
    _root_may_run,
    isa_flags,
    parse_cpuinfo,
    parse_lspci,
    parse_meminfo,
    parse_nvidia_smi,
    parse_os_release,
    parse_python_environments,
    parse_tegra_release,
    read_machine,
)
from provision.doctor.matching import (
    Diagnosis,
    Match,
    choose_frameworks,
    default_frameworks,
    diagnose,
    match_profiles,
    shipped_profiles,
    warnings_for,
)
from provision.doctor.write import profile_dict, write_profile

__all__ = [
    "FRAMEWORK_MODULES", "ISA_FLAG", "NVIDIA_SMI_QUERY", "Diagnosis", "FrameworkSeen", "GpuSeen", "Machine", "Match",
    "Reader", "choose_frameworks", "default_frameworks", "diagnose", "isa_flags", "match_profiles", "parse_cpuinfo",
    "parse_lspci", "parse_meminfo", "parse_nvidia_smi", "parse_os_release", "parse_python_environments",
    "parse_tegra_release", "profile_dict", "read_machine", "shipped_profiles", "warnings_for", "write_profile",
    # Private: tests/unit/test_doctor.py checks it.
    "_root_may_run",
]
