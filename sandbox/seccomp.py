"""The seccomp profile of sandboxes under gVisor (runc ones keep Docker's default).

Why not Docker's default under gVisor: with `--oci-seccomp` gVisor applies the OCI
profile to the code inside, but this gVisor release ignores a rule's `errnoRet` and
answers EPERM. Docker's default answers `clone3` with ENOSYS so that glibc falls back to
`clone`; turned into EPERM, every thread start fails ("can't start new thread"), and with
it the egress relay and any threaded program. Under gVisor the code's system calls reach
the Sentry (gVisor's kernel, itself confined by its own host filter), not the host
kernel.

This profile refuses, with EPERM, every call Docker's default profile refuses a container
that has no capabilities (its documented table, and the calls it allows only with a
capability: namespaces, mounts, keyrings, bpf, perf, ptrace, kernel modules, clocks,
NUMA policy, syslog, chroot, host names, reboot, swap), and io_uring besides; it lets
`clone3` reach the Sentry, which answers ENOSYS. Two differences from Docker's rules,
both stricter: `personality` is not listed because the Sentry already refuses every
change of persona (EINVAL), and this release cannot express Docker's rule for it (a call
allowed for five argument values only: it ORs conditions on one argument); and calls
the Sentry does not implement answer ENOSYS whatever the profile says.
"""

from __future__ import annotations

import json
from typing import Any

REFUSED = (
    "acct",
    "add_key",
    "bpf",
    "chroot",
    "clock_adjtime",
    "clock_settime",
    "create_module",
    "delete_module",
    "fanotify_init",
    "finit_module",
    "get_mempolicy",
    "get_kernel_syms",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mbind",
    "migrate_pages",
    "mount",
    "mount_setattr",
    "move_mount",
    "move_pages",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "perf_event_open",
    "pidfd_getfd",
    "pivot_root",
    "process_madvise",
    "process_vm_readv",
    "process_vm_writev",
    "ptrace",
    "query_module",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "set_mempolicy",
    "setdomainname",
    "sethostname",
    "setns",
    "settimeofday",
    "swapoff",
    "swapon",
    "sysfs",
    "syslog",
    "_sysctl",
    "umount2",
    "unshare",
    "uselib",
    "vhangup",
    "userfaultfd",
    "ustat",
    "vm86",
    "vm86old",
)
# clone flags that make new namespaces (CLONE_NEWNS ... CLONE_NEWNET, CLONE_NEWCGROUP).
NAMESPACE_FLAGS = (
    0x00020000,
    0x02000000,
    0x04000000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)


def gvisor_profile() -> dict[str, Any]:
    """The OCI seccomp profile: allow by default, refuse the list above with EPERM."""
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [
            {"names": list(REFUSED), "action": "SCMP_ACT_ERRNO"},
            *(
                {
                    "names": ["clone"],
                    "action": "SCMP_ACT_ERRNO",
                    "args": [
                        {"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}
                    ],
                }
                for flag in NAMESPACE_FLAGS
            ),
        ],
    }


def gvisor_security_opt() -> str:
    """The `security_opt` entry that applies the profile (the engine takes it inline)."""
    return "seccomp=" + json.dumps(gvisor_profile(), separators=(",", ":"))
