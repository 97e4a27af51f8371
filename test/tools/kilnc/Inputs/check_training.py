"""Opens the packages of Inputs/attention_lse.mlir and Inputs/attention_grad.mlir
with the runtime and checks their launches without a GPU (training.test): the
forward that keeps its log-sum-exp needs the lse buffer; the backward site
launches two passes, needs its gradients, its lse and its workspace, and
refuses the forward's entry point."""

import ctypes
import sys

import kiln
from kiln.runtime import AttentionArgs, AttentionGradArgs, DType

forward_package = kiln.Package(sys.argv[1])
grad_package = kiln.Package(sys.argv[2])
SHAPE = [1, 4, 64, 64]
STRIDES = [4 * 64 * 64, 64 * 64, 64, 1]


def forward_args(**change):
    a = AttentionArgs()
    for name in ("q", "k", "v", "out"):
        setattr(a, name, 0x1000)
        setattr(a, name + "_dtype", int(DType.F16))
        getattr(a, name + "_strides")[:] = STRIDES
    a.batch, a.q_heads, a.kv_heads = 1, 4, 4
    a.q_len, a.kv_len, a.head_dim = 64, 64, 64
    a.lse = 0x2000
    for name, value in change.items():
        setattr(a, name, value)
    return a


def grad_args(**change):
    g = AttentionGradArgs()
    g.forward = forward_args()
    for name in ("grad_out", "grad_q", "grad_k", "grad_v"):
        setattr(g, name, 0x3000)
        setattr(g, name + "_dtype", int(DType.F16))
        getattr(g, name + "_strides")[:] = STRIDES
    g.workspace = 0x4000
    g.workspace_bytes = 4 * 4 * 64
    for name, value in change.items():
        setattr(g, name, value)
    return g


def attempt(label, call):
    try:
        print(label, call())
    except kiln.KilnError as error:
        print(label, "->", error)


site = forward_package.site("attention_0")
print("forward", site.kernel, site.lse, site.key_pass)
attempt("forward lse", lambda: tuple(site.check(forward_args()).grid))
attempt("forward no-lse", lambda: site.check(forward_args(lse=None)))

grad = grad_package.site("attention_grad_0")
print("grad", grad.kernel, grad.lse, grad.key_pass)
print("workspace", grad.grad_workspace_bytes(1, 4, 64))
attempt("grad", lambda: [tuple(c.grid) for c in grad.check_grad(grad_args())])
attempt("grad small-workspace",
        lambda: grad.check_grad(grad_args(workspace_bytes=100)))
attempt("grad dtype",
        lambda: grad.check_grad(grad_args(grad_k_dtype=int(DType.BF16))))
attempt("grad no-grad-v", lambda: grad.check_grad(grad_args(grad_v=None)))
no_lse = grad_args()
no_lse.forward.lse = None
attempt("grad no-lse", lambda: grad.check_grad(no_lse))
attempt("grad as forward", lambda: grad.check(forward_args()))
attempt("forward as grad", lambda: site.check_grad(grad_args()))
