"""Run argv[2:] with a seccomp filter on ptrace(GETREGSET/SETREGSET, NT_X86_XSTATE).
argv[1]: 'efault-set' (SETREGSET fails EFAULT: what an AMX host does to UML 6.1) or
'eio' (both fail EIO: UML then falls back to PTRACE_GETFPREGS/SETFPREGS)."""

import ctypes
import os
import struct
import sys

mode, argv = sys.argv[1], sys.argv[2:]
EFAULT, EIO = 14, 5
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000


def ins(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


if mode == "efault-set":
    reqs, err = (0x4205, 0x4205), EFAULT
else:
    reqs, err = (0x4204, 0x4205), EIO
prog = b"".join(
    [
        ins(BPF_LD_W_ABS, 0, 0, 4),
        ins(BPF_JEQ_K, 1, 0, 0xC000003E),
        ins(BPF_RET_K, 0, 0, RET_ALLOW),
        ins(BPF_LD_W_ABS, 0, 0, 0),
        ins(BPF_JEQ_K, 1, 0, 101),
        ins(BPF_RET_K, 0, 0, RET_ALLOW),
        ins(BPF_LD_W_ABS, 0, 0, 16),
        ins(BPF_JEQ_K, 1, 0, reqs[0]),
        ins(BPF_JEQ_K, 0, 3, reqs[1]),
        ins(BPF_LD_W_ABS, 0, 0, 32),
        ins(BPF_JEQ_K, 0, 1, 0x202),
        ins(BPF_RET_K, 0, 0, RET_ERRNO | err),
        ins(BPF_RET_K, 0, 0, RET_ALLOW),
    ]
)
n = len(prog) // 8
buf = ctypes.create_string_buffer(prog)


class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


fp = Fprog(n, ctypes.addressof(buf))
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(fp), 0, 0):
    raise OSError(ctypes.get_errno(), "prctl")
os.execvp(argv[0], argv)
